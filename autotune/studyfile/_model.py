"""The study file's model: every option of ``run``, ``worker``, ``nightly`` and ``compare``, declared
once with its type, default and help. The command-line options are generated from these fields
(:mod:`autotune.cli._study_options`); a study file (:func:`~autotune.studyfile.load_study_file`) sets the
same keys; a flag overrides the file.

Each field's ``json_schema_extra`` says where it applies:

- ``commands``: the commands that take it;
- ``flag`` / ``short``: the option's name when it is not ``--field-name``;
- ``cli_only``: an action of one invocation (``--dry-run``, ``--index``), not a key of a study file;
- ``fingerprint``: it changes what is measured or how it is judged (part of the study's fingerprint);
  ``fingerprint_unless``: only when it is not this value (the default, which studies made before the
  key existed measured with), so their hash is unchanged;
- ``defaults``: a default of its own for some command (``rounds``: 2 a night, 3 for ``compare``);
- ``per_run``: how much or where one invocation runs (trials, budget, GPUs, storage), not what the study
  is: a worker joining a study does not take it from the study's record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autotune.studyfile._duration import parse_duration

__all__ = ["COMMANDS", "ENGINES", "EXPORT_FORMATS", "EngineName", "ExportFormat", "StudySpec"]

COMMANDS = ("run", "worker", "nightly", "compare")
# What the best configuration is written as (autotune/export/: one exporter per format)
ExportFormat = Literal["vllm-config", "helm-values"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
# The inference engine a study tunes (autotune/engine/: one implementation of its Engine seam each)
EngineName = Literal["vllm"]
ENGINES: tuple[str, ...] = get_args(EngineName)
_MEASURE = COMMANDS
_STUDY = ("run", "worker", "nightly")


def _opt(
    default: Any,
    help: str,
    *,
    commands: tuple[str, ...] = _MEASURE,
    flag: str | None = None,
    short: str | None = None,
    cli_only: bool = False,
    fingerprint: bool = False,
    minimum: float | None = None,
    defaults: dict[str, Any] | None = None,
    per_run: bool | None = None,
    fingerprint_when: tuple[str, str] | None = None,
    fingerprint_unless: Any = None,
) -> Any:
    extra: dict[str, Any] = {"commands": list(commands), "cli_only": cli_only, "fingerprint": fingerprint}
    # per_run: how much or where this invocation runs, not what the study is (a worker does not inherit it)
    extra["per_run"] = per_run if per_run is not None else commands not in (_MEASURE, _STUDY)
    if flag:
        extra["flag"] = flag
    if short:
        extra["short"] = short
    if minimum is not None:
        extra["minimum"] = minimum
    if defaults:
        extra["defaults"] = defaults
    if fingerprint_when:
        extra["fingerprint_when"] = list(fingerprint_when)
    if fingerprint_unless is not None:
        extra["fingerprint_unless"] = fingerprint_unless
    return Field(default, description=help, json_schema_extra=extra)


def slo_items(value: Any) -> Any:
    """``slo: {ttft_p90: 800ms}`` in a file reads as ``--slo ttft_p90=800ms``."""
    if isinstance(value, dict):
        return tuple(f"{k}={v}" for k, v in value.items())
    return value


class StudySpec(BaseModel):
    """Everything a study is, and the options of one invocation. Frozen; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    # --- what is measured: the workload and how it arrives --------------------------------------
    workload: Path | None = _opt(
        None, "Workload: a JSONL file (one request per line), or a folder of traffic files.",
        short="-w", fingerprint=True,
    )  # fmt: skip
    window: str | None = _opt(
        None, "With a folder: keep the latest files within this span of their timestamps, e.g. 24h.",
        fingerprint=True,
    )  # fmt: skip
    max_requests: int | None = _opt(
        None, "Sample the workload down to about N requests, keeping whole sessions and the arrival curve.",
        fingerprint=True, minimum=1,
    )  # fmt: skip
    max_duration: str | None = _opt(
        None, "Sample the workload down to this span of arrival time (e.g. 30m), keeping whole sessions.",
        fingerprint=True,
    )  # fmt: skip
    sample: int | None = _opt(None, "Replay a random subset of N sessions.", fingerprint=True, minimum=1)
    skip_bad_lines: bool = _opt(
        False, "Skip invalid workload lines (reported) instead of failing.", fingerprint=True
    )
    history: Literal["recorded", "actual"] = _opt(
        "recorded",
        "Multi-turn history: 'recorded' as in the file, or 'actual' previous outputs.",
        fingerprint=True,
    )
    rate: float | None = _opt(None, "Poisson arrivals at this many sessions/s.", fingerprint=True)
    burstiness: float | None = _opt(
        None, "Gamma arrivals at --rate with this shape (<1 burstier).", fingerprint=True
    )
    concurrency: int | None = _opt(
        None, "Closed loop: this many sessions in flight.", fingerprint=True, minimum=1
    )
    speed: float = _opt(1.0, "Replay the file's timestamps this many times faster.", fingerprint=True)
    seed: int = _opt(0, "Seed for sampling, arrivals and the Optuna sampler.", fingerprint=True)
    warmup: int = _opt(
        2, "Warm-up requests per engine start, not counted: the workload's longest prompts with their words "
        "shuffled (no shared prefix), sent together.", fingerprint=True, minimum=0,
    )  # fmt: skip

    # --- the engine and the model --------------------------------------------------------------
    engine: EngineName = _opt(
        "vllm",
        "Inference engine to tune: vllm (the only one today).",
        fingerprint=True,
        fingerprint_unless="vllm",
    )
    model: str | None = _opt(None, "Model directory or name, as vLLM takes it.", short="-m", fingerprint=True)
    profile: str | None = _opt(
        None, "Engine profile: cuda-native, cuda-lmcache, ascend or cpu (how offload knobs reach the engine). "
        "Default: detected from the installed vLLM (see autotune doctor).", fingerprint=True,
    )  # fmt: skip
    space: Path | None = _opt(
        None, "Search-space YAML. Default: search_spaces/cpu.yaml on the CPU build, cuda.yaml else.",
        commands=_STUDY, fingerprint=True,
    )  # fmt: skip
    opt_in: tuple[str, ...] = _opt(
        (), "Tune this opt-in parameter of the space too (repeatable), e.g. kv_cache_dtype (fp8 KV changes "
        "numerics).", commands=_STUDY, flag="--opt-in", fingerprint=True,
    )  # fmt: skip
    engine_args: tuple[str, ...] = _opt(
        (), "Fixed vLLM flag, not tuned (repeatable), e.g. --engine-arg=--max-model-len=4096: a parameter of the "
        "space that it sets is left out of the search. Given as a flag, it adds to the study file's engine_args "
        "(a flag the file sets already gets the new value).", flag="--engine-arg", fingerprint=True,
    )  # fmt: skip
    baseline_args: tuple[str, ...] = _opt(
        (), "vLLM flag of the baseline that the search may change (repeatable), e.g. "
        "--baseline-arg=--kv-cache-memory-bytes=20M: the value you run today, in every command until a trial "
        "tunes that flag. Unlike --engine-arg, it leaves the parameter in the search.", flag="--baseline-arg",
        fingerprint=True,
    )  # fmt: skip
    launcher: str | None = _opt(
        None, "Command that starts vLLM before the model and flags. Default: 'vllm serve' on the GPU build, "
        "'python -P -m vllm.entrypoints.openai.api_server' on the CPU build.",
    )  # fmt: skip
    startup_timeout: float = _opt(600.0, "Seconds vLLM may take to become healthy.", minimum=1)
    api_key_env: str | None = _opt(
        None, "Name of an environment variable holding the API key vLLM should require."
    )
    engine_pass_env: tuple[str, ...] = _opt(
        (), "Pass this variable of autotune's environment to vLLM although its name looks like a secret (e.g. a "
        "plugin's *_TOKEN) (repeatable). autotune's storage URL, PG* variables and the --api-key-env variable "
        "are never passed.", flag="--engine-pass-env",
    )  # fmt: skip
    compile_cache: Path | None = _opt(
        None, "Folder for vLLM's compile and kernel caches (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, "
        "TRITON_CACHE_DIR), shared by every engine that uses it. Default: STUDY/cache (compare: LOG_DIR/cache).",
    )  # fmt: skip
    host_share: float = _opt(0.65, "Largest share of available host memory a CPU KV-offload pool may take.")
    allow_swap: bool = _opt(False, "Accept runs during which the host swapped (default: infeasible).")
    check_memory: bool = _opt(
        True, "Estimate memory before launch (needs MODEL/config.json) and watch it during runs."
    )
    check_args: bool = _opt(
        True, "Check each command with the installed vLLM's own parser before launching it."
    )

    # --- how a trial is judged -------------------------------------------------------------------
    objective: str = _opt(
        "ttft_p90", "Metric to optimise: ttft|tpot|itl|e2el with _p50/_p75/_p90/_p95/_p99/_mean (minimised), "
        "or output_throughput, request_throughput, goodput (maximised), or capacity: the most load (req/s) "
        "at which every --slo holds, bracketed per engine start.", commands=_STUDY, fingerprint=True,
    )  # fmt: skip
    slo: tuple[str, ...] = _opt(
        (),
        "Constraint METRIC=LIMIT, e.g. ttft_p90=800ms (repeatable). Defines goodput too.",
        fingerprint=True,
    )
    capacity_tolerance: float = _opt(
        0.10, "--objective capacity: bisect until the bracket [held, broke] is within this share of the load "
        "that held.", commands=_STUDY, fingerprint=True, fingerprint_when=("objective", "capacity"),
    )  # fmt: skip
    capacity_levels: int = _opt(
        6, "--objective capacity: at most this many load levels per engine start (each replays the workload "
        "once, its prefix cache emptied first).", commands=_STUDY, fingerprint=True, minimum=2,
        fingerprint_when=("objective", "capacity"),
    )  # fmt: skip
    capacity_min_level: str = _opt(
        "10s", "--objective capacity: a load level lasts at least this much arrival time; a workload whose "
        "arrivals at that load span less is replayed again after itself. 0s: once per level.",
        commands=_STUDY, fingerprint=True, fingerprint_when=("objective", "capacity"),
    )  # fmt: skip
    min_throughput_ratio: float = _opt(
        0.95,
        "A trial must reach this share of the baseline's output tokens/s.",
        commands=_STUDY,
        fingerprint=True,
    )
    passes: str = _opt(
        "auto", "Replays of the workload per started engine, the prefix cache emptied between them; the trial "
        "reports their median. auto: as many as cost at most half a one-pass trial (up to 5).", fingerprint=True,
    )  # fmt: skip
    prune: bool = _opt(
        True, "Stop a trial early when its running objective is worse than the best's beyond the noise.",
        commands=_STUDY,
    )  # fmt: skip
    prior: bool = _opt(
        True, "Use the workload's prefix reuse and the KV estimate to enqueue informed candidates first and "
        "skip offload where it cannot add hits.", commands=_STUDY,
    )  # fmt: skip
    predict: bool = _opt(
        False, "Predict each candidate's TTFT before it starts (a model fitted on this study's measured trials), "
        "show it next to the measurement, start the model's best picks after the baseline, and skip a candidate "
        "predicted worse than the best beyond the model's own measured error (after 3 measured errors; the first "
        "such candidate, and 1 in 5 later, is started anyway as an audit). Objective ttft_p50 or ttft_p90.",
        commands=_STUDY,
    )  # fmt: skip

    # --- where the study lives -------------------------------------------------------------------
    study: str | None = _opt(
        None,
        "Study name; re-running with the same name resumes. Default (run): WORKLOAD-SPACE.",
        commands=_STUDY,
        per_run=True,
    )
    storage: str | None = _opt(
        None, "SQLAlchemy URL (no password: use PGPASSWORD or $AUTOTUNE_STORAGE). "
        "Default: sqlite:///STUDIES_DIR/STUDY.db.", commands=_STUDY, per_run=True,
    )  # fmt: skip
    studies_dir: Path = _opt(
        Path("studies"), "Home of study databases, trial logs and exports.", commands=_STUDY, per_run=True
    )

    # --- how much to run -------------------------------------------------------------------------
    n_trials: int = _opt(
        10, "Trials to run now, the baseline included: this many MORE when resuming (worker: at most this many); "
        "0: none, the study's best is confirmed and exported as it stands.",
        commands=("run", "worker"), minimum=0,
    )  # fmt: skip
    total_trials: int | None = _opt(
        None, "Instead of --n-trials: run until the study has this many finished trials in all (re-running the "
        "same command after an interruption then finishes the job, no more).", commands=("run", "worker"), minimum=1,
    )  # fmt: skip
    timeout: float | None = _opt(
        None, "Stop starting new trials after this many seconds.", commands=("run", "worker")
    )
    gpus: str | None = _opt(
        None, "GPUs: run: trials in parallel on 0,1,2,3 or all (one worker per GPU or --tensor-parallel-size "
        "group); worker: this worker's GPUs; compare: measure on these only. Each engine sees only its GPUs.",
        commands=("run", "worker", "compare"),
    )  # fmt: skip
    workers: int | None = _opt(
        None, "Without GPUs (the CPU build): this many parallel workers, each on its own CPU cores.",
        commands=("run",), minimum=1,
    )  # fmt: skip
    overlap_starts: bool = _opt(
        False, "Start the next trial's engine while the current one replays, when the free GPU memory beside "
        "it holds the next one's share (a small fixed --gpu-memory-utilization, or a small model). Off by "
        "default: see benchmarks/RESULTS.md, issue 31, for what it does to the figures.", commands=_STUDY,
        per_run=True,
    )  # fmt: skip
    budget: str = _opt(
        "2h",
        "Wall time for the whole night, from the process start, e.g. 2h, 45m or 1h30m.",
        commands=("nightly",),
    )
    max_trials: int | None = _opt(None, "Cap on new trials tonight.", commands=("nightly",), minimum=0)
    rounds: int = _opt(
        2, "A/B rounds per arm: a night's re-measurement and promotion check; compare's runs of each arm.",
        commands=("nightly", "compare"), minimum=1, defaults={"compare": 3},
    )  # fmt: skip
    confirm_rounds: int = _opt(
        2, "Before exporting, re-measure baseline and best alternately this many times each; the best is "
        "exported only if it wins by more than the noise (0: skip).", commands=("run",), minimum=0,
    )  # fmt: skip
    min_improvement: float = _opt(
        0.03, "Smallest relative gain of the median that counts (a night: and regression), whatever the noise.",
        commands=("run", "nightly"), defaults={"nightly": 0.05},
    )  # fmt: skip

    # --- what comes out --------------------------------------------------------------------------
    out: Path | None = _opt(
        None, "Where the best (a night: the promoted) config YAML is written. Default: STUDIES_DIR/STUDY/best.yaml.",
        commands=("run", "nightly"),
    )  # fmt: skip
    export_format: ExportFormat = _opt(
        "vllm-config", "What --out is: vllm-config, a YAML for `vllm serve --config`; helm-values, a values.yaml "
        "for vLLM's production-stack Helm chart (one modelSpec per model; a group writes it beside its files). "
        "See docs/export.md.", commands=("run",),
    )  # fmt: skip
    incumbent: Path | None = _opt(
        None, "The deployed config (YAML). Default: --out when it exists (whoever wrote it), else the study's "
        "last promoted one, else the baseline.",
        commands=("nightly",),
    )  # fmt: skip
    on_promote: str | None = _opt(
        None, "Shell command run after a night promotes a config (its paths and figures in the environment: "
        "AUTOTUNE_NEW_CONFIG, AUTOTUNE_PREVIOUS_CONFIG, ...), e.g. a Git commit or kubectl apply.",
        commands=("nightly",),
    )  # fmt: skip
    on_promote_timeout: float = _opt(
        600.0,
        "Seconds the --on-promote command may take before it is stopped.",
        commands=("nightly",),
        minimum=1,
    )

    # --- compare's arms --------------------------------------------------------------------------
    config: Path | None = _opt(
        None,
        "Config to check (e.g. the exported best.yaml), arm B; or a measurement of `autotune bench "
        "--json-out` (.json, with --baseline-config another: compared as recorded, nothing launched).",
        commands=("compare",),
    )
    baseline_config: Path | None = _opt(
        None,
        "Arm A config (default: vLLM's defaults plus --engine-arg flags), or a measurement (.json).",
        commands=("compare",),
    )
    log_dir: Path = _opt(Path("studies/compare"), "Where vLLM's logs of each run go.", commands=("compare",))
    json_out: Path | None = _opt(None, "Write every figure as JSON here.", commands=("compare",))

    # --- actions of one invocation (not study-file keys) -------------------------------------------
    dry_run: bool = _opt(
        False, "Print the exact commands (baseline and a few sampled trials) with their environment, checked "
        "by vLLM's parser and the memory estimate; launch nothing, write nothing.", commands=("run",), cli_only=True,
    )  # fmt: skip
    dry_run_samples: int = _opt(
        3, "Sampled trials shown by --dry-run.", commands=("run",), cli_only=True, minimum=0
    )
    accept_reference: bool = _opt(
        False, "With --dry-run: exit 0 even when vLLM's defaults cannot run here (a runnable reference is then "
        "measured as the baseline).", commands=("run",), cli_only=True,
    )  # fmt: skip
    index: int | None = _opt(
        None, "This worker's number: sampler seed = --seed + index; worker 0 measures the baseline while the "
        "others wait for it. Default: $JOB_COMPLETION_INDEX, else a free number.",
        commands=("worker",), cli_only=True, minimum=0,
    )  # fmt: skip
    create: bool = _opt(
        False, "Create the study when it does not exist (give this to one worker only).",
        commands=("worker",), cli_only=True,
    )  # fmt: skip
    spec_file: Path | None = _opt(
        None, "A worker spec file as `autotune run --gpus` writes it; replaces the options above.",
        commands=("worker",), cli_only=True, flag="--spec",
    )  # fmt: skip

    @field_validator("capacity_min_level")
    @classmethod
    def _duration_or_zero(cls, value: str) -> str:
        parse_duration(value, allow_zero=True)
        return value

    @field_validator("budget", "window", "max_duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)  # raises ValueError with the fix
        return value

    @field_validator("passes")
    @classmethod
    def _passes(cls, value: str) -> str:
        text = str(value).strip()
        if text != "auto" and not (text.isdigit() and int(text) >= 1):
            raise ValueError(f"{value!r} is neither 'auto' nor a count of at least 1 (fix: e.g. auto or 2)")
        return text

    @field_validator("slo", mode="before")
    @classmethod
    def _slo_mapping(cls, value: Any) -> Any:
        return slo_items(value)

    @property
    def budget_s(self) -> float:
        return parse_duration(self.budget)
