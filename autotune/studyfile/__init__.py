"""The study file: one declaration of everything a study is (:class:`StudySpec`), the options of
``run``, ``worker``, ``nightly`` and ``compare`` generated from it, a study file read and checked
(:func:`load_study_file`), and the effective study resolved (:func:`resolve_spec`), recorded
(:func:`study_record`) and fingerprinted (:func:`spec_fingerprint`)."""

from __future__ import annotations

from autotune.studyfile._duration import parse_duration
from autotune.studyfile._file import (
    field_meta,
    fields_for,
    load_study_file,
    resolve_spec,
    spec_fingerprint,
    study_record,
)
from autotune.studyfile._group import GROUP_MODES, GroupFile, GroupMode, load_group_file, parse_bytes
from autotune.studyfile._model import COMMANDS, ENGINES, EXPORT_FORMATS, EngineName, ExportFormat, StudySpec
from autotune.studyfile._render import commented_study_file

__all__ = [
    "COMMANDS",
    "ENGINES",
    "EXPORT_FORMATS",
    "GROUP_MODES",
    "EngineName",
    "ExportFormat",
    "GroupFile",
    "GroupMode",
    "StudySpec",
    "commented_study_file",
    "field_meta",
    "fields_for",
    "load_group_file",
    "load_study_file",
    "parse_bytes",
    "parse_duration",
    "resolve_spec",
    "spec_fingerprint",
    "study_record",
]
