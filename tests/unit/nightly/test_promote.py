"""The promote hook (a real /bin/sh, a real Git repository) and the history that makes rollback possible."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from autotune.errors import ConfigError, ExportError, PromoteHookError
from autotune.nightly._promote import keep_promoted, promoted_history, rollback, run_on_promote

FIGURES = {"best_value": 412.5, "baseline_value": 530.0}
GIT_ENV = {
    "GIT_AUTHOR_NAME": "autotune",
    "GIT_AUTHOR_EMAIL": "autotune@example.invalid",
    "GIT_COMMITTER_NAME": "autotune",
    "GIT_COMMITTER_EMAIL": "autotune@example.invalid",
}


def _export(tmp_path: Path, text: str = "max-num-seqs: 128\n") -> Path:
    out = tmp_path / "export" / "best.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def _hook(command: str, new: Path, *, previous: Path | None = None, timeout_s: float = 30.0, **kw: object):  # type: ignore[no-untyped-def]
    return run_on_promote(
        command,
        new_config=new,
        previous_config=previous,
        figures=FIGURES,
        night="12",
        timeout_s=timeout_s,
        objective="ttft_p90",
        **kw,  # type: ignore[arg-type]
    )


def test_a_hook_commits_the_new_config_into_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    new = _export(tmp_path, "max-num-seqs: 256\nenable-prefix-caching: true\n")
    command = (
        f'cp "$AUTOTUNE_NEW_CONFIG" {repo}/ && git -C {repo} add best.yaml && '
        f'git -C {repo} commit -q -m "night $AUTOTUNE_NIGHT: $AUTOTUNE_OBJECTIVE $AUTOTUNE_BEST_VALUE"'
    )
    result = _hook(command, new)
    assert result.ok and result.exit_code == 0, result.log_tail
    log = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.strip() == "night 12: ttft_p90 412.5"
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", "HEAD:best.yaml"], capture_output=True, check=True
    )
    assert shown.stdout == new.read_bytes()


def test_the_hook_sees_paths_and_figures_but_not_the_tuners_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "pg-Secret-4711")
    monkeypatch.setenv("AUTOTUNE_STORAGE", "postgresql://u:db-Secret-0815@db/x")
    monkeypatch.setenv("VLLM_API_KEY", "sk-Secret-42")
    monkeypatch.setenv("GITOPS_TOKEN", "the-hooks-own-token")
    new, previous = _export(tmp_path), tmp_path / "export" / "history" / "best.old.yaml"
    result = _hook("env | sort", new, previous=previous, scrub=["VLLM_API_KEY"])
    seen = dict(line.split("=", 1) for line in result.log_path.read_text().splitlines() if "=" in line)
    assert seen["AUTOTUNE_NEW_CONFIG"] == str(new.resolve())
    assert seen["AUTOTUNE_PREVIOUS_CONFIG"] == str(previous.resolve())
    assert seen["AUTOTUNE_NIGHT"] == "12" and seen["AUTOTUNE_OBJECTIVE"] == "ttft_p90"
    assert seen["AUTOTUNE_BEST_VALUE"] == "412.5" and seen["AUTOTUNE_BASELINE_VALUE"] == "530.0"
    assert seen["AUTOTUNE_FIGURES"] == '{"baseline_value": 530.0, "best_value": 412.5}'
    assert seen["GITOPS_TOKEN"] == "the-hooks-own-token"  # a hook may need a credential of its own
    assert "Secret" not in result.log_path.read_text()
    assert result.log_path.parent == new.parent / "promote-logs"


def test_a_failing_hook_keeps_the_export_and_reports_its_own_exit_code(tmp_path: Path) -> None:
    new = _export(tmp_path)
    before = new.read_bytes()
    result = _hook('echo "kubectl: forbidden" >&2; rm -f "$AUTOTUNE_NEW_CONFIG.nope"; exit 3', new)
    assert not result.ok and result.exit_code == 3 and not result.timed_out
    assert new.read_bytes() == before
    assert "kubectl: forbidden" in result.log_tail
    assert "exited with code 3" in result.describe()
    assert result.shell_code == 3  # the night exits with the hook's own code
    assert PromoteHookError(result.describe(), exit_code=result.shell_code).exit_code == 3


def test_a_hook_ended_by_a_signal_reports_128_plus_the_signal_as_a_shell_does(tmp_path: Path) -> None:
    result = _hook("kill -USR1 $$", _export(tmp_path))
    assert result.exit_code == -10 and not result.timed_out
    assert result.shell_code == 128 + 10
    assert PromoteHookError("hook", exit_code=result.shell_code).exit_code == 138


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def test_a_hanging_hook_and_what_it_started_are_killed_at_the_timeout(tmp_path: Path) -> None:
    new = _export(tmp_path)
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    # The shell ignores SIGTERM: the group gets SIGKILL after the grace period.
    result = _hook(f"trap '' TERM; sleep 300 & echo $! > {pidfile}; wait; wait", new, timeout_s=0.5)
    assert result.timed_out and not result.ok
    assert result.exit_code == -9 and result.shell_code == 137  # SIGKILL after the ignored SIGTERM
    assert time.monotonic() - start < 20
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the hook's background child outlived the timeout"
    assert "killed at its timeout" in result.describe()


def test_a_figure_that_is_not_a_number_is_null_in_the_json(tmp_path: Path) -> None:
    new = _export(tmp_path)
    result = run_on_promote(
        'printf "%s|%s" "$AUTOTUNE_BEST_VALUE" "$AUTOTUNE_FIGURES"', new_config=new, previous_config=None,
        figures={"best_value": float("nan"), "gain": 0.125}, night="3", timeout_s=10,
    )  # fmt: skip
    assert result.log_tail == 'nan|{"best_value": null, "gain": 0.125}'


def test_bad_hook_settings_are_one_line_errors(tmp_path: Path) -> None:
    new = _export(tmp_path)
    with pytest.raises(ConfigError, match="empty"):
        _hook("  ", new)
    with pytest.raises(ConfigError, match="new_config"):
        run_on_promote(
            "true", new_config=new, previous_config=None, figures={"new_config": 1.0}, night="1", timeout_s=5
        )
    with pytest.raises(ConfigError, match="no time"):
        _hook("true", new, timeout_s=0)


def test_rollback_restores_the_previous_promotions_byte_for_byte(tmp_path: Path) -> None:
    archive = tmp_path / "export" / "history"
    versions = [b"max-num-seqs: 64\n", b"max-num-seqs: 128\r\n# \xc3\xa9t\xc3\xa9  \n", b"max-num-seqs: 256"]
    out = _export(tmp_path)
    kept = []
    for data in versions:
        out.write_bytes(data)
        kept.append(keep_promoted(out, archive))
    assert promoted_history(out, archive) == kept == sorted(kept)
    assert [p.read_bytes() for p in kept] == versions
    assert not [p for p in archive.iterdir() if p.name.startswith(".")]  # no temp file left

    restored, withdrawn = rollback(out, archive)
    assert out.read_bytes() == versions[1] and restored == kept[1]
    assert withdrawn.read_bytes() == versions[2] and withdrawn.parent == archive / "withdrawn"
    restored, _ = rollback(out, archive)
    assert out.read_bytes() == versions[0] and restored == kept[0]
    with pytest.raises(ExportError, match="no earlier promoted config"):
        rollback(out, archive)
    assert out.read_bytes() == versions[0]


def test_rollback_of_a_hand_edited_export_keeps_the_edit(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    out = _export(tmp_path, "max-num-seqs: 64\n")
    keep_promoted(out, archive)
    out.write_text("max-num-seqs: 999  # edited by hand\n")
    restored, withdrawn = rollback(out, archive)
    assert out.read_text() == "max-num-seqs: 64\n" == restored.read_text()
    assert withdrawn.read_text() == "max-num-seqs: 999  # edited by hand\n"


def test_keep_promoted_of_a_missing_export_is_an_export_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="cannot read"):
        keep_promoted(tmp_path / "nope.yaml", tmp_path / "archive")
    assert not os.path.exists(tmp_path / "archive")
