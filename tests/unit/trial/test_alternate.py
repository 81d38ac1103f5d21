"""The one A B A B alternation that one engine's compare and a group's confirmation both run."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.trial import alternate


def _run(number: int, arm: str, this_round: Sequence[str]) -> str:
    return f"{arm}{number}<{','.join(this_round)}>"


def test_arms_take_turns_numbered_in_the_order_they_start() -> None:
    said: list[tuple[str, int, str]] = []
    (a, b), why = alternate(
        [("base", "A"), ("best", "B")],
        3,
        _run,
        first_number=10,
        on_run=lambda label, r, res: said.append((label, r, res)),
    )
    # each run sees only this round's earlier arms: the best is judged against this round's baseline
    assert a == ("A10<>", "A12<>", "A14<>")
    assert b == ("B11<A10<>>", "B13<A12<>>", "B15<A14<>>")
    assert [(label, r) for label, r, _ in said] == [
        (label, r) for r in range(3) for label in ("base", "best")
    ]
    assert [res for _, _, res in said] == [a[0], b[0], a[1], b[1], a[2], b[2]]
    assert why is None


def test_a_stop_ends_the_rounds_after_the_round_it_names() -> None:
    seen: list[Sequence[str]] = []

    def stop(this_round: Sequence[str]) -> str | None:
        seen.append(tuple(this_round))
        return "B failed" if any(res.startswith("B3") for res in this_round) else None

    (a, b), why = alternate([("A", "A"), ("B", "B")], 5, _run, stop=stop)
    assert (a, b) == (("A0<>", "A2<>"), ("B1<A0<>>", "B3<A2<>>"))  # both arms of the round that failed
    assert why == "B failed"
    assert seen == [("A0<>", "B1<A0<>>"), ("A2<>", "B3<A2<>>")]


def test_no_rounds_run_nothing() -> None:
    calls: list[int] = []
    runs, why = alternate([("A", "A"), ("B", "B")], 0, lambda n, arm, _: calls.append(n) or arm)
    assert runs == ((), ()) and why is None and calls == []


def test_a_start_refuses_a_round_before_any_of_its_runs() -> None:
    """The nightly's budget: a round the budget would not hold is not begun (no arm of it runs)."""
    asked: list[int] = []

    def start(r: int) -> str | None:
        asked.append(r)
        return "budget" if r == 2 else None

    (a, b), why = alternate([("A", "A"), ("B", "B")], 5, _run, start=start)
    assert (a, b) == (("A0<>", "A2<>"), ("B1<A0<>>", "B3<A2<>>"))
    assert why == "budget" and asked == [0, 1, 2]
