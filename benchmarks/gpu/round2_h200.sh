#!/usr/bin/env bash
# Round two on the lent pair of H200s (nvidia-h200-x2; issues 14, 15 and 18), vLLM 0.26.0 GPU build
# from ../shared/gpu, the 8B-shaped dummy Llama at /root/m8b, CUDA graphs ON (no --enforce-eager)
# with one compile cache shared by every study and comparison (/root/r2-cache, linked as each
# folder's cache/; `--compile-cache /root/r2-cache`, added after these runs, does the same). One trial
# = one pass (--passes 1) everywhere: see RESULTS.md for why.
#
#   call 1 (.gpu/c1 .gpu/s):  bash .gpu/s/install.sh c1
#   call 2 (.gpu/c2 .gpu/s):  bash .gpu/s/install.sh c2 && bash benchmarks/gpu/round2_h200.sh A
#       GPU 0: the long scarce-KV study (memory share fixed at 0.15), 400 s of trial starts
#       GPU 1: the short ample-KV study, 260 s of trial starts, then its best against the defaults
#   call 3 (.gpu/s):          bash benchmarks/gpu/round2_h200.sh B
#       GPUs 0,1: every configuration of the long study's space (benchmarks/exhaustive.py), 2 workers
#   call 4 (.gpu/s .whl):     bash benchmarks/gpu/round2_h200.sh C
#       GPU 0: the long study's best against the defaults, 2 rounds each, alternating
#       GPU 1: the KV-unconstrained reference (memory share 0.9) against the defaults, 2 rounds each
#       CPU:   LMCache's import check (benchmarks/gpu/lmcache_check.sh)
# Each phase ends by its deadline (SIGINT to the tool, which stops its engines), and leaves
# $OUT/phase-X.tar.gz (studies' SQLite files, console output, trial and vLLM logs, JSON) and
# $OUT/phase-X.txt (the console output's tails, GPU memory and vLLM processes left).
set -uo pipefail
PHASE=${1:?usage: round2_h200.sh A|B|C}
T0=$(date +%s)
BUDGET=${BUDGET:-545}  # seconds this phase may take (a call is at most 600 s, the install included)
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/r2
mkdir -p "$OUT" "$R" /root/r2-cache
L="python3 -m vllm.entrypoints.cli.main serve"
BASE=(--model /root/m8b --launcher "$L" --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192)
LONG=(--workload benchmarks/gpu/rag_long.jsonl "${BASE[@]}" --engine-arg=--gpu-memory-utilization=0.15)
SHORT=(--workload benchmarks/gpu/chat_short.jsonl "${BASE[@]}")
REF=(--workload benchmarks/gpu/rag_long.jsonl "${BASE[@]}")  # the long workload, the memory share left to each arm
left() { echo $((T0 + BUDGET - $(date +%s))); }
share_cache() { mkdir -p "$1" && { [ -e "$1/cache" ] || ln -s /root/r2-cache "$1/cache"; }; }
snap() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; }

echo "phase $PHASE at $(date -u +%FT%TZ); vLLM $(python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null)" \
  | tee "$R/phase-$PHASE.txt"
snap | tee -a "$R/phase-$PHASE.txt"
case "$PHASE" in
  A)
    share_cache "$R/long"; share_cache "$R/short"; share_cache "$R/short-compare"
    (timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${LONG[@]}" --space benchmarks/gpu/space_h200_long.yaml \
       --gpus 0 --study long --studies-dir "$R" --n-trials 40 --timeout 400 --passes 1 --confirm-rounds 0 \
       --out "$R/long-best.yaml" > "$R/A-long.txt" 2>&1; echo "exit $?" >> "$R/A-long.txt") &
    (timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${SHORT[@]}" --space benchmarks/gpu/space_h200_short.yaml \
       --gpus 1 --study short --studies-dir "$R" --n-trials 40 --timeout 260 --passes 1 --confirm-rounds 0 \
       --out "$R/short-best.yaml" > "$R/A-short.txt" 2>&1; echo "exit $?" >> "$R/A-short.txt"
     if [ "$(left)" -gt 300 ] && [ -f "$R/short-best.yaml" ]; then
       timeout -s INT $(( $(left) - 5 )) python3 -m autotune compare "${SHORT[@]}" --config "$R/short-best.yaml" \
         --gpus 1 --rounds 2 --passes 1 --log-dir "$R/short-compare" --json-out "$R/short-compare.json" \
         > "$R/A-short-compare.txt" 2>&1; echo "exit $?" >> "$R/A-short-compare.txt"
     else echo "no time left for the short comparison ($(left) s)" > "$R/A-short-compare.txt"; fi) &
    wait
    ;;
  B)
    share_cache "$R/long-grid"
    timeout -s INT $(( $(left) - 5 )) python3 benchmarks/exhaustive.py --gpus 0,1 "${LONG[@]}" \
      --space benchmarks/gpu/space_h200_long.yaml --passes 1 --studies-dir "$R" --study long-grid \
      --minutes 7.6 --json-out "$R/long-grid.json" > "$R/B-grid.txt" 2>&1; echo "exit $?" >> "$R/B-grid.txt"
    ;;
  C)
    share_cache "$R/long-compare"; share_cache "$R/reference"
    (bash benchmarks/gpu/lmcache_check.sh > "$R/C-lmcache.txt" 2>&1) &
    reference() {  # the KV-unconstrained reference: vLLM's defaults (memory share 0.9), one trial
      if [ "$(left)" -gt 180 ]; then
        timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${REF[@]}" --gpus "$1" --study reference \
          --studies-dir "$R" --space benchmarks/gpu/space_h200_long.yaml --n-trials 1 --passes 1 \
          --confirm-rounds 0 --out "$R/reference.yaml" >> "$R/C-reference.txt" 2>&1; echo "exit $?" >> "$R/C-reference.txt"
      else echo "no time left for the reference on GPU $1 ($(left) s)" >> "$R/C-reference.txt"; fi
    }
    (timeout -s INT $(( $(left) - 5 )) python3 -m autotune compare "${LONG[@]}" --config "$R/long-best.yaml" \
       --gpus 0 --rounds 2 --passes 1 --log-dir "$R/long-compare" --json-out "$R/long-compare.json" \
       > "$R/C-long-compare.txt" 2>&1; echo "exit $?" >> "$R/C-long-compare.txt"
     [ -f "$R/reference.db" ] || reference 0) &
    (timeout -s INT $(( $(left) - 5 )) python3 benchmarks/exhaustive.py --gpus 1 "${LONG[@]}" \
       --space benchmarks/gpu/space_h200_long.yaml --passes 1 --studies-dir "$R" --study long-grid \
       --minutes 4.5 --json-out "$R/long-grid.json" > "$R/C-grid.txt" 2>&1; echo "exit $?" >> "$R/C-grid.txt"
     [ -f "$R/reference.db" ] || reference 1) &
    wait
    ;;
  *) echo "usage: round2_h200.sh A|B|C"; exit 2 ;;
esac
{
  echo "--- after $(( $(date +%s) - T0 )) s"; snap
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
  ls /tmp/autotune-gpu-leases 2>/dev/null | sed 's/^/lease file: /'
  for f in "$R"/"$PHASE"-*.txt; do echo "=== $f"; tail -45 "$f"; done
} 2>&1 | tee -a "$R/phase-$PHASE.txt"
cp "$R/phase-$PHASE.txt" "$OUT/"
# everything but the shared compile cache (a link, archived as a link)
tar -czf "$OUT/phase-$PHASE.tar.gz" -C /root r2 2>/dev/null
ls -la "$OUT"
