"""The workload fixtures (tokenizer, data files) for the ``autotune workload`` command tests."""

from __future__ import annotations

from tests.unit.workload.conftest import (  # noqa: F401 - pytest fixtures
    data_dir,
    tiny_tokenizer,
    tiny_tokenizer_dir,
    write_lines,
)
