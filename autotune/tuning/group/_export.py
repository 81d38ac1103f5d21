"""A group study's export: the chosen group written for deployment.

One ``vllm serve --config`` YAML per model (``NAME.yaml``, the command it was measured with:
its share of the budget and its own configuration) into the ``out`` folder, each checked by the
installed vLLM's own parser before anything is written, plus ``launch.sh``, which starts the group as
it was measured (each engine its own port, from ``base_port`` up, and on the CPU build its own cores;
engines that share a GPU one at a time, each once the one before it answers ``/health``, as a trial
starts them: vLLM sizes its KV cache from the memory it sees used while it profiles). Another
``export_format`` adds its one file for the whole group (``helm-values``: ``values.yaml``, one
modelSpec per model); the per-model files stay, as a group night re-measures them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.errors import ExportError
from autotune.export import (
    ExportedConfig,
    Measured,
    export_measured,
    exporter_for,
    write_atomically,
    write_export,
    write_text,
)
from autotune.tuning.group._setup import GroupSetup
from autotune.tuning.group._trial import GroupEvaluator

__all__ = [
    "GroupExport",
    "baseline_group_trial",
    "best_group_trial",
    "export_group",
]

BASE_PORT = 8000
_ENV_KEPT = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES")


def best_group_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The measured group trial with the lowest group objective (the baseline group scores 1.0)."""
    done = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
    return min(done, key=lambda t: float(t.value or 0.0), default=None)


def baseline_group_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    return next(
        (t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("group_trial") == "baseline"), None
    )


# launch.sh on a shared GPU: the next engine starts once this one answers /health (or the group stops)
def _up(python: str) -> list[str]:
    return [
        "# engines that share a GPU start one at a time: vLLM sizes its KV cache from the memory it sees",
        "# used while it profiles, and an engine loading beside it would be counted against it",
        "up() {  # PORT PID NAME",
        f"  until {shlex.quote(python)} -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \\",
        '      "http://127.0.0.1:$1/health" 2>/dev/null; do',
        '    kill -0 "$2" 2>/dev/null || { echo "launch.sh: $3 exited before it was healthy" >&2; kill 0; exit 1; }',
        "    sleep 2",
        "  done",
        "}",
    ]


@dataclass(frozen=True)
class GroupExport:
    """What was written: each model's YAML and the launch script (and the group's file of another
    export format, e.g. Helm values)."""

    configs: Mapping[str, Path]
    launch: Path
    group_file: Path | None = None
    deploy: str | None = None  # the command that deploys group_file


def _model_export(
    setup: GroupSetup, trial: optuna.trial.FrozenTrial, name: str, header: Sequence[str], engine: str | None
) -> ExportedConfig:
    attrs = trial.user_attrs.get(f"model:{name}") or {}
    command = attrs.get("command") or []
    if not command:
        raise ExportError(f"trial {trial.number}: model {name} stored no command to export")
    checker = next(m for m in setup.models if m.name == name).setup.checker()
    return export_measured(
        command,
        Measured(trial.number, f"model {name}'s exported config", engine),
        header=[*header, f"model {name} of the group, share {trial.user_attrs['split'][name]:.3f}"],
        check=(lambda argv: checker.check(argv).error) if checker is not None else None,
    )


def export_group(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    trial: optuna.trial.FrozenTrial,
    out_dir: Path,
    header: Sequence[str],
    *,
    base_port: int = BASE_PORT,
    export_format: str = "vllm-config",
) -> GroupExport:
    """``NAME.yaml`` per model and ``launch.sh`` into ``out_dir``, and ``export_format``'s group file
    (module docstring); every model is checked, and the group file rendered, before the first file
    is written."""
    exporter = exporter_for(export_format)
    exports = {
        m.name: _model_export(setup, trial, m.name, header, evaluate.evaluators[m.name].engine_label)
        for m in setup.models
    }
    group_text = exporter.render(exports) if exporter.group_file else None
    paths: dict[str, Path] = {}
    lines = [
        "#!/bin/sh",
        f"# The group as vllm-autotune measured it (trial {trial.number}): one vLLM per model, each its",
        "# own port; Ctrl-C or SIGTERM stops them all.",
        *(f"# {h}" for h in header),
        "set -eu",
        'cd "$(dirname "$0")"',
        "trap 'kill 0' INT TERM",
    ]
    one_at_a_time = evaluate.one_at_a_time
    if one_at_a_time:
        first = shlex.split(exports[setup.models[0].name].deploy_command("x.yaml"))[0]
        lines += _up(first if "python" in Path(first).name else "python3")
    for i, m in enumerate(setup.models):
        path = Path(out_dir) / f"{m.name}.yaml"
        write_export(exports[m.name], path)
        paths[m.name] = path
        env = {k: v for k, v in evaluate.evaluators[m.name].spec.env.items() if k in _ENV_KEPT}
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        run = exports[m.name].deploy_command(path.name) + f" --port {base_port + i}"
        lines.append(f"{prefix + ' ' if prefix else ''}{run} &  # {m.name}")
        if one_at_a_time and i + 1 < len(setup.models):
            lines.append(f"up {base_port + i} $! {shlex.quote(m.name)}")
    lines.append("wait")
    launch = Path(out_dir) / "launch.sh"
    write_atomically(launch, ("\n".join(lines) + "\n").encode(), mode=0o755)
    if not exporter.group_file or group_text is None:
        return GroupExport(paths, launch)
    group_file = Path(out_dir) / exporter.group_file
    write_text(group_file, group_text)
    deploy = exporter.deploy_command(exports[setup.models[0].name], group_file)
    return GroupExport(paths, launch, group_file, deploy)
