"""``autotune run -f group.yaml`` on the fake server: the baseline group, the prior's split, then a
sampled one; each trial the whole group, its value the group's objective, each model's figures kept;
then the best group re-measured against the baseline group (A B A B) and the chosen group exported:
one YAML per model, which the installed vLLM's own parser accepts, and a launch script."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.engine._argcheck import VllmArgChecker
from autotune.errors import ConfigError
from autotune.tiny_model import make_tiny_model
from tests.conftest import (
    FAKE_LAUNCHER,
    MARK_ENV,
    REPO,
    processes_marked,
    write_fake_space,
    write_two_model_group,
)


def test_a_group_study_runs_baseline_prior_and_sampled_trials(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    space = write_fake_space(tmp_path)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}, space: {space}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    studies = tmp_path / "studies"
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--n-trials", "3", "--max-requests", "8", "--warmup", "0",
            "--study", "g", "--out", str(tmp_path / "export")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert "trial 0 (baseline): split of 64 MiB" in res.output and "trial 2 (sampled)" in res.output
    study = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}")
    trials = study.trials
    assert [t.user_attrs["group_trial"] for t in trials] == ["baseline", "prior", "sampled"]
    assert trials[0].value == pytest.approx(1.0)  # the baseline group against itself
    assert trials[0].user_attrs["split"] == pytest.approx({"rag": 0.5, "chat": 0.5})
    for t in trials:
        for name in ("rag", "chat"):
            got = t.user_attrs[f"model:{name}"]
            assert got["status"] == "ok" and got["figures"]["completed"] == 8, got
        ratios = t.user_attrs["group_ratios"]
        if t.value is not None:  # pareto, the default: the geometric mean of the models' ratios
            assert t.value == pytest.approx(math.prod(ratios.values()) ** (1 / len(ratios)))
        else:  # or a model worse than its baseline beyond the noise floor, named
            assert t.user_attrs["group_reason"].startswith("infeasible: "), t.user_attrs["group_reason"]
    assert any(p.startswith("rag.") for p in trials[2].params)  # the sampled trial tunes each space
    # the end of the study: confirmation (or the baseline was best), then the export of the chosen group
    confirmed = [v for k, v in study.user_attrs.items() if k.startswith("group_confirmation_")]
    best = min((t for t in trials if t.value is not None), key=lambda t: t.value)
    if best.number != 0:
        assert "confirm round 2: baseline group: group objective" in res.output, res.output
        assert len(confirmed) == 1 and "group objective" in confirmed[0]["why"], confirmed
    chosen = best if best.number == 0 or confirmed[0]["confirmed"] else trials[0]
    launch = (tmp_path / "export" / "launch.sh").read_text()
    with VllmArgChecker() as checker:
        for port, name in ((8000, "rag"), (8001, "chat")):
            path = tmp_path / "export" / f"{name}.yaml"
            parsed = checker.check(["--config", str(path)])
            assert parsed.ok, (name, parsed.error)
            measured = chosen.user_attrs[f"model:{name}"]["command"]
            kv = measured[measured.index("--kv-cache-memory-bytes") + 1]
            assert (
                parsed.args["kv_cache_memory_bytes"] == int(kv.rstrip("M")) * 2**20
            )  # its share, as measured
            assert f"--config {name}.yaml --port {port} &" in launch, launch
    assert "wrote" in res.output and "launch the group as measured: sh" in res.output
    # the study's report: its group trials, and each model's figures as the engines measured them
    res = CliRunner().invoke(app, ["report", "--study", "g", "--studies-dir", str(studies)])
    assert res.exit_code == 0, res.output
    page = (studies / "g" / "report.html").read_text()
    assert page.count("<tr") - page.count("<tr><th>") == 3 * 3, (
        "3 trials in the group's and each model's table"
    )
    for name in ("rag", "chat"):
        completed = trials[1].user_attrs[f"model:{name}"]["figures"]["ttft_p90"]
        assert f'id="model-{name}"' in page and f"{completed:,.2f}" in page
    assert not processes_marked(mark)


def test_a_group_split_that_cannot_run_is_kept_as_optuna_keeps_a_trial_without_a_value(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split infeasible before launch: PRUNED with its constraint violated and its reason, no value
    (no sentinel), as TPE and optuna-dashboard read such a trial."""
    monkeypatch.setenv(MARK_ENV, mark)
    path = write_two_model_group(tmp_path, engine_args="--max-model-len=2048")
    studies = tmp_path / "studies"
    studies.mkdir()
    study = optuna.create_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}")
    study.enqueue_trial({"split.rag": 0.5})  # the baseline group: the equal split
    study.enqueue_trial({"split.rag": 0.05})  # rag gets 2.4 MiB: not one request of 2,048 tokens
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--n-trials", "2", "--max-requests", "4", "--warmup", "0", "--study", "g",
            "--no-prior", "--confirm-rounds", "0", "--out", str(tmp_path / "export")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}").trials
    bad = [t for t in trials if t.user_attrs.get("group_reason", "").startswith("infeasible before launch")]
    assert bad, [(t.number, t.state, t.user_attrs.get("group_reason")) for t in trials]
    assert all(t.state is optuna.trial.TrialState.PRUNED and t.value is None for t in bad)
    assert all(t.constraints.get("group_feasible") == 1.0 for t in bad)
    assert not processes_marked(mark)


def test_a_baseline_group_that_misses_an_slo_is_measured_and_stays_the_reference(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's split misses rag's SLO (here 1 ms, which nothing meets): that is a measured
    baseline, infeasible, not a failed one; the study goes on and holds every trial against it."""
    monkeypatch.setenv(MARK_ENV, mark)
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, slo: {{ttft_p90: 1ms}}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    studies = tmp_path / "studies"
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--n-trials", "2", "--max-requests", "4", "--warmup", "0", "--study", "g",
            "--confirm-rounds", "0", "--out", str(tmp_path / "export")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert "the baseline group failed" not in res.output, res.output
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}").trials
    assert [t.user_attrs["group_trial"] for t in trials] == ["baseline", "prior"], res.output
    base = trials[0]
    assert base.value is None and "rag: slo:ttft_p90 not met" in base.user_attrs["group_reason"]
    assert base.user_attrs["model:rag"]["status"] == "ok" and base.user_attrs["model:rag"]["figures"]
    assert trials[1].user_attrs["group_ratios"]  # the prior's group measured against that baseline
    assert not processes_marked(mark)


def test_a_model_that_saturates_its_engine_is_said_after_each_trial_and_at_the_end(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake engines serve one request at a time and rag's requests arrive together: rag's
    figures are its queue. Each trial line is followed by a line naming rag; the end says that the
    best is no evidence of a better split (issue 36's saturation, for a group)."""
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("FAKE_SERIAL", "1")
    monkeypatch.setenv("FAKE_TTFT_S", "0.05")
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    burst = tmp_path / "burst.jsonl"
    burst.write_text(
        "".join(
            f'{{"prompt": "q{i} {"word " * 20}", "max_tokens": 8, "timestamp": {i * 0.02}}}\n'
            for i in range(30)
        )
    )
    calm = tmp_path / "calm.jsonl"
    calm.write_text(
        "".join(f'{{"prompt": "c{i} hello", "max_tokens": 4, "timestamp": {i * 0.5}}}\n' for i in range(6))
    )
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {burst}}}
  - {{name: chat, model: {l2}, workload: {calm}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "s"),
            "--no-check-args", "--n-trials", "2", "--warmup", "0", "--study", "g", "--confirm-rounds", "0",
            "--out", str(tmp_path / "export")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    lines = res.output.splitlines()
    for number in (0, 1):
        at = next(i for i, ln in enumerate(lines) if ln.startswith(f"trial {number} ("))
        assert lines[at + 1].startswith("  rag saturated its engine: its requests queued"), lines[at : at + 3]
    assert not any(ln.startswith("  chat saturated") for ln in lines), res.output
    assert "rag saturated its engine in every measured group trial (2 of 2)" in res.output, res.output
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path / 's' / 'g.db'}").trials
    assert all(t.user_attrs["model:rag"]["saturated"] is True for t in trials)
    assert all(t.user_attrs["model:chat"]["saturated"] is False for t in trials)
    assert not processes_marked(mark)


def test_a_resumed_group_study_keeps_its_baseline_and_n_trials_0_confirms_and_exports(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 measures the baseline group and the prior's split; run 2 (``--n-trials 0``) runs no trial
    and confirms and exports what the study holds; run 3 adds one sampled trial, held against the
    baseline group of run 1 (no second baseline, no second prior's split)."""
    monkeypatch.setenv(MARK_ENV, mark)
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    space = write_fake_space(tmp_path)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}, space: {space}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    studies = tmp_path / "studies"
    common = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
              "--no-check-args", "--max-requests", "6", "--warmup", "0", "--study", "g"]  # fmt: skip

    def run(*extra: str) -> str:
        res = CliRunner().invoke(app, [*common, *extra])
        assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
        return res.output

    run("--n-trials", "2", "--confirm-rounds", "0", "--out", str(tmp_path / "e1"))
    second = run("--n-trials", "0", "--confirm-rounds", "1", "--out", str(tmp_path / "e2"))
    assert "# resuming study g: 2 group trial(s) stand, the baseline group is trial 0; 0 more" in second
    assert "trial 2 (" not in second and (tmp_path / "e2" / "launch.sh").exists()
    third = run("--n-trials", "1", "--confirm-rounds", "0", "--out", str(tmp_path / "e3"))
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}").trials
    assert [t.user_attrs["group_trial"] for t in trials] == ["baseline", "prior", "sampled"], third
    assert trials[2].user_attrs["group_ratios"]  # measured against run 1's baseline group
    assert not processes_marked(mark)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"chat_workload": "rag.jsonl"}, "chat.workload: the study measures support_chat.jsonl"),
        (
            {"share": "{kv_cache_memory_bytes: 64M, baseline: {rag: 0.7, chat: 0.3}}"},
            "share: the study measures",
        ),
        ({"rag_weight": "3"}, "rag.weight: the study measures weight 1 [1], this run weight 3 [3]"),
    ],
)
def test_a_resumed_group_study_of_another_group_is_refused_in_one_line(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch, change: dict[str, str], named: str
) -> None:
    """Its baseline group and trials would be held against figures of another group: refused before
    any engine starts, naming what changed; the study keeps its trials."""
    monkeypatch.setenv(MARK_ENV, mark)
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    space = write_fake_space(tmp_path)
    path = tmp_path / "group.yaml"

    def write(chat_workload: str = "support_chat.jsonl", share: str = "{kv_cache_memory_bytes: 64M}", rag_weight: str = "1") -> None:  # fmt: skip
        path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}, weight: {rag_weight}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / chat_workload}, space: {space}}}
share: {share}
engine_args: [--max-model-len=2048]
""")

    studies = tmp_path / "studies"
    common = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
              "--no-check-args", "--max-requests", "4", "--warmup", "0", "--study", "g", "--no-prior",
              "--confirm-rounds", "0", "--out", str(tmp_path / "e")]  # fmt: skip
    write()
    first = CliRunner().invoke(app, [*common, "--n-trials", "1"])
    assert first.exit_code == 0, f"{first.output}\n{first.exception!r}"
    write(**change)
    res = CliRunner().invoke(app, [*common, "--n-trials", "1"])  # main() makes it one line, exit 2
    why = str(res.exception)
    assert isinstance(res.exception, ConfigError), f"{res.output}\n{res.exception!r}"
    assert "study 'g' measures another group" in why and named in why and "a new --study name" in why, why
    assert "trial 1" not in res.output
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}").trials
    assert [t.user_attrs["group_trial"] for t in trials] == ["baseline"]
    assert not processes_marked(mark)
