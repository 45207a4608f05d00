#!/usr/bin/env bash
# Smoke test for the control plane built by build.sh: starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok on
# 127.0.0.1 only, registers one fake kwok node, checks that a pod is scheduled
# onto it and reported Running, then stops everything it started.
#
# The start/stop logic lives in ONE place, controlplane.py next to this file,
# which the operator's pytest fixtures use too.
#
# Needs: python3, openssl. CONTROLPLANE_BIN=<dir> skips build.sh;
# CONTROLPLANE_KEEP=1 keeps the work dir.
set -Eeuo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "${HERE}/controlplane.py" smoke
