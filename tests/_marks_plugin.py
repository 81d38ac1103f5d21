"""``pytest -p tests._marks_plugin --collect-only``: one line per collected test, its node id and
whether pytest sees the ``vllm`` mark on it (tests/test_vllm_group.py reads them)."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        print(f"VLLM-MARK\t{item.nodeid}\t{int(item.get_closest_marker('vllm') is not None)}")
