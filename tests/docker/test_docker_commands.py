"""Every `autotune` command line that docker/ and the docs ship parses with the real CLI: the
Kubernetes manifests' `command`/`args`, the commands the entrypoint builds from a container's (or
compose service's, or systemd unit's) environment, and the commands of README.md, docker/README.md
and docs/. Parsing is click's own (`make_context`, down the command tree): options, their types and
the required ones; nothing runs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import yaml

from autotune.cli import app
from tests.conftest import REPO
from tests.docker._entrypoint import clean_env, fake_autotune, run_entrypoint

DOCKER = REPO / "docker"
_BIN = re.compile(r"^(?:\S*/)?(?:autotune|autotune-entrypoint|entrypoint\.sh)$")


def parse(argv: list[str]) -> None:
    """Parse ``autotune ARGV`` as the real CLI does, without invoking a command; raises on a usage error."""
    cmd: Any = typer.main.get_command(app)  # typer's own (vendored) click
    ctx = cmd.make_context("autotune", list(argv), resilient_parsing=False)
    while hasattr(cmd, "resolve_command"):  # a group
        rest = [*ctx._protected_args, *ctx.args]  # what the group left for a subcommand
        if not rest:
            return
        name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None, name
        cmd, ctx = sub, sub.make_context(name or "", args, parent=ctx)


def _autotune_words(line: str) -> list[list[str]]:
    """The `autotune ...` commands of one shell line (split at ;, &&, ||, |; env assignments dropped)."""
    found = []
    for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words[:2] in (["python", "-m"], ["python3", "-m"]) and words[2:3] == ["autotune"]:
            words = words[2:]
        if words and _BIN.match(words[0]) and len(words) > 1:
            found.append(words[1:])
    return found


def _pods() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(manifest, pod spec, container) for every container of docker/k8s that runs the image."""
    out = []
    for manifest in sorted((DOCKER / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(manifest.read_text()):
            spec = doc.get("spec", {})
            spec = spec.get("jobTemplate", {}).get("spec", spec)
            pod = spec.get("template", {}).get("spec")
            for c in (pod or {}).get("containers", []):
                if "vllm-autotune" in c.get("image", ""):
                    out.append((manifest.name, pod, c))
    return out


def _mounted_study_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> Path:
    """The repository file a ConfigMap item mounted at ``path`` comes from (docker/study/)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container.get("volumeMounts", []):
        cm = volumes[mount["name"]].get("configMap")
        for item in (cm or {}).get("items", []):
            if f"{mount['mountPath']}/{item['path']}" == path:
                return DOCKER / "study" / item["key"]
    raise AssertionError(f"{path} is mounted from no ConfigMap item")


def _built(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """The argv the entrypoint builds from ``env`` (a fake autotune prints it)."""
    secret = tmp_path / "secret"
    secret.write_text("not-a-real-secret\n")
    env = {
        k: (str(secret) if k.endswith("_FILE") and k != "AUTOTUNE_STUDY_FILE" else v) for k, v in env.items()
    }
    res = run_entrypoint(clean_env(AUTOTUNE_BIN=str(fake_autotune(tmp_path)), **env))
    assert res.returncode == 0, res.stderr
    return list(json.loads(res.stdout)["argv"])


def _manifest_commands(tmp_path: Path) -> list[tuple[str, list[str]]]:
    out = []
    for name, pod, c in _pods():
        line = " ".join([*c.get("command", []), *c.get("args", [])])
        explicit = _autotune_words(line.removeprefix("/bin/sh -c "))
        out += [(name, words) for words in explicit]
        if not c.get("command") and not c.get("args"):  # the image's entrypoint, from the environment
            env = {e["name"]: e.get("value", "x") for e in c.get("env", [])}
            if "AUTOTUNE_STUDY_FILE" in env:
                env["AUTOTUNE_STUDY_FILE"] = str(_mounted_study_file(pod, c, env["AUTOTUNE_STUDY_FILE"]))
            out.append((name, _built(tmp_path, env)))
    return out


def _compose_commands(tmp_path: Path) -> list[tuple[str, list[str]]]:
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    out = []
    for name, svc in services.items():
        env = svc.get("environment") or {}
        if "AUTOTUNE_MODE" not in env:
            continue
        expanded = {k: re.sub(r"\$\{\w+:-(.*?)\}", r"\1", str(v)) for k, v in env.items()}
        expanded = {k: re.sub(r"\$\{\w+:-(.*?)\}", r"\1", v) for k, v in expanded.items()}  # nested
        out.append((f"compose:{name}", _built(tmp_path, expanded)))
    return out


def _systemd_commands(tmp_path: Path) -> list[tuple[str, list[str]]]:
    unit = (DOCKER / "systemd" / "vllm-autotune-nightly.service").read_text()
    (start,) = re.findall(r"^ExecStart=(.*)$", unit, flags=re.M)
    out = [("systemd", words) for words in _autotune_words(start) if words]
    env = dict(
        ln.split("=", 1)
        for ln in (DOCKER / "systemd" / "nightly.env").read_text().splitlines()
        if "=" in ln and not ln.startswith("#")
    )
    out.append(("systemd:nightly.env", _built(tmp_path, env)))
    return out


def _doc_commands() -> list[tuple[str, list[str]]]:
    out = []
    for doc in [REPO / "README.md", DOCKER / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        for block in re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                out += [(doc.name, w) for w in _autotune_words(line.strip().removeprefix("$ "))]
        for inline in re.findall(r"`((?:\S*/)?autotune [^`]+)`", text.replace("\n", " ")):
            if " -" not in inline or re.search(r"\.\.\.|\[|\||<|\bor\b", inline):
                continue  # a command's name, or a synopsis (`MODE --file FILE`, `[--rate N | ...]`)
            out += [(doc.name, w) for w in _autotune_words(inline) if not w[0].isupper()]
    return out


def test_the_commands_are_found_where_they_are_shipped(tmp_path: Path) -> None:
    commands = _manifest_commands(tmp_path)
    assert ("rollback-job.yaml", ["nightly", "rollback", "--file", "/etc/autotune/study.yaml"]) in commands
    nightly = [w for n, w in commands if n == "cronjob-nightly.yaml"]
    assert nightly and nightly[0][:3] == ["nightly", "--file", str(DOCKER / "study" / "nightly.yaml")]
    assert len(_compose_commands(tmp_path)) >= 2 and len(_systemd_commands(tmp_path)) >= 1
    assert len(_doc_commands()) >= 15


@pytest.mark.parametrize("where", ["manifests", "compose", "systemd", "docs"])
def test_every_shipped_command_line_parses_with_the_real_cli(tmp_path: Path, where: str) -> None:
    found = {
        "manifests": _manifest_commands,
        "compose": _compose_commands,
        "systemd": _systemd_commands,
        "docs": lambda _tmp: _doc_commands(),
    }[where](tmp_path)
    bad = []
    for name, argv in found:
        try:
            parse(argv)
        except typer.TyperException as exc:  # click's usage errors, as `autotune` itself catches them
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            bad.append(f"{name}: autotune {shlex.join(argv)}: {message}")
    assert not bad, "\n".join(bad)
