"""``autotune run``, ``export``, ``show`` and ``tiny-model``: the commands of the tuning loop."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer
from rich.table import Table

from autotune.bench import ArrivalSpec
from autotune.cli import console, out
from autotune.errors import ConfigError
from autotune.study import TrialReport

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def _study_dir(studies_dir: Path, name: str) -> Path:
    return studies_dir / name


def _fmt_params(params: Mapping[str, Any]) -> str:
    if not params:
        return "vLLM defaults"
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def _fmt_value(metric: str, value: float | None) -> str:
    if value is None or math.isnan(value) or abs(value) >= 1e11:
        return "-"
    unit = " ms" if not metric.endswith("throughput") and metric != "goodput" else "/s"
    return f"{value:.1f}{unit}"


def run(
    workload: Annotated[
        Path, typer.Option("--workload", "-w", help="JSONL workload file (one request per line).")
    ],
    model: Annotated[str, typer.Option("--model", "-m", help="Model directory or name, as vLLM takes it.")],
    profile: Annotated[
        Optional[str],
        typer.Option(
            help="Engine profile: cuda-native, cuda-lmcache, ascend or cpu (how offload knobs reach the engine). "
            "Default: detected from the installed vLLM (see autotune doctor)."
        ),
    ] = None,
    space: Annotated[
        Optional[Path],
        typer.Option(
            help="Search-space YAML. Default: search_spaces/cpu.yaml on the CPU build, cuda.yaml else."
        ),
    ] = None,
    study: Annotated[
        Optional[str],
        typer.Option(help="Study name; re-running with the same name resumes. Default: WORKLOAD-SPACE."),
    ] = None,
    storage: Annotated[
        Optional[str],
        typer.Option(
            help="SQLAlchemy URL (no password: use PGPASSWORD or $AUTOTUNE_STORAGE). "
            "Default: sqlite:///STUDIES_DIR/STUDY.db."
        ),
    ] = None,
    studies_dir: Annotated[
        Path, typer.Option(help="Home of study databases, trial logs and exports.")
    ] = Path("studies"),
    n_trials: Annotated[int, typer.Option(min=1, help="Trials to run now, the baseline included.")] = 10,
    timeout: Annotated[
        Optional[float], typer.Option(help="Stop starting new trials after this many seconds.")
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help="Metric to optimise: ttft|tpot|itl|e2el with _p50/_p75/_p90/_p95/_p99/_mean (minimised), "
            "or output_throughput, request_throughput, goodput (maximised)."
        ),
    ] = "ttft_p90",
    slo: Annotated[
        Optional[list[str]],
        typer.Option(help="Constraint METRIC=LIMIT, e.g. ttft_p90=800ms (repeatable). Defines goodput too."),
    ] = None,
    min_throughput_ratio: Annotated[
        float, typer.Option(help="A trial must reach this share of the baseline's output tokens/s.")
    ] = 0.95,
    out_path: Annotated[
        Optional[Path], typer.Option("--out", help="Best-config YAML. Default: STUDIES_DIR/STUDY/best.yaml.")
    ] = None,
    engine_arg: Annotated[
        Optional[list[str]],
        typer.Option(
            "--engine-arg",
            help="Fixed vLLM flag, not tuned (repeatable), e.g. --engine-arg=--max-model-len=4096. "
            "A fixed flag that the space also tunes is the baseline's value.",
        ),
    ] = None,
    launcher: Annotated[
        Optional[str],
        typer.Option(
            help="Command that starts vLLM before the model and flags. Default: 'vllm serve' on the GPU build, "
            "'python -m vllm.entrypoints.openai.api_server' on the CPU build."
        ),
    ] = None,
    startup_timeout: Annotated[float, typer.Option(help="Seconds vLLM may take to become healthy.")] = 600.0,
    rate: Annotated[Optional[float], typer.Option(help="Poisson arrivals at this many sessions/s.")] = None,
    burstiness: Annotated[
        Optional[float], typer.Option(help="Gamma arrivals at --rate with this shape (<1 burstier).")
    ] = None,
    concurrency: Annotated[
        Optional[int], typer.Option(help="Closed loop: this many sessions in flight.")
    ] = None,
    speed: Annotated[float, typer.Option(help="Replay the file's timestamps this many times faster.")] = 1.0,
    sample: Annotated[Optional[int], typer.Option(help="Replay a random subset of N sessions.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling, arrivals and the Optuna sampler.")] = 0,
    warmup: Annotated[int, typer.Option(min=0, help="Warm-up requests per trial, not counted.")] = 2,
    history: Annotated[
        str, typer.Option(help="Multi-turn history: 'recorded' as in the file, or 'actual' previous outputs.")
    ] = "recorded",
    api_key_env: Annotated[
        Optional[str],
        typer.Option(help="Name of an environment variable holding the API key vLLM should require."),
    ] = None,
    host_share: Annotated[
        float, typer.Option(help="Largest share of available host memory a CPU KV-offload pool may take.")
    ] = 0.65,
    allow_swap: Annotated[
        bool, typer.Option(help="Accept trials during which the host swapped (default: infeasible).")
    ] = False,
    check_memory: Annotated[
        bool,
        typer.Option(
            help="Estimate memory before launch (needs MODEL/config.json) and watch it during runs."
        ),
    ] = True,
    confirm_rounds: Annotated[
        int,
        typer.Option(
            min=0,
            help="Before exporting, re-measure baseline and best alternately this many times each; "
            "the best is exported only if it wins by more than the noise.",
        ),
    ] = 0,
    min_improvement: Annotated[
        float, typer.Option(help="With --confirm-rounds: smallest relative gain of the median that counts.")
    ] = 0.03,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Print the exact commands (baseline and a few sampled trials) with their environment, "
            "checked by vLLM's parser and the memory estimate; launch nothing, write nothing."
        ),
    ] = False,
    dry_run_samples: Annotated[int, typer.Option(min=0, help="Sampled trials shown by --dry-run.")] = 3,
    check_args: Annotated[
        bool,
        typer.Option(help="Check each command with the installed vLLM's own parser before launching it."),
    ] = True,
    skip_bad_lines: Annotated[
        bool, typer.Option(help="Skip invalid workload lines (reported) instead of failing.")
    ] = False,
) -> None:
    """Tune vLLM on a workload: baseline (vLLM defaults) first, then Optuna's proposals; export the best."""
    from autotune.confirm import confirm_best
    from autotune.engine import (
        LaunchSpec,
        VllmArgChecker,
        clean_stale_shm,
        default_launcher,
        installed_build,
        parse_engine_args,
        preview_profile,
        select_profile,
    )
    from autotune.engine import default_space_path as profile_space_path
    from autotune.export import export_best
    from autotune.memory import read_machine_facts
    from autotune.memory_guard import MemoryGuard, clamp_space
    from autotune.space import apply_profile, load_search_space
    from autotune.study import (
        Objective,
        load_or_create,
        parse_slo,
        redact_url,
        resolve_storage_url,
        run_study,
    )
    from autotune.trial import VllmEvaluator
    from autotune.workload import load_workload, sample_workload

    # Validate everything before any engine starts.
    if history not in ("recorded", "actual"):
        raise ConfigError(f"--history: {history!r} is not 'recorded' or 'actual'")
    wl = load_workload(workload, skip_bad_lines=skip_bad_lines)
    for msg in wl.skipped:
        console.print(f"[yellow]skipped[/yellow] {msg}")
    if sample is not None:
        wl = sample_workload(wl, sample, seed)
    build, version = installed_build()
    preview_note = None
    if dry_run and profile is not None:
        prof, preview_note = preview_profile(profile)
    else:
        prof = select_profile(profile)
    space_path = space or profile_space_path(prof)
    sp = apply_profile(load_search_space(space_path), prof)
    slos = dict(parse_slo(s) for s in (slo or []))
    obj = Objective(metric=objective, min_throughput_ratio=min_throughput_ratio, slos_ms=slos)
    fixed = parse_engine_args(engine_arg or [])
    arrival = _arrival(wl, rate=rate, burstiness=burstiness, concurrency=concurrency, speed=speed, seed=seed)
    name = study or f"{workload.stem}-{sp.name}"
    if not _NAME_RE.match(name):
        raise ConfigError(f"--study: {name!r} is not a valid name (fix: letters, digits, '-', '_', '.')")
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise ConfigError(f"--api-key-env: environment variable {api_key_env} is not set")
    launch = LaunchSpec(
        model=model,
        launcher=tuple(launcher.split()) if launcher else default_launcher(),
        fixed_args=fixed,
        api_key=api_key,
        startup_timeout_s=startup_timeout,
    )
    platform: Literal["cpu", "cuda"] = "cpu" if sp.platform == "cpu" else "cuda"
    guard = (
        MemoryGuard.for_model(model, platform, host_share=host_share, allow_swap=allow_swap)
        if check_memory
        else None
    )
    if dry_run:
        shown = clamp_space(sp, read_machine_facts(), host_share) if guard is not None else sp
        if preview_note:
            out.print(f"# {preview_note}")
        _print_dry_run(
            shown, launch, prof.name, dry_run_samples, seed, check_args and build != "missing", guard
        )
        return
    sdir = _study_dir(studies_dir, name)
    sdir.mkdir(parents=True, exist_ok=True)
    _log_to_file(sdir / "study.log")
    url = resolve_storage_url(storage, name, studies_dir)
    st = load_or_create(url, name, obj, seed)
    previous = st.user_attrs.get("engine_profile")
    if previous and previous != prof.name:
        console.print(f"[yellow]study {name} ran with profile {previous}; this run uses {prof.name}[/yellow]")
    st.set_user_attr("engine_profile", prof.name)

    for pname, reason in sp.unsupported.items():
        console.print(f"[dim]not tuned with profile {prof.name}: {pname}: {reason}[/dim]")
    if prof.shm_patterns:
        report = clean_stale_shm(prof.shm_patterns)
        if report.removed:
            console.print(report.summary())
    console.print(
        f"study [bold]{name}[/bold] in {redact_url(url)} | vLLM {version or '?'} ({build} build) | "
        f"space {space_path} | workload {workload} ({len(wl)} requests, {arrival.describe()}) | "
        f"objective {obj.direction} {obj.metric}"
    )
    if guard is not None:
        sp = clamp_space(sp, read_machine_facts(), host_share)  # logged in the study's log
    checker = VllmArgChecker() if check_args and build != "missing" else None
    evaluator = VllmEvaluator(
        spec=launch,
        workload=wl,
        arrival=arrival,
        log_dir=sdir,
        warmup_requests=warmup,
        history=history,  # type: ignore[arg-type]
        slos_ms=obj.request_slos,
        arg_checker=checker,
        memory=guard,
        host_sources=prof.cpu_hit_sources or ("host",),
        shm_patterns=prof.shm_patterns,
    )
    done = {"n": 0}

    def on_start(number: int, baseline: bool, params: Mapping[str, Any]) -> None:
        console.print(
            f"[bold]trial {done['n'] + 1}/{n_trials}[/bold] (#{number}) starting: "
            f"{'baseline: vLLM defaults' if baseline else _fmt_params(params)}"
        )

    def on_done(rep: TrialReport) -> None:
        done["n"] += 1
        console.print(_trial_line(rep, obj.metric))

    try:
        run_study(
            study=st,
            space=sp,
            evaluator=evaluator,
            objective=obj,
            n_trials=n_trials,
            timeout_s=timeout,
            on_trial_start=on_start,
            on_trial_done=on_done,
        )
    finally:
        if checker is not None:
            checker.close()
    _print_table(st, obj.metric)
    target = out_path or sdir / "best.yaml"
    fixed_argv = [tok for name_, value in fixed for tok in ([name_] if value is None else [name_, value])]
    chosen, confirmation = confirm_best(
        st, evaluator, obj, rounds=confirm_rounds, min_improvement=min_improvement, log_dir=sdir / "confirm"
    )
    if confirmation is not None:
        verdict = "confirmed" if confirmation["confirmed"] else "not confirmed: exporting vLLM's defaults"
        console.print(
            f"re-measured trial {confirmation['trial']} against the baseline: {verdict} ({confirmation['why']})"
        )
    best, exported = export_best(st, model=model, fixed_argv=fixed_argv, out=target, trial=chosen)
    out.print(f"best: trial {best.number} {obj.metric} = {_fmt_value(obj.metric, best.value)}")
    out.print(f"wrote {target}")
    out.print(f"deploy: vllm serve --config {target}")
    out.print(f"or:     {exported.command}")


def _print_dry_run(
    sp: Any, launch: Any, profile: str, samples: int, seed: int, check_args: bool, guard: Any
) -> None:
    import json
    import shlex

    from autotune.dry_run import preview_commands
    from autotune.engine import VllmArgChecker

    checker = VllmArgChecker() if check_args else None
    try:
        previews = preview_commands(sp, launch, samples=samples, seed=seed, checker=checker, memory=guard)
    finally:
        if checker is not None:
            checker.close()
    for pname, reason in sp.unsupported.items():
        out.print(f"# not tuned with profile {profile}: {pname}: {reason}")
    for p in previews:
        verdict = (
            f"REJECTED by vLLM's parser: {p.parser_error}"
            if p.parser_error
            else ("accepted by vLLM's parser" if check_args else "not checked (--no-check-args)")
        )
        fit = "fits" if not p.fit_reasons else "does not fit: " + "; ".join(p.fit_reasons)
        out.print(f"\n# {p.label}: {_fmt_params(p.params)}")
        out.print(f"# {verdict}; memory: {fit if guard is not None else 'not checked'}")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
        out.print((env + " " if env else "") + " ".join(shlex.quote(a) for a in p.argv), soft_wrap=True)
        if p.transfer_config is not None:
            out.print("# --kv-transfer-config:\n" + json.dumps(p.transfer_config, indent=2), soft_wrap=True)
    out.print("\n# dry run: nothing was launched and no study was written (the port is chosen at launch)")


def _arrival(
    wl: Any, *, rate: float | None, burstiness: float | None, concurrency: int | None, speed: float, seed: int
) -> ArrivalSpec:
    given = [x is not None for x in (rate, concurrency)]
    if all(given):
        raise ConfigError("--rate and --concurrency exclude each other (fix: pass one of them)")
    if burstiness is not None and rate is None:
        raise ConfigError("--burstiness needs --rate")
    if rate is not None:
        return ArrivalSpec(
            mode="gamma" if burstiness is not None else "poisson",
            rate=rate,
            burstiness=burstiness or 1.0,
            seed=seed,
        )
    if concurrency is not None:
        return ArrivalSpec(mode="closed", concurrency=concurrency, seed=seed)
    spec = ArrivalSpec.default_for(wl)
    return ArrivalSpec(mode=spec.mode, concurrency=spec.concurrency, speed=speed, seed=seed)


def _log_to_file(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)


def _trial_line(rep: TrialReport, metric: str) -> str:
    rec = rep.record
    status = rec.get("status", "failed")
    head = f"  trial #{rep.number} {status}"
    if rec.get("duplicate_of") is not None:
        head += f" (same config as #{rec['duplicate_of']}: measurement reused)"
    if status != "ok":
        why = rec.get("failure") or ""
        reason = (rec.get("reason") or "").split(";")[0]
        body = f"[red]{why}[/red] {reason}"
    else:
        f = rec.get("figures") or {}
        m = rec.get("metrics") or {}
        hit = m.get("prefix_hit_rate")
        body = (
            f"{metric}={_fmt_value(metric, rep.value)} ttft_p50={f['percentiles_ms']['ttft_p50']:.1f} ms "
            f"out={f['output_throughput']:.1f} tok/s failed={f['failed']}"
            + (f" prefix-hit={hit:.0%}" if hit is not None else "")
            + ("" if rep.feasible else " [yellow](violates a constraint)[/yellow]")
        )
    best = (
        f" | best so far: #{rep.best_number} {_fmt_value(metric, rep.best_value)}"
        if rep.best_number is not None
        else " | no feasible trial yet"
    )
    return head + ": " + body + best


def _print_table(st: Any, metric: str) -> None:
    table = Table(title=f"study {st.study_name}", show_lines=False)
    for col in (
        "#",
        "status",
        "params",
        metric,
        "ttft p50",
        "out tok/s",
        "GPU prefix hit",
        "CPU offload hit",
        "KV tokens",
        "peak mem GiB",
        "start s",
    ):
        table.add_column(col)
    for t in st.get_trials(deepcopy=False):
        a = t.user_attrs
        f = a.get("figures") or {}
        m = a.get("metrics") or {}
        ok = a.get("status") == "ok"
        hit, host = m.get("prefix_hit_rate"), m.get("host_hit_rate")
        mem = a.get("memory") or {}
        peak = max(mem.get("gpu_used_peak") or [0]) or mem.get("rss_peak") or 0
        table.add_row(
            str(t.number),
            (a.get("status") or t.state.name.lower())
            + ("" if ok or not a.get("failure") else f" ({a['failure']})"),
            "defaults" if a.get("baseline") else _fmt_params(t.params),
            _fmt_value(metric, t.value) if ok else "-",
            f"{f['percentiles_ms']['ttft_p50']:.1f}" if ok else "-",
            f"{f['output_throughput']:.1f}" if ok else "-",
            f"{hit:.0%}" if hit is not None else "-",
            f"{host:.0%}" if host is not None else "-",
            f"{a['kv_tokens']:,}" if a.get("kv_tokens") else "-",
            f"{peak / 2**30:.1f}" if peak else "-",
            f"{(a.get('timings_s') or {}).get('startup', 0):.0f}",
        )
    console.print(table)
