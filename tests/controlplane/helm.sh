#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy for the chart tests (no prebuilt
# binaries can be downloaded here). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/helm-<version>/bin/helm
# A binary that is already there is not rebuilt (about 10 ms); a cold build takes about 7 min.
# The last stdout line is the path of the helm binary:  HELM="$(tests/controlplane/helm.sh)"
#
# Env knobs: HELM_FORCE=1 rebuilds; CONTROLPLANE_NICE=N niceness (default 19).
set -Eeuo pipefail

HELM_VERSION=v3.19.5

TOOL=helm
# shellcheck source=gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/gobuild.sh"
install_cached helm "${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/helm-${HELM_VERSION}" \
	"${HELM_FORCE:-0}" -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
	"helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
