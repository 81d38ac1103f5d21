"""``--export-format helm-values``: a values.yaml for vLLM's production-stack chart that its own schema
accepts (tests/data/production-stack, vendored with its licence) and whose template starts exactly
the command the study measured, for one engine and for a group of two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from autotune.errors import ExportError
from autotune.export import ExportedConfig, build_export, chart_command, export_best, exporter_for
from tests.conftest import REPO
from tests.unit.export._measured import LMCACHE_POOL, measured_study

SCHEMA = json.loads((REPO / "tests" / "data" / "production-stack" / "values.schema.json").read_text())
HELM = exporter_for("helm-values")


def _undeclared(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Keys the schema does not declare (it allows unknown keys, so a misspelt field would pass)."""
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [k for i, v in enumerate(value) for k in _undeclared(v, items, f"{where}[{i}]")]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    found = []
    for key, item in value.items():
        if key in schema["properties"]:
            found += _undeclared(item, schema["properties"][key], f"{where}.{key}")
        else:
            found.append(f"{where}.{key}")
    return found


def _valid(text: str) -> dict[str, Any]:
    values = yaml.safe_load(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(values)
    assert _undeclared(values, SCHEMA) == []
    return values


def _entries(text: str) -> list[dict[str, Any]]:
    return list(_valid(text)["servingEngineSpec"]["modelSpec"])


def test_the_schema_check_can_fail() -> None:
    with pytest.raises(jsonschema.ValidationError):
        _valid("servingEngineSpec:\n  modelSpec:\n  - name: x\n    vllmConfig: {maxNumSeqs: many}\n")
    assert _undeclared({"servingEngineSpec": {"modelSpec": [{"nmae": "x"}]}}, SCHEMA) == [
        ".servingEngineSpec.modelSpec[0].nmae"
    ]


def test_one_engine_exports_one_modelspec_that_the_charts_schema_accepts(tmp_path: Path) -> None:
    out = tmp_path / "values.yaml"
    st = measured_study(env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, memory={"rss_peak": 30 * 2**30})
    export_best(st, out=out, export_format="helm-values")
    text = out.read_text()
    (entry,) = _entries(text)
    assert entry["name"] == "qwen2-5-7b-instruct" and entry["modelURL"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (entry["repository"], entry["tag"], entry["requestGPU"]) == ("vllm/vllm-openai", "v0.32.0", 1)
    assert entry["requestMemory"] == "36Gi"  # the measured 30 GiB + 20%
    assert entry["vllmConfig"] == {
        "enablePrefixCaching": True,  # unset is vLLM's default: the chart would turn it off
        "maxModelLen": 8192,
        "tensorParallelSize": 1,  # the chart mounts /dev/shm, where vLLM's pool lives, only with it
        "maxNumSeqs": 128,
        "gpuMemoryUtilization": 0.92,
        "extraArgs": [
            "--max-num-batched-tokens", "4096", "--block-size", "32", "--kv-cache-dtype", "fp8",
            "--kv-offloading-size", "24", "--kv-transfer-config",
            '{"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {"block_size": 128}, '
            '"kv_role": "kv_both"}',
        ],
    }  # fmt: skip
    assert entry["shmSize"] == "44Gi" and "lmcacheConfig" not in entry  # the native pool: 24 GiB + 20Gi
    assert entry["env"] == [{"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}]
    head = text.split("servingEngineSpec:")[0]
    assert "# study 'chat', trial 1; engine vllm 0.32.0 (cuda build)\n# ttft_p90: 420.0 ms\n" in head
    assert "# baseline (vLLM defaults; trial 0) ttft_p90: 900.0 ms\n" in head
    assert head.rstrip().endswith("helm install vllm vllm/vllm-stack -f THIS_FILE")
    assert "--kv-offloading-size 24 GiB (vLLM's native OffloadingConnector) stays in extraArgs" in text


def test_what_the_charts_template_starts_is_the_measured_command() -> None:
    _, exported = export_best(measured_study(), out=None)
    (entry,) = yaml.safe_load(HELM.render({"chat": exported}))["servingEngineSpec"]["modelSpec"]
    argv, _ = chart_command(entry)
    assert argv[:7] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--host", "0.0.0.0", "--port", "8000"]
    assert argv[7:15] == [
        "--enable-prefix-caching", "--max-model-len", "8192", "--tensor-parallel-size", "1",
        "--max-num-seqs", "128", "--gpu_memory_utilization",
    ]  # fmt: skip
    assert argv[-4:-2] == ["--kv-offloading-size", "24"]


def test_an_lmcache_pool_goes_where_the_chart_takes_it() -> None:
    _, exported = export_best(measured_study(LMCACHE_POOL), out=None)
    text = HELM.render({"chat": exported})
    (entry,) = _entries(text)
    assert entry["lmcacheConfig"] == {"enabled": True, "cpuOffloadingBufferSize": 8}
    assert entry["env"] == [{"name": "LMCACHE_CHUNK_SIZE", "value": "256"}]
    assert list(entry["vllmConfig"].items()) == [  # in the template's order, no extra argument left
        ("enableChunkedPrefill", True),
        ("enablePrefixCaching", False),
        ("tensorParallelSize", 2),
    ]
    assert entry["repository"] == "lmcache/vllm-openai" and entry["requestGPU"] == 2
    assert entry["requestMemory"] == "32Gi"  # not measured: the chart's example 16Gi + 2 ranks x 8 GB
    argv, env = chart_command(entry)
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector"] == "LMCacheConnectorV1"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "8" and env["LMCACHE_CHUNK_SIZE"] == "256"
    assert "lmcache.max_local_cpu_size 8 GB per rank -> lmcacheConfig.cpuOffloadingBufferSize" in text


def test_a_pool_the_chart_would_drop_stays_as_measured() -> None:
    small = [
        a.replace('"lmcache.max_local_cpu_size": 8', '"lmcache.max_local_cpu_size": 0.5')
        for a in LMCACHE_POOL
    ]
    _, exported = export_best(measured_study(small), out=None)
    (entry,) = _entries(HELM.render({"chat": exported}))
    assert "lmcacheConfig" not in entry and "--kv-transfer-config" in entry["vllmConfig"]["extraArgs"]


def _member(name: str, flags: list[str]) -> ExportedConfig:
    """A group member as the group export builds it (tuning/group/_export.py::_model_export)."""
    return build_export(
        model=f"/models/{name}",
        fixed_argv=flags,
        tuned_argv=[],
        env={},
        header_lines=[
            "study 'g', group trial 7, group objective 0.612",
            f"model {name} of the group, share 0.500",
        ],
        launcher=("/usr/bin/python3", "-P", "-m", "vllm.entrypoints.openai.api_server"),
        engine="vllm 0.32.0 (cuda build)",
    )


def test_a_group_of_two_exports_one_modelspec_per_model() -> None:
    engines = {
        "rag": _member("rag", ["--gpu-memory-utilization", "0.45", "--max-model-len", "16384"]),
        "chat": _member("chat", ["--gpu-memory-utilization", "0.4", "--max-num-seqs", "64", "--enable-prefix-caching"]),
    }  # fmt: skip
    text = HELM.render(engines)
    rag, chat = _entries(text)
    assert (rag["name"], chat["name"]) == ("rag", "chat")
    assert rag["vllmConfig"] == {
        "enablePrefixCaching": True,
        "maxModelLen": 16384,
        "gpuMemoryUtilization": 0.45,
    }
    assert chat["vllmConfig"] == {"enablePrefixCaching": True, "maxNumSeqs": 64, "gpuMemoryUtilization": 0.4}
    assert text.startswith("# study 'g', group trial 7, group objective 0.612\n")  # shared: once, on top
    assert text.count("# model rag of the group, share 0.500") == 1
    assert text.index("# model chat of the group") > text.index("- name: rag")  # each above its own entry
    assert "--gpu-memory-utilization it was measured with" in text
    assert "is a path on the measuring host" in text  # /models/rag: the pod must see it there


def test_names_are_kubernetes_names_and_unique() -> None:
    engines = {k: _member("m", []) for k in ("Llama_3.1-8B", "llama 3.1 8b")}
    first, second = _entries(HELM.render(engines))
    assert (first["name"], second["name"]) == ("llama-3-1-8b", "llama-3-1-8b-2")


def test_a_number_helm_would_rewrite_stays_an_argument() -> None:
    # Go prints the float64 1048576 as 1.048576e+06, which vLLM's --max-model-len cannot read
    (entry,) = _entries(HELM.render({"long": _member("long", ["--max-model-len", "1048576"])}))
    assert "maxModelLen" not in entry["vllmConfig"]
    assert entry["vllmConfig"]["extraArgs"] == ["--max-model-len", "1048576"]


def test_values_that_would_start_another_command_are_refused() -> None:
    # a --no-x and an --x of one switch: no vllmConfig field says both, and the chart adds its own
    both = _member("odd", ["--enable-prefix-caching", "--no-enable-prefix-caching"])
    with pytest.raises(ExportError, match=r"^the Helm values of odd would start .* nothing was written$"):
        HELM.render({"odd": both})


def test_a_group_export_adds_values_yaml_beside_its_files(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import optuna

    from autotune.tuning import export_group

    names = ("rag", "chat")
    launcher = ["/usr/bin/python3", "-P", "-m", "vllm.entrypoints.openai.api_server"]
    commands = {
        "rag": [*launcher, "--model", "/models/rag", "--port", "8000", "--gpu-memory-utilization", "0.45"],
        "chat": [*launcher, "--model", "/models/chat", "--port", "8001", "--gpu-memory-utilization", "0.4"],
    }
    trial = optuna.trial.create_trial(
        value=0.6,
        params={},
        distributions={},
        user_attrs={
            "split": {"rag": 0.5, "chat": 0.5},
            **{f"model:{n}": {"command": commands[n]} for n in names},
        },
    )
    member = SimpleNamespace(engine_label="vllm 0.32.0 (cuda build)", spec=SimpleNamespace(env={}))
    setup = SimpleNamespace(
        models=[SimpleNamespace(name=n, setup=SimpleNamespace(checker=lambda: None)) for n in names]
    )
    evaluate = SimpleNamespace(one_at_a_time=False, evaluators=dict.fromkeys(names, member))
    written = export_group(setup, evaluate, trial, tmp_path, ["study 'g'"], export_format="helm-values")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.yaml", "launch.sh", "rag.yaml", "values.yaml"]
    assert written.group_file == tmp_path / "values.yaml"
    assert written.deploy is not None and written.deploy.endswith(f"-f {tmp_path / 'values.yaml'}")
    entries = _entries(written.group_file.read_text())
    assert [(e["name"], e["vllmConfig"]["gpuMemoryUtilization"]) for e in entries] == [
        ("rag", 0.45),
        ("chat", 0.4),
    ]
    assert "share 0.500" in written.group_file.read_text()
