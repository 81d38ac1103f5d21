#!/usr/bin/env bash
# Round four on the lent H200 (issue 40 items 1 and 2), vLLM 0.26.0 GPU build from ../shared/gpu,
# the 8B-shaped dummy Llama at /root/m8b, the long shared-document workload (rag_long.jsonl) with
# the memory share fixed by the operator at 0.15 (another model shares the GPU).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Then, calls back to back (the machine goes back about 30 s after one):
#   call 1 (.gpu/c1 .gpu/p .gpu/s): bash .gpu/s/install.sh c1 && python3 .gpu/s/untar.py .gpu/p/p.tar.xz /root/site && bash benchmarks/gpu/round4_h200.sh check
#   call 2 (.gpu/c2 .gpu/s):        bash .gpu/s/install.sh c2 && bash benchmarks/gpu/round4_h200.sh night 1
#   call 3:                         bash benchmarks/gpu/round4_h200.sh night 2
#   call 4:                         bash benchmarks/gpu/round4_h200.sh fidelity   (or: ... poisson)
# Item 4 (the throughput study against the grid), after calls 1-2 of an install (c2 with `grid`):
#   calls 2-3:                      bash benchmarks/gpu/round4_h200.sh grid       (9 points, ~100 s each, resumes)
#   call 4:                         bash benchmarks/gpu/round4_h200.sh throughput (3 starts: a third of the grid's)
#
# night N: `autotune nightly --budget 8m`, the deployed config = vLLM's defaults with the operator's
#   fixed flags, searching from the prior, confirming A B A B, promoting through --on-promote
#   (benchmarks/gpu/on_promote_h200.sh copies the export under the night's record). The study lives
#   in /root/r4 between calls. Each call's files come back under $OUT.
# fidelity: benchmarks/bench_vs_vllm.py on one server: the tool's replayer and `vllm bench serve`,
#   alternately, 3 runs each, closed loop at concurrency 8 and Poisson 6/s with one seed (the same
#   arrival times for both), the workload's 60 prompts twice over; then the closed loop with bench
#   shuffling its dataset, as it does by default (the outside measurement of issue 36).
set -uo pipefail
STEP=${1:?usage: round4_h200.sh check|night N|fidelity|poisson|grid|throughput}
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/r4
mkdir -p "$OUT" "$R"
L="python3 -m vllm.entrypoints.cli.main serve"
FIXED=(--engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 --engine-arg=--enforce-eager
       --engine-arg=--gpu-memory-utilization=0.15)
snap() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; }
left_over() {
  echo "GPU after: $(snap)"
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
}
case "$STEP" in
  check)  # every runtime import of the package, with the kit's and the image's packages only
    python3 -c "import autotune.cli, autotune.nightly, autotune.report, plotly, narwhals, optuna; print('imports ok', plotly.__version__, narwhals.__version__, optuna.__version__)"
    python3 -m autotune --help > /dev/null && echo "autotune --help ok" ;;
  night)
    N=${2:?night number}
    snap > "$OUT/gpu-night$N.txt"
    t0=$(date +%s)
    # the budget counts from here: `time` is the judge of the night's wall
    { time timeout -s INT 575 python3 -m autotune nightly --study r4-night --workload benchmarks/gpu/rag_long.jsonl \
        --model /root/m8b --space benchmarks/gpu/space_h200_long.yaml --studies-dir "$R" --budget 8m \
        --out "$R/deployed.yaml" --launcher "$L" "${FIXED[@]}" --passes 1 \
        --on-promote "bash $PWD/benchmarks/gpu/on_promote_h200.sh $R/promoted" ; } \
      > "$OUT/night$N.stdout" 2> "$OUT/night$N.stderr"
    rc=$?
    echo "night $N: exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-night$N.txt"
    python3 -m autotune nightly history --study r4-night --studies-dir "$R" > "$OUT/history-night$N.txt" 2>&1
    left_over | tee -a "$OUT/gpu-night$N.txt"
    tar -czf "$OUT/r4-night$N.tar.gz" -C /root r4 2>/dev/null
    tail -25 "$OUT/night$N.stdout" ;;
  fidelity)
    snap > "$OUT/gpu-fidelity.txt"
    timeout -s INT 560 python3 benchmarks/bench_vs_vllm.py --model-dir /root/m8b \
      --workload benchmarks/gpu/rag_long.jsonl --repeat 1 --rounds 3 --concurrency 8 --rate 6 --seed 0 \
      --modes closed,poisson,closed-shuffled \
      --launcher "$L" --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 \
      --engine-arg=--gpu-memory-utilization=0.15 --json-out "$OUT/bench_vs_vllm_h200.json" \
      > "$OUT/fidelity.stdout" 2> "$OUT/fidelity.stderr"
    echo "fidelity: exit $?" | tee -a "$OUT/gpu-fidelity.txt"
    left_over | tee -a "$OUT/gpu-fidelity.txt"
    tail -40 "$OUT/fidelity.stdout" ;;
  poisson)  # the Poisson rounds alone (3 of each client, one seed, the same arrivals for both)
    snap > "$OUT/gpu-poisson.txt"
    timeout -s INT 420 python3 benchmarks/bench_vs_vllm.py --model-dir /root/m8b \
      --workload benchmarks/gpu/rag_long.jsonl --repeat 1 --rounds 3 --concurrency 8 --rate 6 --seed 0 \
      --modes poisson --launcher "$L" --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 \
      --engine-arg=--gpu-memory-utilization=0.15 --json-out "$OUT/bench_vs_vllm_h200_poisson.json" \
      > "$OUT/poisson.stdout" 2> "$OUT/poisson.stderr"
    echo "poisson: exit $?" | tee -a "$OUT/gpu-poisson.txt"
    left_over | tee -a "$OUT/gpu-poisson.txt"
    tail -30 "$OUT/poisson.stdout" ;;
  grid|throughput)  # issue 40 item 4: max-num-seqs x max-num-batched-tokens, the SLO from the first point
    part=$([ "$STEP" = grid ] && echo grid || echo study)
    BUDGET=540 timeout -s INT 580 python3 benchmarks/gpu/issue31_h200.py "$part" --seqs 128 256 512 \
      --batched 2048 4096 8192 --slo-from-first 1.1 > "$OUT/$STEP.stdout" 2> "$OUT/$STEP.stderr"
    echo "$STEP: exit $?" | tee -a "$OUT/gpu-$STEP.txt"
    cp /root/i31/*.json "$OUT/" 2>/dev/null
    left_over | tee -a "$OUT/gpu-$STEP.txt"
    tail -20 "$OUT/$STEP.stdout" ;;
  *) echo "usage: round4_h200.sh check|night N|fidelity|poisson|grid|throughput"; exit 2 ;;
esac
