"""The shape of a model as far as memory goes, read from its Hugging Face ``config.json``.

Only the figures that size weights and the KV cache are kept: layers, heads, head size,
the MLA latent size (DeepSeek-V2/V3), which layers attend through a sliding window, the
dtype and an estimated parameter count. A missing or malformed key is a one-line
:class:`~autotune.errors.ConfigError` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

__all__ = ["ModelShape", "dtype_bytes", "kv_dtype_bytes"]

_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
}

# Nested language-model sections of multimodal configs, in the order they are looked for.
_TEXT_SECTIONS = ("text_config", "llm_config", "language_config")

# Families whose published config.json leaves keys to the Transformers class defaults.
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
    },
}
# Bits per weight of quantized checkpoints, by quantization_config.quant_method.
_QUANT_BITS = {"fp8": 8, "fbgemm_fp8": 8, "modelopt": 8, "bitsandbytes": 4, "mxfp4": 4}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a config or CLI dtype name (``torch.`` prefix allowed)."""
    name = dtype.removeprefix("torch.").lower()
    if name not in _DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(_DTYPE_BYTES))}")
    return _DTYPE_BYTES[name]


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for vLLM's ``--kv-cache-dtype``: ``auto`` follows the model, ``fp8*`` is 1."""
    name = kv_cache_dtype.lower()
    if name == "auto":
        return model_dtype_bytes
    if name.startswith("fp8") or name in ("int8", "uint8"):
        return 1
    return dtype_bytes(name)


@dataclass(frozen=True)
class ModelShape:
    """What sizes a model's memory. ``dtype`` is the config's; vLLM serves float32 models in bf16
    unless ``--dtype`` says otherwise (``served_dtype``, see :meth:`served_as`)."""

    source: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    mlp_width: int  # MLP width one token passes through (routed experts x top-k + shared for MoE)
    dtype: str
    param_count: int
    weight_bits: int = 16  # bits per parameter as served (quantized checkpoints: their bit width)
    tie_word_embeddings: bool = False
    num_experts: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] = ()
    max_position_embeddings: int | None = None
    served_dtype: str | None = None  # vLLM's --dtype when not ``auto``

    @classmethod
    def from_config(cls, path: str | Path) -> ModelShape:
        """Read ``config.json`` (or the file itself) and derive the shape."""
        file = Path(path)
        if file.is_dir():
            file = file / "config.json"
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{file}: no such model config (expected a Hugging Face config.json)") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read model config ({exc.strerror})") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{file}: expected a JSON object at the top level")
        return _shape_from_dict(raw, str(file))

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_sliding_layers(self) -> int:
        return sum(self.sliding_layers)

    @property
    def serving_dtype_bytes(self) -> int:
        """Bytes per weight (and per KV element under ``--kv-cache-dtype auto``) as served: the
        ``--dtype`` given, else as ``--dtype auto`` loads the config's (float32 is served as bf16)."""
        if self.served_dtype is not None:
            return dtype_bytes(self.served_dtype)
        return min(dtype_bytes(self.dtype), 2)

    def served_as(self, dtype: str) -> ModelShape:
        """This model served with vLLM's ``--dtype`` (``auto``: as its config says); under
        ``--kv-cache-dtype auto`` its KV cache takes that type too."""
        if dtype == "auto":
            return dataclasses.replace(self, served_dtype=None)
        dtype_bytes(dtype)  # a name vLLM accepts (float32, float, half, float16, bfloat16)
        return dataclasses.replace(self, served_dtype=dtype)

    def kv_bytes_per_layer_token(self, kv_cache_dtype: str = "auto") -> int:
        """KV bytes one token takes in one attention layer."""
        width = kv_dtype_bytes(kv_cache_dtype, self.serving_dtype_bytes)
        if self.kv_lora_rank is not None:
            # MLA keeps one latent (plus the shared rotary key) per token: no separate K and V.
            return (self.kv_lora_rank + (self.qk_rope_head_dim or 0)) * width
        return 2 * self.num_kv_heads * self.head_dim * width

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto") -> int:
        """KV bytes per cached token over all layers (what one slot of a full-attention pool costs)."""
        return self.num_layers * self.kv_bytes_per_layer_token(kv_cache_dtype)

    def kv_bytes_for_request(self, num_tokens: int, kv_cache_dtype: str = "auto") -> int:
        """KV bytes a request of ``num_tokens`` holds: sliding layers keep at most the window."""
        per_layer = self.kv_bytes_per_layer_token(kv_cache_dtype)
        window = self.sliding_window if self.sliding_window is not None else num_tokens
        sliding = self.num_sliding_layers
        full = self.num_layers - sliding
        return per_layer * (full * num_tokens + sliding * min(num_tokens, window))


class _Reader:
    """Typed look-ups in one config dict, with errors naming the file and the key."""

    def __init__(self, cfg: Mapping[str, Any], source: str) -> None:
        self.cfg = cfg
        self.source = source

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int_(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            value = self.cfg.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{self.source}: key {key!r} must be a positive integer, got {value!r}")
            return value
        if default is None:
            raise ConfigError(f"{self.source}: missing key {keys[0]!r} (needed to size the model's memory)")
        return default

    def opt_int(self, key: str) -> int | None:
        return self.int_(key) if self.has(key) else None

    def count(self, *keys: str) -> int:
        """A non-negative integer (0 when absent), e.g. an expert count."""
        for key in keys:
            value = self.cfg.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{self.source}: key {key!r} must be a non-negative integer, got {value!r}")
            return value
        return 0


def _text_section(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    text: Mapping[str, Any] = raw
    for key in _TEXT_SECTIONS:
        section = raw.get(key)
        if isinstance(section, dict):
            text = section
            break
    defaults = _FAMILY_DEFAULTS.get(str(text.get("model_type", "")), {})
    return {**defaults, **text}


def _weight_bits(raw: Mapping[str, Any], text: Mapping[str, Any], dtype: str) -> int:
    quant = text.get("quantization_config", raw.get("quantization_config"))
    if not isinstance(quant, dict):
        return min(_DTYPE_BYTES[dtype], 2) * 8
    bits = quant.get("bits", quant.get("w_bit"))
    if isinstance(bits, int) and not isinstance(bits, bool) and 0 < bits <= 16:
        return bits  # AWQ, GPTQ and the like
    method = str(quant.get("quant_method", "")).lower()
    # An unknown scheme is sized as unquantized: an overestimate, never a refusal.
    return _QUANT_BITS.get(method, min(_DTYPE_BYTES[dtype], 2) * 8)


def _config_dtype(raw: Mapping[str, Any], text: Mapping[str, Any], source: str) -> str:
    for cfg in (text, raw):
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ConfigError(f"{source}: key {key!r} must be a dtype name, got {value!r}")
            name = value.removeprefix("torch.").lower()
            if name not in _DTYPE_BYTES:
                raise ConfigError(f"{source}: key {key!r} has unknown dtype {value!r}")
            return name
    # Hugging Face's default when a config names none; vLLM then serves it in bf16.
    return "float32"


def _sliding_layers(r: _Reader, model_type: str, num_layers: int) -> tuple[int | None, tuple[bool, ...]]:
    cfg = r.cfg
    window = r.opt_int("sliding_window")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != num_layers:
            raise ConfigError(
                f"{r.source}: key 'layer_types' has {len(layer_types)} entries for {num_layers} layers"
            )
        flags = tuple(t == "sliding_attention" for t in layer_types)
        return (window if any(flags) else None), flags
    if window is None or cfg.get("use_sliding_window") is False:
        return None, (False,) * num_layers
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:
        # Gemma-3: every pattern-th layer is global, the others slide.
        return window, tuple((i + 1) % pattern != 0 for i in range(num_layers))
    if model_type == "gemma2":
        return window, tuple(i % 2 == 0 for i in range(num_layers))
    if model_type.startswith("qwen") and r.has("max_window_layers"):
        first = r.int_("max_window_layers")
        return window, tuple(i >= first for i in range(num_layers))
    return window, (True,) * num_layers


def _attention_params(r: _Reader, hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    if not r.has("kv_lora_rank"):
        return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    # MLA (DeepSeek-V2/V3): low-rank query and a shared compressed KV latent.
    kv_rank = r.int_("kv_lora_rank")
    rope = r.int_("qk_rope_head_dim")
    nope = r.int_("qk_nope_head_dim")
    v_dim = r.int_("v_head_dim", default=nope)
    q_head = nope + rope
    q_rank = r.opt_int("q_lora_rank")
    query = hidden * heads * q_head if q_rank is None else hidden * q_rank + q_rank + q_rank * heads * q_head
    kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v_dim)
    return query + kv + heads * v_dim * hidden


def _mlp_params(r: _Reader, hidden: int, intermediate: int, num_layers: int) -> tuple[int, int, int]:
    """All MLP parameters (gated: gate, up, down), the routed expert count, the MLP width one token uses."""
    experts = r.count("num_local_experts", "n_routed_experts", "num_experts")
    dense = 3 * hidden * intermediate
    if experts == 0:
        return num_layers * dense, 0, intermediate
    moe_inter = r.int_("moe_intermediate_size", default=intermediate)
    # Shared experts: DeepSeek counts them in expert widths, Qwen-MoE gives their total width.
    shared_width = r.count("n_shared_experts") * moe_inter or r.count("shared_expert_intermediate_size")
    moe_layer = (experts * moe_inter + shared_width) * 3 * hidden + hidden * experts
    dense_layers = min(r.count("first_k_dense_replace"), num_layers)
    routed_width = moe_inter * r.int_("num_experts_per_tok", default=1) + shared_width
    width = max(routed_width, intermediate if dense_layers else 0)
    return dense_layers * dense + (num_layers - dense_layers) * moe_layer, experts, width


def _shape_from_dict(raw: Mapping[str, Any], source: str) -> ModelShape:
    text = _text_section(raw)
    r = _Reader(text, source)
    model_type = str(text.get("model_type") or raw.get("model_type") or "unknown")
    hidden = r.int_("hidden_size", "n_embd", "d_model")
    layers = r.int_("num_hidden_layers", "n_layer", "num_layers")
    heads = r.int_("num_attention_heads", "n_head", "num_heads")
    kv_heads = r.int_("num_key_value_heads", "num_kv_heads", default=heads)
    if heads % kv_heads:
        raise ConfigError(
            f"{source}: key 'num_key_value_heads' ({kv_heads}) must divide {heads} attention heads"
        )
    head_dim = r.int_("head_dim", default=max(hidden // heads, 1))
    vocab = r.int_("vocab_size")
    intermediate = r.int_("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    # Transformers' default is tied; Llama-like classes untie, and their configs say so.
    tied = bool(
        text.get("tie_word_embeddings", raw.get("tie_word_embeddings", model_type.startswith("gemma")))
    )
    window, sliding = _sliding_layers(r, model_type, layers)
    kv_rank = r.opt_int("kv_lora_rank")
    rope = r.int_("qk_rope_head_dim") if kv_rank is not None else None
    mlp, experts, mlp_width = _mlp_params(r, hidden, intermediate, layers)
    params = (
        vocab * hidden * (1 if tied else 2)
        + layers * (_attention_params(r, hidden, heads, kv_heads, head_dim) + 2 * hidden)
        + mlp
        + hidden
    )
    dtype = _config_dtype(raw, text, source)
    return ModelShape(
        source=source,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=intermediate,
        mlp_width=mlp_width,
        dtype=dtype,
        param_count=params,
        weight_bits=_weight_bits(raw, text, dtype),
        tie_word_embeddings=tied,
        num_experts=experts,
        kv_lora_rank=kv_rank,
        qk_rope_head_dim=rope,
        sliding_window=window,
        sliding_layers=sliding,
        max_position_embeddings=r.opt_int("max_position_embeddings"),
    )
