"""Per run of a group study: each model's p50/p90 TTFT and p50 TPOT from its per-request timings
(``NAME-trial-NNNN.requests.npz`` or the study's own ``NAME/trial-NNNN.requests.npz``), and the KV tokens its engine sized (kv-lines.txt), as a
markdown table (issue 47 item 1; the same figures as issue 40 item 3's table).

    python3 benchmarks/gpu/group_table.py REQUESTS_DIR [KV_LINES] [--labels "trial 0,trial 1,..."]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

_FILE = re.compile(r"^(?:(?P<model>[A-Za-z0-9_-]+)-)?trial-(?P<n>\d{4})\.requests\.npz$")
_KV = re.compile(r"(?P<model>[A-Za-z0-9_-]+)/trial-(?P<n>\d{4})\.log: .*?kv_tokens (?P<tok>[\d,]+)")
_HIT = re.compile(
    r"(?P<model>[A-Za-z0-9_-]+)/trial-(?P<n>\d{4})\.log: .*?last_prefix_hit_pct (?P<hit>[\d.]+)"
)


def figures(path: Path) -> dict[str, float]:
    z = np.load(path)
    ok = z["ok"].astype(bool)
    ttft = z["ttft"][ok] * 1000
    tpot = z["tpot"][ok] * 1000
    return {
        "n": int(ok.sum()),
        "of": len(ok),
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p90": float(np.percentile(ttft, 90)),
        "tpot_p50": float(np.percentile(tpot, 50)),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("requests")
    ap.add_argument("kv", nargs="?")
    ap.add_argument("--labels", default="")
    a = ap.parse_args()
    runs: dict[int, dict[str, dict[str, float]]] = {}
    models: list[str] = []
    for p in sorted(Path(a.requests).rglob("*.requests.npz")):
        m = _FILE.match(p.name)
        if not m:
            continue
        name = m["model"] or p.parent.name  # NAME-trial-NNNN.requests.npz, or the study's NAME/trial-NNNN...
        if name not in models:
            models.append(name)
        runs.setdefault(int(m["n"]), {})[name] = figures(p)
    kv: dict[tuple[str, int], str] = {}
    hit: dict[tuple[str, int], str] = {}
    if a.kv:
        text = Path(a.kv).read_text()
        for m in _KV.finditer(text):
            kv[(m["model"], int(m["n"]))] = m["tok"]
        for m in _HIT.finditer(text):
            hit[(m["model"], int(m["n"]))] = m["hit"]
    labels = [s.strip() for s in a.labels.split(",")] if a.labels else []
    head = ["run"]
    for name in models:
        head += [f"{name} TTFT p50 / p90 ms", f"{name} TPOT p50 ms", f"{name} KV tokens (last hit %)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n in sorted(runs):
        label = labels[n] if n < len(labels) and labels[n] else f"trial {n}"
        row = [label]
        for name in models:
            f = runs[n].get(name)
            if f is None:
                row += ["-", "-", "-"]
                continue
            served = "" if f["n"] == f["of"] else f" ({f['n']}/{f['of']} ok)"
            row += [
                f"{f['ttft_p50']:,.1f} / {f['ttft_p90']:,.1f}{served}",
                f"{f['tpot_p50']:.1f}",
                f"{kv.get((name, n), '?')} ({hit.get((name, n), '?')})",
            ]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
