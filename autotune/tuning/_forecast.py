"""The study's calibrated latency model (``--predict``, issue 48): predicted next to measured, the
starts it saves, and the audit that keeps it honest.

- **Before each start** the gate (:meth:`StudyForecast.check`) predicts the candidate's TTFT from the
  model fitted on every trial this study measured (:class:`autotune.predict.LatencyModel`: the cache
  replay of the prior, the engine's costs fitted on the measured per-request timings, the
  workload's arrivals simulated), and stores it on the trial (``forecast``) with its interval.
- **A veto**: a candidate whose predicted objective is worse than the best measured trial beyond
  the interval (its low end above the best) is not started; it is recorded as infeasible,
  ``predicted_worse``, with the numbers, so the sampler learns from it. Never before the model's
  error was measured on :data:`~autotune.predict.MIN_ERRORS` trials of this study.
- **The audit**: the first candidate the model would veto is started anyway, and each later one
  with probability :data:`AUDIT_RATE` (drawn from the study's seed and the trial's number). When an
  audited candidate measures no worse than the best it was held against, the veto would have been
  wrong: the model vetoes no more in this study, and the study says why (:data:`STOPPED_ATTR`).
- **After each trial** (:meth:`StudyForecast.after_trial`) the model refits; after the baseline it
  enqueues its own top picks of the space's grid (:data:`TOP_PICKS`) in place of the prior's.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna

from autotune.errors import ConfigError
from autotune.predict import (
    Calibration,
    Candidate,
    EngineDefaults,
    LatencyModel,
    MeasuredTrial,
    Prediction,
    RequestTimes,
    grid_of,
    this_machine,
    workload_shape,
)
from autotune.space import EngineConfig, describe_values
from autotune.study import (
    BASELINE_ATTR,
    FORECAST_ATTR,
    REFERENCE_ATTR,
    GateVerdict,
    TrialRecord,
    TrialStatus,
    baseline_trial,
    best_feasible,
    read_record,
)
from autotune.trial import read_request_timings
from autotune.tuning._forecast_ledger import STOPPED_ATTR, StoredForecast
from autotune.tuning._prior import PriorInputs

__all__ = [
    "AUDIT_RATE",
    "FORECAST_METRICS",
    "STOPPED_ATTR",
    "TOP_PICKS",
    "StudyForecast",
    "check_forecast_objective",
]

log = logging.getLogger(__name__)

FORECAST_METRICS = {"ttft_p50": "ttft_p50_ms", "ttft_p90": "ttft_p90_ms"}  # what the model predicts
AUDIT_RATE = 0.2  # after the first, this share of would-be vetoes is started anyway
TOP_PICKS = 3  # the model's best-predicted points of the grid, enqueued after the baseline
MAX_GRID = 4096  # a larger grid is not ranked (the sampler proposes, the veto still applies)
PICKED_ATTR = "forecast_picked"  # study attr: the model's picks were enqueued


def check_forecast_objective(metric: str) -> None:
    """``--predict`` needs an objective the model predicts: a one-line error naming the fix."""
    if metric not in FORECAST_METRICS:
        raise ConfigError(
            f"--predict: the latency model predicts {' and '.join(FORECAST_METRICS)}, not --objective {metric} "
            "(fix: --objective ttft_p90, or drop --predict)"
        )


@dataclass
class StudyForecast:
    """The latency model of one study run: a gate (:meth:`check`) and an after-trial hook."""

    inputs: PriorInputs
    metric: str  # the study's objective (one of FORECAST_METRICS)
    seed: int = 0
    platform_defaults: EngineDefaults | None = None  # tests: in place of the memory estimate's
    # tests: a deliberately wrong model (prediction -> prediction) the audit must catch
    distort: Any = None
    model: LatencyModel | None = field(default=None, init=False)
    _fitted: dict[int, MeasuredTrial] = field(default_factory=dict, init=False)
    _kv_scale: float = field(default=1.0, init=False)  # measured / estimated KV tokens of the baseline

    def __post_init__(self) -> None:
        check_forecast_objective(self.metric)
        if self.inputs.guard is None:
            raise ConfigError("--predict needs the memory estimate (fix: drop --no-check-memory)")

    # -- the candidate as the model sees it -------------------------------------------------------
    def candidate(self, values: Mapping[str, Any], kv_tokens: int | None = None) -> Candidate:
        """``values``' KV capacity and scheduler limits, as the engine would size its command."""
        space, guard = self.inputs.space, self.inputs.guard
        assert guard is not None
        sizing = self.inputs.sizing(EngineConfig.chosen(space, values))
        est = guard.check(sizing).estimate
        per_token = est.kv_bytes_per_token if est is not None else 0
        if kv_tokens is None:
            kv_tokens = int((est.kv_tokens if est is not None else 0) * self._kv_scale)
        caching = space.value_of(space.roles.prefix_caching, {**space.fixed_values, **values}, True)
        return Candidate(
            label=describe_values(space, dict(values)) or "(defaults)",
            gpu_kv_tokens=kv_tokens,
            block_size=sizing.block_size,
            batched_tokens=sizing.max_num_batched_tokens,
            max_seqs=sizing.max_num_seqs,
            pool_tokens=sizing.offload_bytes // per_token if per_token else 0,
            caching=caching is not False,
        )

    # -- fitting ------------------------------------------------------------------------------------
    def refresh(self, study: optuna.Study) -> LatencyModel | None:
        """Fit on every measured trial not fitted yet; None before the baseline is measured."""
        base = baseline_trial(study)
        if base is None:
            return None
        added = False
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.number in self._fitted:
                continue
            measured = self._measured(study, t)
            if measured is None:
                continue
            if self.model is None:
                if t.number != base.number:
                    continue  # the baseline sets the shape and the KV scale first
                self.model = self._start(study, t)
            self._fitted[t.number] = measured
            self._log_error(t, measured)
            added = True
        if self.model is not None and added:
            self.model.fit(list(self._fitted.values()))
        return self.model

    def _start(self, study: optuna.Study, base: optuna.trial.FrozenTrial) -> LatencyModel:
        rec = read_record(base)
        est = self.candidate(self._values(study, base), kv_tokens=None).gpu_kv_tokens
        if rec.kv_tokens and est:
            self._kv_scale = rec.kv_tokens / est  # the engine's own count against the estimate's
        arrays = read_request_timings(rec.requests_path or "")
        n = len(self.inputs.workload)
        arrivals = np.sort(np.asarray(arrays["scheduled"][:n], dtype=float))
        shape = workload_shape(self.inputs.workload, self.inputs.model, arrivals=arrivals)
        return LatencyModel(shape)

    def _values(self, study: optuna.Study, t: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """What the trial launched: its parameters; the baseline's reference (none: vLLM's defaults)."""
        if t.user_attrs.get(BASELINE_ATTR):
            return dict(study.user_attrs.get(REFERENCE_ATTR) or {})
        return dict(t.params)

    def _measured(self, study: optuna.Study, t: optuna.trial.FrozenTrial) -> MeasuredTrial | None:
        rec = read_record(t)
        if not rec.ok or rec.duplicate_of is not None or not rec.requests_path:
            return None
        arrays = read_request_timings(rec.requests_path)
        if "scheduled" not in arrays:
            return None
        passes = RequestTimes.passes_from_arrays(arrays, len(self.inputs.workload))
        return MeasuredTrial(self.candidate(self._values(study, t), kv_tokens=rec.kv_tokens), passes)

    def _log_error(self, t: optuna.trial.FrozenTrial, measured: MeasuredTrial) -> None:
        """The trial's prediction against its measurement, into the model's ledger."""
        fc = t.user_attrs.get(FORECAST_ATTR) or {}
        if self.model is None or "ttft_p90_ms" not in fc:
            return
        self.model.ledger.add(StoredForecast(fc), measured.ttft_p90_ms(), label=f"trial {t.number}")

    # -- before a start: the gate -------------------------------------------------------------------
    def predict(self, study: optuna.Study, values: Mapping[str, Any]) -> Prediction | None:
        model = self.refresh(study)
        if model is None or model.costs is None:
            return None
        pred = model.predict(self.candidate(values))
        return self.distort(pred) if self.distort is not None else pred

    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        """Predict ``params`` before its start and store it; a verdict when it is vetoed."""
        if trial.user_attrs.get(BASELINE_ATTR):
            return None
        study = trial.study
        pred = self.predict(study, params)
        if pred is None:
            return None
        fc = self._forecast(pred)
        best = best_feasible(study)
        verdict = "launch"
        if best is not None and best.value is not None:
            fc.update(best_trial=best.number, best_ms=float(best.value))
            worse = fc["interval_ms"][0] > best.value
            if worse and pred.interval.veto_allowed:
                stopped = study.user_attrs.get(STOPPED_ATTR)
                verdict = "launch" if stopped else self._veto_or_audit(study, trial.number)
        fc["verdict"] = verdict
        trial.set_user_attr(FORECAST_ATTR, fc)
        if verdict != "veto":
            if verdict == "audit":
                log.info(
                    "trial %d: predicted worse than trial %s; measured anyway (audit)",
                    trial.number,
                    fc["best_trial"],
                )
            return None
        lo, hi = fc["interval_ms"]
        why = (
            f"predicted worse: {self.metric} {fc['predicted_ms']:.1f} ms [{lo:.1f}-{hi:.1f}], "
            f"the best measured is trial {fc['best_trial']}'s {fc['best_ms']:.1f} ms: not started"
        )
        log.info("trial %d: %s", trial.number, why)
        return GateVerdict(
            record=TrialRecord(status=TrialStatus.INFEASIBLE, failure="predicted_worse", reason=why)
        )

    def _forecast(self, pred: Prediction) -> dict[str, Any]:
        """The prediction as stored on the trial: the objective's figure and its interval (the p90
        interval scaled to the objective's percentile)."""
        fc = pred.as_dict()
        value = float(fc[FORECAST_METRICS[self.metric]])
        scale = value / pred.ttft_p90_ms if pred.ttft_p90_ms > 0 else 1.0
        fc.update(
            metric=self.metric,
            predicted_ms=value,
            interval_ms=[pred.interval.low * scale, pred.interval.high * scale],
            p90_interval_ms=[pred.interval.low, pred.interval.high],
        )
        return fc

    def _veto_or_audit(self, study: optuna.Study, number: int) -> str:
        audited = any(
            (t.user_attrs.get(FORECAST_ATTR) or {}).get("verdict") == "audit"
            for t in study.get_trials(deepcopy=False)
            if t.number != number
        )
        if not audited:
            return "audit"
        return "audit" if random.Random(f"{self.seed}:{number}").random() < AUDIT_RATE else "veto"

    # -- after a trial --------------------------------------------------------------------------------
    def after_trial(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        """Refit; judge an audit; after the baseline, enqueue the model's picks."""
        model = self.refresh(study)
        fc = frozen.user_attrs.get(FORECAST_ATTR) or {}
        if fc.get("verdict") == "audit" and not study.user_attrs.get(STOPPED_ATTR):
            self._judge_audit(study, frozen, fc)
        if model is not None and model.costs is not None and not study.user_attrs.get(PICKED_ATTR):
            self._enqueue_picks(study, model)

    def _judge_audit(self, study: optuna.Study, t: optuna.trial.FrozenTrial, fc: Mapping[str, Any]) -> None:
        rec = read_record(t)
        measured = rec.metric(self.metric) if rec.ok else None
        if measured is None or "best_ms" not in fc:
            return
        if measured <= fc["best_ms"]:
            lo, hi = fc["interval_ms"]
            why = (
                f"trial {t.number} was predicted worse ({self.metric} {fc['predicted_ms']:.1f} ms "
                f"[{lo:.1f}-{hi:.1f}] against trial {fc['best_trial']}'s {fc['best_ms']:.1f} ms) and measured "
                f"{measured:.1f} ms: the veto would have been wrong, so the model vetoes no more in this study"
            )
            study.set_user_attr(STOPPED_ATTR, why)
            log.warning("latency model: %s", why)

    def _enqueue_picks(self, study: optuna.Study, model: LatencyModel) -> None:
        study.set_user_attr(PICKED_ATTR, True)
        space = self.inputs.space
        points = grid_of(space)
        if len(points) > MAX_GRID or len(points) < 2:
            return
        known = [t.params for t in study.get_trials(deepcopy=False) if t.params]
        known += [
            t.system_attrs.get("fixed_params", {})
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        ]
        base = baseline_trial(study)
        # a point that launches what the baseline launched (its values spelled out) is measured already
        same_as_base = self._sizing_key(self._values(study, base)) if base is not None else None
        points = [p for p in points if self._sizing_key(p) != same_as_base]
        ranked = sorted(
            ((self._value(model.predict(self.candidate(p))), i, p) for i, p in enumerate(points)),
            key=lambda x: (x[0], x[1]),
        )
        picks = [p for _, _, p in ranked if not any(_same(p, k) for k in known)][:TOP_PICKS]
        for p in picks:
            study.enqueue_trial(p, user_attrs={"informed": True, "forecast_pick": True})
        if picks:
            log.info("latency model: %d pick(s) enqueued after the baseline", len(picks))

    def _sizing_key(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """What the model tells configurations apart by (its candidate less the label)."""
        c = self.candidate(values)
        return (c.gpu_kv_tokens, c.block_size, c.batched_tokens, c.max_seqs, c.pool_tokens, c.caching)

    def _value(self, pred: Prediction) -> float:
        pred = self.distort(pred) if self.distort is not None else pred
        v = float(getattr(pred, FORECAST_METRICS[self.metric]))
        return v if math.isfinite(v) else math.inf

    # -- the calibration file ---------------------------------------------------------------------
    def calibration(self, engine: str, space: str) -> Calibration | None:
        """What ``autotune predict --calibration`` reads: the fitted costs and the measured errors."""
        model = self.model
        if model is None or model.costs is None or not self._fitted:
            return None
        base = next(iter(self._fitted.values())).candidate
        return Calibration(
            machine=this_machine(),
            model=str(self.inputs.model),
            engine=engine,
            costs=model.costs,
            errors=tuple(model.ledger.errors),
            defaults=EngineDefaults(
                kv_tokens=base.gpu_kv_tokens,
                kv_bytes_per_token=_per_token(self.inputs),
                block_size=base.block_size,
                batched_tokens=base.batched_tokens,
                max_seqs=base.max_seqs,
            ),
            space=space,
        )


def _per_token(inputs: PriorInputs) -> int:
    est = inputs.guard.check(inputs.sizing()).estimate if inputs.guard is not None else None
    return est.kv_bytes_per_token if est is not None else 0


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return bool(b) and all(b.get(k) == v for k, v in a.items())
