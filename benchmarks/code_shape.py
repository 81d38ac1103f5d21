"""Issue 46's measures of the code's shape, for one tree: functions over 60 lines (from ``def`` to their
last line), functions above cyclomatic complexity C (radon: D, E or F), and pylint's duplicate-code
pairs (its defaults: 4 lines or more). radon and pylint are not the project's dependencies: run it with
an environment that has them, e.g.

    python3 -m venv /tmp/qa && /tmp/qa/bin/pip install radon pylint
    /tmp/qa/bin/python benchmarks/code_shape.py [TREE]        # TREE: a checkout (default: this one)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

MAX_LINES = 60


def long_functions(package: Path) -> list[tuple[int, str, str]]:
    out = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    out.append((lines, str(path.relative_to(package.parent)), node.name))
    return sorted(out, reverse=True)


def main() -> int:
    tree = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    bin_dir = Path(sys.executable).parent
    longs = long_functions(tree / "autotune")
    ranks = subprocess.run(
        [bin_dir / "radon", "cc", "-n", "D", "-s", "autotune"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    complex_ = [ln.strip() for ln in ranks.splitlines() if ln.startswith("    ")]
    dup = subprocess.run(
        [bin_dir / "pylint", "--disable=all", "--enable=duplicate-code", "autotune"],
        cwd=tree, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    pairs = [ln for ln in dup.splitlines() if "Similar lines" in ln]
    print(f"functions over {MAX_LINES} lines: {len(longs)}")
    for lines, path, name in longs:
        print(f"  {lines:4d}  {path}  {name}")
    print(f"functions above radon C (D, E, F): {len(complex_)}")
    for ln in complex_:
        print(f"  {ln}")
    print(f"pylint duplicate-code pairs: {len(pairs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
