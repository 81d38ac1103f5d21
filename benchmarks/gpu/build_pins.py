"""The GPU kit's extra wheels (``benchmarks/gpu/pins.txt``), built from ``pyproject.toml``.

The lent H200 has no network: every runtime dependency of this package that its image lacks must
travel as a wheel. ``pins.txt`` once fell behind ``pyproject.toml`` (plotly, then narwhals), and
``autotune nightly`` failed there at ``import plotly``. So the list is built, not kept by hand:

- start from ``[project].dependencies`` of ``pyproject.toml``;
- walk their requirements through the installed distributions of this environment (the versions
  that the tests ran with), with the markers evaluated for the device (CPython 3.12, Linux x86-64);
- stop at a package that the device image provides at a version that serves (``IMAGE``, read from
  the device kinds' package list: torch and the Hugging Face stack) or that the shared vLLM kit
  carries (``../shared/gpu/pins-vllm.txt``); everything else is carried at its installed version.

    python benchmarks/gpu/build_pins.py            # rewrite benchmarks/gpu/pins.txt
    python benchmarks/gpu/build_pins.py --check    # CI: exit 1 naming each runtime dependency
                                                   # that neither the pins, the kit nor the image carry

The check compares names, not versions: CI's fresh environment may resolve newer releases than the
ones pinned, and the kit installs the pinned ones, which the tests also passed with.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "benchmarks" / "gpu" / "pins.txt"
KIT_PINS = ROOT.parent / "shared" / "gpu" / "pins-vllm.txt"
# The device image's own packages (../.library/device/KINDS.md, "Python packages already there"),
# taken as they are: PyTorch 2.11, which vLLM 0.26.0 pins, and the libraries built with it.
IMAGE = frozenset(
    canonicalize_name(n)
    for n in (
        "torch", "triton", "numpy", "transformers", "tokenizers", "huggingface-hub", "hf-xet",
        "safetensors", "jinja2", "markupsafe", "filelock", "fsspec", "packaging", "regex",
        "typing-extensions", "requests", "urllib3", "charset-normalizer", "sympy", "mpmath",
        "networkx", "setuptools", "nvidia-ml-py",
    )
)  # fmt: skip
# The device: CPython 3.12 on Linux x86-64 (markers of the requirements are evaluated for it).
DEVICE = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
          "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
          "implementation_name": "cpython", "platform_python_implementation": "CPython"}  # fmt: skip


def _names(lines: list[str]) -> set[str]:
    out = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(canonicalize_name(Requirement(line).name))
    return out


def kit_names() -> set[str] | None:
    """The names the shared kit carries; None where ../shared is not beside this checkout."""
    return _names(KIT_PINS.read_text().splitlines()) if KIT_PINS.is_file() else None


def runtime_closure(stop: set[str]) -> dict[str, str]:
    """name -> installed version of every package the device must be given, walking from pyproject."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [Requirement(d) for d in deps]
    carried: dict[str, str] = {}
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({**DEVICE, "extra": ""})):
            continue
        seen.add(name)
        if name in stop:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            sys.exit(f"build_pins: {req.name} (needed by the package) is not installed here "
                     "(fix: run from the project's venv, `make setup`)")  # fmt: skip
        carried[dist.metadata["Name"]] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return carried


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if pins.txt misses a runtime dependency")
    args = ap.parse_args()
    kit = kit_names()
    if kit is None:
        print(f"build_pins: skipped, {KIT_PINS} is not beside this checkout (the shared GPU kit's pins, "
              "which the check subtracts)")  # fmt: skip
        return 0
    stop = set(IMAGE) | kit
    carried = runtime_closure(stop)
    if args.check:
        have = _names(PINS.read_text().splitlines())
        missing = sorted(n for n in carried if canonicalize_name(n) not in have)
        if missing:
            print(f"{PINS.relative_to(ROOT)} misses runtime dependencies of the package: "
                  f"{', '.join(missing)} (fix: python benchmarks/gpu/build_pins.py)")  # fmt: skip
            return 1
        print(f"pins.txt carries all {len(carried)} runtime dependencies the device image and the kit lack")
        return 0
    PINS.write_text("".join(f"{n}=={v}\n" for n, v in sorted(carried.items(), key=lambda kv: kv[0].lower())))
    print(f"wrote {PINS.relative_to(ROOT)}: {len(carried)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
