set -e
cd /work/main
M=/tmp/tiny29; D=/tmp/anon29; rm -rf $D; mkdir -p $D
export AUTOTUNE_ANON_SALT=nightly-secret
A=".venv/bin/autotune workload"
$A synth chat -o $D/chat.jsonl --sessions 12 --turns 5 --documents 3 --model $M >/dev/null
$A synth rag -o $D/rag.jsonl --documents 4 --questions-per-document 10 --model $M >/dev/null
$A import sharegpt tests/data/workloads/sharegpt_small.json -o $D/sharegpt.jsonl --model $M >/dev/null
$A import openai-log tests/data/workloads/openai_requests.jsonl -o $D/openai.jsonl >/dev/null
cp examples/support_chat.jsonl examples/rag.jsonl $D/
for f in chat rag sharegpt openai support_chat; do
  $A anonymize $D/$f.jsonl -o $D/$f.anon.jsonl --model $M | tail -1
  for bs in 16 128; do
    for v in $f $f.anon; do
      $A inspect $D/$v.jsonl --model $M --block-size $bs --json | python3 -c "import json,sys; r=json.load(sys.stdin); print('$v bs=$bs', 'prompt_tokens', r['prompt_tokens']['total'], 'reuse %.4f'%r['prefix_reuse'], 'hit', r['prefix_hit_tokens'], 'working_set', r['working_set_tokens'])"
    done
  done
done
