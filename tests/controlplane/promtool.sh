#!/usr/bin/env bash
# Builds promtool (Prometheus' rule checker) from the Go module proxy, for the chart's
# PrometheusRule test (no prebuilt binaries can be downloaded here). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/<version>/bin/promtool
# A binary that is already there is not rebuilt. The last stdout line is the path of the
# binary:  PROMTOOL="$(tests/controlplane/promtool.sh)"
#
# Prometheus tags its Go module v0.<major*100+minor>.<patch> (v0.316.0 is Prometheus 3.16.0); the
# v3.x tags are not importable as Go module versions. go install of a module version builds with
# that module's own go.mod/go.sum, verified against the checksum database as usual.
#
# Built with the build tag remove_all_sd: Prometheus' plugins/ package then leaves out every
# service-discovery plugin (AWS, Azure, GCE, Kubernetes, ... SDKs), which `promtool check rules`
# never uses. That takes a cold build (empty module and build caches, 2 busy cores) from about
# 9 minutes to under 3.
#
# Env knobs: PROMTOOL_FORCE=1 rebuilds; CONTROLPLANE_NICE=N niceness (default 19).
set -Eeuo pipefail

PROMTOOL_VERSION=v0.316.0

ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/${PROMTOOL_VERSION}"
BIN="${ROOT}/bin"
NICE="${CONTROLPLANE_NICE:-19}"

log() { printf '[promtool] %s\n' "$*" >&2; }

if [[ "${PROMTOOL_FORCE:-0}" != 1 && -x "${BIN}/promtool" ]]; then
	log "up to date: ${PROMTOOL_VERSION}"
	printf '%s\n' "${BIN}/promtool"
	exit 0
fi
command -v go >/dev/null 2>&1 || { log "ERROR: go is not on PATH"; exit 1; }
mkdir -p "${BIN}"
exec 9>"${ROOT}/.lock"
flock 9
if [[ "${PROMTOOL_FORCE:-0}" != 1 && -x "${BIN}/promtool" ]]; then
	printf '%s\n' "${BIN}/promtool"
	exit 0
fi
STAGE="$(mktemp -d "${ROOT}/.stage.XXXXXX")"
trap 'rm -rf "${STAGE}"' EXIT
log "building promtool ${PROMTOOL_VERSION} (minutes cold)"
T0=$(date +%s)
GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="${STAGE}" \
	nice -n "${NICE}" go install -trimpath -tags remove_all_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMTOOL_VERSION}" \
	"github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_VERSION}"
mv -f "${STAGE}/promtool" "${BIN}/promtool"
log "built in $(($(date +%s) - T0)) s"
printf '%s\n' "${BIN}/promtool"
