#!/usr/bin/env bash
# The package's own runtime dependencies for the lent H200, as one archive (.gpu/p/p.tar.xz) that
# travels beside the kit's chunk c1 (../shared/gpu/prepare.sh): the wheels of benchmarks/gpu/pins.txt
# (built from pyproject.toml by build_pins.py, checked in CI), unpacked and xz-compressed: 22 MB of
# wheels become 11 MB, so c1 + this + the working tree fit one call's 64 MiB.
# Device side, after `bash .gpu/s/install.sh c1`: python3 .gpu/s/untar.py .gpu/p/p.tar.xz /root/site
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 benchmarks/gpu/build_pins.py --check
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps $PLAT -d "$W/whl" -r benchmarks/gpu/pins.txt
mkdir -p "$W/site" .gpu/p
for w in "$W"/whl/*.whl; do unzip -q -o "$w" -d "$W/site"; done
rm -rf "$W"/site/*.data  # jupyter extension files of plotly: not imported
(cd "$W/site" && tar cf - . | xz -9e -T0 > "$OLDPWD/.gpu/p/p.tar.xz")
du -b .gpu/p/p.tar.xz
