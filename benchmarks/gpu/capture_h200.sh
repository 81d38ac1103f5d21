#!/bin/bash
# Issue 29: TTFT added by `autotune capture` in front of real GPU vLLM 0.26.0 on the H200 (the kit's
# 8B-shaped Llama, dummy weights), against direct requests, at 100 and 200 req/s (raw records) and
# 100 req/s (anonymized with the model's tokenizer). Device side, after the kit's install.sh c2:
#   source .gpu/s/env.sh && bash benchmarks/gpu/capture_h200.sh
# Writes $OUT/capture_h200_{raw,anon}.json (benchmarks/capture_overhead.py's JSON) and the logs.
set -u
OUT=${OUT:-/tmp/capture-h200}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import aiohttp, uvicorn, httptools, uvloop; print('aiohttp', aiohttp.__version__, 'uvicorn', uvicorn.__version__, 'uvloop', uvloop.__version__)" | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
lscpu > "$OUT/lscpu.txt" 2>&1
setsid python3 -m vllm.entrypoints.cli.main serve /root/m8b --load-format dummy --host 127.0.0.1 --port 8000 \
  --max-model-len 4096 --gpu-memory-utilization 0.85 > "$OUT/vllm.log" 2>&1 &
VPID=$!
stop() { kill -TERM -- -$VPID 2>/dev/null; for _ in $(seq 30); do kill -0 $VPID 2>/dev/null || return; sleep 1; done; kill -KILL -- -$VPID 2>/dev/null; }
trap stop EXIT
python3 - <<'EOF' || exit 1
import time, httpx
t0 = time.monotonic()
while time.monotonic() - t0 < 300:
    try:
        if httpx.get("http://127.0.0.1:8000/health", timeout=2).status_code == 200:
            print(f"vLLM healthy after {time.monotonic() - t0:.0f} s"); raise SystemExit(0)
    except httpx.HTTPError:
        pass
    time.sleep(1)
raise SystemExit("vLLM not healthy after 300 s")
EOF
python3 benchmarks/capture_overhead.py --upstream http://127.0.0.1:8000 --model-dir /root/m8b --raw \
  --rate 100 200 --duration 60 --json "$OUT/capture_h200_raw.json" > "$OUT/raw.log" 2>&1
echo "raw: exit $?"; grep -E '"added_p(50|99)_ms"|"sent_rate"' "$OUT/raw.log"
python3 benchmarks/capture_overhead.py --upstream http://127.0.0.1:8000 --model-dir /root/m8b \
  --rate 100 --duration 60 --json "$OUT/capture_h200_anon.json" > "$OUT/anon.log" 2>&1
echo "anonymized: exit $?"; grep -E '"added_p(50|99)_ms"|"sent_rate"|records_written' "$OUT/anon.log"
