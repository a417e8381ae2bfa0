#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd from the Go module proxy into a cache outside the
# repository, and prints the cache directory: a thin call to
#
#   python -m kdispatch.testing.envtest build [--with-scheduler]
#
# which owns the pins (kdispatch/testing/envtest/modules/{kube-apiserver,etcd}/go.{mod,sum}),
# the cache (KDISPATCH_K8S_CACHE=DIR, else ~/.cache/kdispatch/k8s-<version>) and its stamp.
# Uses $PYTHON, else the repository's .venv, else python3.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-}
if [[ -z $py ]]; then
    if [[ -x $repo/.venv/bin/python ]]; then py=$repo/.venv/bin/python; else py=python3; fi
fi
cd "$repo"
exec "$py" -m kdispatch.testing.envtest build "$@"
