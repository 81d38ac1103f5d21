"""The ``compare`` use case: re-measure two configurations alternately, exactly as study trials are
measured; or set two recorded measurements (``autotune bench --json-out``) side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import ConfigError
from autotune.space import EngineConfig
from autotune.study import TrialRecord
from autotune.studyfile import StudySpec
from autotune.trial import Comparison, compare_configs, compare_recorded, config_to_args, read_measurement
from autotune.tuning import TuningSetup, build_setup, on_gpus
from autotune.usecases._reporter import Reporter

__all__ = ["CompareOutcome", "compare"]


@dataclass(frozen=True)
class CompareOutcome:
    """Two arms compared: the comparison and its title, the warnings on it (arms that disagree, recorded
    measurements of unlike runs), the JSON written, and the arms without figures (exit code 1)."""

    result: Comparison
    title: str
    warnings: tuple[str, ...]
    json_out: Path | None
    failed: tuple[str, ...]
    recorded: bool  # two recorded measurements, nothing re-measured

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def compare(spec: StudySpec, reporter: Reporter) -> CompareOutcome:
    """Measure arm A (defaults, or ``baseline_config``) and arm B (``config``) alternately, ``rounds``
    runs each; two ``.json`` measurements are compared as recorded. Each run is said as it ends."""
    if any(p is not None and p.suffix == ".json" for p in (spec.config, spec.baseline_config)):
        return _compare_recorded(spec)
    if spec.config is None:
        raise ConfigError(
            "compare: --config is required (fix: the config to check, e.g. the exported best.yaml)"
        )
    cfg_model, b_args = config_to_args(spec.config)
    a_model, a_args = config_to_args(spec.baseline_config) if spec.baseline_config else ("", [])
    the_model = spec.model or cfg_model or a_model
    if not the_model:
        raise ConfigError(f"{spec.config}: no 'model' in the config (fix: pass --model)")
    arms = [
        (f"A {spec.baseline_config}" if spec.baseline_config else "A defaults", a_args),
        (f"B {spec.config}", b_args),
    ]
    with (
        build_setup(spec.model_copy(update={"model": the_model})) as base,
        on_gpus(base, spec.gpus, owner=f"compare {spec.config}") as setup,
    ):
        _precheck(setup, arms)
        setup.check_fixed_flags()
        result = compare_configs(
            setup.evaluator(spec.log_dir), arms, rounds=spec.rounds, on_run=_RunLine(spec.rounds, reporter)
        )
    title = f"{setup.workload.path.name}: {spec.rounds} runs each, alternating"
    return _outcome(spec, result, title, tuple(result.disagreeing()), recorded=False)


@dataclass(frozen=True)
class _RunLine:
    """Says each run as it ends: its status, TTFT p50 and p90, throughput (or why it failed)."""

    rounds: int
    reporter: Reporter

    def __call__(self, name: str, r: int, rec: TrialRecord) -> None:
        f = rec.figures
        self.reporter.say(
            f"round {r + 1}/{self.rounds} {name}: {rec.status.value}"
            + (
                f" ttft p50 {f.get('ttft_p50') or 0:.1f} ms p90 {f.get('ttft_p90') or 0:.1f} ms, "
                f"{f.output_throughput:.1f} tok/s"
                if rec.ok and f
                else f" ({rec.failure}: {(rec.reason or '').split(';')[0]})"
            ),
            soft_wrap=True,
        )


def _precheck(setup: TuningSetup, arms: list[tuple[str, list[str]]]) -> None:
    """The memory check ``run`` makes before a trial, for each arm, before anything starts."""
    for name, args in arms:
        reasons = setup.fit_reasons(EngineConfig.recorded(args))
        if reasons:
            raise ConfigError(
                f"{name}: does not fit this machine: {'; '.join(reasons)} "
                "(fix: a smaller KV/offload setting, or --no-check-memory to measure anyway)"
            )


def _compare_recorded(spec: StudySpec) -> CompareOutcome:
    """Two measurements ``autotune bench --json-out`` wrote (a running server each, or one server
    before and after a change): their figures side by side with the ratio; nothing is launched."""
    if (
        spec.config is None
        or spec.baseline_config is None
        or spec.baseline_config.suffix != spec.config.suffix
    ):
        raise ConfigError(
            "compare: recorded measurements (.json of `autotune bench --json-out`) are compared with each "
            "other only (fix: --baseline-config A.json --config B.json, or two vLLM config YAMLs to measure)"
        )
    a, b = read_measurement(spec.baseline_config), read_measurement(spec.config)
    result = compare_recorded((f"A {spec.baseline_config}", a), (f"B {spec.config}", b))
    title = "recorded measurements, not re-measured (range: their passes)"
    return _outcome(spec, result, title, _unlike(spec.baseline_config, spec.config), recorded=True)


def _outcome(
    spec: StudySpec, result: Comparison, title: str, warnings: tuple[str, ...], *, recorded: bool
) -> CompareOutcome:
    """The comparison written to ``--json-out`` (when given), and its outcome."""
    if spec.json_out is not None:
        spec.json_out.parent.mkdir(parents=True, exist_ok=True)
        spec.json_out.write_text(json.dumps(result.as_dict(), indent=2))
    failed = tuple(arm.name for arm in (result.a, result.b) if not arm.measured)
    return CompareOutcome(result, title, warnings, spec.json_out, failed, recorded)


def _unlike(a: Path, b: Path) -> tuple[str, ...]:
    """A line for each thing two measurements did not share (workload, arrivals, requests)."""
    sides = [json.loads(p.read_text()).get("bench") or {} for p in (a, b)]
    return tuple(
        f"the two measurements differ in {key}: {sides[0].get(key)!r} vs {sides[1].get(key)!r}; "
        "the ratio compares unlike runs"
        for key in ("workload", "requests", "arrival")
        if sides[0].get(key) != sides[1].get(key)
    )
