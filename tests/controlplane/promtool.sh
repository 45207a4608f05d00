#!/usr/bin/env bash
# Builds promtool (Prometheus' rule checker) from the Go module proxy, for the chart's
# PrometheusRule test (no prebuilt binaries can be downloaded here). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/<version>/bin/promtool
# A binary that is already there is not rebuilt. The last stdout line is the path of the
# binary:  PROMTOOL="$(tests/controlplane/promtool.sh)"
#
# Prometheus tags its Go module v0.<major*100+minor>.<patch> (v0.316.0 is Prometheus 3.16.0); the
# v3.x tags are not importable as Go module versions.
#
# Built with the build tag remove_all_sd: Prometheus' plugins/ package then leaves out every
# service-discovery plugin (AWS, Azure, GCE, Kubernetes, ... SDKs), which `promtool check rules`
# never uses. That takes a cold build (empty module and build caches, 2 busy cores) from about
# 9 minutes to under 3.
#
# Env knobs: PROMTOOL_FORCE=1 rebuilds; CONTROLPLANE_NICE=N niceness (default 19).
set -Eeuo pipefail

PROMTOOL_VERSION=v0.316.0

TOOL=promtool
# shellcheck source=gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/gobuild.sh"
install_cached promtool "${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/${PROMTOOL_VERSION}" \
	"${PROMTOOL_FORCE:-0}" -tags remove_all_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMTOOL_VERSION}" \
	"github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_VERSION}"
