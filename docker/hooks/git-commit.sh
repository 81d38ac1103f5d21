#!/bin/sh
# --on-promote hook (on_promote: "sh /hooks/git-commit.sh"): commit the promoted config into a Git
# repository and push it, for a GitOps controller (Argo CD, Flux) to deploy: the repository, not
# the tuner, is what the cluster follows, and `git revert` is a rollback anyone can review.
#
# From autotune (never argv): AUTOTUNE_NEW_CONFIG, AUTOTUNE_NIGHT, AUTOTUNE_OBJECTIVE,
# AUTOTUNE_BASELINE_VALUE, AUTOTUNE_BEST_VALUE (missing ones read "?"). Settings: GITOPS_REPO
# (a clone URL or path; required), GITOPS_BRANCH (main), GITOPS_PATH (the file in the repository,
# vllm/best.yaml), GITOPS_AUTHOR (autotune <autotune@localhost>). Credentials are the hook's own,
# never autotune's: an SSH deploy key through GIT_SSH_COMMAND (e.g. `ssh -i
# /etc/gitops/id_ed25519 -o UserKnownHostsFile=/etc/gitops/known_hosts`, both mounted from a
# Secret), or a credential helper reading a mounted token file. autotune removes its database
# password (PGPASSWORD, AUTOTUNE_STORAGE) from the hook's environment; the rest passes through.
set -eu

: "${AUTOTUNE_NEW_CONFIG:?is not set: this script is an autotune --on-promote hook}"
: "${GITOPS_REPO:?is not set (fix: the repository to commit to, e.g. git@github.com:org/deploy.git)}"
branch=${GITOPS_BRANCH:-main}
path=${GITOPS_PATH:-vllm/best.yaml}
author=${GITOPS_AUTHOR:-autotune <autotune@localhost>}
name=${author% <*}
email=${author##*<}
email=${email%>}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --depth 1 --branch "$branch" "$GITOPS_REPO" "$work/repo"
mkdir -p "$(dirname "$work/repo/$path")"
cp "$AUTOTUNE_NEW_CONFIG" "$work/repo/$path"
git -C "$work/repo" add -- "$path"
if git -C "$work/repo" diff --cached --quiet; then
  echo "git-commit: $path already holds this config; nothing to commit"
  exit 0
fi
git -C "$work/repo" -c user.name="$name" -c user.email="$email" commit --quiet \
  -m "autotune: promote night ${AUTOTUNE_NIGHT:-?} (${AUTOTUNE_OBJECTIVE:-objective} ${AUTOTUNE_BASELINE_VALUE:-?} -> ${AUTOTUNE_BEST_VALUE:-?})" \
  -m "The config autotune's nightly study promoted, from ${AUTOTUNE_NEW_CONFIG}."
git -C "$work/repo" push --quiet origin "HEAD:$branch"
echo "git-commit: pushed $path to $branch: $(git -C "$work/repo" rev-parse --short HEAD)"
