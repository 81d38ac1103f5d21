"""Read a search-space YAML file into a validated :class:`SearchSpace`.

Every error is one line naming the file, the line and key path, the bad value and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import SearchSpaceError
from autotune.space._model import SearchSpace

__all__ = ["load_search_space"]


def _line_of(node: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``path`` (or of its nearest existing parent)."""
    line = node.start_mark.line + 1 if node is not None else None
    for depth, key in enumerate(path):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(key)), None)
            if pair is not None and path[-1] == "[key]" and depth == len(path) - 2:
                return int(pair[0].start_mark.line) + 1  # a bad mapping key: the key's own line
            nxt = pair[1] if pair is not None else None
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            nxt = node.value[key]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
        line = node.start_mark.line + 1
    return line


def _fix_for(err_type: str, key: str) -> str:
    if err_type == "extra_forbidden":
        return "remove it or fix its spelling"
    if err_type == "missing":
        return f"add '{key}'"
    if err_type.endswith("_type") or err_type.endswith("_parsing"):
        return "use a value of the expected type"
    if err_type == "literal_error":
        return "use one of the allowed values"
    return "see search_spaces/README.md for the format"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (fix: keep one of them)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_KEY_PATH_RE = re.compile(r"^(parameters\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*): ")


def load_search_space(path: Path, opt_in: Iterable[str] = ()) -> SearchSpace:
    """The space in ``path``, with the named opt-in parameters enabled (``--opt-in NAME``)."""
    path = Path(path)
    space = _load(path)
    try:
        return space.with_opt_in(opt_in)
    except ValueError as exc:
        raise SearchSpaceError(f"{path}: --opt-in: {exc}") from exc


def _load(path: Path) -> SearchSpace:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SearchSpaceError(f"{path}: cannot read search space: {exc.strerror}") from exc
    try:
        root = yaml.compose(text)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        fix = "" if "fix:" in problem else " (fix the syntax there)"
        raise SearchSpaceError(f"{path}{where}: invalid YAML: {problem}{fix}") from exc
    if not isinstance(data, dict):
        raise SearchSpaceError(
            f"{path}: a search space is a mapping with 'name', 'platform' and 'parameters', "
            f"got {type(data).__name__}"
        )
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        msg_path = _KEY_PATH_RE.match(err["msg"].removeprefix("Value error, "))
        if not loc and msg_path:  # a model-level check names its key path in the message
            loc = tuple(msg_path[1].split("."))
            err = {**err, "msg": err["msg"].removeprefix("Value error, ")[msg_path.end() :]}
        key = ".".join(str(p) for p in loc if p != "[key]") or "(top level)"
        line = _line_of(root, loc)
        where = f":{line}" if line is not None else ""
        msg = err["msg"].removeprefix("Value error, ")
        shown = "" if err["type"] in ("missing", "value_error") else f", got {err.get('input')!r}"
        fix = (
            ""
            if err["type"] == "value_error"
            else f" ({_fix_for(err['type'], str(loc[-1]) if loc else key)})"
        )
        raise SearchSpaceError(f"{path}{where}: {key}: {msg}{shown}{fix}") from exc
