#!/usr/bin/env bash
# Issue 18 part 2 on the lent H200: two nights back to back with `autotune nightly` (vLLM 0.26.0 GPU
# build from ../shared/gpu, 8B-shaped dummy Llama at /root/m8b), the long shared-document RAG workload
# with KV made scarce by the user's fixed gpu-memory-utilization 0.15 (as in issue 7).
# Usage on the device, right after `bash .gpu/s/install.sh c1`:
#   bash .gpu/s/install.sh c2 && bash benchmarks/gpu/run_nightly_h200.sh 1     (night 1, <= 10 min)
#   bash benchmarks/gpu/run_nightly_h200.sh 2                                  (night 2, the next call)
# The study lives in /root/nightly (the machine stays up between calls); each call copies it, the
# night's logs and the printed summary under $OUT.
set -uo pipefail
source .gpu/s/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}
STUDIES=/root/nightly
mkdir -p "$OUT" "$STUDIES"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu-night$1.txt"
t0=$(date +%s)
python3 -m autotune nightly --study h200-nightly --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b \
  --space benchmarks/gpu/space_h200.yaml --studies-dir "$STUDIES" --budget 8m --rounds 1 \
  --min-improvement 0.05 --out "$STUDIES/deployed.yaml" \
  --launcher "python3 -m vllm.entrypoints.cli.main serve" \
  --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 --engine-arg=--enforce-eager \
  --engine-arg=--gpu-memory-utilization=0.15 > "$OUT/night$1.stdout" 2> "$OUT/night$1.stderr"
rc=$?
echo "night $1: exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-night$1.txt"
python3 -m autotune nightly --study h200-nightly --studies-dir "$STUDIES" --history > "$OUT/history-night$1.txt" 2>&1
python3 -m autotune show --study h200-nightly --studies-dir "$STUDIES" > "$OUT/show-night$1.txt" 2>&1
cp -r "$STUDIES" "$OUT/studies"
nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$OUT/gpu-night$1.txt"
ps aux | grep -c "[v]llm.entrypoints" | sed 's/^/vllm processes left: /' | tee -a "$OUT/gpu-night$1.txt"
tail -3 "$OUT/night$1.stdout"
