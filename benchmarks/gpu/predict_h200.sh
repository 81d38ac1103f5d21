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
# STEP=study (a second call, about 560 s): the same setting as a study of the long space
# (space_h200_long.yaml, objective p90 TTFT) with `--predict` (the model's picks after the baseline, its
# veto and audit, the ledger) for N_WITH trials (default 4), then, when time is left, the same study
# without it (--no-predict, the prior's candidates and TPE) for N_WITHOUT trials (default 4): each
# run's trial lines, its ledger and the engine starts each took (`autotune show`).
#
# On this machine first: ../shared/gpu/prepare.sh && bash benchmarks/gpu/prepare_pins.sh
# Install as capacity_h200.sh says (calls 1-3), then one call each (about 450 and 560 s):
#   bash benchmarks/gpu/predict_h200.sh            # the grid (predict_grid.py)
#   STEP=study bash benchmarks/gpu/predict_h200.sh  # a study with --predict, then without
set -uo pipefail
source .gpu/s/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
SHARE=${SHARE:-$(python3 -c "print(round(0.15 * 143771 / $TOTAL, 4))")}
echo "share $SHARE: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader)" | tee "$OUT/gpu-predict.txt"
if [ "${STEP:-grid}" = study ]; then
  R=${R:-/root/pstudy}
  L="python3 -m vllm.entrypoints.cli.main serve"
  for arm in with without; do
    n=$([ $arm = with ] && echo "${N_WITH:-4}" || echo "${N_WITHOUT:-4}")
    flag=$([ $arm = with ] && echo --predict || echo --no-predict)
    t0=$(date +%s)
    timeout -s INT "${T:-270}" python3 -m autotune run --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b \
      --space benchmarks/gpu/space_h200_long.yaml --launcher "$L" --engine-arg=--load-format=dummy \
      --engine-arg=--max-model-len=8192 --engine-arg=--gpu-memory-utilization=$SHARE --profile cuda-native \
      --objective ttft_p90 --n-trials "$n" --confirm-rounds 0 --startup-timeout 400 $flag \
      --study "$arm" --studies-dir "$R" --out "$OUT/$arm.yaml" > "$OUT/study-$arm.stdout" 2> "$OUT/study-$arm.stderr"
    echo "study $arm: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-predict.txt"
    python3 -m autotune show --study "$arm" --studies-dir "$R" > "$OUT/show-$arm.txt" 2>&1
    grep -E "^  trial #|^ledger|^veto|^audit" "$OUT/study-$arm.stderr"
  done
  echo "GPU after: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader)" | tee -a "$OUT/gpu-predict.txt"
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints.openai|vllm.entrypoints.cli' || true)" | tee -a "$OUT/gpu-predict.txt"
  exit 0
fi
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
