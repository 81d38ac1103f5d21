"""``autotune run --dry-run``: the exact commands a study would launch, checked, and nothing launched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.engine import LaunchSpec, transfer_config
from autotune.space import EngineConfig, RenderedConfig
from autotune.study import suggest_values
from autotune.tuning._setup import TuningSetup

__all__ = ["CommandPreview", "preview_commands"]

_PORT = 0  # a free port is chosen at launch; the preview shows 0


@dataclass(frozen=True)
class CommandPreview:
    label: str
    params: Mapping[str, Any]
    argv: tuple[str, ...]
    env: Mapping[str, str]  # what autotune adds to the environment; secrets masked
    transfer_config: Mapping[str, Any] | None
    parser_error: str | None  # None: vLLM's own parser accepts it (or no parser was asked)
    fit_reasons: tuple[str, ...] = field(default=())  # why it would not fit (empty: it fits)


def _env_shown(spec: LaunchSpec, rendered: RenderedConfig) -> dict[str, str]:
    env = {**spec.env, **rendered.env}
    if spec.api_key:
        env["VLLM_API_KEY"] = "***"
    return env


def preview_commands(
    setup: TuningSetup, *, samples: int, seed: int, reference: Mapping[str, Any] | None = None
) -> list[CommandPreview]:
    """The baseline (vLLM's defaults, or ``reference`` when they cannot run here) and ``samples``
    configurations drawn at random from the setup's space, each as the setup's engine would launch it
    (the engine's own ``argv``), checked by its parser and the memory guard."""
    space, spec, checker, memory = setup.space, setup.launch, setup.checker(), setup.guard
    sampler_study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))  # in memory
    configs: list[tuple[str, dict[str, Any]]] = [("baseline (vLLM defaults)", {})]
    if reference:
        configs.append(("baseline (runnable reference: the defaults do not fit)", dict(reference)))
    for i in range(samples):
        trial = sampler_study.ask()
        configs.append((f"sample {i + 1}", suggest_values(trial, space)))
        sampler_study.tell(trial, 0.0)
    out = []
    for label, values in configs:
        config = EngineConfig.chosen(space, values)
        rendered = setup.engine.render(config)
        argv = setup.engine.argv(spec, config, _PORT)
        engine_argv = argv[len(spec.launcher) :]
        error = None
        if checker is not None:
            check = checker.check(engine_argv)
            error = None if check.ok else check.error
        reasons = memory.check(setup.sizing(config)).reasons if memory is not None else ()
        out.append(
            CommandPreview(
                label=label,
                params=values,
                argv=tuple(argv),
                env=_env_shown(spec, rendered),
                transfer_config=transfer_config(argv),
                parser_error=error,
                fit_reasons=tuple(reasons),
            )
        )
    return out
