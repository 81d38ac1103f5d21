"""Intervals come from the model's own measured errors; before 3 of them, a wide default and no veto."""

from __future__ import annotations

import pytest

from autotune.predict import DEFAULT_HALF_WIDTH, MIN_ERRORS, LatencyModel, Ledger, interval_for
from tests.unit.predict.conftest import candidate, measured, shape


def test_before_three_errors_the_interval_is_the_stated_default_and_no_veto() -> None:
    iv = interval_for(100.0, [0.01, -0.02])

    assert (iv.low, iv.high) == (100 * (1 - DEFAULT_HALF_WIDTH), 100 * (1 + DEFAULT_HALF_WIDTH))
    assert not iv.veto_allowed
    assert "no veto yet" in iv.describe()


def test_the_interval_follows_the_measured_errors() -> None:
    tight = interval_for(100.0, [0.01, -0.02, 0.0, 0.015])
    biased = interval_for(100.0, [0.3, 0.35, 0.4])

    assert tight.veto_allowed and tight.errors == MIN_ERRORS + 1
    assert (tight.low, tight.high) == pytest.approx((90.0, 110.0))  # never narrower than +-10%
    assert biased.low == pytest.approx(90.0) and biased.high > 140.0  # a model that predicts low
    assert not biased.holds(150.0) and biased.holds(139.0)


def test_ledger_summary_counts_errors_and_coverage() -> None:
    s = shape(n=80, gap_s=0.05)
    model = LatencyModel(s)
    model.fit([measured(s, candidate())])
    for i, c in enumerate([candidate(), candidate(caching=False), candidate(batched=256), candidate(seqs=8)]):
        p = model.predict(c)
        model.ledger.add(p, p.ttft_p90_ms * (1.1 if i % 2 else 0.4), label=c.label)

    summary = model.ledger.summary()

    assert summary.predictions == 4
    assert summary.within_20 == 2  # the two at +10%; the two at -60% are 150% above the measured figure
    assert summary.inside == 2  # each made before any error was measured: the default +-50% holds +10% only
    assert "4 predictions of p90 TTFT" in summary.line() and "2 of 4 inside" in summary.line()
    assert model.predict(candidate()).interval.veto_allowed  # 4 measured errors now


def test_an_empty_ledger_says_so_and_carried_errors_count() -> None:
    assert Ledger().summary().line() == "ledger: no prediction measured yet"
    assert Ledger(carried=(0.1, 0.2, -0.1)).errors == [0.1, 0.2, -0.1]
