# shellcheck shell=bash
# Sourced (not run) by build.sh and helm.sh: how they build Go binaries into a cache
# directory of their own, in one place. The caller sets TOOL (the prefix of its log lines) first.
#
# The cache directory, ROOT, is named after the versions built, so a version bump builds afresh
# and everything else finds its binaries with no Go command run at all. Every build:
# - waits for a build of the same ROOT already under way (flock on ROOT/.lock),
# - compiles into a stage directory under ROOT and moves each finished binary into ROOT/bin, so an
#   interrupted build never leaves a half-written binary behind,
# - uses a Go build cache (GOCACHE) inside that stage, deleted with it. A cold build of the control
#   plane fills about 6 GB of build cache that nothing reads once the binaries are in place (warm
#   runs never start the compiler); Go's default cache (~/.cache/go-build) would keep it forever.
#   The module cache (GOMODCACHE) stays Go's default: downloads are what a version bump and the
#   Go client driver of tests/clients reuse, and it can only be removed with `go clean -modcache`.
# - runs the compiler at low priority, in an isolated Go environment: no workspace file, no
#   caller's GOFLAGS, no cgo.
#
# Env knob: CONTROLPLANE_NICE=N, the compiler's niceness (default 19).

NICE="${CONTROLPLANE_NICE:-19}"

log() { printf '[%s] %s\n' "${TOOL}" "$*" >&2; }
die() {
	printf '[%s] ERROR: %s\n' "${TOOL}" "$*" >&2
	exit 1
}

# lock_cache ROOT: creates ROOT/bin and holds ROOT's lock (file descriptor 9) until the script exits.
lock_cache() {
	command -v go >/dev/null 2>&1 || die "go is not on PATH (Go >= 1.26 is needed)"
	mkdir -p "$1/bin"
	exec 9>"$1/.lock"
	flock 9
}

# open_stage ROOT: sets STAGE to a new directory under ROOT (removed when the script exits) and
# points the Go build cache into it. Call with ROOT's lock held: stages a killed build left behind
# are removed first, as no other build of ROOT can be using them.
open_stage() {
	rm -rf "$1"/.stage.*
	STAGE="$(mktemp -d "$1/.stage.XXXXXX")"
	trap 'rm -rf "${STAGE}"' EXIT
	export GOCACHE="${STAGE}/go-build" GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
}

# install_cached NAME ROOT FORCE GO-INSTALL-ARGS...: ROOT/bin/NAME, built with
# `go install GO-INSTALL-ARGS` (a module at a fixed version: built with that module's own
# go.mod/go.sum, checksum-verified as usual) unless it is there already and FORCE is not 1.
# Prints its path as the last stdout line.
install_cached() {
	local name="$1" root="$2" force="$3"
	shift 3
	local binary="${root}/bin/${name}"
	if [[ "${force}" != 1 && -x "${binary}" ]]; then
		log "up to date: ${binary}"
		printf '%s\n' "${binary}"
		return
	fi
	lock_cache "${root}"
	if [[ "${force}" != 1 && -x "${binary}" ]]; then
		log "built by a concurrent run: ${binary}"
		printf '%s\n' "${binary}"
		return
	fi
	open_stage "${root}"
	log "building ${name}: go install ${*: -1} (minutes cold)"
	local t0="${SECONDS}"
	GOBIN="${STAGE}" nice -n "${NICE}" go install -trimpath "$@"
	mv -f "${STAGE}/${name}" "${binary}"
	log "built in $((SECONDS - t0)) s"
	printf '%s\n' "${binary}"
}
