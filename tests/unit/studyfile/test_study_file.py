"""The study file: one declaration of every option; the file read, checked and overridden by flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from autotune.cli import app
from autotune.errors import ConfigError
from autotune.studyfile import (
    COMMANDS,
    StudySpec,
    commented_study_file,
    field_meta,
    fields_for,
    load_study_file,
    resolve_spec,
    spec_fingerprint,
    study_record,
)


def _command(name: str) -> typer.core.TyperCommand:
    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_a_measuring_command_is_a_field_of_the_study_model(command: str) -> None:
    """A command that declares an option of its own, outside the study model, fails here."""
    params = {p.name for p in _command(command).params} - {"file", "help"}
    assert params == set(fields_for(command)), params ^ set(fields_for(command))
    for p in _command(command).params:
        if p.name in StudySpec.model_fields:  # the help is the model's, written once
            assert p.help == StudySpec.model_fields[p.name].description  # type: ignore[attr-defined]


def test_shared_options_are_one_declaration_across_commands() -> None:
    shared = set(fields_for("run")) & set(fields_for("nightly")) & set(fields_for("worker"))
    assert {"workload", "model", "engine_args", "slo", "passes", "history", "storage"} <= shared
    # `nightly --history` printed the nights and took multi-turn history from nights: it is the study's now
    assert "history" in fields_for("nightly")
    assert _command("nightly").params and "history" in getattr(_command("nightly"), "commands", {})


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_an_unknown_key_names_its_line_and_the_closest_valid_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "workload: rag.jsonl\nmodel: m\nn_trial: 3\n")
    with pytest.raises(ConfigError) as err:
        load_study_file(path)
    assert str(err.value) == f"{path}:3: unknown key 'n_trial' (did you mean 'n_trials'?)"


def test_a_bad_value_names_the_file_line_key_value_and_fix(tmp_path: Path) -> None:
    path = _write(tmp_path, "workload: rag.jsonl\nbudget: soon\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}:2: budget: 'soon': cannot read 'soon' as a duration \(fix: e.g. 2h"
    ):
        load_study_file(path)
    path = _write(tmp_path, "n_trials: many\n")
    with pytest.raises(ConfigError, match=rf"^{path}:1: n_trials: 'many': .*integer"):
        load_study_file(path)


def test_an_action_of_one_command_line_is_not_a_study_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "dry_run: true\n")
    with pytest.raises(
        ConfigError, match=r"study.yaml:1: 'dry_run' is an action of one command line.*--dry-run"
    ):
        load_study_file(path)


def test_not_yaml_or_not_a_mapping_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"study.yaml:2: not valid YAML"):
        load_study_file(_write(tmp_path, "a: 1\n b: [\n"))
    with pytest.raises(ConfigError, match="a mapping of keys"):
        load_study_file(_write(tmp_path, "- 1\n- 2\n"))


def test_paths_in_a_file_are_relative_to_its_folder_and_a_flag_overrides_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "models" / "tiny").mkdir(parents=True)
    path = folder / "study.yaml"
    path.write_text(
        "workload: day.jsonl\nmodel: models/tiny\nn_trials: 4\nengine_args: [--enforce-eager]\n"
        "slo: {ttft_p90: 800ms}\nrounds: 5\n"
    )
    spec = resolve_spec("run", flags={"n_trials": 2}, file=load_study_file(path))
    assert spec.workload == folder / "day.jsonl"
    assert spec.model == str(folder / "models" / "tiny")
    assert spec.n_trials == 2  # the flag
    assert spec.engine_args == ("--enforce-eager",) and spec.slo == ("ttft_p90=800ms",)
    hub = _write(tmp_path, "model: meta-llama/Llama-3.1-8B\n")
    assert resolve_spec("run", flags={}, file=load_study_file(hub)).model == "meta-llama/Llama-3.1-8B"


def test_a_command_has_defaults_of_its_own_and_a_worker_inherits_the_study_not_its_budget() -> None:
    assert resolve_spec("compare", flags={}).rounds == 3
    assert resolve_spec("nightly", flags={}).rounds == 2
    assert resolve_spec("nightly", flags={}).min_improvement == 0.05
    assert resolve_spec("run", flags={}).min_improvement == 0.03
    recorded = {"workload": "/data/w.jsonl", "model": "/m", "speed": 3.0}
    spec = resolve_spec("worker", flags={"speed": 2.0}, recorded=recorded)
    assert spec.workload == Path("/data/w.jsonl") and spec.speed == 2.0  # the flag wins over the record
    assert all(not field_meta(k)["per_run"] for k in ("workload", "speed", "engine_args", "objective"))
    assert all(field_meta(k)["per_run"] for k in ("n_trials", "budget", "storage", "study"))


def test_the_fingerprint_follows_what_is_measured_not_how_much_or_where() -> None:
    contents = {"workload": "w1", "model": "m1", "space": "s1"}
    a = StudySpec(workload=Path("a/rag.jsonl"), model="x", n_trials=3, studies_dir=Path("one"))
    b = StudySpec(
        workload=Path("/abs/rag.jsonl"), model="y", n_trials=9, studies_dir=Path("two"), prune=False
    )
    assert spec_fingerprint(a, contents) == spec_fingerprint(b, contents)  # same files, other budget
    assert spec_fingerprint(a, contents) != spec_fingerprint(a.model_copy(update={"speed": 2.0}), contents)
    assert spec_fingerprint(a, contents) != spec_fingerprint(a, {**contents, "workload": "w2"})


def test_init_output_reads_back_as_the_same_study(tmp_path: Path) -> None:
    values = {"workload": "rag.jsonl", "model": "org/model", "study": "s", "profile": "cpu"}
    text = commented_study_file(values, header=["found: nothing"])
    path = _write(tmp_path, text)
    spec = resolve_spec("run", flags={}, file=load_study_file(path))
    assert spec.workload == tmp_path / "rag.jsonl" and spec.model == "org/model" and spec.study == "s"
    assert "# n_trials: 10" in text and "# found: nothing" in text
    assert study_record(spec)["study"] == "s" and "dry_run" not in study_record(spec)
