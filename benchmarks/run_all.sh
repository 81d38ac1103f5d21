#!/usr/bin/env bash
# Run the four benchmarks one after the other (they measure the same 2-core machine: never in
# parallel) and keep their JSON and markdown under benchmarks/out/ (or $OUT).
#   benchmarks/run_all.sh           full run, real vLLM CPU build: about 23 min on 2 cores
#                                   (search_efficiency replays the stored grid table
#                                   benchmarks/data/grid_cpu.json; add MEASURE_GRID=1 to measure it
#                                   again first: about 15 more minutes)
#   benchmarks/run_all.sh --quick   smoke run: fake server where real vLLM is not essential, ~1 min (61 s)
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=()
[[ "${1:-}" == "--quick" ]] && QUICK=(--quick)
OUT="${OUT:-benchmarks/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
GRID=()
[[ "${MEASURE_GRID:-0}" == "1" ]] && GRID=(--measure-grid)

run() {  # name, extra args...
  local name=$1
  shift
  local start=$SECONDS
  echo "== $name ${QUICK[*]} $*" >&2
  "$PY" "benchmarks/$name.py" "${QUICK[@]}" --json-out "$OUT/$name.json" "$@" | tee "$OUT/$name.md"
  echo "== $name: $((SECONDS - start)) s" >&2
}

run fidelity
run repeatability
run search_efficiency "${GRID[@]}"
run gain
echo "== all done in $SECONDS s; results in $OUT/" >&2
