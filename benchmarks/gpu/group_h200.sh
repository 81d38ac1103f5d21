#!/usr/bin/env bash
# Issue 39 on the lent H200, run under issue 40 (the GPU proof): two 8B-shaped dummy models on one
# H200 with a group share of the GPU (default 0.5; SHARE=0.35 for a total the two working sets cannot
# both fill), the long shared-document RAG traffic (rag_long.jsonl: a 78k-token working set) on one
# and short multi-turn chat (chat_short.jsonl) on the other. It measures the tool's split (the prior's)
# against the equal split, alternating (the study's A B A B confirmation).
#
# Issue 47 item 1 (the co-located split where memory is scarce) runs the same steps with a smaller chat
# model (a 1.5B-shaped Qwen2 with the same tokenizer: benchmarks/gpu/mk_small_model.py), a share the
# equal split starves the RAG model at, and p90 TTFT as each model's objective metric:
#   SHARE=0.25 CHAT_MODEL=/root/m1p5b OBJECTIVE=ttft_p90 bash benchmarks/gpu/group_h200.sh dry|study|ab
# Variables (defaults: issue 40's run): SHARE (0.5), RAG_MODEL and CHAT_MODEL (/root/m8b), OBJECTIVE
# (ttft_p50), R (the study's folder, /root/grp), T (the step's time limit, 560 s).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Then, calls back to back (the machine goes back about 30 s after one). c1 + the pins archive + the
# working tree (11.05 MB on 2026-12-05) no longer fit one call's 64 MiB, and the dry step needs c2
# (vLLM's parser imports vllm._C_stable_libtorch), so:
#   call 1 (.gpu/c1 .gpu/s): bash .gpu/s/install.sh c1 && python3 benchmarks/gpu/mk_small_model.py /root/m8b /root/m1p5b
#   call 2 (.gpu/p .gpu/s):  python3 .gpu/s/untar.py .gpu/p/p.tar.xz /root/site
#   call 3 (.gpu/c2 .gpu/s): bash .gpu/s/install.sh c2 && T=100 bash benchmarks/gpu/group_h200.sh dry; T=470 bash benchmarks/gpu/group_h200.sh study
#   call 4 (.gpu/s):         T=560 bash benchmarks/gpu/group_h200.sh ab
# (issue 47's run put c1, the pins and mk_small_model.py in one call with 807 KB of tracked results
# moved out of the tree for its duration; issue 40's call 1 carried .gpu/c1 .gpu/p .gpu/s.)
# Issue 47 measured 2 group trials in 301-303 s (the first trial's cold starts 174-187 s, the second's 95-110 s).
#
# dry:   every engine's command for the baseline, the prior's split and 3 samples, each checked by
#        vLLM's own parser, and the prior's reasons (no engine starts).
# study: the baseline group (the equal split) and the prior's split, one group trial each (engines
#        start one at a time, both workloads replay at once); no confirmation yet.
# ab:    the same study resumed with no new trial: the best group against the baseline group,
#        A B A B (2 rounds), then the export (one YAML per model and launch.sh) under $OUT.
# After study and ab, benchmarks/gpu/group_logs.py writes under $OUT what the study's vLLM logs say
# (kv-lines.txt: KV memory and tokens per engine start, the last prefix-cache hit rate; phases.json:
# each start's phases) and logs.tar.gz (the logs less their HTTP access lines, each run's per-request
# timings, the study's SQLite file). FULL_TAR=1: also the whole study folder as grp.tar.gz (issue 40).
set -uo pipefail
STEP=${1:?usage: group_h200.sh dry|study|ab}
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=${R:-/root/grp}
SHARE=${SHARE:-0.5}
RAG_MODEL=${RAG_MODEL:-/root/m8b}
CHAT_MODEL=${CHAT_MODEL:-/root/m8b}
OBJECTIVE=${OBJECTIVE:-ttft_p50}
mkdir -p "$OUT" "$R"
G="$R/group.yaml"
cat > "$G" <<YAML
# written by benchmarks/gpu/group_h200.sh
models:
  - name: rag
    model: $RAG_MODEL
    workload: $PWD/benchmarks/gpu/rag_long.jsonl
  - name: chat
    model: $CHAT_MODEL
    workload: $PWD/benchmarks/gpu/chat_short.jsonl
share:
  gpu_memory_utilization: $SHARE
engine_args: [--load-format=dummy, --max-model-len=8192, --enforce-eager]
launcher: python3 -m vllm.entrypoints.cli.main serve
passes: "1"
objective: $OBJECTIVE
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
logs() {  # what the study's vLLM logs say, small enough to come back
  timeout 60 python3 benchmarks/gpu/group_logs.py "$R" "$OUT" > "$OUT/logs-$1.stdout" 2>&1
  tail -40 "$OUT/logs-$1.stdout"
}
case "$STEP" in
  dry)   run dry --dry-run --dry-run-samples 3 ;;
  study) run study --n-trials 2 --confirm-rounds 0 --out "$R/export-study"; logs study ;;
  ab)    run ab --n-trials 0 --confirm-rounds 2 --out "$OUT/export"; logs ab
         if [ "${FULL_TAR:-0}" = 1 ]; then tar -czf "$OUT/grp.tar.gz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null; fi ;;
  *) echo "usage: group_h200.sh dry|study|ab"; exit 2 ;;
esac
# At most 8 files come back from a call: everything else of the step in one archive ($STEP.tar.gz).
keep=("$STEP.stdout" "gpu-$STEP.txt" kv-lines.txt phases.json logs.tar.gz grp.tar.gz)
(cd "$OUT" && tar czf "/tmp/$STEP.tar.gz" --exclude=logs.tar.gz --exclude=grp.tar.gz . ) \
  && for f in "$OUT"/* "$OUT"/.[!.]*; do
       [ -e "$f" ] || continue
       case " ${keep[*]} " in *" $(basename "$f") "*) ;; *) rm -rf "$f" ;; esac
     done && mv "/tmp/$STEP.tar.gz" "$OUT/"
ls -la "$OUT"
