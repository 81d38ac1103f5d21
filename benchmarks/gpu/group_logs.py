"""What a group study's vLLM logs say, per engine start, small enough to bring back (issue 47).

    python3 benchmarks/gpu/group_logs.py STUDY_ROOT OUT

Writes under OUT:
- kv-lines.txt: per log, the free memory at start-up, non-torch memory, the KV memory and tokens vLLM
  sized, and the last prefix-cache hit rate it logged (the evidence of a starved pool);
- phases.json: per log, the start-up phases the tool reads (imports, weights, compile, graphs,
  kv_profile, init_engine, total; ``autotune.engine.VLLM.log.startup_phases``);
- logs.tar.gz: every log without its HTTP access lines (the rest is vLLM's own records), plus each
  run's per-request timings (``*.requests.npz``), the study's SQLite file and any summary/JSON.
"""

from __future__ import annotations

import io
import json
import re
import sys
import tarfile
from pathlib import Path

_KV = (
    ("free", re.compile(r"Free memory on device \(([\d.]+/[\d.]+ GiB)\) on startup")),
    ("non_torch", re.compile(r"([\d.\-]+) GiB for non-torch memory")),
    ("kv_gib", re.compile(r"Available KV cache memory: ([\d.\-]+) GiB")),
    ("kv_tokens", re.compile(r"GPU KV cache size: ([\d,]+) tokens")),
    ("error", re.compile(r"(No available memory for the cache blocks[^\n]*)")),
)
_HIT = re.compile(r"Prefix cache hit rate: ([\d.]+)%")
_ACCESS = re.compile(r'"(?:GET|POST) /')


def main(root: Path, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    logs = sorted(p for p in root.rglob("*.log") if p.is_file())
    kv_lines, phases = [], {}
    try:
        from autotune.engine import VLLM

        read_phases = VLLM.log.startup_phases
    except Exception as exc:
        print(f"no start-up phases: {exc}")
        read_phases = None
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for log in logs:
            text = log.read_text(errors="replace")
            rel = str(log.relative_to(root))
            found = {}
            for key, rx in _KV:
                m = rx.search(text)
                if m:
                    found[key] = m.group(1)
            hits = _HIT.findall(text)
            if hits:
                found["last_prefix_hit_pct"] = hits[-1]
            kv_lines.append(f"{rel}: " + "; ".join(f"{k} {v}" for k, v in found.items()))
            if read_phases is not None:
                try:
                    phases[rel] = read_phases(text)
                except Exception as exc:
                    phases[rel] = {"error": str(exc)}
            kept = "".join(line for line in text.splitlines(True) if not _ACCESS.search(line)).encode()
            info = tarfile.TarInfo(f"logs/{rel}")
            info.size = len(kept)
            tar.addfile(info, io.BytesIO(kept))
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if any("cache" in part for part in rel.parts[:-1]):
                continue  # the study's vLLM/Inductor/Triton caches
            if (
                p.is_file()
                and p.suffix in {".npz", ".db", ".json", ".yaml", ".txt", ".sh"}
                and p.stat().st_size < 4 << 20
            ):
                tar.add(p, arcname=f"study/{rel}")
    (out / "kv-lines.txt").write_text("\n".join(kv_lines) + "\n")
    (out / "phases.json").write_text(json.dumps(phases, indent=1))
    print("\n".join(kv_lines))
    for rel, ph in phases.items():
        print(f"{rel}: {ph}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
