"""vllm-autotune: tune a vLLM server on your own workload.

The package is laid out as the pipeline data flows through:
``workload`` (requests from a file) -> ``bench`` (replay over HTTP, timings, /metrics)
-> ``study`` (Optuna: suggest, constrain, persist) -> ``engine`` (launch, wait, stop vLLM)
-> ``export`` (best-config YAML).
"""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.1.0"
