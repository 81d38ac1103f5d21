"""Kill storm (issue 17): kill ``autotune run`` and its engine at random moments; nothing may stay.

Each kill runs the real CLI (``python -m autotune run ...``, a one-trial study in a fresh studies
directory) under a marker in its environment (``AUTOTUNE_TEST_MARK``, as the tests do), waits for a
random moment (seeded) of the engine's start-up or of the measurement, and delivers one kind of kill:

  tool-SIGINT, tool-SIGTERM, tool-SIGKILL   to the ``autotune`` process (Ctrl-C, kill, kill -9)
  guardian-SIGKILL                          to the guardian that leads the engine's process group
  engine-SIGKILL                            to the engine: the API server the guardian started

"start-up" is a moment before the engine answers ``/health`` (within 90% of the start-ups seen),
"measurement" one after (warm-up and replay); the phase actually hit is recorded. Then, polling
every 0.1 s: the seconds until no marked process remains (the tool, the guardian, the engine and
what they started, found as tests/conftest.py finds them, and every descendant of the tool seen),
given up at 60 s; the orphans alive then (killed and counted; must be 0); and the ``/dev/shm`` files created since that run started that still exist
once everything is gone (name+inode snapshots) and are the run's: one of its processes was seen
holding the file (open or mapped), or it is named after one (must be 0 bytes; removed once
counted). New files nobody of the run was seen holding are listed as "unattributed", not counted:
on a shared machine other engines come and go in /dev/shm meanwhile. Killing the guardian or the
engine leaves the tool running: its trial fails, the study ends; "everything gone" includes it.

Engines: ``fake`` is tests/fakes/fake_vllm.py with FAKE_SPAWN_CHILD=1 (a child that would outlive
a naive kill), FAKE_START_DELAY=2 (a start-up to hit) and FAKE_SHM_PREFIX (it leaves a 64 KiB
``/dev/shm/psm_killstorm_<pid>``, as torch's segments are left when killed), 40 requests over
4 s; ``vllm`` is the CPU build on the tool's tiny model (``autotune tiny-model``),
examples/rag.jsonl at ``--speed 3``.

    python benchmarks/kill_storm.py                          # 24 kills on the fake server, seed 17
    python benchmarks/kill_storm.py --engine vllm --kills 6  # real vLLM CPU: ~1 min per kill
    python benchmarks/kill_storm.py --quick                  # 5 kills on the fake, about a minute

Then each run is resumed (the same command again): no trial may be left RUNNING, and the study must
hold exactly one measured baseline.

Exit status 1 when any orphan, any of the runs' shared-memory residue, a RUNNING trial after the resume,
or a study with no baseline or two was found.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as c
import httpx
import psutil

sys.path.insert(0, str(c.REPO))
from tests.conftest import MARK_ENV, processes_marked  # one home for "our processes"

KINDS = ("tool-SIGINT", "tool-SIGTERM", "tool-SIGKILL", "guardian-SIGKILL", "engine-SIGKILL")
PHASES = ("start-up", "measurement")
POLL_S = 0.1
GIVE_UP_S = 60.0
MAPS_EVERY = 10  # polls between scans of /proc/PID/maps (costly for vLLM); fds are read every poll
SHM = Path("/dev/shm")
FAKE_VLLM = c.REPO / "tests" / "fakes" / "fake_vllm.py"
COLUMNS = (
    "#", "kill", "phase", "moment s", "processes at kill", "shm files at kill", "tool exit",
    "engine gone s", "all gone s", "orphans", "shm left files / bytes",
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    """What ``autotune run`` is pointed at, and the windows random moments are drawn from."""

    args: tuple[str, ...]  # after ``python -m autotune``, without --studies-dir
    env: tuple[tuple[str, str], ...]
    startup_s: float  # first guess of the engine's start-up; replaced by what is seen
    measure_s: float  # measurement moments fall within this many seconds after /health answers
    appear_s: float  # how long the engine may take to appear at all


def fake_target(work: Path) -> Target:
    model = work / "fake-model"
    model.mkdir(parents=True, exist_ok=True)
    config = c.REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json"
    (model / "config.json").write_text(config.read_text())
    wl = work / "fake-40x0.1s.jsonl"
    lines = [{"prompt": f"q{i} " + "word " * 30, "max_tokens": 50, "timestamp": i * 0.1} for i in range(40)]
    wl.write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = (
        "run", "--workload", str(wl), "--model", str(model), "--launcher", f"{sys.executable} {FAKE_VLLM}",
        "--no-check-args", "--no-check-memory", "--confirm-rounds", "0", "--n-trials", "1",
    )  # fmt: skip
    env = (("FAKE_SPAWN_CHILD", "1"), ("FAKE_START_DELAY", "2"), ("FAKE_SHM_PREFIX", "psm_killstorm_"))
    return Target(args, env, 2.0, 3.0, 120.0)


def vllm_target(models_dir: Path) -> Target:
    model = models_dir / "tiny"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, "-m", "autotune", "tiny-model", str(model)], check=True, cwd=c.REPO)
    args = (
        "run", "--workload", str(c.EXAMPLES / "rag.jsonl"), "--model", str(model), "--speed", "3",
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
        "--engine-arg=--kv-cache-memory-bytes=64M", "--confirm-rounds", "0", "--no-check-args",
        "--n-trials", "1",
    )  # fmt: skip
    return Target(args, (), 40.0, 5.0, 300.0)


def schedule(n: int, seed: int) -> list[tuple[str, str, float]]:
    """(kind, phase, fraction of the window) for each kill: kinds and phases as evenly spread as
    ``n`` allows, in a seeded random order; the moment within the window is uniform."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(n)]
    phases = [PHASES[i % len(PHASES)] for i in range(n)]
    rng.shuffle(kinds)
    rng.shuffle(phases)
    return [(k, p, rng.random()) for k, p in zip(kinds, phases, strict=True)]


# -- what a run leaves ----------------------------------------------------------------------------
def shm_entries() -> dict[tuple[str, int], int]:
    """(name, inode) -> size in bytes of every regular file in /dev/shm (what an engine leaves:
    shared-memory segments and semaphores; other programs' directories there are not counted)."""
    found = {}
    with contextlib.suppress(OSError), os.scandir(SHM) as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.is_file(follow_symlinks=False):
                    found[(e.name, e.inode())] = e.stat(follow_symlinks=False).st_size
    return found


def held_shm(pids: Iterable[int], *, maps: bool) -> set[int]:
    """Inodes of the /dev/shm files these processes hold open (and, with ``maps``, map). By inode:
    glibc's ``sem_open`` maps a temporary name, links it to ``sem.mp-*`` and unlinks the temporary,
    so /proc shows ``sem.XXXXXX (deleted)`` for a semaphore that lives on as ``sem.mp-*``."""
    held = set()
    prefix = f"{SHM}/"
    for pid in pids:
        base = f"/proc/{pid}"
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{base}/fd/{fd}").startswith(prefix):
                        held.add(os.stat(f"{base}/fd/{fd}").st_ino)
        if maps:
            with contextlib.suppress(OSError), open(f"{base}/maps") as fh:
                for line in fh:
                    if prefix in line:
                        f = line.split(maxsplit=5)
                        if len(f) == 6:
                            held.add(int(f[4]))
    return held


class Watch:
    """The processes of one run: every one marked, and every descendant of the tool seen; the
    /dev/shm files they were seen holding."""

    def __init__(self, tool: subprocess.Popen[bytes], mark: str):
        self.tool, self.mark = tool, mark
        self.seen: dict[int, float] = {}  # pid -> create_time (a pid may be reused)
        self.shm_held: set[int] = set()  # inodes
        self._polls = 0
        self._guards: dict[str, int] | None = {}  # pid-named files held open until the kill

    def poll(self) -> list[psutil.Process]:
        """Record new processes and what they hold; return those alive (zombies count as gone)."""
        found = list(processes_marked(self.mark))
        if self.tool.poll() is None:  # poll() also reaps the tool once it exits
            with contextlib.suppress(psutil.Error):
                found += psutil.Process(self.tool.pid).children(recursive=True)
        for p in found:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(p.pid, p.create_time())
        alive = self.alive()
        self.shm_held |= held_shm([p.pid for p in alive], maps=self._polls % MAPS_EVERY == 0)
        self._polls += 1
        for name, _ in shm_entries() if self._guards is not None else ():
            if name not in self._guards and _named_after(name, set(self.seen)):
                with contextlib.suppress(OSError):
                    self._guards[name] = os.open(SHM / name, os.O_RDONLY)
        return alive

    def release(self) -> None:
        """Let go of the pid-named files. Another autotune on the machine removes new psm_* files
        nobody holds; vLLM holds its segments until it dies, the fake never holds its file: held
        by us until the kill, the fake's file is exposed as vLLM's are, from the kill on."""
        for fd in (self._guards or {}).values():
            os.close(fd)
        self._guards = None

    def alive(self) -> list[psutil.Process]:
        out = []
        for pid, created in self.seen.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
        return out

    def engine(self) -> tuple[psutil.Process | None, psutil.Process | None]:
        """(guardian, engine): the guardian of this run and the server it started, if alive."""
        for p in self.alive():
            with contextlib.suppress(psutil.Error):
                if any("_guardian.py" in a for a in p.cmdline()[:3]):
                    kids = p.children()
                    return p, (kids[0] if kids else None)
        return None, None


def _port(engine: psutil.Process) -> int | None:
    with contextlib.suppress(psutil.Error, ValueError, IndexError):
        argv = engine.cmdline()
        return int(argv[argv.index("--port") + 1])
    return None


def _healthy(client: httpx.Client, port: int | None) -> bool:
    if port is None:
        return False
    try:
        return client.get(f"http://127.0.0.1:{port}/health").status_code == 200
    except httpx.HTTPError:
        return False


# -- one kill -------------------------------------------------------------------------------------
def run_one(
    target: Target, kind: str, phase: str, frac: float, run_dir: Path, startup_s: float
) -> dict[str, Any]:
    """Start ``autotune run``, kill at the drawn moment, measure what is left."""
    run_dir.mkdir(parents=True, exist_ok=True)
    mark = uuid.uuid4().hex
    env = {**os.environ, **dict(target.env), MARK_ENV: mark, "PYTHONPATH": str(c.REPO)}
    argv = [sys.executable, "-m", "autotune", *target.args, "--studies-dir", str(run_dir / "studies")]
    shm_before = shm_entries()
    log = (run_dir / "autotune.log").open("wb")
    tool = subprocess.Popen(argv, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    watch = Watch(tool, mark)
    row: dict[str, Any] = {"kind": kind, "drawn_phase": phase, "fraction": frac}
    try:
        with httpx.Client(trust_env=False, timeout=0.5) as client:
            victim = _wait_and_pick(watch, client, target, startup_s, row)
            watch.release()
            if victim is not None:
                try:
                    os.kill(victim, getattr(signal, kind.split("-")[1]))
                    row["delivered"] = True
                except ProcessLookupError:
                    row["missed"] = "the process to kill had just exited"
                row.update(_measure_after(watch, time.monotonic()))
    finally:
        watch.release()
        row["left_unmeasured"] = len(watch.alive())  # a missed kill, or the storm interrupted
        for p in watch.alive():
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            tool.wait(timeout=10)
        log.close()
    row["tool_exit"] = tool.returncode
    tail = (run_dir / "autotune.log").read_text(errors="replace").strip().splitlines()
    row["tool_last_line"] = tail[-1][:160] if tail else ""
    row.update(_shm_left(shm_before, watch.shm_held, set(watch.seen)))
    row.update(_resume(argv, env, run_dir))
    return row


def _resume(argv: list[str], env: dict[str, str], run_dir: Path) -> dict[str, Any]:
    """The same command again, as a user resumes after the kill: then no trial may be left RUNNING and
    the study holds one measured baseline (issue 30: no baseline or two after a kill during it)."""
    import optuna

    from autotune.study import read_record

    with (run_dir / "resume.log").open("wb") as log:
        rc = subprocess.run(
            argv, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900
        ).returncode
    dbs = list((run_dir / "studies").glob("*.db"))
    if not dbs:
        return {"resume_exit": rc, "running_after_resume": None, "baselines": None}
    url = f"sqlite:///{dbs[0]}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = optuna.get_all_study_names(url)[0]
    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    running = sum(t.state.name == "RUNNING" for t in trials)
    records = [read_record(t) for t in trials if t.state.name == "COMPLETE"]
    # a measured baseline (a failed one, e.g. the engine killed under it, is recorded as data, not measured)
    baselines = sum(r.baseline and r.ok and r.duplicate_of is None for r in records)
    return {"resume_exit": rc, "running_after_resume": running, "baselines": baselines}


def _wait_and_pick(
    watch: Watch, client: httpx.Client, target: Target, startup_s: float, row: dict[str, Any]
) -> int | None:
    """Wait for the moment drawn in ``row``; return the pid to kill (None: a missed kill)."""
    kind, phase, frac = row["kind"], row["drawn_phase"], row["fraction"]
    t_start = time.monotonic()
    guardian = engine = None
    while engine is None:
        if watch.tool.poll() is not None or time.monotonic() - t_start > target.appear_s:
            row["missed"] = "the engine never appeared"
            return None
        watch.poll()
        guardian, engine = watch.engine()
        time.sleep(POLL_S)
    t_engine = time.monotonic()
    port = _port(engine)
    with contextlib.suppress(psutil.Error):
        row["engine_cmd"] = " ".join(engine.cmdline()[:6])
    t_healthy = None
    kill_at = t_engine + frac * 0.9 * startup_s if phase == "start-up" else None
    while True:
        now = time.monotonic()
        if t_healthy is None and _healthy(client, port):
            t_healthy = now
            row["startup_s"] = now - t_engine
            if kill_at is None:
                kill_at = now + frac * target.measure_s
        if kill_at is not None and (now >= kill_at or (phase == "start-up" and t_healthy is not None)):
            break
        if watch.tool.poll() is not None:
            row["missed"] = "the tool finished first"
            return None
        watch.poll()
        time.sleep(POLL_S)
    watch.poll()
    guardian, engine = watch.engine()
    row["phase"] = "measurement" if t_healthy is not None else "start-up"
    row["moment_s"] = now - (t_healthy if t_healthy is not None else t_engine)
    alive = [p.pid for p in watch.alive()]
    row["processes_at_kill"] = len(alive)
    held, pids = held_shm(alive, maps=True), set(watch.seen)
    row["shm_at_kill"] = sorted(n for n, i in shm_entries() if i in held or _named_after(n, pids))
    who = kind.split("-")[0]
    victim = {"tool": watch.tool, "guardian": guardian, "engine": engine}[who]
    if victim is None:
        row["missed"] = f"no {who} to kill"
        return None
    return victim.pid


def _measure_after(watch: Watch, t_kill: float) -> dict[str, Any]:
    """Seconds until the killed engine's processes are gone and until everything is gone; orphans
    alive after :data:`GIVE_UP_S` are killed and counted."""
    engine_side = set(watch.seen) - {watch.tool.pid}  # the engine being killed and its children
    engine_gone = all_gone = None
    orphans: list[str] = []
    while True:
        alive = watch.poll()
        now = time.monotonic() - t_kill
        if engine_gone is None and not [p for p in alive if p.pid in engine_side]:
            engine_gone = now
        if not alive:
            all_gone = now
            break
        if now > GIVE_UP_S:
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    orphans.append(" ".join(p.cmdline()[:4]))
                    p.kill()
            psutil.wait_procs(alive, timeout=5)
            break
        time.sleep(POLL_S)
    times = {"engine_gone_s": engine_gone, "all_gone_s": all_gone}
    return {**times, "orphans": len(orphans), "orphan_cmds": orphans}


def _named_after(name: str, pids: set[int]) -> bool:
    return any(name.endswith(f"_{pid}") for pid in pids)


def _shm_left(before: dict[tuple[str, int], int], held: set[int], pids: set[int]) -> dict[str, Any]:
    """New /dev/shm files that no live process holds: ours (seen held by the run, or named after
    one of its processes, as the fake's ``psm_killstorm_<pid>``) or unattributed."""
    new = {k: v for k, v in shm_entries().items() if k not in before}
    if new:  # a file a live process holds is that program's, not a leak of this run
        live = held_shm([int(d) for d in os.listdir("/proc") if d.isdigit()], maps=True)
        new = {k: v for k, v in new.items() if k[1] not in live}
    ours = {k for k in new if k[1] in held or _named_after(k[0], pids)}
    mine = {k[0]: v for k, v in new.items() if k in ours}
    other = {k[0]: v for k, v in new.items() if k not in ours}
    for name in mine:  # counted: now give the memory back (tmpfs keeps it until reboot)
        with contextlib.suppress(OSError):
            (SHM / name).unlink()
    return {
        "shm_files": len(mine),
        "shm_bytes": sum(mine.values()),
        "shm_ours": mine,
        "shm_unattributed": other,
    }


# -- the storm ------------------------------------------------------------------------------------
def storm(target: Target, kills: int, seed: int, work: Path) -> list[dict[str, Any]]:
    rows = []
    startups: list[float] = []
    for i, (kind, phase, frac) in enumerate(schedule(kills, seed), start=1):
        est = statistics.median(startups) if startups else target.startup_s
        row = {"n": i, **run_one(target, kind, phase, frac, work / f"kill-{i:02d}", est)}
        if row.get("startup_s"):
            startups.append(row["startup_s"])
        rows.append(row)
        c.log.info("%s", _row_cells(row))
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("delivered")]
    times = [r["all_gone_s"] for r in done if r.get("all_gone_s") is not None]
    return {
        "kills": len(done),
        "missed": len(rows) - len(done),
        "by_kind": dict(sorted(Counter(r["kind"] for r in done).items())),
        "by_phase": dict(sorted(Counter(r["phase"] for r in done).items())),
        "all_gone_s": c.spread(times),
        "engine_gone_s": c.spread(r["engine_gone_s"] for r in done if r.get("engine_gone_s") is not None),
        "orphans": sum(r.get("orphans", 0) for r in rows),
        "shm_bytes_left": sum(r["shm_bytes"] for r in rows),
        "shm_files_left": sum(r["shm_files"] for r in rows),
        "shm_bytes_unattributed": sum(sum(r["shm_unattributed"].values()) for r in rows),
        "resumes_failed": sum(r.get("resume_exit") not in (0, None) for r in rows),
        "running_after_resume": sum(r.get("running_after_resume") or 0 for r in rows),
        "duplicate_baselines": sum(max((r.get("baselines") or 0) - 1, 0) for r in rows),
        "no_baseline_after_resume": sum(r.get("baselines") == 0 for r in rows),
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _row_cells(r: dict[str, Any]) -> list[object]:
    shm = f"{r['shm_files']} / {r['shm_bytes']:,}" if r["shm_files"] else "0"
    return [
        r["n"],
        r["kind"],
        r.get("phase", "-") if r.get("delivered") else f"missed: {r.get('missed')}",
        _s(r.get("moment_s")),
        r.get("processes_at_kill", "-"),
        len(r.get("shm_at_kill", ())),
        r["tool_exit"],
        _s(r.get("engine_gone_s")),
        _s(r.get("all_gone_s")),
        r.get("orphans", 0),
        shm,
    ]


def summary_line(s: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in s["by_kind"].items())
    t = s["all_gone_s"]
    times = f"max {t['max']:.1f} s, median {t['median']:.1f} s" if t.get("n") else "-"
    other = s["shm_bytes_unattributed"]
    return (
        f"{s['kills']} kills ({kinds}; missed {s['missed']}): time until everything is gone {times}; "
        f"orphans {s['orphans']}; shm bytes left {s['shm_bytes_left']:,} ({s['shm_files_left']} files"
        + (f"; not counted: {other:,} bytes unattributed" if other else "")
        + f"); after resuming each: {s['running_after_resume']} RUNNING trials, {s['duplicate_baselines']} "
        f"duplicate baselines, {s['no_baseline_after_resume']} studies without a baseline, "
        f"{s['resumes_failed']} resumes that failed"
    )


def markdown(r: dict[str, Any]) -> str:
    title = f"Kill storm: {r['summary']['kills']} kills, engine {r['engine']}, seed {r['seed']}"
    lines = [
        c.md_header(title, r["env"], r["load_average"]),
        c.md_table(COLUMNS, [_row_cells(x) for x in r["kills"]]),
        "",
        "moment: seconds after the engine appeared (start-up) or after it first answered /health "
        "(measurement). processes at kill: the tool, the guardian, the engine and what they started. "
        "shm files at kill: /dev/shm files those processes held open or mapped, or named after one "
        "of them (what could leak).",
        "",
        summary_line(r["summary"]),
    ]
    for x in r["kills"]:
        at = f"- kill {x['n']} ({x['kind']}, {x.get('phase')}):"
        lines += [f"{at} left /dev/shm/{n}, {b:,} bytes (ours)" for n, b in x["shm_ours"].items()]
        lines += [
            f"{at} new /dev/shm/{n}, {b:,} bytes (unattributed)" for n, b in x["shm_unattributed"].items()
        ]
        lines += [f"{at} orphan `{cmd}`" for cmd in x.get("orphan_cmds", [])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument(
        "--engine", choices=("fake", "vllm"), default="fake", help="what autotune tunes (default: fake)"
    )
    p.add_argument("--kills", type=int, help="kills to deliver (default 24; quick 5)")
    p.add_argument("--seed", type=int, default=17, help="seeds the kinds, phases and moments (default 17)")
    args = p.parse_args(argv)
    if args.quick and args.engine != "fake":
        p.error("--quick runs the fake server only")
    kills = args.kills or (5 if args.quick else 24)
    c.setup_logging(args.verbose)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the /health polls
    env = c.environment()
    work = args.work_dir / f"kill-storm-{args.engine}-{time.strftime('%Y%m%d-%H%M%S')}"
    target = fake_target(work) if args.engine == "fake" else vllm_target(args.models_dir)
    load = {"start": c.load_average()}
    t0 = time.monotonic()
    rows = storm(target, kills, args.seed, work)
    load["end"] = c.load_average()
    result = {"benchmark": "kill_storm", "quick": args.quick, "engine": args.engine, "seed": args.seed}
    result |= {"env": env, "load_average": load, "kills": rows, "summary": summarize(rows)}
    result["wall_s"] = time.monotonic() - t0
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(f"\nwall time: {result['wall_s']:.1f} s; logs in {work}", file=sys.stderr)
    s = result["summary"]
    bad = s["orphans"] or s["shm_bytes_left"] or s["shm_files_left"]
    return (
        1
        if bad or s["running_after_resume"] or s["duplicate_baselines"] or s["no_baseline_after_resume"]
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
