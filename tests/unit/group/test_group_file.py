"""A study file of several models (``models:``, ``share:``): read, checked, each bad input one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.studyfile import load_group_file, load_study_file, parse_bytes

GOOD = """\
models:
  - name: rag
    model: m8
    workload: rag.jsonl
    engine_args: [--max-model-len=2048]
    weight: 2
    slo: {ttft_p90: 800ms}
  - name: chat
    model: m2
    workload: chat.jsonl
share:
  kv_cache_memory_bytes: 48M
  baseline: {rag: 0.5, chat: 0.4}
speed: 3
engine_args: [--enforce-eager]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "group.yaml"
    path.write_text(text)
    return path


def test_a_group_file_gives_each_model_its_own_study_keys_beside_the_common_ones(tmp_path: Path) -> None:
    group = load_group_file(_write(tmp_path, GOOD))
    assert group is not None
    assert group.names == ("rag", "chat")
    assert group.share.kv_cache_memory_bytes == 48 * 2**20
    rag = group.member_file(group.members[0]).values
    assert rag["workload"] == str(tmp_path / "rag.jsonl")  # relative to the file, as a study file's
    assert rag["engine_args"] == ("--enforce-eager", "--max-model-len=2048")  # common, then its own
    assert rag["slo"] == ("ttft_p90=800ms",) and rag["speed"] == 3
    chat = group.member_file(group.members[1]).values
    assert chat["engine_args"] == ("--enforce-eager",) and "slo" not in chat


def test_a_plain_study_file_is_no_group(tmp_path: Path) -> None:
    assert load_group_file(_write(tmp_path, "workload: a.jsonl\nmodel: m\n")) is None


@pytest.mark.parametrize(
    ("change", "line", "needle"),
    [
        (("name: chat", "name: rag"), 8, "'rag' names two entries"),
        (
            ("chat: 0.4", "chat: 0.6"),
            13,
            "share.baseline: {'rag': 0.5, 'chat': 0.6}: the shares sum to 1.1, above 1",
        ),
        (("chat: 0.4", "coder: 0.4"), 13, "'coder' is not a model"),
        (("{rag: 0.5, chat: 0.4}", "{rag: 0.5}"), 13, "no share for 'chat'"),
        (("kv_cache_memory_bytes: 48M", "kv_cache_memory_bytes: lots"), 12, "'lots' is not a byte count"),
        (("kv_cache_memory_bytes: 48M", "pool: 3"), 12, "share.pool"),
        (("speed: 3", "model: m"), 14, "'model': a study of several models sets it under each entry"),
        (("    weight: 2\n", "    wieght: 2\n"), 2, "models[0].wieght"),
    ],
)
def test_bad_group_input_is_one_line_naming_the_key_and_its_line(
    tmp_path: Path, change: tuple[str, str], line: int, needle: str
) -> None:
    path = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ConfigError) as err:
        load_group_file(path)
    msg = str(err.value)
    assert "\n" not in msg and needle in msg, msg
    assert msg.startswith(f"{path}:{line}: "), msg
    assert "fix:" in msg


def test_one_model_is_not_a_group(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least two engines"):
        load_group_file(_write(tmp_path, "models:\n  - {name: a, model: m, workload: w.jsonl}\n"))


def test_commands_that_take_one_engine_refuse_a_group_file_by_its_key(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=rf"^{path}:1: 'models': .*autotune run"):
        load_study_file(path)


def test_a_models_study_given_model_or_workload_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, GOOD)
    for flag in ("--model=x", "--workload=x.jsonl"):
        with pytest.raises(SystemExit) as exited:
            main(["run", "-f", str(path), flag, "--dry-run"])
        said = capsys.readouterr()
        assert exited.value.code == 2, said
        assert f"--{flag[2:].split('=')[0]}: {path} is a study of several models" in " ".join(
            said.err.split()
        )
        assert "Traceback" not in said.err + said.out


def test_byte_counts_read_as_vllm_reads_them() -> None:
    assert parse_bytes("48M") == 48 * 2**20
    assert parse_bytes("1.5g") == 1_500_000_000
    assert parse_bytes(1024) == 1024


def test_the_example_group_file_reads_with_its_paths_beside_it() -> None:
    from tests.conftest import REPO

    group = load_group_file(REPO / "examples" / "group.yaml")
    assert group is not None and group.names == ("rag", "chat")
    chat = group.member_file(group.members[1]).values
    assert chat["workload"] == str(REPO / "examples" / "support_chat.jsonl")
    assert chat["model"] == str(REPO / ".models" / "tiny-l2")
    assert chat["engine_args"] == ("--enforce-eager", "--max-model-len=2048", "--max-num-seqs=64")


def test_group_objective_defaults_to_pareto_and_a_bad_one_is_one_line_naming_the_choices(
    tmp_path: Path,
) -> None:
    path = tmp_path / "g.yaml"
    body = "models:\n  - {name: a, model: m, workload: w.jsonl}\n  - {name: b, model: m, workload: w.jsonl}\n"
    path.write_text(body)
    group = load_group_file(path)
    assert group is not None and group.objective == "pareto"
    path.write_text(body + "group_objective: worst\n")
    group = load_group_file(path)
    assert group is not None and group.objective == "worst" and "group_objective" not in group.common.values
    path.write_text(body + "group_objective: best\n")
    with pytest.raises(ConfigError) as err:
        load_group_file(path)
    assert str(err.value) == (
        f"{path}:4: group_objective: 'best' is not a group objective (fix: one of pareto, worst, weighted_sum)"
    )
    path.write_text("model: m\nworkload: w.jsonl\ngroup_objective: pareto\n")
    with pytest.raises(ConfigError, match=r"g.yaml:3: group_objective: needs models:"):
        load_group_file(path)
