"""A study recorded when fixed flags were still tuned resumes with one line saying what changed, once."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.study import Objective, load_or_create
from autotune.studyfile import StudySpec
from autotune.tuning import (
    FINGERPRINT_ATTR,
    build_setup,
    check_fingerprint,
    space_change_note,
    study_fingerprint,
)

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
SPACE = """
name: small
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64], flag: --block-size}
  max_num_seqs: {type: categorical, choices: [16, 32], flag: --max-num-seqs}
"""


def _choices(tmp_path: Path, *engine_args: str) -> StudySpec:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / "tiny-llama-2layer.json").read_text())
    wl = tmp_path / "wl.jsonl"
    wl.write_text('{"prompt": "hello there", "max_tokens": 4, "timestamp": 0}\n')
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    return StudySpec(workload=wl, model=str(model), space=space, check_args=False, engine_args=engine_args)


def _old_study(tmp_path: Path) -> optuna.Study:
    """A study as an earlier version left it: block_size tuned although --block-size=32 was fixed, and
    a fingerprint without the tuned set."""
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    trial = study.ask({"block_size": optuna.distributions.CategoricalDistribution([32, 64])})
    study.tell(trial, 1.0)
    return study


def test_an_older_study_whose_space_now_differs_says_so_once(tmp_path: Path) -> None:
    study = _old_study(tmp_path)
    with build_setup(_choices(tmp_path, "--block-size=32")) as setup:
        recorded = {k: v for k, v in study_fingerprint(setup).items() if k != "tuned"}
        study.set_user_attr(FINGERPRINT_ATTR, recorded)
        assert check_fingerprint(study, setup, refuse=False) == []  # the same space file and flags
        note = space_change_note(study, setup)
        assert note is not None and "\n" not in note
        assert "block_size (now fixed by you (--block-size 32))" in note and "max_num_seqs" not in note
        assert space_change_note(study, setup) is None  # said once: the tuned set is recorded now
        assert study.user_attrs[FINGERPRINT_ATTR]["tuned"]["what"] == "tuned max_num_seqs"


def test_a_study_whose_tuned_parameters_are_still_tuned_says_nothing(tmp_path: Path) -> None:
    study = _old_study(tmp_path)
    with build_setup(_choices(tmp_path, "--max-num-seqs=16")) as setup:
        study.set_user_attr(
            FINGERPRINT_ATTR, {k: v for k, v in study_fingerprint(setup).items() if k != "tuned"}
        )
        assert space_change_note(study, setup) is None
