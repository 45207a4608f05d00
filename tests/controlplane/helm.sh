#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy for the chart tests (no prebuilt
# binaries can be downloaded here). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/helm-<version>/bin/helm
# A binary that is already there is not rebuilt (about 10 ms). The last stdout
# line is the path of the helm binary:  HELM="$(tests/controlplane/helm.sh)"
#
# Env knobs: HELM_FORCE=1 rebuilds; CONTROLPLANE_NICE=N niceness (default 19).
set -Eeuo pipefail

HELM_VERSION=v3.19.5

ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/helm-${HELM_VERSION}"
BIN="${ROOT}/bin"
NICE="${CONTROLPLANE_NICE:-19}"

log() { printf '[helm] %s\n' "$*" >&2; }

if [[ "${HELM_FORCE:-0}" != 1 && -x "${BIN}/helm" ]]; then
	log "up to date: ${HELM_VERSION}"
	printf '%s\n' "${BIN}/helm"
	exit 0
fi
command -v go >/dev/null 2>&1 || { log "ERROR: go is not on PATH"; exit 1; }
mkdir -p "${BIN}"
exec 9>"${ROOT}/.lock"
flock 9
if [[ "${HELM_FORCE:-0}" != 1 && -x "${BIN}/helm" ]]; then
	printf '%s\n' "${BIN}/helm"
	exit 0
fi
STAGE="$(mktemp -d "${ROOT}/.stage.XXXXXX")"
trap 'rm -rf "${STAGE}"' EXIT
log "building helm ${HELM_VERSION} (a few minutes cold)"
T0=$(date +%s)
# go install of a module version uses that module's own go.mod/go.sum; checksums are verified
# against the checksum database as usual.
GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="${STAGE}" \
	nice -n "${NICE}" go install -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
	"helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv -f "${STAGE}/helm" "${BIN}/helm"
log "built in $(($(date +%s) - T0)) s"
printf '%s\n' "${BIN}/helm"
