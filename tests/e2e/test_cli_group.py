"""``autotune run -f group.yaml --dry-run``: every engine's command and the split for the baseline, the
prior's first split and sampled trials, each command accepted by the installed vLLM's own parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import AutotuneError
from tests.conftest import write_two_model_group

SPLIT = re.compile(r"^# (.+?): split of 48 MiB of KV \(share.kv_cache_memory_bytes\): rag [0-9.]+ \((\d+) MiB\), "
                   r"chat [0-9.]+ \((\d+) MiB\); in all (\d+) MiB$", re.M)  # fmt: skip


def _invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if isinstance(res.exception, AutotuneError):
        return res.exception.exit_code, res.output + f"error: {res.exception}"
    return res.exit_code, res.output


def test_the_dry_run_of_a_group_shows_every_engine_checked_and_splits_within_the_budget(
    tmp_path: Path,
) -> None:
    pytest.importorskip("vllm")
    path = write_two_model_group(tmp_path)
    rc, out = _invoke(["run", "-f", str(path), "--dry-run", "--dry-run-samples", "3"])
    assert rc == 0, out
    splits = SPLIT.findall(out)
    labels = [s[0] for s in splits]
    assert labels[:2] == [
        "baseline (equal split, each model's fixed flags)",
        "prior's first split (each model's fixed flags)",
    ]
    assert labels[2:] == ["sample 1", "sample 2", "sample 3"], out
    assert splits[0][1:3] == ("24", "24")
    for _, rag, chat, total in splits:
        assert int(rag) + int(chat) == int(total) <= 48  # never past the budget
    assert out.count("accepted by vLLM's parser") == 2 * 5 and "REJECTED" not in out
    commands = [line for line in out.splitlines() if "vllm.entrypoints.openai.api_server" in line]
    assert len(commands) == 10 and all(c.count("--kv-cache-memory-bytes") == 1 for c in commands)
    l8, l2 = tmp_path / "l8", tmp_path / "l2"  # the group file's models
    assert sum(str(l8) in c for c in commands) == 5 and sum(str(l2) in c for c in commands) == 5
    assert "# prior split: rag: working set" in out
