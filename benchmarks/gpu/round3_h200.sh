#!/usr/bin/env bash
# Round three on the lent pair of H200s (nvidia-h200-x2; issue 14, and issue 18's missing
# reference), vLLM 0.26.0 GPU build from ../shared/gpu, the 8B-shaped dummy Llama at /root/m8b,
# CUDA graphs ON, one compile cache for every study (--compile-cache /root/r3-cache). One pass
# per trial, as in round two, so the long study is measured the way round two's exhaustive run
# measured every configuration.
#
#   call 1 (.gpu/c1 .gpu/s):  bash .gpu/s/install.sh c1
#   call 2 (.gpu/c2 .gpu/s):  bash .gpu/s/install.sh c2 && BUDGET=$((560 - SECONDS)) bash benchmarks/gpu/round3_h200.sh A
#   call 3 (.gpu/s):          BUDGET=585 bash benchmarks/gpu/round3_h200.sh B
#   call 4 (.gpu/s):          BUDGET=... bash benchmarks/gpu/round3_h200.sh C
#
# GPU 0: the short ample-KV study (chat_short.jsonl), resumed in every phase: as many trials as the
#        lease allows, to see whether offload stays at one trial (the prior's check) over a long study.
# GPU 1: the long scarce-KV study (rag_long.jsonl, memory share 0.15), 600 s of trial starts over
#        phases A and B (a 10-minute study), then in C the KV-unconstrained reference (vLLM's
#        defaults at memory share 0.9, one trial).
# A study stops starting trials before the call's end (--timeout), so no trial is cut by the call
# boundary; `timeout -s INT` is the safety net (the tool stops its engines on SIGINT).
set -uo pipefail
PHASE=${1:?usage: round3_h200.sh A|B|C}
T0=$(date +%s)
BUDGET=${BUDGET:-545}
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/r3
LONG_TOTAL=600  # seconds of trial starts for the long study, over phases A and B
mkdir -p "$OUT" "$R" /root/r3-cache
L="python3 -m vllm.entrypoints.cli.main serve"
BASE=(--model /root/m8b --launcher "$L" --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192
      --compile-cache /root/r3-cache --passes 1 --confirm-rounds 0 --studies-dir "$R" --n-trials 60)
LONG=(--workload benchmarks/gpu/rag_long.jsonl "${BASE[@]}" --engine-arg=--gpu-memory-utilization=0.15
      --space benchmarks/gpu/space_h200_long.yaml)
SHORT=(--workload benchmarks/gpu/chat_short.jsonl "${BASE[@]}" --space benchmarks/gpu/space_h200_short.yaml)
left() { echo $((T0 + BUDGET - $(date +%s))); }
snap() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; }
short() {  # resume the short study on GPU 0 until the call's end (less a trial's length)
  local t=$(( $(left) - 110 ))
  if [ "$t" -gt 30 ]; then
    echo "== phase $PHASE: --timeout $t" >> "$R/short.txt"
    timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${SHORT[@]}" --gpus 0 --study short \
      --timeout "$t" --out "$R/short-best.yaml" >> "$R/short.txt" 2>&1; echo "exit $?" >> "$R/short.txt"
  fi
}
long() {  # the long study on GPU 1: what is left of its LONG_TOTAL seconds, within this call
  local used; used=$(cat "$R/long-used" 2>/dev/null || echo 0)
  local t=$(( LONG_TOTAL - used )); local room=$(( $(left) - 150 ))
  [ "$t" -gt "$room" ] && t=$room
  if [ "$t" -gt 30 ]; then
    echo $(( used + t )) > "$R/long-used"
    echo "== phase $PHASE: --timeout $t (study total $(( used + t )) of $LONG_TOTAL s)" >> "$R/long.txt"
    timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${LONG[@]}" --gpus 1 --study long \
      --timeout "$t" --out "$R/long-best.yaml" >> "$R/long.txt" 2>&1; echo "exit $?" >> "$R/long.txt"
  fi
}
reference() {  # vLLM's defaults with the memory share left at 0.9: the KV-unconstrained reference
  if [ "$(left)" -gt 200 ]; then
    timeout -s INT $(( $(left) - 5 )) python3 -m autotune run --workload benchmarks/gpu/rag_long.jsonl \
      "${BASE[@]}" --space benchmarks/gpu/space_h200_long.yaml --gpus 1 --study reference --n-trials 1 \
      --out "$R/reference.yaml" > "$R/reference.txt" 2>&1; echo "exit $?" >> "$R/reference.txt"
  else echo "no time left for the reference ($(left) s)" > "$R/reference.txt"; fi
}

echo "phase $PHASE at $(date -u +%FT%TZ), budget $BUDGET s; vLLM $(python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null)" \
  | tee -a "$R/phases.txt"
snap | tee -a "$R/phases.txt"
case "$PHASE" in
  A|B) short & long & wait ;;
  C) short & reference & wait ;;
  *) echo "usage: round3_h200.sh A|B|C"; exit 2 ;;
esac
{
  echo "--- phase $PHASE after $(( $(date +%s) - T0 )) s"; snap
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
  for f in "$R"/short.txt "$R"/long.txt "$R"/reference.txt; do [ -f "$f" ] && { echo "=== $f"; tail -25 "$f"; }; done
} 2>&1 | tee -a "$R/phases.txt" | tail -80
# everything but the compile cache
tar -czf "$OUT/round3-$PHASE.tar.gz" -C /root r3 2>/dev/null
ls -la "$OUT"
