"""What the user fixes is not tuned: the dry run says so and every command carries the fixed values;
conditions on a fixed parameter follow it; the space is clipped to what can run with the fixed flags;
``--engine-arg`` adds to the study file's ``engine_args``, and ``show`` prints the merged list."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import AutotuneError
from tests.conftest import FAKE_LAUNCHER, REPO

FIXED = [
    "--engine-arg=--max-num-batched-tokens=2048",
    "--engine-arg=--block-size=32",
    "--engine-arg=--max_num_seqs=8",
]


def _invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if isinstance(res.exception, AutotuneError):
        return res.exception.exit_code, res.output + f"error: {res.exception}"
    return res.exit_code, res.output


def _commands(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "--port" in ln and not ln.startswith("#")]


def _values(command: str, flag: str) -> list[str]:
    """Every value ``command`` gives ``flag`` (spelled with dashes or underscores)."""
    pattern = re.escape(flag).replace("\\-", "[-_]")
    return re.findall(rf"(?:^| ){pattern}[ =](\S+)", command)


def _dry_run(model: Path, *extra: str) -> tuple[int, str]:
    return _invoke(
        [
            "run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(model), "--dry-run",
            "--dry-run-samples", "6", "--no-check-args", "--engine-arg=--enforce-eager", *extra,
        ]
    )  # fmt: skip


def test_fixed_batching_and_block_size_are_not_tuned_and_every_command_carries_them(tiny_model: Path) -> None:
    rc, out = _dry_run(tiny_model, "--engine-arg=--max-model-len=2048", *FIXED)
    assert rc in (0, 5), out
    assert "not tuned: max_num_batched_tokens: fixed by you (--max-num-batched-tokens 2048)" in out
    assert "not tuned: block_size: fixed by you (--block-size 32)" in out
    # 8 is not one of the CPU space's max_num_seqs choices: allowed, and said
    assert "not tuned: max_num_seqs: fixed by you (--max_num_seqs 8); not one of the space's choices" in out
    commands = _commands(out)
    assert len(commands) >= 7  # the baseline (and its reference) and six samples
    for command in commands:
        assert _values(command, "--max-num-batched-tokens") == ["2048"], command
        assert _values(command, "--block-size") == ["32"], command
        assert _values(command, "--max-num-seqs") == ["8"], command
    candidates = next(ln for ln in out.splitlines() if "informed candidates" in ln)
    assert "block_size" not in candidates and "max_num_batched_tokens" not in candidates


def test_a_fixed_memory_share_outside_the_range_is_kept_and_a_fixed_pool_of_zero_turns_off_its_knobs(
    tiny_model: Path,
) -> None:
    rc, out = _dry_run(
        tiny_model,
        "--space", str(REPO / "search_spaces" / "cuda.yaml"), "--profile", "cuda-native",
        "--engine-arg=--gpu-memory-utilization=0.15", "--engine-arg=--kv-offloading-size=0",
    )  # fmt: skip
    assert rc in (0, 5), out
    assert (
        "not tuned: gpu_memory_utilization: fixed by you (--gpu-memory-utilization 0.15); outside the "
        "space's range 0.5..0.95: used as you set it"
    ) in out
    assert (
        "not tuned: offload_block_size: off: tuned only when cpu_swap_space_gb is > 0, and cpu_swap_space_gb is fixed by you (--kv-offloading-size 0)"
        in out
    )
    assert "not tuned: offload_eviction_policy: off" in out
    for command in _commands(out):
        assert _values(command, "--gpu-memory-utilization") == ["0.15"], command
        assert _values(command, "--kv-offloading-size") == ["0"], command
        assert "--kv-transfer-config" not in command, command


def test_the_space_is_clipped_to_kv_sizes_that_hold_one_request_of_the_fixed_length(tiny_model: Path) -> None:
    """The CPU space's smallest KV sizes cannot hold one 8,192-token request of this model: they are
    not sampled, said once, and every sample fits."""
    rc, out = _dry_run(tiny_model, "--engine-arg=--max-model-len=8192")
    assert rc in (0, 5), out
    clipped = [ln for ln in out.splitlines() if ln.startswith("# not searched: kv_cache_memory_bytes")]
    assert len(clipped) == 1 and "8M" in clipped[0] and "cannot hold one request" in clipped[0], out
    samples = re.findall(r"# sample \d+: .*\n# .*memory: (.*)", out)
    assert len(samples) == 6 and all(s == "fits" for s in samples), samples


def _study_file(tmp_path: Path, model: Path) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "rag.jsonl", folder / "rag.jsonl")
    (folder / "study.yaml").write_text(
        f"workload: rag.jsonl\nmodel: {model}\nstudy: merged\nn_trials: 1\n"
        "engine_args: [--enforce-eager, --max-model-len=8192, --block-size 64]\n"
        f"studies_dir: {tmp_path / 'studies'}\n"
    )
    return folder / "study.yaml"


def test_engine_args_given_as_flags_add_to_the_study_files(tmp_path: Path, tiny_model: Path) -> None:
    path = _study_file(tmp_path, tiny_model)
    flags = ["--engine-arg=--dtype=float32", "--engine-arg=--max_model_len=4096"]
    rc, out = _invoke(
        ["run", "-f", str(path), *flags, "--dry-run", "--no-check-args", "--dry-run-samples", "1"]
    )
    assert rc in (0, 5), out
    for command in _commands(out):
        assert " --enforce-eager" in command and _values(command, "--dtype") == ["float32"], command
        assert _values(command, "--max-model-len") == ["4096"], command  # given again: replaced in place
        assert _values(command, "--block-size") == ["64"], command
    # a study run with the fake server records the merged list; `show` prints it
    with path.open("a") as f:
        f.write(
            f"launcher: {' '.join(FAKE_LAUNCHER)}\ncheck_args: false\ncheck_memory: false\nconfirm_rounds: 0\n"
        )
    rc, out = _invoke(["run", "-f", str(path), *flags, "--passes", "1"])
    assert rc == 0, out
    rc, out = _invoke(["show", "--study", "merged", "--studies-dir", str(tmp_path / "studies")])
    assert rc == 0, out
    listed = out[out.index("engine_args:") :].split("\n", 5)[1:5]
    assert [ln.strip() for ln in listed] == [
        "- --enforce-eager",
        "- --max_model_len=4096",
        "- --block-size 64",
        "- --dtype=float32",
    ], out
