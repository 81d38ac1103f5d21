"""A group's capacity levels run in step (issue 46): the engines meet after each level and a level
holds only where every model held it; a model that fails releases the others; every bracket shares
one ceiling; a mix of capacity and latency objectives is refused before anything starts."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.bench._capacity import CapacityPlan
from autotune.errors import ConfigError
from autotune.tuning.group._setup import _capacity_in_step
from autotune.tuning.group._trial import _brackets_in_step, _GroupListener, _GroupStopped, _Stop


def _stop(names: tuple[str, ...]) -> _Stop:
    return _Stop(threading.Barrier(len(names)), tuple(threading.Event() for _ in names), names)


def _both(stop: _Stop, verdicts: list[tuple[bool, str]]) -> list[Any]:
    got: list[Any] = [None] * len(verdicts)

    def one(i: int) -> None:
        try:
            got[i] = _GroupListener(stop, i).level(2.0, *verdicts[i])
        except _GroupStopped as exc:
            got[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(verdicts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return got


def test_a_level_holds_for_the_group_only_where_every_model_held_it() -> None:
    stop = _stop(("rag", "chat"))
    assert _both(stop, [(True, ""), (True, "")]) == [(True, "")] * 2
    got = _both(stop, [(False, "ttft_p90 400 ms > 250 ms"), (True, "")])  # the next level, same barrier
    assert got == [(False, "rag: ttft_p90 400 ms > 250 ms")] * 2


def test_a_model_that_fails_releases_the_others_waiting_at_a_level() -> None:
    stop = _stop(("rag", "chat"))
    result: list[Any] = []
    waiting = threading.Thread(target=lambda: result.append(_catch(_GroupListener(stop, 0))))
    waiting.start()
    stop.fail("chat", "engine crashed")
    waiting.join(10)
    assert not waiting.is_alive() and isinstance(result[0], _GroupStopped)
    assert "chat of the group failed (engine crashed)" in str(result[0])


def _catch(listener: _GroupListener) -> Any:
    try:
        return listener.level(1.0, True, "")
    except _GroupStopped as exc:
        return exc


def test_every_models_bracket_takes_the_first_models_steps_up_to_the_lowest_ceiling() -> None:
    a = SimpleNamespace(capacity=CapacityPlan(slos_ms={"ttft_p90": 250}, max_multiplier=8.0, tolerance=0.2))
    b = SimpleNamespace(capacity=CapacityPlan(slos_ms={"ttft_p50": 100}, max_multiplier=3.0, tolerance=0.4))
    _brackets_in_step([a, b])  # type: ignore[list-item]
    assert a.capacity.max_multiplier == b.capacity.max_multiplier == 3.0
    assert a.capacity.tolerance == b.capacity.tolerance == 0.2
    assert b.capacity.slos_ms == {"ttft_p50": 100}  # each model keeps its own SLOs


def _setup(capacity: bool, metric: str) -> Any:
    return SimpleNamespace(objective=SimpleNamespace(is_capacity=capacity, metric=metric))


def test_a_mix_of_capacity_and_latency_objectives_is_refused_naming_the_model() -> None:
    group = SimpleNamespace(path=Path("group.yaml"))
    _capacity_in_step(
        group, [("rag", 1.0, _setup(True, "capacity")), ("chat", 1.0, _setup(True, "capacity"))]
    )  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        _capacity_in_step(
            group, [("rag", 1.0, _setup(True, "capacity")), ("chat", 1.0, _setup(False, "ttft_p90"))]
        )  # type: ignore[arg-type]
    assert str(err.value).startswith("group.yaml: models.chat: objective ttft_p90 beside rag's capacity")
    assert "(fix: " in str(err.value)
