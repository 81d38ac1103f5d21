#!/usr/bin/env bash
# Issue 39 on the lent H200, run under issue 40 (the GPU proof): two 8B-shaped dummy models on one
# H200 with a group share of the GPU (default 0.5; SHARE=0.35 for a total the two working sets cannot
# both fill), the long shared-document RAG traffic (rag_long.jsonl: a 78k-token working set) on one
# and short multi-turn chat (chat_short.jsonl) on the other. It measures the tool's split (the prior's)
# against the equal split, alternating (the study's A B A B confirmation).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Then, calls back to back (the machine goes back about 30 s after one):
#   call 1 (.gpu/c1 .gpu/p .gpu/s): bash .gpu/s/install.sh c1 && python3 .gpu/s/untar.py .gpu/p/p.tar.xz /root/site && bash benchmarks/gpu/group_h200.sh dry
#   call 2 (.gpu/c2 .gpu/s):        bash .gpu/s/install.sh c2 && bash benchmarks/gpu/group_h200.sh study
#   call 3:                         bash benchmarks/gpu/group_h200.sh ab
#
# dry:   every engine's command for the baseline, the prior's split and 3 samples, each checked by
#        vLLM's own parser, and the prior's reasons (no engine starts).
# study: the baseline group (the equal split) and the prior's split, one group trial each (both engines
#        start together, both workloads replay at once); no confirmation yet.
# ab:    the same study resumed with no new trial: the best group against the baseline group,
#        A B A B (2 rounds), then the export (one YAML per model and launch.sh) under $OUT.
# The study lives in /root/grp between calls; each call's files come back under $OUT. T=S: the step's
# time limit (default 560 s; less where one call also installs).
set -uo pipefail
STEP=${1:?usage: group_h200.sh dry|study|ab}
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/grp
SHARE=${SHARE:-0.5}
mkdir -p "$OUT" "$R"
G="$R/group.yaml"
cat > "$G" <<YAML
# written by benchmarks/gpu/group_h200.sh
models:
  - name: rag
    model: /root/m8b
    workload: $PWD/benchmarks/gpu/rag_long.jsonl
  - name: chat
    model: /root/m8b
    workload: $PWD/benchmarks/gpu/chat_short.jsonl
share:
  gpu_memory_utilization: $SHARE
engine_args: [--load-format=dummy, --max-model-len=8192, --enforce-eager]
launcher: python3 -m vllm.entrypoints.cli.main serve
passes: "1"
objective: ttft_p50
YAML
cp "$G" "$OUT/group.yaml"
snap() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; }
left_over() {
  echo "GPU after: $(snap)"
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
}
run() {  # the tool, timed; what it printed under $OUT
  local name=$1; shift
  snap > "$OUT/gpu-$name.txt"
  t0=$(date +%s)
  { time timeout -s INT "${T:-560}" python3 -m autotune run -f "$G" --study grp --studies-dir "$R" "$@" ; } \
    > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-$name.txt"
  left_over | tee -a "$OUT/gpu-$name.txt"
  tail -30 "$OUT/$name.stdout"
}
case "$STEP" in
  dry)   run dry --dry-run --dry-run-samples 3 ;;
  study) run study --n-trials 2 --confirm-rounds 0 --out "$R/export-study" ;;
  ab)    run ab --n-trials 0 --confirm-rounds 2 --out "$OUT/export"
         tar -czf "$OUT/grp.tar.gz" -C /root grp 2>/dev/null ;;
  *) echo "usage: group_h200.sh dry|study|ab"; exit 2 ;;
esac
