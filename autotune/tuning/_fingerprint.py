"""Which study a worker may join, and what it measures there: the study's fingerprint (hashes of
its space, workload and model: :func:`check_fingerprint` keeps a worker out of a study made for
others) and the choices it was created with (:func:`recorded_choices`, so that ``autotune worker
--study NAME`` needs nothing else), both stored as JSON on the study.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.space import measured_bytes
from autotune.studyfile import StudySpec, field_meta, spec_fingerprint, study_record
from autotune.tuning._setup import TuningSetup

__all__ = [
    "CHOICES_ATTR",
    "FINGERPRINT_ATTR",
    "SPEC_ATTR",
    "SPEC_FINGERPRINT_ATTR",
    "check_fingerprint",
    "effective_fingerprint",
    "fingerprint_diffs",
    "from_jsonable",
    "record_effective_study",
    "recorded_choices",
    "space_change_note",
    "study_fingerprint",
    "to_jsonable",
]

FINGERPRINT_ATTR = "fingerprint"  # study attr: hashes of the space, workload and model it measures
CHOICES_ATTR = "choices"  # study attr: the effective study it was created with (a worker needs only its name)
SPEC_ATTR = "study_spec"  # study attr: the effective study of the latest run, night or worker (autotune show)
SPEC_FINGERPRINT_ATTR = "study_fingerprint"  # study attr: its hash (the same study from a file or flags)


def to_jsonable(value: Any) -> Any:
    """A dataclass (a worker spec) or a :class:`StudySpec` as JSON values; :func:`from_jsonable` reads it back."""
    if isinstance(value, StudySpec):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return json.loads(json.dumps(value, default=str))


def from_jsonable(tp: Any, value: Any) -> Any:
    """A JSON value back into ``tp`` (dataclasses, tuples, paths and optionals of them)."""
    if value is None:
        return None
    if tp is StudySpec:
        return StudySpec.model_validate(_legacy(value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: from_jsonable(hints[k], v) for k, v in value.items() if k in known})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return from_jsonable(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v) for v in value)
        return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=False))
    if tp is Path:
        return Path(value)
    return value


_LEGACY = {"engine_args": "engine_args", "startup_timeout_s": "startup_timeout", "slos": "slo"}


def _legacy(value: dict[str, Any]) -> dict[str, Any]:
    """Choices recorded by an earlier version (``TuningChoices``: nested arrivals, ``_s`` names) as study keys."""
    out = {_LEGACY.get(k, k): v for k, v in value.items() if k not in ("arrivals", "preview")}
    out.update({k: v for k, v in (value.get("arrivals") or {}).items()})
    return {k: v for k, v in out.items() if k in StudySpec.model_fields and not field_meta(k).get("per_run")}


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _model_sha(model: str) -> str:
    """config.json and the weight files' names and sizes (not their bytes: tens of GB); a hub name as is."""
    path = Path(model)
    try:
        config = (path / "config.json").read_bytes()
    except OSError:
        return _sha("name", model)
    weights = sorted(
        f"{p.name}:{p.stat().st_size}"
        for pattern in ("*.safetensors", "*.bin", "*.pt")
        for p in path.glob(pattern)
    )
    return _sha(config, *weights)


def study_fingerprint(setup: TuningSetup) -> dict[str, dict[str, str]]:
    """What a study measures, hashed: the space (file, profile, fixed flags), the workload as replayed
    (file, sample, arrivals, warm-up, history), the model (its config and weight files) and the
    parameters it tunes (the space less what the user fixed)."""
    c = setup.choices
    tuned = sorted(setup.space.tunable)  # less what the user fixed
    space = _space_bytes(setup)
    fixed = " ".join(setup.fixed_argv)
    if setup.choices.baseline_args:  # older studies have none: their hash is unchanged
        fixed += " baseline " + " ".join(setup.choices.baseline_args)
    wl = Path(setup.workload.path)
    wl_bytes = wl.read_bytes() if wl.exists() else b""
    replay = f"sample={c.sample} seed={c.seed} arrivals={setup.arrival.describe()} warmup={c.warmup} history={c.history}"
    return {
        "space": {
            "sha": _sha(space, setup.profile.name, fixed),
            "what": f"{setup.space_path.name}, profile {setup.profile.name}, fixed flags {fixed or 'none'}",
        },
        "workload": {
            "sha": _sha(wl_bytes, replay),
            "what": f"{wl.name} ({len(setup.workload)} requests, {setup.arrival.describe()})",
        },
        "model": {"sha": _model_sha(setup.model), "what": setup.model},
        "tuned": {"sha": _sha(*tuned), "what": f"tuned {', '.join(tuned) or 'nothing'}"},
    }


def _space_bytes(setup: TuningSetup) -> bytes:
    return measured_bytes(setup.space_path)


def _files_sha(path: Path) -> str:
    """A workload file's bytes, or a folder's files (names and bytes, in name order)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return _sha(*(part for p in files for part in (str(p.relative_to(path)), p.read_bytes())))
    return _sha(path.read_bytes() if path.exists() else b"")


def effective_fingerprint(setup: TuningSetup) -> str:
    """The hash of the effective study (:func:`autotune.studyfile.spec_fingerprint`): the same study from a file
    or from flags, from any working directory, hashes the same."""
    c = setup.choices
    contents = {
        "workload": _files_sha(Path(c.workload)) if c.workload else "",
        "model": _model_sha(setup.model),
        "space": _sha(_space_bytes(setup), setup.space_path.name),
    }
    return spec_fingerprint(c, contents)


def check_fingerprint(study: optuna.Study, setup: TuningSetup, *, refuse: bool = True) -> list[str]:
    """Refuse to measure into a study made for another space, workload or model (``refuse=False``:
    only return what differs). A study that records none yet gets this setup's fingerprint and
    choices (:data:`CHOICES_ATTR`), so that workers joining later know what to measure."""
    mine = study_fingerprint(setup)
    recorded = study.user_attrs.get(FINGERPRINT_ATTR)
    if not recorded:
        study.set_user_attr(FINGERPRINT_ATTR, mine)
        recorded = study.user_attrs.get(FINGERPRINT_ATTR) or mine
    if CHOICES_ATTR not in study.user_attrs:
        study.set_user_attr(CHOICES_ATTR, study_record(_portable(setup.choices)))
    diffs = fingerprint_diffs(recorded, mine, "this worker")
    if diffs and refuse:
        raise ConfigError(
            f"study {study.study_name!r} measures something else: {'; '.join(diffs)} "
            "(fix: give this worker the study's space, workload, flags and model, or use a new --study name)"
        )
    return diffs


def fingerprint_diffs(recorded: Any, mine: dict[str, dict[str, str]], who: str) -> list[str]:
    """What ``who`` would measure that differs from what the study ``recorded``, one line a part."""
    return [
        f"{key}: the study measures {recorded[key].get('what')} [{recorded[key].get('sha')}], "
        f"{who} {value['what']} [{value['sha']}]"
        for key, value in mine.items()
        if key in recorded and recorded[key].get("sha") != value["sha"]
    ]


def space_change_note(study: optuna.Study, setup: TuningSetup) -> str | None:
    """One line when a study recorded before fixed flags left the search has tuned parameters that this
    run's fixed flags now fix (its earlier trials keep their values). The study's fingerprint then
    records the tuned set, so the line is said once."""
    recorded = study.user_attrs.get(FINGERPRINT_ATTR)
    if not isinstance(recorded, dict) or "tuned" in recorded:
        return None
    tuned_before = {n for t in study.get_trials(deepcopy=False) for n in t.params}
    now_fixed = {n: why for n, why in setup.space.fixed.items() if n in tuned_before}
    study.set_user_attr(FINGERPRINT_ATTR, {**recorded, "tuned": study_fingerprint(setup)["tuned"]})
    if not now_fixed:
        return None
    return (
        f"study {study.study_name!r} was recorded when fixed flags were still tuned: its trials tuned "
        + ", ".join(f"{n} (now {why})" for n, why in now_fixed.items())
        + "; new trials keep your values, earlier ones keep theirs (fix: a new --study name to search only "
        "the rest)"
    )


def record_effective_study(study: optuna.Study, setup: TuningSetup) -> str:
    """Record the effective study of this invocation and its fingerprint (shown by ``autotune show``)."""
    fingerprint = effective_fingerprint(setup)
    study.set_user_attr(SPEC_ATTR, study_record(_portable(setup.choices)))
    study.set_user_attr(SPEC_FINGERPRINT_ATTR, fingerprint)
    return fingerprint


def _portable(choices: StudySpec) -> StudySpec:
    """Paths made absolute (a worker elsewhere finds the same mount points, or says it cannot); the
    compile cache left out (a folder of this host: a worker elsewhere keeps its own)."""
    model = Path(choices.model or "")
    return choices.model_copy(
        update={
            "workload": choices.workload.resolve() if choices.workload else None,
            "space": choices.space.resolve() if choices.space else None,
            "model": str(model.resolve()) if choices.model and model.exists() else choices.model,
            "compile_cache": None,
        }
    )


def recorded_choices(study: optuna.Study) -> dict[str, Any] | None:
    """The study keys it was created with (None: created by a version that did not record them)."""
    data = study.user_attrs.get(CHOICES_ATTR)
    if not isinstance(data, dict):
        return None
    return _legacy(data)
