"""The user's choices -> a ready evaluator: the one assembly every command measures with.

``run``, ``compare``, the confirmation rounds, the benchmarks and every later command build
their evaluator here, so a comparison measures exactly as a study trial does (same engine
profile, CPU-hit labels, /dev/shm hygiene, memory guard, API key, arrivals, warm-up).

Everything is validated before any engine starts: the workload, the model directory, the
space, the fixed flags (once, by the engine's own parser), the objective and the arrivals.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from autotune.bench import ArrivalSpec
from autotune.bench._capacity import CapacityPlan, arrival_span, base_request_rate
from autotune.engine import ArgChecker, Engine, EngineProfile, EngineSizing, LaunchSpec, engine_named
from autotune.errors import ConfigError
from autotune.memory import read_machine_facts
from autotune.space import (
    EngineConfig,
    FlagPairs,
    SearchSpace,
    apply_profile,
    fix_space,
    flags_to_argv,
    load_search_space,
)
from autotune.study import Objective, TrialPolicy, parse_slo
from autotune.studyfile import StudySpec, parse_duration
from autotune.trial import (
    DEV_MODE_ENV,
    MemoryGuard,
    PassPlan,
    VllmEvaluator,
    check_request_sizes,
    clamp_space,
    clip_space,
    parse_passes,
)
from autotune.tuning._forecast import StudyForecast, check_forecast_objective
from autotune.tuning._model import check_model
from autotune.tuning._policy import TrialScope, trial_policy
from autotune.tuning._prior import Prior, build_prior
from autotune.tuning._reference import recheck_baseline
from autotune.workload import Workload, load_traffic, sample_workload

__all__ = ["TuningSetup", "arrival_spec", "build_setup"]

log = logging.getLogger(__name__)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# --objective capacity replays the workload once per load level: without --max-duration, a slice of
# this much arrival time (at the recorded pace) keeps a level to tens of seconds
CAPACITY_DEFAULT_SPAN = "60s"


def arrival_spec(spec: StudySpec, wl: Workload) -> ArrivalSpec:
    """How requests arrive: the file's timestamps (``speed``), Poisson/gamma at ``rate``, or a closed loop."""
    if spec.rate is not None and spec.concurrency is not None:
        raise ConfigError("--rate and --concurrency exclude each other (fix: pass one of them)")
    if spec.burstiness is not None and spec.rate is None:
        raise ConfigError("--burstiness needs --rate (fix: add --rate N, or drop --burstiness)")
    if spec.rate is not None:
        return ArrivalSpec(
            mode="gamma" if spec.burstiness is not None else "poisson",
            rate=spec.rate,
            burstiness=spec.burstiness or 1.0,
            seed=spec.seed,
        )
    if spec.concurrency is not None:
        return ArrivalSpec(mode="closed", concurrency=spec.concurrency, seed=spec.seed)
    default = ArrivalSpec.default_for(wl)
    return ArrivalSpec(mode=default.mode, concurrency=default.concurrency, speed=spec.speed, seed=spec.seed)


class _CheckerCache:
    """The engine's argument checker (one worker process), started on first use by any copy of a
    setup and shared by all of them: started at most once, closed once, by :func:`build_setup`'s exit.
    The one mutable part of a setup, held by reference so that its copies share it."""

    __slots__ = ("_checker", "_lock")

    def __init__(self) -> None:
        self._checker: ArgChecker | None = None
        self._lock = threading.Lock()  # workers' threads may ask for it at once: one start

    def get(self, start: Callable[[], ArgChecker]) -> ArgChecker:
        with self._lock:
            if self._checker is None:
                self._checker = start()
            return self._checker

    def close(self) -> None:
        with self._lock:
            checker, self._checker = self._checker, None
        if checker is not None:
            checker.close()


@dataclass(frozen=True)
class TuningSetup:
    """Validated choices and the parts built from them; immutable once built (:func:`build_setup`,
    a context manager). A variant is a new setup: :meth:`with_prior` (the prior built once, its
    space the setup's), :meth:`watching_gpus`, :func:`~autotune.tuning.for_gpus` (a worker's)."""

    choices: StudySpec  # the effective study (autotune.studyfile)
    engine: Engine
    workload: Workload
    profile: EngineProfile
    profile_note: str | None
    space_path: Path
    space: SearchSpace  # the profile applied, offload pools clamped to the host once; the prior's when built
    objective: Objective
    launch: LaunchSpec
    fixed: FlagPairs
    arrival: ArrivalSpec
    guard: MemoryGuard | None
    pass_plan: PassPlan = field(default_factory=PassPlan)
    clipped: tuple[str, ...] = ()  # what the memory check took out of the space, one line each
    prior: Prior | None = None  # built by with_prior(), once; None: not built, or --no-prior
    capacity: CapacityPlan | None = None  # --objective capacity: how each trial brackets its capacity
    _checkers: _CheckerCache = field(default_factory=_CheckerCache, repr=False, compare=False)

    @property
    def model(self) -> str:
        return self.choices.model or ""

    @property
    def engine_label(self) -> str:
        return self.engine.install.installed().describe()

    @property
    def fixed_argv(self) -> list[str]:
        return flags_to_argv(self.fixed)

    @property
    def platform(self) -> Literal["cuda", "cpu"]:
        return "cpu" if self.space.platform == "cpu" else "cuda"

    @property
    def needs_prior(self) -> bool:
        """The prior is on (``--prior``, the default) and not built yet: :meth:`with_prior` builds it."""
        return self.choices.prior and self.prior is None

    def checker(self) -> ArgChecker | None:
        """The engine's own argument parser (one worker process, started on first use, shared by
        every copy of this setup)."""
        if not self.choices.check_args or self.engine.install.installed().vllm_distribution is None:
            return None
        return self._checkers.get(self.engine.arg_checker)

    def evaluator(
        self, log_dir: Path, *, check_args: bool = True, cache_dir: Path | None = None
    ) -> VllmEvaluator:
        """An evaluator that measures exactly as a study trial does, logging under ``log_dir``;
        vLLM's caches under ``--compile-cache``, else ``cache_dir``, else ``log_dir``/cache."""
        # vLLM's compile and kernel caches shared by every engine of the study (or of the
        # comparison): a restart of a configuration seen before skips most of its compilation
        root = cache_dir or log_dir / "cache"
        spec = self.launch if self.launch.cache_dir else replace(self.launch, cache_dir=root)
        return VllmEvaluator(
            spec=spec,
            workload=self.workload,
            arrival=self.arrival,
            log_dir=log_dir,
            warmup_requests=self.choices.warmup,
            history=self.choices.history,
            slos_ms=self.objective.request_slos,
            arg_checker=self.checker() if check_args else None,
            memory=self.guard,
            host_sources=self.profile.cpu_hit_sources or ("host",),
            shm_patterns=self.profile.shm_patterns,
            engine=self.engine,
            engine_label=self.engine_label,
            passes=self.pass_plan,
            objective_metric=self.objective.metric,
            capacity=self.capacity,
        )

    def with_prior(self) -> TuningSetup:
        """This setup with the workload-aware prior built and the space shrunk by it: a new setup
        (this one keeps the full space). Itself when the prior is built already or ``--no-prior``.

        Call it once where a study's setup is made, after :meth:`watching_gpus` (the prior reads the
        memory of the GPUs watched then), and pass the result on: the study's announcement, its
        policy (:meth:`policy`), a worker and a night all read this one prior."""
        if not self.needs_prior:
            return self
        prior = build_prior(self)
        return replace(self, space=prior.space, prior=prior)

    def policy(self, scope: TrialScope) -> TrialPolicy:
        """How every trial of this study runs in ``scope`` (see :func:`trial_policy`). Its prior is
        built (:meth:`with_prior`): the policy reads it."""
        if self.needs_prior:
            raise ValueError(
                "TuningSetup.policy: the setup's prior is not built, so the study would search the full "
                "space with no veto (fix: call it on setup.with_prior(), made once where the study's setup is)"
            )
        return trial_policy(
            scope, self.space, self.objective, self.prior, self.choices, lambda: recheck_baseline(self),
            self.forecast(),
        )  # fmt: skip

    def forecast(self) -> StudyForecast | None:
        """The latency model of this study's run (``--predict``), else None."""
        if not self.choices.predict:
            return None
        return StudyForecast(self, self.objective.metric, seed=self.choices.seed or 0)

    def engine_argv(self, config: EngineConfig | None = None) -> list[str]:
        """The engine's flags for a configuration (fixed flags, then its own; none: the engine's
        defaults), port 0, without the launcher: what its parser checks and a person reads."""
        return _engine_argv(self.engine, self.launch, config or EngineConfig())

    def sizing(self, config: EngineConfig | None = None) -> EngineSizing:
        """What a configuration asks of memory (none: the engine's defaults), as the engine reads it."""
        platform = self.guard.platform if self.guard is not None else self.platform
        return self.engine.sizing(self.launch, config or EngineConfig(), platform)

    def config(self, values: Mapping[str, Any]) -> EngineConfig:
        """``values`` of this setup's space as the engine takes them."""
        return EngineConfig.chosen(self.space, values)

    def space_lines(self) -> list[str]:
        """What the user's fixed flags take out of the search, said once (the run's header, the dry run)."""
        lines = [f"not tuned: {name}: {why}" for name, why in self.space.fixed.items()]
        return lines + list(self.clipped)

    def watching_gpus(self, gpus: Sequence[int]) -> TuningSetup:
        """This setup with its memory checks reading only ``gpus`` (NVML numbers), e.g. the GPUs of
        the worker that measures the baseline, not GPU 0 while another job fills it: a new setup
        (itself when memory checks are off or ``gpus`` is empty). The engine still sees every GPU:
        a worker's setup is :func:`~autotune.tuning.for_gpus`'s."""
        if self.guard is None or not gpus:
            return self
        return replace(self, guard=self.guard.for_gpus(gpus))

    def fit_reasons(self, config: EngineConfig | None = None) -> tuple[str, ...]:
        """Why a configuration would not fit this machine (empty: it fits, or memory checks are off)."""
        if self.guard is None:
            return ()
        return tuple(self.guard.check(self.sizing(config)).reasons)

    def check_fixed_flags(self) -> None:
        """The fixed flags, once, by the engine's own parser: a bad one fails the run up front."""
        checker = self.checker()
        if checker is None or not self.launch.fixed_args:
            return
        result = checker.check(self.engine_argv())
        if not result.ok:
            raise ConfigError(
                f"--engine-arg: {self.engine.name} {checker.version}'s parser rejects the fixed flags "
                f"{' '.join(self.fixed_argv)}: {result.error} (fix: correct or drop the flag)"
            )

    def close(self) -> None:
        """Stop the argument checker (shared with every copy of this setup)."""
        self._checkers.close()


def _engine_argv(engine: Engine, launch: LaunchSpec, config: EngineConfig) -> list[str]:
    argv = engine.argv(launch, config, 0)
    return argv[len(launch.launcher) :]


def _api_key(env_name: str | None) -> str | None:
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ConfigError(f"--api-key-env: environment variable {env_name} is not set (fix: export it first)")
    return key


def check_study_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ConfigError(f"--study: {name!r} is not a valid name (fix: letters, digits, '-', '_', '.')")
    return name


def _span(choices: StudySpec) -> str | None:
    """The arrival span the workload is sampled down to: ``--max-duration``, or a capacity study's default."""
    if choices.max_duration:
        return choices.max_duration
    return CAPACITY_DEFAULT_SPAN if choices.objective == "capacity" else None


def _capacity_plan(
    choices: StudySpec, objective: Objective, wl: Workload, arrival: ArrivalSpec
) -> CapacityPlan | None:
    """How each trial brackets its capacity (``--objective capacity``); the workload checked for it."""
    if not objective.is_capacity:
        return None
    plan = CapacityPlan(
        slos_ms=objective.slos_ms,
        tolerance=choices.capacity_tolerance,
        max_levels=choices.capacity_levels,
        max_failed=objective.max_failed_requests,
        min_level_s=parse_duration(choices.capacity_min_level, allow_zero=True),
    )
    base_request_rate(wl, arrival)  # a closed loop or a workload too short to bracket: refused now
    return plan.with_workload_span(arrival_span(wl, arrival))


def _load(choices: StudySpec) -> Workload:
    if choices.workload is None:
        raise ConfigError(
            "--workload is required (fix: pass --workload FILE, or set `workload:` in the study file)"
        )
    span = _span(choices)
    wl = load_traffic(  # a file, or a folder of traffic files windowed and sampled down
        choices.workload,
        window_s=parse_duration(choices.window) if choices.window else None,
        max_requests=choices.max_requests,
        max_duration_s=parse_duration(span) if span else None,
        seed=choices.seed,
        skip_bad_lines=choices.skip_bad_lines,
    )
    if choices.sample is not None:
        wl = sample_workload(wl, choices.sample, choices.seed)
    return wl


@contextmanager
def build_setup(choices: StudySpec, *, engine: Engine | None = None) -> Iterator[TuningSetup]:
    """Validate ``choices`` and build the parts; the argument checker is closed on exit. ``engine``:
    the study file's (``engine: vllm``) unless given (a test's double)."""
    setup = _build(choices, engine if engine is not None else engine_named(choices.engine))
    try:
        yield setup
    finally:
        setup.close()


def _launch_spec(
    choices: StudySpec, engine: Engine, fixed_args: tuple[tuple[str, str | None], ...], reset_cache: bool
) -> LaunchSpec:
    """How every trial's engine is launched; ``reset_cache``: with the environment that lets the
    tool empty the prefix cache."""
    return LaunchSpec(
        model=choices.model or "",
        launcher=tuple(choices.launcher.split()) if choices.launcher else engine.install.default_launcher(),
        fixed_args=fixed_args,
        api_key=_api_key(choices.api_key_env),
        api_key_env=choices.api_key_env,  # the key's source variable: never passed to the engine
        pass_env=tuple(choices.engine_pass_env),
        startup_timeout_s=choices.startup_timeout,
        env=dict(DEV_MODE_ENV) if reset_cache else {},
        cache_dir=Path(choices.compile_cache).expanduser().resolve() if choices.compile_cache else None,
    )


def _memory_guard(choices: StudySpec, engine: Engine, platform: Literal["cuda", "cpu"]) -> MemoryGuard | None:
    return MemoryGuard.for_model(
        choices.model or "",
        platform,
        host_share=choices.host_share,
        allow_swap=choices.allow_swap,
    )


def _build(choices: StudySpec, engine: Engine) -> TuningSetup:
    wl = _load(choices)
    if not choices.model:
        raise ConfigError("--model is required (fix: pass --model DIR, or set `model:` in the study file)")
    check_model(choices.model)
    profile, note = engine.install.select_profile(choices.profile, preview=choices.dry_run)
    space_path = choices.space or engine.install.default_space(profile)
    fixed = engine.install.parse_fixed_args(list(choices.engine_args))
    # the baseline's own values: in every command (before the tuned flags, which override them), not fixed
    baseline_flags = engine.install.parse_fixed_args(list(choices.baseline_args))
    space = fix_space(apply_profile(load_search_space(space_path, opt_in=choices.opt_in), profile), fixed)
    slos = dict(parse_slo(s) for s in choices.slo)
    if choices.predict:
        check_forecast_objective(choices.objective)
    objective = Objective(
        metric=choices.objective, min_throughput_ratio=choices.min_throughput_ratio, slos_ms=slos
    )
    wl = check_request_sizes(wl, choices.model, fixed + baseline_flags, skip_bad_lines=choices.skip_bad_lines)
    arrival = arrival_spec(choices, wl)
    pass_plan = parse_passes(choices.passes)
    capacity = _capacity_plan(choices, objective, wl, arrival)
    # the cache reset between passes, and before every level of a capacity bracket
    launch = _launch_spec(choices, engine, fixed + baseline_flags, pass_plan.repeated or capacity is not None)
    platform: Literal["cuda", "cpu"] = "cpu" if space.platform == "cpu" else "cuda"
    guard = _memory_guard(choices, engine, platform) if choices.check_memory else None
    clipped: tuple[str, ...] = ()
    if guard is not None:
        space = clamp_space(space, read_machine_facts(), choices.host_share)
        space, clipped = clip_space(space, guard, lambda config: engine.sizing(launch, config, platform))
    return TuningSetup(
        choices=choices,
        engine=engine,
        workload=wl,
        profile=profile,
        profile_note=note,
        space_path=space_path,
        space=space,
        objective=objective,
        launch=launch,
        fixed=fixed,
        arrival=arrival,
        guard=guard,
        pass_plan=pass_plan,
        clipped=clipped,
        capacity=capacity,
    )


def describe_params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


__all__ += ["check_study_name", "describe_params"]
