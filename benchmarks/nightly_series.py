"""Four nights in a row, as cron would run them (issue 28's Done-when), recorded as JSON.

A prefix-heavy workload (examples/rag.jsonl: 4 shared documents, 48 requests, replayed at 3x) on
the demo's 8-layer model with a scarce KV pool (``--kv-cache-memory-bytes=20M``: 2,560 tokens for
a 2,048-token working set plus the requests in flight), a space that cannot buy more KV (the CPU
space without ``kv_cache_memory_bytes``), ``--budget 12m`` a night:

1. from scratch: should search at least 3 candidates and promote one that the promotion check
   confirmed better than the baseline;
2. nothing changed: should keep it, no alarm (exit 0);
3. a starved KV pool as a fixed flag (``--max-model-len=1024 --kv-cache-memory-bytes=8M``: 1,024
   tokens): should exit 3 naming ``environment.fixed_flags``;
4. the scarce pool again, and a workload with 3x the working set (each document in 3 versions, the
   same 48 requests): should name the workload change, re-tune and promote only a confirmed gain.

Each night's wall time (against 1.10x its budget), exit code, paragraph, plan, decision and trial
counts (the paragraph, ``autotune.nightly.history_lines``, nights.html and the study) go to
``benchmarks/results/issue28/series-<UTC time>.json``.

    python benchmarks/nightly_series.py                          # the real series: about 50 min
    python benchmarks/nightly_series.py --fake --budget 2m       # the fake server: checks the script
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import yaml

REPO = Path(__file__).resolve().parent.parent
FAKE = (sys.executable, str(REPO / "tests" / "fakes" / "fake_vllm.py"))
SCARCE = ("--enforce-eager", "--max-model-len=2048", "--kv-cache-memory-bytes=20M")
STARVED = ("--enforce-eager", "--max-model-len=1024", "--kv-cache-memory-bytes=8M")
RESULTS = REPO / "benchmarks" / "results" / "issue28"


def _space(path: Path) -> Path:
    """The CPU space less its KV-size knobs: the pool stays as the fixed flags set it."""
    doc = yaml.safe_load((REPO / "search_spaces" / "cpu.yaml").read_text())
    for name in ("kv_cache_memory_bytes", "gpu_memory_utilization"):
        doc["parameters"].pop(name, None)
    doc["name"] = "cpu-fixed-kv"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _triple_working_set(src: Path, dst: Path) -> Path:
    """The same requests, each document in 3 editions: edition k swaps the document's 2nd word with
    its (k+2)th (the same tokens, so the block boundaries stay; the first block differs, so no
    block is shared across editions): 3x the distinct prefix blocks."""
    with src.open() as f, dst.open("w") as out:
        for i, line in enumerate(f):
            req = json.loads(line)
            words, k = req["prompt"].split(" "), i % 3
            if k:
                words[1], words[k + 1] = words[k + 1], words[1]
            req["prompt"] = " ".join(words)
            req["id"] = f"{req.get('id', i)}-e{k}"
            out.write(json.dumps(req) + "\n")
    return dst


def _night_args(a: argparse.Namespace, work: Path, workload: Path, fixed: Sequence[str]) -> list[str]:
    args = [
        sys.executable, "-m", "autotune", "nightly", "--study", a.study, "--workload", str(workload),
        "--model", str(a.model), "--space", str(work / "space.yaml"), "--studies-dir", str(work / "studies"),
        "--budget", a.budget, "--speed", str(a.speed), "--objective", a.objective,
        "--out", str(work / "deployed.yaml"), *(f"--engine-arg={x}" for x in fixed),
    ]  # fmt: skip
    if a.fake:
        args += ["--launcher", " ".join(FAKE), "--no-check-args", "--no-check-memory"]
    return args


def _budget_s(text: str) -> float:
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    if not m or not any(m.groups()):
        raise SystemExit(f"--budget: cannot read {text!r} (fix: e.g. 12m or 90s)")
    return float(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def _counts(a: argparse.Namespace, work: Path, number: int, paragraph: str) -> dict[str, Any]:
    """Tonight's trial count as each place states it."""
    from autotune.nightly import history_lines

    url = f"sqlite:///{work / 'studies' / (a.study + '.db')}"
    st = optuna.load_study(study_name=a.study, storage=url)
    tagged = [t for t in st.get_trials(deepcopy=False) if t.user_attrs.get("night") == number]
    found = re.search(r"(\d+) trial\(s\) tonight", paragraph)
    history = history_lines(a.study, None, work / "studies")
    line = next((x for x in history if x.startswith(f"night {number} ")), "")
    in_history = re.search(r"(\d+) trial\(s\) tonight", line)
    index = work / "studies" / a.study / "nights.html"
    return {
        "study": sum(1 for t in tagged if t.state.is_finished()),
        "paragraph": int(found.group(1)) if found else None,
        "history": int(in_history.group(1)) if in_history else None,
        "nights_html": _index_trials(index, number) if index.exists() else None,
    }


def _index_trials(index: Path, number: int) -> int | None:
    """The trials cell of night ``number`` in nights.html (rows latest first); None when absent."""
    page = index.read_text()
    head = re.search(r"<thead>(.*?)</thead>", page, flags=re.S)
    body = re.search(r"<tbody>(.*?)</tbody>", page, flags=re.S)
    if not head or not body:
        return None
    cols = [re.sub(r"<.*?>", "", h).strip() for h in re.findall(r"<th.*?>(.*?)</th>", head.group(1))]
    rows = re.findall(r"<tr.*?>(.*?)</tr>", body.group(1), flags=re.S)
    if "trials" not in cols or len(rows) < number:
        return None
    cells = re.findall(r"<td.*?>(.*?)</td>", rows[len(rows) - number], flags=re.S)
    text = re.sub(r"<.*?>", "", cells[cols.index("trials")]).strip()
    return int(text) if text.isdigit() else None


def _run_night(a: argparse.Namespace, work: Path, number: int, workload: Path, fixed: Sequence[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if a.fake:
        env["FAKE_TTFT_SCALE"] = "5"
    t0 = time.monotonic()
    res = subprocess.run(
        _night_args(a, work, workload, fixed), env=env, capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - t0
    (work / f"night{number}.stderr.log").write_text(res.stderr)
    url = f"sqlite:///{work / 'studies' / (a.study + '.db')}"
    st = optuna.load_study(study_name=a.study, storage=url)
    record = st.user_attrs.get(f"night:{number:04d}") or {}
    paragraph = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    budget = _budget_s(a.budget)
    return {
        "night": number,
        "workload": str(workload),
        "fixed_flags": list(fixed),
        "exit_code": res.returncode,
        "wall_s": round(wall, 1),
        "budget_s": budget,
        "wall_over_budget": round(wall / budget, 3),
        "paragraph": paragraph,
        "plan": (record.get("plan") or {}).get("lines"),
        "decision": record.get("decision"),
        "reason": record.get("reason"),
        "regression": record.get("regression"),
        "changes": record.get("changes"),
        "workload_changes": record.get("workload_changes"),
        "noise_band": record.get("noise_band"),
        "band_source": record.get("band_source"),
        "candidates": record.get("candidates"),
        "counts": _counts(a, work, number, paragraph) if record else None,
        "stderr_tail": res.stderr[-1500:] if res.returncode not in (0, 3) else "",
    }


def _verdicts(nights: list[dict]) -> dict[str, bool]:
    n1, n2, n3, n4 = nights

    def agree(n: dict) -> bool:
        c = n.get("counts") or {}
        return len({v for v in c.values() if v is not None}) == 1 and c.get("paragraph") is not None

    searched = [c for c in n1.get("candidates") or [] if not c.get("baseline")]
    return {
        "night1_searched_3_candidates": len(searched) >= 3,
        "night1_promoted_confirmed": n1["decision"] == "promoted",
        "night2_kept_no_alarm": n2["exit_code"] == 0 and not n2["regression"],
        "night3_exit3_names_fixed_flags": n3["exit_code"] == 3
        and "environment.fixed_flags" in n3["paragraph"],
        "night4_names_workload_change": bool(n4.get("workload_changes")),
        "night4_promotes_only_confirmed": n4["decision"] != "promoted"
        or "ranges do not overlap" in n4["reason"],
        "wall_within_1.10x": all(n["wall_over_budget"] <= 1.10 for n in nights),
        "counts_agree": all(agree(n) for n in nights),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", default="12m", help="each night's --budget (minutes 'm' or seconds 's')")
    p.add_argument(
        "--model", type=Path, default=REPO / ".models" / "tiny-l8", help="`autotune tiny-model --layers 8`"
    )
    p.add_argument("--speed", type=float, default=3.0)
    p.add_argument("--objective", default="ttft_p90")
    p.add_argument("--study", default="series")
    p.add_argument("--work", type=Path, default=None, help="folder for the studies (default: a new one)")
    p.add_argument("--fake", action="store_true", help="the fake server instead of vLLM (checks the script)")
    p.add_argument(
        "--out", type=Path, default=None, help="JSON file (default: results/issue28/series-*.json)"
    )
    a = p.parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    work = a.work or REPO / "studies" / f"nightly-series-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    if a.fake:
        a.model = work / "fake-model"
        a.model.mkdir(exist_ok=True)
        cfg = REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json"
        (a.model / "config.json").write_text(cfg.read_text())
    elif not (a.model / "config.json").exists():
        raise SystemExit(f"--model: no model at {a.model} (fix: autotune tiny-model --layers 8 {a.model})")
    _space(work / "space.yaml")
    rag = REPO / "examples" / "rag.jsonl"
    wide = _triple_working_set(rag, work / "rag-3x-working-set.jsonl")
    nights = []
    for number, (wl, fixed) in enumerate([(rag, SCARCE), (rag, SCARCE), (rag, STARVED), (wide, SCARCE)], 1):
        nights.append(_run_night(a, work, number, wl, fixed))
        n = nights[-1]
        print(
            f"night {number}: exit {n['exit_code']}, {n['wall_s'] / 60:.1f} min, {n['decision']}: {n['reason']}"
        )
    result = {
        "date": stamp,
        "command": " ".join([sys.executable, *sys.argv]),
        "fake": a.fake,
        "budget": a.budget,
        "work": str(work),
        "nights": nights,
        "verdicts": _verdicts(nights),
    }
    out = a.out or RESULTS / f"series-{stamp}{'-fake' if a.fake else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result["verdicts"], indent=2))
    print(f"wrote {out}")
    return 0 if all(result["verdicts"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
