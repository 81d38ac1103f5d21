"""The Kubernetes manifests of a real cluster fit together: the kustomization makes the ConfigMaps
the pods mount and copies the deadline the budget is derived from; PostgreSQL takes its password
from the Secret only; the serving Deployment reads the ConfigMap the promote hook writes and
restarts on the annotation it sets, with exactly the rights the hook's kubectl calls need; the
report server reads the claim and cannot write it."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

DOCKER = REPO / "docker"
K8S = DOCKER / "k8s"
HOOK = (DOCKER / "hooks" / "configmap-update.sh").read_text()


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((K8S / name).read_text())}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]  # type: ignore[no-any-return]


KUSTOMIZATION = yaml.safe_load((DOCKER / "kustomization.yaml").read_text())


def test_the_kustomization_names_files_that_exist_and_makes_what_the_pods_mount() -> None:
    for resource in KUSTOMIZATION["resources"]:
        assert (DOCKER / resource).is_file(), resource
    generated = {g["name"]: g["files"] for g in KUSTOMIZATION["configMapGenerator"]}
    for files in generated.values():
        assert all((DOCKER / f).is_file() for f in files), files
    assert sorted(generated["autotune-study"]) == sorted(
        f"study/{p.name}" for p in (DOCKER / "study").glob("*.yaml")
    )
    assert sorted(generated["autotune-hooks"]) == sorted(
        f"hooks/{p.name}" for p in (DOCKER / "hooks").glob("*.sh")
    )
    nightly = _pod(_docs("cronjob-nightly.yaml")["CronJob"])
    mounted = {v["configMap"]["name"] for v in nightly["volumes"] if "configMap" in v}
    assert mounted == set(generated)
    assert KUSTOMIZATION["generatorOptions"]["disableNameSuffixHash"] is True  # the Jobs mount them by name
    (rep,) = KUSTOMIZATION["replacements"]
    assert rep["source"]["fieldPath"] == "spec.jobTemplate.spec.activeDeadlineSeconds"
    assert rep["targets"][0]["fieldPaths"] == [
        "spec.jobTemplate.spec.template.spec.containers.[name=autotune].env.[name=AUTOTUNE_DEADLINE_SECONDS].value"
    ]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on this machine")
def test_kustomize_copies_the_deadline_an_overlay_sets(tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(DOCKER, base, ignore=shutil.ignore_patterns("secrets", "models"))
    cronjob = base / "k8s" / "cronjob-nightly.yaml"
    cronjob.write_text(cronjob.read_text().replace('value: "9000"', 'value: "1"'))  # a stale copy
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    replacements = (DOCKER / "kustomization.yaml").read_text().split("\nreplacements:\n", 1)[1]
    (overlay / "kustomization.yaml").write_text(
        "resources: [../base]\npatches:\n  - target: {kind: CronJob, name: autotune-nightly}\n"
        "    patch: |\n      - op: replace\n        path: /spec/jobTemplate/spec/activeDeadlineSeconds\n"
        "        value: 12600\nreplacements:\n" + replacements
    )
    for root, deadline in ((base, 9000), (overlay, 12600)):
        built = subprocess.run(
            ["kubectl", "kustomize", str(root)], capture_output=True, text=True, check=True
        )
        docs = {d["kind"]: d for d in yaml.safe_load_all(built.stdout)}
        pod = _pod(docs["CronJob"])
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert docs["CronJob"]["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == deadline
        assert env["AUTOTUNE_DEADLINE_SECONDS"] == str(deadline)  # a string, as env values must be


def test_postgres_takes_its_password_from_the_secret_only() -> None:
    docs = _docs("postgres.yaml")
    pod = _pod(docs["StatefulSet"])
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "POSTGRES_PASSWORD" not in env
    pw_file = env["POSTGRES_PASSWORD_FILE"]["value"]
    (mount,) = [m for m in container["volumeMounts"] if pw_file.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "autotune-secrets"
    assert volume["secret"]["items"] == [{"key": "pgpassword", "path": Path(pw_file).name}]
    # The tuners connect as this user to this database through this Service.
    storage = yaml.safe_load((DOCKER / "study" / "workers.yaml").read_text())["storage"]
    user, host_port_db = storage.split("://", 1)[1].split("@")
    assert user == env["POSTGRES_USER"]["value"]
    assert host_port_db == f"{docs['Service']['metadata']['name']}:5432/{env['POSTGRES_DB']['value']}"
    assert docs["StatefulSet"]["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] in {
        m["name"] for m in container["volumeMounts"]
    }


def _hook_setting(name: str) -> str:
    m = re.search(rf"\${{{name}:-([^}}]+)}}", HOOK)
    assert m, name
    return m[1]


def test_the_serving_deployment_reads_what_the_hook_writes_and_restarts_on_its_annotation() -> None:
    deploy = _docs("serving.yaml")["Deployment"]
    assert deploy["metadata"]["name"] == _hook_setting("VLLM_DEPLOYMENT")
    pod = _pod(deploy)
    container = next(c for c in pod["containers"] if c["name"] == "vllm")
    config = container["args"][container["args"].index("--config") + 1]
    (mount,) = [m for m in container["volumeMounts"] if config == f"{m['mountPath']}/{Path(config).name}"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == _hook_setting("VLLM_CONFIGMAP")
    assert Path(config).name == _hook_setting("VLLM_CONFIG_KEY")
    assert "subPath" not in mount  # a subPath mount never sees an update
    annotation = re.search(r"^annotation=(\S+)$", HOOK, flags=re.M)
    assert annotation and annotation[1] in deploy["spec"]["template"]["metadata"]["annotations"]
    assert (
        deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    )  # old pod serves until the new is ready
    # The model path the export names is where the tuner found it: the same claim at the same path.
    tuner = _pod(_docs("cronjob-nightly.yaml")["CronJob"])
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for p in (pod, tuner)
        for c in p["containers"]
        for m in c["volumeMounts"]
        for v in p["volumes"]
        if v["name"] == m["name"] and m["mountPath"] == "/models"
    ]
    assert len(claims) >= 2 and set(claims) == {"vllm-models"}


def test_the_capture_sidecar_fronts_vllm_and_records_tomorrows_workload() -> None:
    docs = _docs("serving.yaml")
    pod = _pod(docs["Deployment"])
    containers = {c["name"]: c for c in pod["containers"]}
    capture, vllm = containers["capture"]["args"], containers["vllm"]["args"]
    assert capture[0] == "capture"
    opt = {a: b for a, b in itertools.pairwise(capture) if a.startswith("--")}
    assert opt["--upstream"] == f"http://127.0.0.1:{vllm[vllm.index('--port') + 1]}"
    port = int(opt["--listen"].rsplit(":", 1)[1])
    assert {"name": "http", "containerPort": port} in containers["capture"]["ports"]
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == "http"  # clients reach the capture
    study = yaml.safe_load((DOCKER / "study" / "nightly.yaml").read_text())
    assert opt["--out"] == study["workload"] and opt["--model"] == study["model"]
    (salt,) = [e for e in containers["capture"]["env"] if e["name"] == opt["--salt-env"]]
    assert salt["valueFrom"]["secretKeyRef"] == {"name": "autotune-secrets", "key": "anon-salt"}


def test_the_promote_account_may_do_what_the_hook_does_and_nothing_else() -> None:
    docs = _docs("rbac-promote.yaml")
    nightly = _pod(_docs("cronjob-nightly.yaml")["CronJob"])
    assert nightly["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["RoleBinding"]["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    grants = {
        (resource, verb, name)
        for rule in docs["Role"]["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", ["*"])
    }
    cm, deploy = _hook_setting("VLLM_CONFIGMAP"), _hook_setting("VLLM_DEPLOYMENT")
    # `kubectl apply` of a ConfigMap: get, then create or patch; `kubectl patch`, `rollout status`.
    needed = {
        ("configmaps", "get", cm), ("configmaps", "create", "*"), ("configmaps", "patch", cm),
        ("deployments", "get", deploy), ("deployments", "patch", deploy), ("deployments", "watch", deploy),
    }  # fmt: skip
    assert needed <= grants
    assert {r for r, _, _ in grants} == {"configmaps", "deployments"}  # no secrets, nothing else
    assert all(name != "*" or verb == "create" for _, verb, name in grants)


def test_the_report_server_reads_the_claim_and_cannot_write_it() -> None:
    docs = _docs("reports.yaml")
    pod = _pod(docs["Deployment"])
    (container,) = pod["containers"]
    served = container["command"][container["command"].index("--directory") + 1]
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == served and mount["readOnly"] is True
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": "autotune-data", "readOnly": True}
    assert docs["Service"]["spec"].get("type", "ClusterIP") == "ClusterIP"  # no login: not exposed
    studies_dir = yaml.safe_load((DOCKER / "study" / "nightly.yaml").read_text())["studies_dir"]
    assert studies_dir.startswith(served + "/")


def test_the_rollback_job_restores_the_nightly_export_and_delivers_it_with_the_hook() -> None:
    job = _docs("rollback-job.yaml")["Job"]
    pod = _pod(job)
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    study = yaml.safe_load((DOCKER / "study" / "nightly.yaml").read_text())
    assert env["AUTOTUNE_NEW_CONFIG"] == study["out"]
    script = container["args"][0]
    assert script.startswith("autotune-entrypoint nightly rollback --file /etc/autotune/study.yaml && ")
    assert script.endswith(study["on_promote"])  # delivered the way a promotion is
    study_volume = next(v for v in pod["volumes"] if v["name"] == "study")
    assert study_volume["configMap"]["items"] == [{"key": "nightly.yaml", "path": "study.yaml"}]
    assert pod["serviceAccountName"] == _pod(_docs("cronjob-nightly.yaml")["CronJob"])["serviceAccountName"]


def test_the_nightly_fails_its_job_on_each_exit_code_a_night_can_end_with() -> None:
    from autotune.errors import EXIT_BUDGET, EXIT_REGRESSION

    cron = _docs("cronjob-nightly.yaml")["CronJob"]
    rules = cron["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]
    named = {
        v
        for r in rules
        if r.get("onExitCodes", {}).get("operator") == "In"
        for v in r["onExitCodes"]["values"]
    }
    assert {EXIT_REGRESSION, EXIT_BUDGET, 7} <= named  # 8: the budget could not hold one candidate
    assert all(r["action"] == "FailJob" for r in rules if "onExitCodes" in r)
