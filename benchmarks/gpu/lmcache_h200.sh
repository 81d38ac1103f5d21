#!/usr/bin/env bash
# Issue 19 on the lent H200s: LMCache's CPU tier (--profile cuda-lmcache) on the long scarce-KV
# workload of round two, then the three-way re-measurement (defaults, best LMCache, best native).
# LMCache 0.5.3 is the release whose compiled ops load with the machine's torch 2.11
# (benchmarks/gpu/results/round2/lmcache_check.txt: 0.5.4-0.5.6's cuda_ops need a newer torch and
# LMCache then falls back to its pure-torch ops). Its wheels travel in .whl/ (see lmcache_check.sh:
# .whl/alt/ holds 0.5.3), too large to travel with .gpu/c2, hence a call of their own.
#
#   here, once:               bash benchmarks/gpu/lmcache_h200.sh prepare   (the wheels into .whl/, ~21 MB)
#   call 1 (.gpu/c1 .gpu/s):  bash .gpu/s/install.sh c1
#   call 2 (.gpu/c2 .gpu/s):  bash .gpu/s/install.sh c2
#   call 3 (.gpu/s .whl):     bash benchmarks/gpu/lmcache_h200.sh A     (install LMCache; the study)
#   call 4 (.gpu/s):          bash benchmarks/gpu/lmcache_h200.sh B     (the re-measurements)
# A: GPU 0, `autotune run --profile cuda-lmcache` over benchmarks/gpu/space_h200_lmcache.yaml
#    (pool 0/16/32 GB per rank x chunk 256/512), 360 s of trial starts. Each trial records LMCache's
#    own lookup lines (requests, tokens held, tokens loaded) next to vLLM's prefix hits.
# B: GPU 0: the LMCache best against the defaults; GPU 1 (nvidia-h200-x2): the LMCache best against
#    round two's native best (benchmarks/gpu/results/round2/long-best.yaml); 2 rounds each, alternating.
#    On one GPU the second comparison runs after the first.
set -uo pipefail
PHASE=${1:?usage: lmcache_h200.sh prepare|A|B}
if [ "$PHASE" = prepare ]; then  # on this machine: LMCache 0.5.3 and what vLLM's connector imports of
  # its dependencies that the GPU machine lacks (/work/.library/device/KINDS.md's package list)
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  mkdir -p .whl/alt
  get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 -d "$@"; }
  get .whl/alt lmcache==0.5.3
  get .whl aiofile==3.12.3 caio==0.12.10 cryptography==50.0.2 cffi==2.1.1 nvtx==0.2.17
  ls -la .whl .whl/alt; exit 0
fi
T0=$(date +%s)
BUDGET=${BUDGET:-560}
source .gpu/s/env.sh
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
R=/root/lmc
mkdir -p "$OUT" "$R" /root/r2-cache
L="python3 -m vllm.entrypoints.cli.main serve"
LONG=(--workload benchmarks/gpu/rag_long.jsonl --model /root/m8b --launcher "$L" --engine-arg=--load-format=dummy
      --engine-arg=--max-model-len=8192 --engine-arg=--gpu-memory-utilization=0.15 --compile-cache /root/r2-cache)
left() { echo $((T0 + BUDGET - $(date +%s))); }
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "phase $PHASE at $(date -u +%FT%TZ); $ngpu GPU(s)" | tee "$R/phase-$PHASE.txt"
case "$PHASE" in
  A)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/alt/lmcache-0.5.3-*.whl $(ls .whl/*.whl | grep -v '/lmcache-') 2>&1 | tail -3
    python3 -c "import torch, lmcache, lmcache.c_ops; print('lmcache', lmcache.__version__, 'c_ops ok, torch', torch.__version__)" \
      2>&1 | tail -1 | tee -a "$R/phase-A.txt"
    timeout -s INT $(( $(left) - 5 )) python3 -m autotune run "${LONG[@]}" --profile cuda-lmcache \
      --space benchmarks/gpu/space_h200_lmcache.yaml --gpus 0 --study lmcache --studies-dir "$R" --n-trials 20 \
      --timeout 360 --passes 1 --confirm-rounds 0 --out "$R/lmcache-best.yaml" > "$R/A-study.txt" 2>&1
    echo "exit $?" >> "$R/A-study.txt"
    ;;
  B)
    cp benchmarks/gpu/results/round2/long-best.yaml "$R/native-best.yaml"
    vs_native() {
      timeout -s INT $(( $(left) - 5 )) python3 -m autotune compare "${LONG[@]}" --profile cuda-lmcache --gpus "$1" \
        --baseline-config "$R/native-best.yaml" --config "$R/lmcache-best.yaml" --rounds 2 --passes 1 \
        --log-dir "$R/vs-native" --json-out "$R/vs-native.json" > "$R/B-vs-native.txt" 2>&1
      echo "exit $?" >> "$R/B-vs-native.txt"
    }
    (timeout -s INT $(( $(left) - 5 )) python3 -m autotune compare "${LONG[@]}" --profile cuda-lmcache --gpus 0 \
       --config "$R/lmcache-best.yaml" --rounds 2 --passes 1 --log-dir "$R/vs-defaults" \
       --json-out "$R/vs-defaults.json" > "$R/B-vs-defaults.txt" 2>&1; echo "exit $?" >> "$R/B-vs-defaults.txt"
     [ "$ngpu" -gt 1 ] || vs_native 0) &
    if [ "$ngpu" -gt 1 ]; then vs_native 1 & fi
    wait
    ;;
  *) echo "usage: lmcache_h200.sh A|B"; exit 2 ;;
esac
{
  echo "--- after $(( $(date +%s) - T0 )) s"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  echo "vllm processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
  for f in "$R"/"$PHASE"-*.txt; do echo "=== $f"; tail -45 "$f"; done
} 2>&1 | tee -a "$R/phase-$PHASE.txt"
cp "$R/phase-$PHASE.txt" "$OUT/"
tar -czf "$OUT/lmcache-$PHASE.tar.gz" -C /root lmc 2>/dev/null
ls -la "$OUT"
