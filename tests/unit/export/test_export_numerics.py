"""An exported config whose tuned KV dtype is fp8 says, in its header, that it changes numerics."""

from __future__ import annotations

from autotune.export import build_export


def _header(tuned: list[str]) -> str:
    return build_export(
        model="m", fixed_argv=["--max-model-len", "4096"], tuned_argv=tuned, env={}, header_lines=["study s"]
    ).header


def test_a_tuned_fp8_kv_cache_is_flagged_as_changing_numerics() -> None:
    header = _header(["--kv-cache-dtype", "fp8", "--max-num-seqs", "256"])
    assert "# kv-cache-dtype fp8 was chosen by the study (an opt-in knob): it changes numerics" in header
    assert "changes numerics" not in _header(["--max-num-seqs", "256"])
    assert "changes numerics" not in _header(["--kv-cache-dtype", "auto"])
