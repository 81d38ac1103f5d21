"""A/B re-measurement: arms alternate, figures are medians with spread, the config reads as vLLM reads it."""

from __future__ import annotations

from pathlib import Path

from autotune.bench import RequestTiming, summarize
from autotune.export import build_export, config_to_args, write_export
from autotune.space import RenderedConfig
from autotune.study import Figures, TrialRecord, TrialStatus
from autotune.trial import compare_configs
from tests.fakes.evaluators import over_words


def test_arms_alternate_and_the_ratio_is_of_medians() -> None:
    order: list[tuple[str, ...]] = []

    @over_words
    def evaluator(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        order.append(rendered.args)
        ttft = 0.2 if not rendered.args else 0.1  # B is twice as fast
        timings = [
            RequestTiming(f"r{i}", None, 0.0, 0.0, ttft + i * 0.001, ttft + 0.05, (0.01,), 5, 9)
            for i in range(9)
        ]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(timings, 1.0).as_dict()))

    b = ["--block-size", "32"]
    result = compare_configs(evaluator, [("A", []), ("B", b)], rounds=3)
    assert order == [(), tuple(b)] * 3
    assert len(result.a.figures["ttft_p50"]) == 3
    ratio = result.ratio("ttft_p50")
    assert ratio is not None and 0.49 < ratio < 0.52
    assert result.as_dict()["b"]["failed_runs"] == 0


def test_exported_config_reads_back_into_the_same_flags(tmp_path: Path) -> None:
    exported = build_export(
        model="/models/m",
        fixed_argv=["--max-model-len", "4096", "--enable-prefix-caching"],
        tuned_argv=[
            "--no-enable-prefix-caching",
            "--kv-transfer-config",
            '{"kv_role": "kv_both"}',
            "--block-size",
            "32",
        ],
        env={},
        header_lines=["t"],
    )
    path = tmp_path / "best.yaml"
    write_export(exported, path)
    model, argv = config_to_args(path)
    assert model == "/models/m"
    assert argv == [
        "--max-model-len", "4096", "--no-enable-prefix-caching",
        "--kv-transfer-config", '{"kv_role": "kv_both"}', "--block-size", "32",
    ]  # fmt: skip


def _comparison(a: list[float], b: list[float]):  # type: ignore[no-untyped-def]
    from autotune.trial import ArmSummary, Comparison

    return Comparison(a=ArmSummary("A", (), (), {"ttft_p90": a}), b=ArmSummary("B", (), (), {"ttft_p90": b}))


def test_a_gain_inside_the_noise_is_not_called_an_improvement() -> None:
    from autotune.trial import significant_gain

    ok, why = significant_gain(_comparison([100, 104, 98], [97, 101, 99]), "ttft_p90", maximize=False)
    assert not ok and "ranges overlap" in why
    ok, _ = significant_gain(_comparison([100, 104, 98], [80, 83, 81]), "ttft_p90", maximize=False)
    assert ok
    ok, why = significant_gain(_comparison([100, 101], [99.0, 99.5]), "ttft_p90", maximize=False)
    assert not ok and "do not overlap" in why  # disjoint by luck, but inside the noise floor
    ok, why = significant_gain(_comparison([100], [98.5]), "ttft_p90", maximize=False, min_improvement=0.03)
    assert not ok and "noise floor" in why
    ok, _ = significant_gain(_comparison([100], [120]), "ttft_p90", maximize=True)
    assert ok  # a throughput-like metric: higher is better


def test_an_arm_whose_runs_disagree_is_flagged() -> None:
    """The H200's defaults measured 212 and 965 ms p90 in two runs of one command: the median of
    two is then mostly the odd run, and the comparison says so; runs within the noise are not flagged."""
    from autotune.trial import ArmSummary, Comparison

    a = ArmSummary("A defaults", (), (), {"ttft_p50": [136.2, 154.6], "ttft_p90": [212.3, 965.2]})
    b = ArmSummary("B best.yaml", (), (), {"ttft_p50": [50.9, 57.2], "ttft_p90": [163.3, 164.6]})
    lines = Comparison(a, b).disagreeing()
    assert len(lines) == 1 and lines[0].startswith(
        "A defaults: its runs disagree on ttft_p90 (212.3-965.2 ms, 4.5x"
    )
    assert Comparison(a, b).as_dict()["disagreeing"] == lines
    one_run = ArmSummary("A", (), (), {"ttft_p90": [212.3]})
    assert Comparison(one_run, b).disagreeing() == []
