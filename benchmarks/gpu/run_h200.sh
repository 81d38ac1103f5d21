#!/usr/bin/env bash
# Issue 7 on the lent H200 (vLLM 0.26.0 GPU build from ../shared/gpu, 8B-shaped dummy Llama at /root/m8b).
# Usage on the device, right after `bash .gpu/s/install.sh c1`:
#   bash .gpu/s/install.sh c2 && bash benchmarks/gpu/run_h200.sh study      (<= 10 min)
#   bash benchmarks/gpu/run_h200.sh compare                                 (the next call, ~5 min)
# Everything it writes goes under $OUT (the study's SQLite file, trial logs, best.yaml, figures).
set -uo pipefail
source .gpu/s/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
FIXED=(--engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 --engine-arg=--enforce-eager
       --engine-arg=--gpu-memory-utilization=0.15)
LAUNCHER="python3 -m vllm.entrypoints.cli.main serve"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv | tee "$OUT/gpu-$1.txt"
case "$1" in
  study)
    python3 -m autotune doctor --model /root/m8b --max-model-len 8192 > "$OUT/doctor.txt" 2>&1
    python3 -m autotune run --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b \
      --space benchmarks/gpu/space_h200.yaml --study h200 --studies-dir "$OUT/studies" \
      --n-trials 8 --timeout 430 --launcher "$LAUNCHER" "${FIXED[@]}" \
      --out "$OUT/best.yaml" 2>&1 | tee "$OUT/study.txt" | tail -60
    mkdir -p /root/h200-out && cp "$OUT/best.yaml" /root/h200-out/  # for the compare call (machine stays up)
    ;;
  compare)
    python3 -m autotune compare --workload benchmarks/gpu/rag_long.jsonl --config /root/h200-out/best.yaml \
      --model /root/m8b --rounds 2 --launcher "$LAUNCHER" "${FIXED[@]}" \
      --log-dir "$OUT/compare-logs" --json-out "$OUT/compare.json" 2>&1 | tee "$OUT/compare.txt" | tail -40
    ;;
esac
nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$OUT/gpu-$1.txt"
ps aux | grep -c "[v]llm.entrypoints" | sed 's/^/vllm processes left: /' | tee -a "$OUT/gpu-$1.txt"
