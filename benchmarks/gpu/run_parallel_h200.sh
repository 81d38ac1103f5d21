#!/usr/bin/env bash
# Issue 15 on the lent pair of H200s (nvidia-h200-x2): trials per wall-minute with 1 GPU and with 2,
# same workload, space and flags, one fresh study each (benchmarks/parallel_workers.py).
# Usage on the device, right after `bash .gpu/s/install.sh c1`:
#   bash .gpu/s/install.sh c2 && bash benchmarks/gpu/run_parallel_h200.sh 0      (1 GPU, <= 10 min)
#   bash benchmarks/gpu/run_parallel_h200.sh 0,1                                 (2 GPUs, the next call)
set -uo pipefail
source .gpu/s/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}
MIN=${MINUTES:-5}
mkdir -p "$OUT"
tag=gpus-${1//,/-}
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/$tag-before.txt"
python3 benchmarks/parallel_workers.py --gpus "$1" --minutes "$MIN" --speed 1 \
  --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b --space benchmarks/gpu/space_h200.yaml \
  --launcher "python3 -m vllm.entrypoints.cli.main serve" --engine-arg=--load-format=dummy \
  --engine-arg=--max-model-len=8192 --engine-arg=--enforce-eager --engine-arg=--gpu-memory-utilization=0.15 \
  --studies-dir "$OUT/studies-$tag" --json-out "$OUT/$tag.json" > "$OUT/$tag.stdout" 2> "$OUT/$tag.stderr"
echo "exit $?" | tee -a "$OUT/$tag-after.txt"
nvidia-smi --query-gpu=index,memory.used --format=csv | tee -a "$OUT/$tag-after.txt"
ps aux | grep -c "[v]llm.entrypoints" | sed 's/^/vllm processes left: /' | tee -a "$OUT/$tag-after.txt"
ls /tmp/autotune-gpu-leases 2>/dev/null | tee -a "$OUT/$tag-after.txt"
tail -8 "$OUT/$tag.stdout"; tail -5 "$OUT/$tag.stderr"
