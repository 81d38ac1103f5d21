#!/usr/bin/env bash
# The --on-promote hook of round4_h200.sh: what a deploy step receives, kept for the record.
# usage: on_promote_h200.sh DIR   (DIR gets the promoted file and the hook's environment)
set -euo pipefail
dir=${1:?usage: on_promote_h200.sh DIR}
mkdir -p "$dir"
n=${AUTOTUNE_NIGHT:-unknown}
cp "$AUTOTUNE_NEW_CONFIG" "$dir/night-$n.yaml"
env | grep '^AUTOTUNE_' | sort > "$dir/night-$n.env"
echo "hook: night $n promoted $AUTOTUNE_NEW_CONFIG (previous: ${AUTOTUNE_PREVIOUS_CONFIG:-none})"
