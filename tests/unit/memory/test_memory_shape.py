"""ModelShape from real model configs: KV bytes per token, sliding layers, parameters, errors."""

from __future__ import annotations

import json

import pytest

from autotune.errors import ConfigError
from autotune.memory import ModelShape, kv_dtype_bytes

KiB = 1024


def test_llama3_8b_kv_is_128_kib_per_token_in_bf16(shape_of):
    shape = shape_of("llama-3-8b")
    assert shape.kv_bytes_per_token() == 32 * 8 * 128 * 2 * 2 == 128 * KiB
    assert shape.dtype == "bfloat16"
    assert shape.num_sliding_layers == 0
    assert shape.param_count == pytest.approx(8.03e9, rel=0.005)


def test_qwen25_7b_gqa_and_disabled_sliding_window(shape_of):
    shape = shape_of("qwen2.5-7b-instruct")
    assert shape.kv_bytes_per_token() == 28 * 4 * 128 * 2 * 2 == 56 * KiB
    # use_sliding_window is false: max_window_layers and sliding_window must not apply.
    assert shape.num_sliding_layers == 0 and shape.sliding_window is None
    assert shape.param_count == pytest.approx(7.62e9, rel=0.01)


def test_fp8_kv_cache_halves_bf16(shape_of):
    shape = shape_of("llama-3-8b")
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert shape.kv_bytes_per_token(name) == 64 * KiB
    assert shape.kv_bytes_per_token("float32") == 256 * KiB


def test_unknown_kv_cache_dtype_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown dtype 'int3'"):
        kv_dtype_bytes("int3", 2)


def test_mistral_every_layer_slides_so_long_requests_hold_only_the_window(shape_of):
    shape = shape_of("mistral-7b-v0.1")
    assert shape.sliding_window == 4096
    assert shape.num_sliding_layers == 32
    per_layer = 8 * 128 * 2 * 2
    assert shape.kv_bytes_for_request(8192) == 32 * per_layer * 4096
    assert shape.kv_bytes_for_request(1000) == 32 * per_layer * 1000
    assert shape.param_count == pytest.approx(7.24e9, rel=0.01)


def test_gemma2_alternates_sliding_layers_and_serves_float32_as_bf16(shape_of):
    shape = shape_of("gemma-2-9b")
    assert shape.dtype == "float32" and shape.serving_dtype_bytes == 2
    assert shape.sliding_layers[:4] == (True, False, True, False)
    assert shape.num_sliding_layers == 21
    per_layer = 2 * 8 * 256 * 2
    assert shape.kv_bytes_per_token() == 42 * per_layer == 344_064
    assert shape.kv_bytes_for_request(8192) == per_layer * (21 * 8192 + 21 * 4096)
    assert shape.tie_word_embeddings  # Gemma ties embeddings without saying so
    assert shape.param_count == pytest.approx(9.24e9, rel=0.01)


def test_gemma3_text_config_nesting_defaults_and_pattern(shape_of):
    shape = shape_of("gemma-3-4b-it")
    assert (shape.hidden_size, shape.num_layers, shape.num_kv_heads, shape.head_dim) == (2560, 34, 4, 256)
    assert shape.dtype == "bfloat16"  # from the top level, not text_config
    global_layers = [i for i, sliding in enumerate(shape.sliding_layers) if not sliding]
    assert global_layers == [5, 11, 17, 23, 29]
    assert shape.sliding_window == 1024
    assert shape.kv_bytes_per_token() == 34 * 4 * 256 * 2 * 2
    assert shape.param_count == pytest.approx(3.88e9, rel=0.02)  # language model only


def test_deepseek_v3_mla_stores_one_latent_per_layer(shape_of):
    shape = shape_of("deepseek-v3")
    assert shape.is_mla
    assert shape.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert shape.kv_bytes_per_token("fp8") == 35_136
    assert shape.num_experts == 256
    assert shape.weight_bits == 8  # fp8 checkpoint
    assert shape.param_count == pytest.approx(671e9, rel=0.01)


def test_mixtral_counts_every_expert(shape_of):
    shape = shape_of("mixtral-8x7b-v0.1")
    assert shape.is_moe and shape.num_experts == 8
    assert shape.param_count == pytest.approx(46.7e9, rel=0.01)
    assert shape.kv_bytes_per_token() == 128 * KiB
    assert shape.mlp_width == 2 * 14336  # two experts per token


def test_tiny_model_exact_figures(shape_of):
    shape = shape_of("tiny-llama-2layer")
    assert shape.kv_bytes_per_token() == 2 * 4 * 64 * 2 * 2 == 2048
    embeddings = 1000 * 256 * 2  # untied lm_head
    per_layer = 4 * 256 * 256 + 3 * 256 * 512 + 2 * 256
    assert shape.param_count == embeddings + 2 * per_layer + 256 == 1_824_000


def test_reads_a_directory_and_explicit_layer_types(tmp_path):
    cfg = {
        "model_type": "custom",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "dtype": "float16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = ModelShape.from_config(tmp_path)
    assert shape.sliding_layers == (True, False, True)
    assert shape.head_dim == 16 and shape.num_kv_heads == 4  # defaults: hidden / heads, no GQA
    assert shape.kv_bytes_for_request(100) == 2 * 4 * 16 * 2 * (100 + 2 * 16)


def _write(tmp_path, content: str):
    path = tmp_path / "config.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"hidden_size": 64}', "missing key 'num_hidden_layers'"),
        ('{"hidden_size": 64, "num_hidden_layers": "x"', "not valid JSON (line 1"),
        (
            '{"hidden_size": 64, "num_hidden_layers": 0, "num_attention_heads": 4, "vocab_size": 10}',
            "key 'num_hidden_layers' must be a positive integer, got 0",
        ),
        (
            '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, '
            '"vocab_size": 10}',
            "key 'num_key_value_heads' (3) must divide 4",
        ),
        (
            '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, '
            '"torch_dtype": "bfloat17"}',
            "unknown dtype 'bfloat17'",
        ),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_config_is_one_line_error_naming_file_and_key(tmp_path, content, expected):
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        ModelShape.from_config(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert expected in message
    assert "\n" not in message


def test_missing_config_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="no such model config"):
        ModelShape.from_config(tmp_path / "nowhere")
