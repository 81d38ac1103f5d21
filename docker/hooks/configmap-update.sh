#!/bin/sh
# --on-promote hook (on_promote: "sh /hooks/configmap-update.sh"): deliver the promoted config to
# the serving Deployment of docker/k8s/serving.yaml. It replaces the ConfigMap the Deployment
# mounts with the new export, then sets the pod template's annotation to the file's SHA-256,
# which rolls the Deployment (the same config twice: no change, no restart). With
# VLLM_ROLLOUT_TIMEOUT set (e.g. 15m) it waits for the rollout, and when the new pods do not
# become ready it puts the previous config back (AUTOTUNE_PREVIOUS_CONFIG) and exits 7: the night
# exits with its hook's code (7, which the CronJob's podFailurePolicy names) and its export stays
# on the claim.
#
# From autotune (never argv): AUTOTUNE_NEW_CONFIG, AUTOTUNE_PREVIOUS_CONFIG (empty the first
# time), AUTOTUNE_NIGHT. Settings: VLLM_CONFIGMAP (vllm-best-config), VLLM_CONFIG_KEY (best.yaml),
# VLLM_DEPLOYMENT (vllm), VLLM_NAMESPACE (the pod's own), VLLM_ROLLOUT_TIMEOUT (unset: do not
# wait), KUBECTL (kubectl). kubectl authenticates with the pod's account (rbac-promote.yaml).
set -eu

: "${AUTOTUNE_NEW_CONFIG:?is not set: this script is an autotune --on-promote hook}"
cm=${VLLM_CONFIGMAP:-vllm-best-config}
key=${VLLM_CONFIG_KEY:-best.yaml}
deploy=${VLLM_DEPLOYMENT:-vllm}
kubectl=${KUBECTL:-kubectl}
annotation=autotune.vllm.ai/config-sha256
ns=${VLLM_NAMESPACE:-}
k() {
  if [ -n "$ns" ]; then "$kubectl" --namespace "$ns" "$@"; else "$kubectl" "$@"; fi
}

deliver() { # deliver CONFIG_FILE
  sum=$(sha256sum "$1" | cut -d ' ' -f 1)
  k create configmap "$cm" --from-file="$key=$1" --dry-run=client -o yaml | k apply -f -
  k patch deployment "$deploy" --type=merge \
    -p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"$annotation\":\"$sum\"}}}}}"
  echo "configmap-update: night ${AUTOTUNE_NIGHT:-?}: configmap/$cm $key <- $1 (sha256 $sum); deployment/$deploy rolls"
}

deliver "$AUTOTUNE_NEW_CONFIG"
[ -n "${VLLM_ROLLOUT_TIMEOUT:-}" ] || exit 0
if k rollout status deployment "$deploy" --timeout="$VLLM_ROLLOUT_TIMEOUT"; then
  exit 0
fi
echo "configmap-update: deployment/$deploy did not become ready within $VLLM_ROLLOUT_TIMEOUT with the new config" >&2
if [ -n "${AUTOTUNE_PREVIOUS_CONFIG:-}" ] && [ -f "$AUTOTUNE_PREVIOUS_CONFIG" ]; then
  echo "configmap-update: putting the previous config back" >&2
  deliver "$AUTOTUNE_PREVIOUS_CONFIG"
fi
exit 7
