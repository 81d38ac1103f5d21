#!/usr/bin/env bash
# The package as users install it: build the wheel, install it (not editable) into a fresh venv,
# and run `autotune run --dry-run` from another directory. Catches files that only exist in the
# checkout (search_spaces/), undeclared dependencies and a broken console script.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=$(mktemp -d /tmp/autotune-wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
.venv/bin/pip wheel -q --no-deps -w "$WORK/dist" . 2>&1 | grep -v -i warning || true
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-compile --disable-pip-version-check "$WORK"/dist/vllm_autotune-*.whl 2>&1 | grep -v -i warning || true
# Listed to a file, then searched: `unzip -l | grep -q` under pipefail fails with SIGPIPE (141)
# whenever grep finds the name before unzip has written the whole listing.
unzip -Z1 "$WORK"/dist/vllm_autotune-*.whl > "$WORK/wheel-files.txt"
grep -qx "autotune/search_spaces/cpu.yaml" "$WORK/wheel-files.txt"
.venv/bin/autotune tiny-model "$WORK/model" >/dev/null
cd "$WORK"  # not the checkout: nothing may come from it
"$WORK/venv/bin/autotune" run --workload "$REPO/examples/rag.jsonl" --model "$WORK/model" --profile cpu \
  --dry-run --dry-run-samples 2 --no-check-args --no-check-memory > "$WORK/dry-run.txt"
grep -q "search_spaces/cpu.yaml\|# baseline" "$WORK/dry-run.txt"
grep -q -- "--port 0" "$WORK/dry-run.txt"
echo "wheel check: installed $(ls "$WORK"/dist) into a fresh venv; dry run from $WORK passed"
