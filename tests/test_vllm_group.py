"""``make test`` runs two pytest-xdist workers and keeps the tests that start real vLLM in two
groups, one per worker (tests/conftest.py): the controller finds them by ``starts_vllm``, from node
ids alone. Every test pytest selects with ``-m vllm`` must be found, and no other."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from functools import cache

from tests.conftest import REPO, VLLM_GROUPS, starts_vllm, vllm_group


@cache
def _collected() -> tuple[frozenset[str], frozenset[str]]:
    """(the tests pytest sees the ``vllm`` mark on, the others), from one collection."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests._marks_plugin", "tests"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [line.split("\t") for line in res.stdout.splitlines() if line.startswith("VLLM-MARK\t")]
    return (
        frozenset(n for _, n, m in rows if m == "1"),
        frozenset(n for _, n, m in rows if m == "0"),
    )


def test_the_real_vllm_group_is_exactly_the_tests_marked_vllm() -> None:
    marked, others = _collected()
    assert len(marked) >= 20 and len(others) >= 500  # the suite as it stands: ~40 and ~950
    assert {n for n in marked if not starts_vllm(n)} == set()
    assert {n for n in others if starts_vllm(n)} == set()


def test_a_parametrized_or_module_marked_node_id_is_read_through_its_function() -> None:
    assert starts_vllm(  # its own mark
        "tests/e2e/test_nightly.py::test_run_then_a_night_promotes_and_a_rollback_restores_the_export_on_the_cpu_build"
    )
    assert starts_vllm(
        "tests/integration/test_capacity_study_vllm.py::test_a_capacity_study_on_real_vllm_exports_a_capacity_above_the_starved_baseline"
    )
    assert not starts_vllm("tests/e2e/test_nightly.py::test_the_night_respects_its_budget")
    assert starts_vllm(  # the module's pytestmark, a parametrized id
        "tests/integration/test_kv_estimate_vs_vllm.py::test_explicit_kv_bytes_match_vllm_exactly[64M-x]"
    )


def test_the_shared_real_engines_runs_stay_in_the_measuring_group() -> None:
    """``real_study`` and ``real_nights`` are session fixtures: built once only if every test that
    reads them runs on one worker, the ``vllm`` group's (the other group runs beside it)."""
    marked, _ = _collected()
    groups = {n: vllm_group(n) for n in marked}
    assert set(groups.values()) == set(VLLM_GROUPS)
    for nodeid, group in groups.items():
        path, _, name = nodeid.partition("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        params = inspect.signature(getattr(module, name.partition("[")[0])).parameters
        if {"real_study", "real_nights"} & set(params):
            assert group == "vllm", nodeid
