"""The promote hooks of docker/hooks/, run as a night runs them (autotune's run_on_promote, /bin/sh):
git-commit.sh pushes the promoted config to a real Git repository; configmap-update.sh, with a
stand-in kubectl that records its calls, replaces the ConfigMap and sets the checksum annotation,
and puts the previous config back when the rollout fails."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.nightly._promote import PromoteResult, run_on_promote
from tests.conftest import REPO

HOOKS = REPO / "docker" / "hooks"
FIGURES = {"best_value": 412.5, "baseline_value": 530.0}


def _night(
    tmp_path: Path, hook: str, monkeypatch: pytest.MonkeyPatch, **env: str
) -> tuple[Path, PromoteResult]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    new = tmp_path / "export" / "best.yaml"
    new.parent.mkdir(parents=True, exist_ok=True)
    new.write_text("model: /models/m\nmax-num-seqs: 256\n")
    previous = tmp_path / "export" / "history" / "best.old.yaml"
    previous.parent.mkdir(parents=True, exist_ok=True)
    previous.write_text("model: /models/m\nmax-num-seqs: 128\n")
    result = run_on_promote(
        f"sh {HOOKS / hook}", new_config=new, previous_config=previous, figures=FIGURES,
        night="12", timeout_s=60, objective="ttft_p90",
    )  # fmt: skip
    return new, result


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def test_git_commit_hook_pushes_the_promoted_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = tmp_path / "deploy.git"
    _git("init", "-q", "--bare", "--initial-branch=main", str(remote))
    seed = tmp_path / "seed"
    _git("clone", "-q", str(remote), str(seed))
    _git(
        "-C",
        str(seed),
        "-c",
        "user.name=x",
        "-c",
        "user.email=x@x",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "init",
    )
    _git("-C", str(seed), "push", "-q", "origin", "HEAD:main")
    new, result = _night(
        tmp_path, "git-commit.sh", monkeypatch, GITOPS_REPO=str(remote), GITOPS_PATH="prod/vllm.yaml"
    )
    assert result.ok, result.log_tail
    assert _git("--git-dir", str(remote), "log", "-1", "--format=%s|%an") == (
        "autotune: promote night 12 (ttft_p90 530.0 -> 412.5)|autotune"
    )
    shown = subprocess.run(
        ["git", "--git-dir", str(remote), "show", "main:prod/vllm.yaml"], capture_output=True
    )
    assert shown.stdout == new.read_bytes()
    # The same config again: nothing to commit, and the hook still succeeds.
    _, again = _night(
        tmp_path, "git-commit.sh", monkeypatch, GITOPS_REPO=str(remote), GITOPS_PATH="prod/vllm.yaml"
    )
    assert again.ok and "nothing to commit" in again.log_tail
    assert _git("--git-dir", str(remote), "rev-list", "--count", "main") == "2"


def test_git_commit_hook_without_a_repository_fails_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITOPS_REPO", raising=False)
    _, result = _night(tmp_path, "git-commit.sh", monkeypatch)
    assert not result.ok and "GITOPS_REPO" in result.log_tail


def _fake_kubectl(tmp_path: Path, *, rollout_fails: bool = False) -> Path:
    """A kubectl that appends its argv (and stdin, for apply) to calls.jsonl; create --dry-run
    prints a stand-in manifest holding the file's content."""
    calls = tmp_path / "calls.jsonl"
    path = tmp_path / "kubectl"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "stdin = sys.stdin.read() if 'apply' in args else ''\n"
        f"open({str(calls)!r}, 'a').write(json.dumps({{'argv': args, 'stdin': stdin}}) + '\\n')\n"
        "if 'create' in args:\n"
        "    src = [a for a in args if a.startswith('--from-file=')][0].split('=', 2)[2]\n"
        "    print('kind: ConfigMap\\ndata: ' + json.dumps(open(src).read()))\n"
        f"if 'rollout' in args and {rollout_fails!r}:\n"
        "    print('error: deployment \"vllm\" exceeded its progress deadline', file=sys.stderr); sys.exit(1)\n"
    )
    path.chmod(0o755)
    return calls


def _calls(calls: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def _annotation_of(patch_call: dict[str, object]) -> str:
    argv = patch_call["argv"]
    assert isinstance(argv, list)
    body = json.loads(argv[argv.index("-p") + 1])
    return str(body["spec"]["template"]["metadata"]["annotations"]["autotune.vllm.ai/config-sha256"])


def test_configmap_hook_replaces_the_configmap_and_rolls_the_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_kubectl(tmp_path)
    new, result = _night(tmp_path, "configmap-update.sh", monkeypatch, KUBECTL=str(tmp_path / "kubectl"))
    assert result.ok, result.log_tail
    create, apply, patch = _calls(calls)
    assert create["argv"] == [
        "create", "configmap", "vllm-best-config", f"--from-file=best.yaml={new.resolve()}",
        "--dry-run=client", "-o", "yaml",
    ]  # fmt: skip
    assert apply["argv"] == ["apply", "-f", "-"] and "max-num-seqs: 256" in str(apply["stdin"])
    assert patch["argv"][:3] == ["patch", "deployment", "vllm"]  # type: ignore[index]
    assert _annotation_of(patch) == hashlib.sha256(new.read_bytes()).hexdigest()


def test_configmap_hook_puts_the_previous_config_back_when_the_rollout_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_kubectl(tmp_path, rollout_fails=True)
    _, result = _night(
        tmp_path, "configmap-update.sh", monkeypatch,
        KUBECTL=str(tmp_path / "kubectl"), VLLM_ROLLOUT_TIMEOUT="15m", VLLM_NAMESPACE="serving",
    )  # fmt: skip
    assert result.exit_code == 7 and "putting the previous config back" in result.log_tail
    seen = _calls(calls)
    assert all(c["argv"][:2] == ["--namespace", "serving"] for c in seen)  # type: ignore[index]
    patches = [c for c in seen if "patch" in c["argv"]]  # type: ignore[operator]
    previous = tmp_path / "export" / "history" / "best.old.yaml"
    assert _annotation_of(patches[-1]) == hashlib.sha256(previous.read_bytes()).hexdigest()
    assert "max-num-seqs: 128" in str(seen[-2]["stdin"])  # the ConfigMap holds the previous config again
