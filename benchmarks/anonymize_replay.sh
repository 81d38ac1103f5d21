#!/usr/bin/env bash
# Issue 29: does an anonymized workload replay like the original on real vLLM (the CPU build)?
# Each workload and its anonymized copy are replayed once with the same command (vLLM's defaults, a
# 64 MiB KV pool of the 8-layer tiny model, block 32 (the CPU build's smallest), prefix caching on: `autotune run --n-trials 1`, the
# baseline only); the prefix hit rate is read from vLLM's own /metrics deltas as the trial records it.
# Writes benchmarks/results/issue29/anonymize_replay.json. About 6 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MODEL:-.models/tiny-l8}; D=$(mktemp -d /tmp/anon-replay.XXXXXX); OUT=benchmarks/results/issue29/anonymize_replay.json
[ -d "$M" ] || .venv/bin/autotune tiny-model --layers 8 "$M" >/dev/null
export AUTOTUNE_ANON_SALT=replay-check-salt
rows=()
for f in rag support_chat; do
  cp "examples/$f.jsonl" "$D/$f.jsonl"
  .venv/bin/autotune workload anonymize "$D/$f.jsonl" -o "$D/$f.anon.jsonl" --model "$M" --salt-env AUTOTUNE_ANON_SALT | tail -1
  for v in "$f" "$f.anon"; do
    .venv/bin/autotune run --workload "$D/$v.jsonl" --model "$M" --study "r-${v//./-}" --studies-dir "$D/studies" \
      --n-trials 1 --no-prior --confirm-rounds 0 --passes 1 --warmup 0 --speed 3 --no-check-args \
      --engine-arg=--enforce-eager --engine-arg=--max-model-len=2048 --engine-arg=--kv-cache-memory-bytes=64M \
      --engine-arg=--block-size=32 >"$D/$v.log" 2>&1 || { tail -5 "$D/$v.log"; exit 1; }
    rows+=("$(.venv/bin/python - "$D/studies" "r-${v//./-}" "$v" <<'PY'
import json, sys
import optuna
from autotune.study import read_record
studies, name, label = sys.argv[1:]
st = optuna.load_study(study_name=name, storage=f"sqlite:///{studies}/{name}.db")
rec = read_record(st.trials[0])
f = rec.figures
hit = rec.metrics.prefix_hit_rate if rec.metrics else None  # vLLM's own /metrics, over the replay
print(json.dumps({"workload": label, "status": rec.status.value, "prefix_hit_rate": hit,
                  "ttft_p50_ms": f.get("ttft_p50"), "completed": f.completed}))
PY
)")
  done
done
printf '%s\n' "${rows[@]}" | .venv/bin/python -c "import json,sys; rows=[json.loads(l) for l in sys.stdin]; json.dump({'command': 'bash benchmarks/anonymize_replay.sh', 'rows': rows}, open('$OUT','w'), indent=1); [print(r) for r in rows]"
rm -rf "$D"
