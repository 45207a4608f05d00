#!/usr/bin/env bash
# Builds a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) plus kwok from Go modules,
# for the operator's tests, and what a real node adds to it (node.py): kubelet and
# kube-proxy from the same Kubernetes module, CoreDNS from its own. No container
# registry is needed.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/<key>/bin
# where <key> = <kube-version>-<etcd-version>-kwok<kwok-version>.
# A binary that is already present there is not rebuilt, so a warm run takes
# well under a second. Progress goes to stderr; the last line on stdout is the
# bin directory, so callers can do:  BIN="$(tests/controlplane/build.sh)"
#
#   build.sh                    everything: the control plane first, then the node's binaries
#   build.sh control-plane      the control plane only (what tests/operator starts)
#   build.sh --check [control-plane]
#                               builds nothing: exits 0 when those binaries are all there, else 1
#
# The control plane comes first so that a cold tests/run can start tests/operator as soon as it
# is built (it polls with --check) while kubelet, kube-proxy and CoreDNS are still compiling. The
# two parts are one build, not two calls: the node's kubelet and kube-proxy share most of their
# packages with the control plane's binaries, and the Go build cache lives only as long as one
# build (gobuild.sh), so a second call would compile those packages again.
#
# Env knobs:
#   CONTROLPLANE_FORCE=1   rebuild even if the binaries exist
#   CONTROLPLANE_NICE=N    niceness for the compiler (default 19)
# How it locks, stages and caches: gobuild.sh.
set -Eeuo pipefail

# Versions. They must match kube/go.mod and etcd/go.mod (checked below).
KUBE_VERSION=v1.34.10
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
# CoreDNS is its own main module: `go install` at a fixed version verifies it
# against the checksum database. Not part of KEY (a CoreDNS bump rebuilds CoreDNS
# only: its binary reports its version, checked below).
COREDNS_VERSION=v1.14.7

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KEY="${KUBE_VERSION}-${ETCD_VERSION}-kwok${KWOK_VERSION}"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/controlplane/${KEY}"
BIN="${ROOT}/bin"
# Standalone kwok has no built-in lifecycle; it needs Stage objects. They are
# assembled from the kwok module's own default stages (see below).
STAGES="${ROOT}/kwok-stages.yaml"
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
NODE=(kubelet kube-proxy coredns)
BINARIES=("${CONTROL_PLANE[@]}" "${NODE[@]}")

check=false
if [[ "${1:-}" == --check ]]; then
	check=true
	shift
fi
case "${1:-}" in
"") part=all ;;
control-plane) part=control-plane ;;
*)
	echo "usage: build.sh [--check] [control-plane]" >&2
	exit 2
	;;
esac

TOOL=controlplane
# shellcheck source=gobuild.sh
source "${HERE}/gobuild.sh"
trap 'rc=$?; printf "[controlplane] ERROR: build failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit "$rc"' ERR

# The version is read whole before it is matched: `coredns -version | grep -q` under pipefail
# fails when grep exits at the first line and coredns dies of SIGPIPE writing the second (seen
# in a cold run: a complete build reported "some outputs are still missing").
coredns_current() {
	local version
	[[ -x "${BIN}/coredns" ]] && version="$("${BIN}/coredns" -version 2>/dev/null)" &&
		[[ $'\n'"${version}"$'\n' == *$'\n'"CoreDNS-${COREDNS_VERSION#v}"$'\n'* ]]
}

# The control plane's binaries and kwok's stages are there.
have_control_plane() {
	local b
	for b in "${CONTROL_PLANE[@]}"; do
		[[ -x "${BIN}/${b}" ]] || return 1
	done
	[[ -s "${STAGES}" ]]
}

have_all() {
	local b
	for b in "${NODE[@]}"; do
		[[ -x "${BIN}/${b}" ]] || return 1
	done
	have_control_plane && coredns_current
}

# Whether the part asked for is built.
have_part() {
	if [[ "${part}" == control-plane ]]; then have_control_plane; else have_all; fi
}

if "${check}"; then
	have_part || exit 1
	exit 0
fi

if [[ "${CONTROLPLANE_FORCE:-0}" != 1 ]] && have_part; then
	log "up to date: ${KEY} (${part})"
	printf '%s\n' "${BIN}"
	exit 0
fi

# One build per cache key at a time (parallel test runners may race here).
lock_cache "${ROOT}"
if [[ "${CONTROLPLANE_FORCE:-0}" != 1 ]] && have_part; then
	log "built by a concurrent run: ${KEY} (${part})"
	printf '%s\n' "${BIN}"
	exit 0
fi

# The wrapper modules' go.mod/go.sum must already be complete (-mod=readonly).
open_stage "${ROOT}"
GO=(nice -n "${NICE}" go)

need() {
	[[ "${CONTROLPLANE_FORCE:-0}" == 1 || ! -x "${BIN}/$1" ]] && return 0
	[[ "$1" == coredns ]] && ! coredns_current
}

# Moves freshly built binaries from the stage into bin/ (atomic rename).
install_bins() {
	local b
	for b in "$@"; do
		[[ -x "${STAGE}/${b}" ]] || die "expected ${STAGE}/${b} after build"
		mv -f "${STAGE}/${b}" "${BIN}/${b}"
		log "  -> ${BIN}/${b} ($(du -h "${BIN}/${b}" | cut -f1))"
	done
}

check_pin() { # module-dir module-path expected-version
	local got
	got="$(cd "$1" && go list -mod=readonly -m -f '{{.Version}}' "$2")" ||
		die "cannot resolve $2 in $1 (go.mod/go.sum incomplete?)"
	[[ "${got}" == "$3" ]] || die "$1/go.mod pins $2 ${got}, build.sh expects $3"
}

log "go: $(go version)"
log "target: ${BIN}"
start=${SECONDS}

# --- etcd --------------------------------------------------------------------
if need etcd; then
	check_pin "${HERE}/etcd" go.etcd.io/etcd/server/v3 "${ETCD_VERSION}"
	log "building etcd (${ETCD_VERSION})"
	(cd "${HERE}/etcd" && "${GO[@]}" build -mod=readonly -trimpath \
		-ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=gomod-${ETCD_VERSION}" \
		-o "${STAGE}/etcd" go.etcd.io/etcd/server/v3)
	install_bins etcd
fi

# --- kwok (go install at a fixed version, checksum-verified); kwokctl, its cluster manager, is
# not built: controlplane.py starts the processes itself ------------------------------------------
kwok_pkgs=()
kwok_bins=()
for b in kwok; do
	if need "${b}"; then
		kwok_pkgs+=("sigs.k8s.io/kwok/cmd/${b}@${KWOK_VERSION}")
		kwok_bins+=("${b}")
	fi
done
if ((${#kwok_pkgs[@]})); then
	log "building ${kwok_bins[*]} (${KWOK_VERSION})"
	(cd "${STAGE}" && GOBIN="${STAGE}" "${GO[@]}" install -trimpath \
		-ldflags "-s -w" "${kwok_pkgs[@]}")
	install_bins "${kwok_bins[@]}"
fi

# --- kwok stages -------------------------------------------------------------
# kwokctl (not built) injects "fast" node/pod stages for the clusters it creates; a bare
# `kwok` process only gets what --config gives it. Assemble the same default
# set from the kwok module source (already in the module cache after go install).
if [[ "${CONTROLPLANE_FORCE:-0}" == 1 || ! -s "${STAGES}" ]]; then
	kwok_dir="$(cd "${STAGE}" && go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -d "${kwok_dir}/kustomize/stage" ]] || die "kwok ${KWOK_VERSION} source not found in the module cache"
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		[[ -s "${kwok_dir}/kustomize/stage/${f}" ]] || die "missing kwok stage ${f}"
		printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "${KWOK_VERSION}" "${f}"
		cat "${kwok_dir}/kustomize/stage/${f}"
	done >"${STAGE}/kwok-stages.yaml"
	mv -f "${STAGE}/kwok-stages.yaml" "${STAGES}"
	log "  -> ${STAGES}"
fi

# --- Kubernetes ------------------------------------------------------------
# build_kube BINARY...: those of k8s.io/kubernetes/cmd that are missing, in one `go build`.
build_kube() {
	local b pkgs=() bins=() minor build_date ldflags p
	for b in "$@"; do
		if need "${b}"; then
			pkgs+=("k8s.io/kubernetes/cmd/${b}")
			bins+=("${b}")
		fi
	done
	((${#pkgs[@]})) || return 0
	check_pin "${HERE}/kube" k8s.io/kubernetes "${KUBE_VERSION}"
	check_pin "${HERE}/kube" k8s.io/component-base "v0.${KUBE_VERSION#v1.}"
	minor="${KUBE_VERSION#v1.}"
	minor="${minor%%.*}"
	build_date="$(cd "${HERE}/kube" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X ${p}.gitVersion=${KUBE_VERSION}"
		ldflags+=" -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
		ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${build_date}"
	done
	log "building ${bins[*]} (${KUBE_VERSION}); cold, all five: ~20-30 min on 2 cores"
	(cd "${HERE}/kube" && "${GO[@]}" build -mod=readonly -trimpath \
		-tags selinux,notest -ldflags "${ldflags}" -o "${STAGE}/" "${pkgs[@]}")
	install_bins "${bins[@]}"
}

# The control plane: everything tests/operator needs.
build_kube kube-apiserver kube-controller-manager kube-scheduler
have_control_plane || die "some control-plane outputs are still missing in ${ROOT}"
log "control plane ready in $((SECONDS - start))s"
if [[ "${part}" == control-plane ]]; then
	printf '%s\n' "${BIN}"
	exit 0
fi

# The node (node.py): kubelet and kube-proxy reuse the build cache the control plane filled.
build_kube kubelet kube-proxy

# --- CoreDNS (cluster DNS of the real node) -----------------------------------
if need coredns; then
	log "building coredns (${COREDNS_VERSION})"
	(cd "${STAGE}" && GOBIN="${STAGE}" "${GO[@]}" install -trimpath \
		-ldflags "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}")
	install_bins coredns
fi

have_all || die "some outputs are still missing in ${ROOT}"
{
	echo "kube=${KUBE_VERSION} etcd=${ETCD_VERSION} kwok=${KWOK_VERSION} coredns=${COREDNS_VERSION}"
	echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go version)"
	(cd "${BIN}" && sha256sum "${BINARIES[@]}")
} >"${ROOT}/MANIFEST"
log "done in $((SECONDS - start))s"
printf '%s\n' "${BIN}"
