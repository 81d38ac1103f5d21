"""A categorical parameter keeps, within one study, the choices it was first recorded with.

Optuna's storages refuse a categorical parameter whose choices differ from those its earlier trials
recorded ("CategoricalDistribution does not support dynamic value space"). The space a run searches
may have fewer choices than an earlier run's: the fixed flags changed the clipping, the host's
memory changed the pool sizes. Such a parameter keeps the study's recorded choices; a value the
memory check refuses is then recorded infeasible before launch, not measured.
"""

from __future__ import annotations

import logging

import optuna

from autotune.space import SearchSpace

__all__ = ["with_recorded_choices"]

log = logging.getLogger(__name__)


def with_recorded_choices(study: optuna.Study, space: SearchSpace) -> SearchSpace:
    """``space`` with each categorical parameter's choices as the study first recorded them."""
    recorded: dict[str, tuple[object, ...]] = {}
    for t in study.get_trials(deepcopy=False):
        for name, dist in t.distributions.items():
            if isinstance(dist, optuna.distributions.CategoricalDistribution):
                recorded.setdefault(name, tuple(dist.choices))
    params = dict(space.parameters)
    for name, p in space.tunable.items():
        choices = recorded.get(name)
        if p.type != "categorical" or choices is None or choices == p.choices:
            continue
        log.info(
            "%s keeps the choices study %s recorded, %s (this run's space has %s): values the memory "
            "check refuses are recorded infeasible without a launch",
            name,
            study.study_name,
            list(choices),
            list(p.choices or ()),
        )
        params[name] = p.model_copy(update={"choices": choices})
    return space.model_copy(update={"parameters": params})
