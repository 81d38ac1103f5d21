#!/bin/sh
# The group as vllm-autotune measured it (trial 0): one vLLM per model, each its
# own port; Ctrl-C or SIGTERM stops them all.
# study 'grp', group trial 1, group objective 0.585
# trial 1 not confirmed (group objective 1.244 on the medians (rag 1.225, chat 1.244): -24.4% better, within the 3% noise floor, not ahead in every round; worse beyond the noise: rag 1.23x, chat 1.24x: not confirmed); the baseline group is exported
set -eu
cd "$(dirname "$0")"
trap 'kill 0' INT TERM
# engines that share a GPU start one at a time: vLLM sizes its KV cache from the memory it sees
# used while it profiles, and an engine loading beside it would be counted against it
up() {  # PORT PID NAME
  until /opt/torch/.venv/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$1/health" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || { echo "launch.sh: $3 exited before it was healthy" >&2; kill 0; exit 1; }
    sleep 2
  done
}
/opt/torch/.venv/bin/python3 -m vllm.entrypoints.openai.api_server --config rag.yaml --port 8000 &  # rag
up 8000 $! rag
/opt/torch/.venv/bin/python3 -m vllm.entrypoints.openai.api_server --config chat.yaml --port 8001 &  # chat
wait
