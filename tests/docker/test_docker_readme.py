"""docker/README.md's commands can be pasted: each shell block parses, names files and names that
exist (compose services in the profile given, manifests, Kubernetes objects), and the block that
runs without a container or cluster (the entrypoint's dry run) runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO

README = REPO / "docker" / "README.md"
TEXT = README.read_text()
BLOCKS = re.findall(r"```sh\n(.*?)```", TEXT, flags=re.S)
COMMANDS = [ln for block in BLOCKS for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def test_the_readme_has_shell_blocks_and_each_parses() -> None:
    assert len(BLOCKS) >= 10
    for block in BLOCKS:
        res = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert res.returncode == 0, f"{res.stderr}\n{block}"


def test_every_repository_path_in_a_command_exists() -> None:
    paths = {p for cmd in COMMANDS for p in re.findall(r"(?<![\w/.-])((?:docker|examples)/[\w./-]+)", cmd)}
    assert "docker/compose.yaml" in paths and "docker/k8s/serving.yaml" in paths
    assert any(
        cmd.startswith("kubectl kustomize docker/ |") for cmd in COMMANDS
    )  # the nightly, with its ConfigMaps
    generated = {"docker/secrets", "docker/secrets/pg_password"}  # made by the README's own commands
    missing = sorted(p for p in paths - generated if not (REPO / p).exists())
    assert not missing


def test_compose_commands_name_services_of_the_profile_they_enable() -> None:
    services = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())["services"]
    checked = 0
    for cmd in COMMANDS:
        m = re.search(r"docker compose -f docker/compose.yaml (.*?) (?:run|up)\b(.*)", cmd)
        if not m:
            continue
        profiles = set(re.findall(r"--profile (\S+)", m[1]))
        words = [w for w in m[2].split() if not w.startswith("-")]
        if not words:
            continue
        name = words[0]
        assert name in services, cmd
        assert set(services[name].get("profiles", [])) <= profiles or not services[name].get("profiles"), cmd
        checked += 1
    assert checked >= 4


def test_kubernetes_commands_name_objects_the_manifests_or_the_readme_create() -> None:
    names = set()
    for manifest in (REPO / "docker" / "k8s").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            names.add(f"{doc['kind'].lower()}/{doc['metadata']['name']}")
    created = {f"job/{m}" for cmd in COMMANDS for m in re.findall(r"kubectl create job \S+ (\S+)", cmd)}
    referenced = {
        r
        for cmd in COMMANDS
        if cmd.startswith("kubectl")
        for r in re.findall(r"\b(?:cronjob|job)/[\w-]+", cmd)
    }
    assert referenced and referenced <= names | created, referenced - names - created
    for cmd in COMMANDS:
        if m := re.search(r'sed "s#(image: [^#]+)#.*" (docker/k8s/\S+)', cmd):
            assert m[1] in (REPO / m[2]).read_text(), cmd  # the image line the sed replaces is there


def test_the_main_readme_links_the_deploy_guide() -> None:
    assert "](docs/docker.md)" in (REPO / "README.md").read_text()
    deploy = (REPO / "docs" / "docker.md").read_text()
    assert deploy.startswith("# Deploy\n") and "](../docker/README.md)" in deploy


def test_the_entrypoint_block_runs_as_written(tmp_path: Path) -> None:
    """A dry run: vLLM's own parser checks the printed commands; nothing starts."""
    (block,) = [b for b in BLOCKS if "docker/entrypoint.sh" in b and "tiny-model" in b]
    res = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace("/tmp/", f"{tmp_path}/")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "# baseline" in res.stdout and "accepted by vLLM's parser" in res.stdout
