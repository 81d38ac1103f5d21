#!/usr/bin/env bash
# Issue 45's H200 script, run under issue 47 (item 2): capacity at an SLO on the lent H200, vLLM 0.26.0
# GPU build from ../shared/gpu, the 8B-shaped dummy Llama at /root/m8b, the long shared-document
# workload (rag_long.jsonl: a 78k-token working set) with the memory share fixed at 0.15 (about 50k KV
# tokens, fewer than the working set), SLO p90 TTFT <= 400 ms, the host pool in the space
# (space_h200_long.yaml: max_num_batched_tokens x cpu_swap_space_gb). Target: the tuned capacity at
# least 1.5x the defaults', brackets apart (A B A B).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Then, calls back to back (the machine goes back about 30 s after one):
#   call 1 (.gpu/c1 .gpu/p .gpu/s): bash .gpu/s/install.sh c1 && python3 .gpu/s/untar.py .gpu/p/p.tar.xz /root/site && bash benchmarks/gpu/capacity_h200.sh dry
#   call 2 (.gpu/c2 .gpu/s):        bash .gpu/s/install.sh c2 && T=400 bash benchmarks/gpu/capacity_h200.sh study
#   call 3:                         bash benchmarks/gpu/capacity_h200.sh more     (2 more trials)
#   call 4:                         bash benchmarks/gpu/capacity_h200.sh ab       (A B A B, export; ROUNDS=1: A B, ~360 s)
#   call 5:                         bash benchmarks/gpu/capacity_h200.sh grid 256   (auto_tune.sh's method, one row)
#   call 6:                         bash benchmarks/gpu/capacity_h200.sh grid 1024  (the other row)
#
# dry:   the commands of the baseline and 3 samples, each checked by vLLM's parser; the prior's lines.
# study: the baseline (the defaults at share 0.15) and the prior's candidate, each bracketed on one start.
# more:  the same study resumed, 2 more trials (the pruner stops those that cannot beat the best).
# ab:    the same study, no new trial: the best against the baseline A B A B (each run a full bracket),
#        then the export with its capacity line under $OUT.
# grid N: benchmarks/capacity_vs_grid.py's grid method (vLLM's auto_tune.sh: per cell one start, rate
#        inf, then down 1 req/s until the SLO holds) on the same model, workload, share and SLO, one row
#        of the grid per call (max-num-seqs N x max-num-batched-tokens 2048 8192; 1024 x 8192 is vLLM
#        0.26's default on an H200): engine starts, wall, best capacity, beside the study's.
# The study lives in /root/cap between calls; each call's files come back under $OUT. T=S: the step's
# time limit (default 560 s).
set -uo pipefail
STEP=${1:?usage: capacity_h200.sh dry|study|more|ab|grid N}
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/cap
mkdir -p "$OUT" "$R"
# The setting is 0.15 of an H200 (0.15 x 143771 MiB = 21566 MiB for weights, activations and KV). On
# another card the share is scaled so the engine gets the same MiB, hence the same KV pool: on an H100
# (81559 MiB) 0.2644. SHARE=x overrides; the card and the share go into every gpu-*.txt.
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
SHARE=${SHARE:-$(python3 -c "print(round(0.15 * 143771 / $TOTAL, 4))")}
L="python3 -m vllm.entrypoints.cli.main serve"
ARGS=(--workload benchmarks/gpu/rag_long.jsonl --model /root/m8b --space benchmarks/gpu/space_h200_long.yaml
      --launcher "$L" --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192
      --engine-arg=--gpu-memory-utilization=$SHARE --objective capacity --slo ttft_p90=400ms
      --study cap --studies-dir "$R")
snap() { echo "share $SHARE: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader)"; }
left_over() {
  echo "GPU after: $(snap)"
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
}
run() {  # the tool, timed; what it printed under $OUT
  local name=$1; shift
  snap > "$OUT/gpu-$name.txt"
  t0=$(date +%s)
  { time timeout -s INT "${T:-560}" python3 -m autotune run "${ARGS[@]}" "$@" ; } \
    > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-$name.txt"
  left_over | tee -a "$OUT/gpu-$name.txt"
  python3 -m autotune show --study cap --studies-dir "$R" > "$OUT/show-$name.txt" 2>&1
  tail -30 "$OUT/$name.stderr"
}
case "$STEP" in
  dry)   run dry --dry-run --dry-run-samples 3 ;;
  study) run study --n-trials 2 --confirm-rounds 0 --out "$R/export-study.yaml" ;;
  more)  run more --n-trials 2 --confirm-rounds 0 --out "$R/export-more.yaml" ;;
  ab)    run ab --n-trials 0 --confirm-rounds "${ROUNDS:-2}" --out "$OUT/best.yaml"
         python3 -m autotune report --study cap --studies-dir "$R" -o "$OUT/report.html" > /dev/null 2>&1
         tar -czf "$OUT/cap.tar.gz" -C /root cap --exclude='*/cache' 2>/dev/null ;;
  grid)  ROW=${2:?usage: capacity_h200.sh grid 256|1024}
         snap > "$OUT/gpu-grid-$ROW.txt"
         t0=$(date +%s)
         timeout -s INT "${T:-560}" python3 benchmarks/capacity_vs_grid.py --only grid \
           --model /root/m8b --workload benchmarks/gpu/rag_long.jsonl --profile cuda-native --launcher "$L" \
           --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 \
           --engine-arg=--gpu-memory-utilization=$SHARE --baseline-arg none --engine-defaults 1024,8192 \
           --num-seqs "$ROW" --num-batched-tokens "2048 8192" --slo ttft_p90=400ms --startup-timeout 400 \
           --work-dir /root/grid --json-out "$OUT/grid-$ROW.json" > "$OUT/grid-$ROW.stdout" 2> "$OUT/grid-$ROW.stderr"
         echo "grid $ROW: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-grid-$ROW.txt"
         left_over | tee -a "$OUT/gpu-grid-$ROW.txt"
         tail -30 "$OUT/grid-$ROW.stdout" ;;
  *) echo "usage: capacity_h200.sh dry|study|more|ab|grid N"; exit 2 ;;
esac
