#!/usr/bin/env bash
# Issue 48's H200 script, run under issue 47 (item 3): the calibrated latency model's predictions
# against measured configurations on the lent GPU, vLLM 0.26.0 GPU build from ../shared/gpu, the
# 8B-shaped dummy Llama at /root/m8b, the long shared-document workload (rag_long.jsonl) at the share
# of 0.15 of an H200's memory (scaled on another card, as capacity_h200.sh does), the grid
# space_h200_predict.yaml (max_num_batched_tokens 2048/8192 x host pool 0/16 GiB): the baseline (vLLM's
# defaults) measured first, the model fitted on it predicting the rest before each is measured, then
# refitted. Reports per configuration the measured and predicted p90 TTFT, the interval, the ledger
# (mean absolute error, coverage) and the calibration file.
#
# Not yet: the starts a study saves with the model on (the veto is not in the study loop yet).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Install as capacity_h200.sh says (calls 1-3), then in one call (about 450 s):
#   bash benchmarks/gpu/predict_h200.sh
set -uo pipefail
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
SHARE=${SHARE:-$(python3 -c "print(round(0.15 * 143771 / $TOTAL, 4))")}
echo "share $SHARE: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader)" | tee "$OUT/gpu-predict.txt"
t0=$(date +%s)
timeout -s INT "${T:-540}" python3 benchmarks/predict_grid.py -v --model /root/m8b \
  --workload benchmarks/gpu/rag_long.jsonl --space benchmarks/gpu/space_h200_predict.yaml \
  --baseline '{"max_num_batched_tokens": 8192, "cpu_swap_space_gb": 0}' --profile cuda-native \
  --launcher "python3 -m vllm.entrypoints.cli.main serve" --engine-arg=--load-format=dummy \
  --engine-arg=--max-model-len=8192 --engine-arg=--gpu-memory-utilization=$SHARE --baseline-arg none \
  --engine-defaults 1024,8192 --startup-timeout 400 --work-dir /root/predict \
  --json-out "$OUT/predict_h200.json" > "$OUT/predict.stdout" 2> "$OUT/predict.stderr"
echo "predict: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-predict.txt"
echo "GPU after: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader)" | tee -a "$OUT/gpu-predict.txt"
echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints.openai|vllm.entrypoints.cli' || true)" | tee -a "$OUT/gpu-predict.txt"
cat "$OUT/predict.stdout"; tail -20 "$OUT/predict.stderr"
