#!/usr/bin/env bash
# promtool (Prometheus' rule checker) for the chart's PrometheusRule test, from the Debian/Ubuntu
# package `prometheus`: downloaded with `apt-get download` (no root needed) and unpacked, never
# installed (installing it would start a Prometheus server on the machine). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/<package version>/bin/promtool
# A binary that is already there is used as it is. The last stdout line is the path of the
# binary:  PROMTOOL="$(tests/controlplane/promtool.sh)"
#
# Why not built from Go modules as the control plane and helm are: a cold build took 7.4 minutes
# of CPU (measured 2026-11-27), on the critical path of a cold test run, for a checker that the
# distribution already ships. The version is the one apt offers (Debian 12: Prometheus 2.42):
# rules that pass an older promtool load in the newer servers too.
set -Eeuo pipefail

log() { printf '[promtool] %s\n' "$*" >&2; }
die() {
	printf '[promtool] ERROR: %s\n' "$*" >&2
	exit 1
}

command -v apt-get >/dev/null 2>&1 || die "apt-get is not available: install promtool (Prometheus 2.x or 3.x) yourself"
version="$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p')"
if [[ -z "${version}" || "${version}" == "(none)" ]]; then
	die "apt knows no package 'prometheus' (run 'sudo apt-get update' first?)"
fi
root="${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/promtool/${version}"
binary="${root}/bin/promtool"
if [[ -x "${binary}" ]]; then
	printf '%s\n' "${binary}"
	exit 0
fi

mkdir -p "${root}"
exec 9>"${root}/.lock"
flock 9 # one download per version at a time
if [[ ! -x "${binary}" ]]; then
	stage="$(mktemp -d "${root}/.stage.XXXXXX")"
	trap 'rm -rf "${stage}"' EXIT
	log "downloading Debian's prometheus ${version} for its promtool"
	(cd "${stage}" && apt-get download -q "prometheus=${version}" >&2)
	dpkg-deb -x "${stage}"/prometheus_*.deb "${stage}/root"
	[[ -x "${stage}/root/usr/bin/promtool" ]] || die "the package prometheus ${version} has no usr/bin/promtool"
	mkdir -p "${root}/bin"
	mv -f "${stage}/root/usr/bin/promtool" "${binary}"
	log "-> ${binary}"
fi
printf '%s\n' "${binary}"
