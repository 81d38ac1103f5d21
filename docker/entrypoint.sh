#!/usr/bin/env bash
# The one entrypoint of vllm-autotune's deployments: the container images (docker/Dockerfile,
# docker/Dockerfile.cpu), compose, the Kubernetes manifests and the systemd service all run this
# script, and CI runs it outside any container (tests/docker/).
#
#   entrypoint.sh ARGS...   ARGS go to `autotune` unchanged (`entrypoint.sh doctor --model M`).
#   entrypoint.sh           the command is built from the environment:
#
#   AUTOTUNE_MODE         run | nightly | worker                                      (required)
#   AUTOTUNE_STUDY_FILE   the study file (YAML; a ConfigMap or a file on the volume): the command
#                         becomes `MODE --file FILE`, and the file says what the study is (study,
#                         workload, model, engine_args, objective, slo, storage, out, on_promote...).
#                         Each variable below that is set still becomes its flag, and a flag
#                         overrides the file; none of them is then required.
#   AUTOTUNE_STUDY        study name                              (required without a study file)
#   AUTOTUNE_WORKLOAD     workload file or folder      (run, nightly: required without a study file)
#   AUTOTUNE_MODEL        model directory or name      (run, nightly: required without a study file)
#   AUTOTUNE_DEADLINE_SECONDS  (nightly) the Kubernetes Job's activeDeadlineSeconds: the night's
#                         --budget becomes it minus AUTOTUNE_DEADLINE_MARGIN_SECONDS (default 1800:
#                         scheduling and image pull, the step in flight when the budget ends, the
#                         stop of its engines and the export; docker/README.md, "The deadline")
#   AUTOTUNE_STUDIES_DIR  --studies-dir: study files, trial logs, exports    (run, nightly)
#   AUTOTUNE_OUT          --out: best-config YAML                            (run, nightly)
#   AUTOTUNE_N_TRIALS     --n-trials                                                   (run)
#   AUTOTUNE_INCUMBENT    --incumbent: the deployed config YAML                    (nightly)
#   AUTOTUNE_BUDGET       --budget, e.g. 2h                                        (nightly)
#   AUTOTUNE_ENGINE_ARGS  fixed vLLM flags, space-separated, each --flag or --flag=value;
#                         each becomes --engine-arg=FLAG                         (run, nightly)
#   AUTOTUNE_API_KEY_ENV  --api-key-env: the NAME of the variable that holds vLLM's API key
#                                                                                (run, nightly)
#   AUTOTUNE_STORAGE_URL  --storage: a database URL with no password in it (that goes in PGPASSWORD)
#                         (worker: this or AUTOTUNE_STORAGE is required)
#   AUTOTUNE_EXTRA_ARGS   more autotune options, space-separated (no quoting), appended last
#   AUTOTUNE_BIN          the autotune executable (default: autotune on PATH)
#
# Secrets never go through argv and are never printed. They are environment variables that
# autotune and libpq read themselves: PGPASSWORD, AUTOTUNE_STORAGE (a whole URL, password
# included) and the variable named by AUTOTUNE_API_KEY_ENV. Each may instead be given as a file
# (Docker/compose secrets, Kubernetes secret volumes, systemd credentials): NAME_FILE=PATH sets
# NAME to the file's content.
#
# Exit status: 2 and one line on stderr for a bad or missing variable; otherwise autotune's own
# (0 done or, for nightly, no regression; 1 other error; 2 bad input; 3 regression and 4 nothing
# feasible (nightly); 5 no baseline could be measured; 6 the study already running on this host;
# 8 the night's budget could not hold one candidate (nightly); 130 interrupted). The script execs autotune, so signals (SIGTERM from Kubernetes,
# systemd or `docker stop`) reach it directly and it stops every vLLM process it started.
set -euo pipefail

die() {
  printf 'autotune-entrypoint: %s\n' "$*" >&2
  exit 2
}

is_name() { [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; }

# NAME_FILE=PATH -> NAME=<content of PATH> (trailing newlines dropped). The value is not printed.
load_secret_file() {
  local name=$1 file_var="$1_FILE" path
  path=${!file_var:-}
  [[ -n $path ]] || return 0
  [[ -z ${!name:-} ]] || die "both $name and $file_var are set (fix: set only one of them)"
  [[ -f $path && -r $path ]] || die "$file_var: cannot read the file $path (fix: mount the secret there, or unset $file_var)"
  local value
  value=$(<"$path")
  [[ -n $value ]] || die "$file_var: the file $path is empty"
  export "$name=$value"
}

# A storage URL with a password would be readable by every user in argv (ps, /proc).
pw_in_userinfo='^[A-Za-z0-9+.-]+://[^/@]*:[^/@]*@'
pw_in_query='[?&](password|passwd|pwd|sslpassword)='
url_has_password() { [[ $1 =~ $pw_in_userinfo || $1 =~ $pw_in_query ]]; }

load_secret_file PGPASSWORD
load_secret_file AUTOTUNE_STORAGE
if [[ -n ${AUTOTUNE_API_KEY_ENV:-} ]]; then
  is_name "$AUTOTUNE_API_KEY_ENV" ||
    die "AUTOTUNE_API_KEY_ENV must be the NAME of a variable (e.g. VLLM_API_KEY), not the key itself"
  load_secret_file "$AUTOTUNE_API_KEY_ENV"
fi

bin=${AUTOTUNE_BIN:-autotune}

if (($# > 0)); then
  exec "$bin" "$@"
fi

mode=${AUTOTUNE_MODE:-}
case $mode in
  run | nightly) required=(AUTOTUNE_STUDY AUTOTUNE_WORKLOAD AUTOTUNE_MODEL) ;;
  worker) required=(AUTOTUNE_STUDY) ;;
  "") die "AUTOTUNE_MODE is not set (fix: set AUTOTUNE_MODE=run|nightly|worker, or pass autotune arguments, e.g. --help)" ;;
  *) die "AUTOTUNE_MODE=$mode is not one of run, nightly, worker" ;;
esac
study_file=${AUTOTUNE_STUDY_FILE:-}
if [[ -n $study_file ]]; then
  [[ -f $study_file && -r $study_file ]] ||
    die "AUTOTUNE_STUDY_FILE: cannot read the study file $study_file (fix: mount it there, e.g. the ConfigMap autotune-study, or unset AUTOTUNE_STUDY_FILE)"
  required=() # the file names the study, workload and model
fi
missing=()
for var in "${required[@]}"; do
  [[ -n ${!var:-} ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf -v missing_list '%s, ' "${missing[@]}"
  die "AUTOTUNE_MODE=$mode needs ${missing_list%, }, which the environment lacks"
fi

storage_url=${AUTOTUNE_STORAGE_URL:-}
if [[ -n $storage_url ]]; then
  [[ -z ${AUTOTUNE_STORAGE:-} ]] ||
    die "both AUTOTUNE_STORAGE_URL and AUTOTUNE_STORAGE are set (fix: set only one of them)"
  ! url_has_password "$storage_url" ||
    die "AUTOTUNE_STORAGE_URL carries a password, which every user could read in argv (fix: drop it from the URL and set PGPASSWORD or PGPASSWORD_FILE, or put the whole URL in AUTOTUNE_STORAGE or AUTOTUNE_STORAGE_FILE)"
elif [[ $mode == worker && -z ${AUTOTUNE_STORAGE:-} && -z $study_file ]]; then
  die "AUTOTUNE_MODE=worker needs AUTOTUNE_STORAGE_URL or AUTOTUNE_STORAGE (the study's shared database)"
fi
if [[ -n ${AUTOTUNE_API_KEY_ENV:-} && -z ${!AUTOTUNE_API_KEY_ENV:-} ]]; then
  die "AUTOTUNE_API_KEY_ENV names $AUTOTUNE_API_KEY_ENV, which is not set (fix: set $AUTOTUNE_API_KEY_ENV or ${AUTOTUNE_API_KEY_ENV}_FILE)"
fi

budget_s=""
if [[ -n ${AUTOTUNE_DEADLINE_SECONDS:-} ]]; then
  margin=${AUTOTUNE_DEADLINE_MARGIN_SECONDS:-1800}
  [[ $mode == nightly ]] ||
    die "AUTOTUNE_DEADLINE_SECONDS sets a night's budget; AUTOTUNE_MODE=$mode has none (fix: unset it)"
  [[ -z ${AUTOTUNE_BUDGET:-} ]] ||
    die "both AUTOTUNE_DEADLINE_SECONDS and AUTOTUNE_BUDGET are set (fix: keep only the deadline; the budget is derived from it)"
  [[ $AUTOTUNE_DEADLINE_SECONDS =~ ^[0-9]+$ && $margin =~ ^[0-9]+$ ]] ||
    die "AUTOTUNE_DEADLINE_SECONDS=$AUTOTUNE_DEADLINE_SECONDS, AUTOTUNE_DEADLINE_MARGIN_SECONDS=$margin: both must be whole seconds (fix: e.g. 9000 and 1800)"
  budget_s=$((AUTOTUNE_DEADLINE_SECONDS - margin))
  ((budget_s >= 600)) ||
    die "AUTOTUNE_DEADLINE_SECONDS=$AUTOTUNE_DEADLINE_SECONDS leaves $budget_s s after the $margin s margin, less than 10 min of tuning (fix: raise the Job's activeDeadlineSeconds)"
fi

cmd=("$mode")
[[ -z $study_file ]] || cmd+=(--file "$study_file")
[[ -z ${AUTOTUNE_STUDY:-} ]] || cmd+=(--study "$AUTOTUNE_STUDY")
# Only the options the command takes: a worker reads the workload, model and space from the study.
if [[ $mode != worker ]]; then
  [[ -z ${AUTOTUNE_WORKLOAD:-} ]] || cmd+=(--workload "$AUTOTUNE_WORKLOAD")
  [[ -z ${AUTOTUNE_MODEL:-} ]] || cmd+=(--model "$AUTOTUNE_MODEL")
  [[ -z ${AUTOTUNE_STUDIES_DIR:-} ]] || cmd+=(--studies-dir "$AUTOTUNE_STUDIES_DIR")
  [[ -z ${AUTOTUNE_OUT:-} ]] || cmd+=(--out "$AUTOTUNE_OUT")
  [[ -z ${AUTOTUNE_API_KEY_ENV:-} ]] || cmd+=(--api-key-env "$AUTOTUNE_API_KEY_ENV")
  read -r -a engine_args <<<"${AUTOTUNE_ENGINE_ARGS:-}"
  for flag in "${engine_args[@]}"; do
    [[ $flag == --?* ]] ||
      die "AUTOTUNE_ENGINE_ARGS: '$flag' is not a vLLM flag (fix: write each as --flag or --flag=value, space-separated)"
    cmd+=("--engine-arg=$flag")
  done
fi
if [[ $mode == run && -n ${AUTOTUNE_N_TRIALS:-} ]]; then
  cmd+=(--n-trials "$AUTOTUNE_N_TRIALS")
fi
if [[ $mode == nightly ]]; then
  [[ -z ${AUTOTUNE_INCUMBENT:-} ]] || cmd+=(--incumbent "$AUTOTUNE_INCUMBENT")
  [[ -z ${AUTOTUNE_BUDGET:-} ]] || cmd+=(--budget "$AUTOTUNE_BUDGET")
  [[ -z $budget_s ]] || cmd+=(--budget "${budget_s}s")
fi
[[ -z $storage_url ]] || cmd+=(--storage "$storage_url")
read -r -a extra_args <<<"${AUTOTUNE_EXTRA_ARGS:-}"
cmd+=("${extra_args[@]}")

# argv carries no secret (checked above), so the command may be logged.
printf 'autotune-entrypoint: %s' "$bin" >&2
printf ' %q' "${cmd[@]}" >&2
printf '\n' >&2
exec "$bin" "${cmd[@]}"
