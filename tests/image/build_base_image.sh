#!/usr/bin/env bash
# Make the Dockerfile's base image, python:3.11-slim, locally, for machines that reach Debian's
# archive and PyPI but no container registry.
#
#   tests/image/build_base_image.sh            # import the image (build the rootfs first if not cached)
#   tests/image/build_base_image.sh --rootfs-only   # only make sure the cached rootfs tarball exists
#
# The rootfs is Debian bookworm (debootstrap --variant=minbase) with Debian's Python 3.11, pip
# and venv, behaving the way the official python:3.11-slim image does for this project's
# Dockerfile: `python` and `python -m pip` on PATH, pip installs into the system interpreter
# (Debian's EXTERNALLY-MANAGED marker removed; pip puts scripts in /usr/local/bin), `useradd`
# present, LANG=C.UTF-8, and apt sources for bookworm, bookworm-updates and bookworm-security
# (/etc/apt/sources.list.d/debian.sources), so that the Dockerfile's build stage can apt-get the
# Rust toolchain Debian keeps current there (rustc-web, cargo-web). The mirrors are the ones apt on
# this host uses (/etc/apt/sources.list*).
#
# The rootfs tarball is cached as
#   ${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/base-images/bookworm-python3.11-$BASE_VERSION.tar
# (bump BASE_VERSION when the package list or the fix-ups change). It holds no host-specific
# file: at import time the host's CA bundle (and its extra CAs from /usr/local/share/ca-certificates)
# is laid over it, so pip inside `docker build` trusts whatever TLS setup this network has.
#
# The tag is only (re)imported when it is missing or was imported by this script from another
# tarball or CA bundle (label org.rocketstore.base-image); a python:3.11-slim that came from a
# registry (no such label) is left alone.
#
# Needs: root (debootstrap, and a Docker engine the `docker` client reaches; see dockerd.sh).
set -euo pipefail

BASE_VERSION="v2"                  # cache key: bump on any change to what goes into the rootfs
SUITE="bookworm"
IMAGE_TAG="${ROCKETSTORE_BASE_IMAGE_TAG:-python:3.11-slim}"
PACKAGES="python3,python3-pip,python3-venv,python-is-python3,ca-certificates"
LABEL_KEY="org.rocketstore.base-image"

die() { echo "build_base_image.sh: error: $*" >&2; exit 1; }
note() { echo "build_base_image.sh: $*" >&2; }

rootfs_only=0
case "${1:-}" in
  --rootfs-only) rootfs_only=1 ;;
  "") ;;
  *) die "unknown argument '$1' (usage: $0 [--rootfs-only])" ;;
esac

cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/base-images"
tarball="$cache_dir/$SUITE-python3.11-$BASE_VERSION.tar"

# The mirror apt on this host uses for suite $1 (the plain suite: the main archive;
# $SUITE-security: the security archive): the first URI serving it, in deb822 (*.sources) or
# one-line (*.list) form.
debian_mirror() {
  local suite="$1" f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    case "$f" in
      *.sources)
        # paragraphs separated by blank lines; pick one whose Suites has the suite itself
        awk -v suite="$suite" '
          BEGIN { RS = ""; FS = "\n" }
          {
            uris = ""; ok = 0; deb = 0
            for (i = 1; i <= NF; i++) {
              line = $i
              if (line ~ /^[ \t]*#/) continue
              if (line ~ /^Types:/ && line ~ /(^|[ \t])deb([ \t]|$)/) deb = 1
              if (line ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", line); uris = line }
              if (line ~ /^Suites:/) {
                sub(/^Suites:[ \t]*/, "", line); n = split(line, s, /[ \t]+/)
                for (j = 1; j <= n; j++) if (s[j] == suite) ok = 1
              }
            }
            if (deb && ok && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit }
          }' "$f"
        ;;
      *)
        awk -v suite="$suite" '
          $1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit }
          }' "$f"
        ;;
    esac
  done | head -n 1
}

build_rootfs() {
  command -v debootstrap >/dev/null 2>&1 \
    || die "debootstrap is not installed (Debian: apt-get install debootstrap)"
  [ "$(id -u)" = 0 ] || die "debootstrap needs root"
  local mirror security_mirror keyring work rootfs
  mirror="$(debian_mirror "$SUITE")"
  [ -n "$mirror" ] || die "no '$SUITE' mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/"
  security_mirror="$(debian_mirror "$SUITE-security")"
  [ -n "$security_mirror" ] \
    || die "no '$SUITE-security' mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "$keyring is missing (Debian: apt-get install debian-archive-keyring)"
  mkdir -p "$cache_dir"
  work="$(mktemp -d "$cache_dir/.rootfs.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
  trap "rm -rf '$work'" EXIT
  rootfs="$work/rootfs"
  note "debootstrap $SUITE (minbase + $PACKAGES) from $mirror into $rootfs"
  debootstrap --variant=minbase --keyring="$keyring" --include="$PACKAGES" \
    "$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }

  # apt sources as in Debian's official images (debootstrap wrote only the plain suite)
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  # pip installs into the system interpreter, as in the official image
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  # images carry no package caches or lists
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
         "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
  # resolv.conf and hostname come from the engine
  : >"$rootfs/etc/resolv.conf"
  echo localhost >"$rootfs/etc/hostname"

  for tool in usr/bin/python usr/bin/python3.11 usr/sbin/useradd; do
    [ -x "$rootfs/$tool" ] || die "the rootfs has no /$tool"
  done
  [ -f "$rootfs/usr/lib/python3/dist-packages/pip/__init__.py" ] || die "the rootfs has no pip"

  tar --numeric-owner -C "$rootfs" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$work"
  trap - EXIT
  note "cached $tarball ($(du -h "$tarball" | cut -f1))"
}

if [ -s "$tarball" ]; then
  note "using cached $tarball"
else
  build_rootfs
fi
[ "$rootfs_only" = 1 ] && exit 0

command -v docker >/dev/null 2>&1 || die "the docker client is not installed (Debian: apt-get install docker.io)"
docker info >/dev/null 2>&1 \
  || die "no Docker engine answers ${DOCKER_HOST:-at the default socket} (start one: tests/image/dockerd.sh start)"

# What identifies the image: the tarball and the CA material laid over it.
host_bundle=/etc/ssl/certs/ca-certificates.crt
extra_cas=()
for crt in /usr/local/share/ca-certificates/*.crt; do
  [ -f "$crt" ] && extra_cas+=("$crt")
done
ca_files=()
[ -r "$host_bundle" ] && ca_files+=("$host_bundle")
ca_files+=("${extra_cas[@]}")
ca_digest="none"
if [ ${#ca_files[@]} -gt 0 ]; then
  ca_digest="$(cat "${ca_files[@]}" | sha256sum | cut -c1-16)"
fi
identity="$SUITE-python3.11-$BASE_VERSION/ca-$ca_digest"

current="$(docker image inspect -f "{{ index .Config.Labels \"$LABEL_KEY\" }}" "$IMAGE_TAG" 2>/dev/null || true)"
if [ "$current" = "$identity" ]; then
  note "$IMAGE_TAG is up to date ($identity)"
  exit 0
fi
if docker image inspect "$IMAGE_TAG" >/dev/null 2>&1 && { [ -z "$current" ] || [ "$current" = "<no value>" ]; }; then
  note "$IMAGE_TAG exists and was not made by this script (a registry image?): leaving it alone"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "unpacking the rootfs with its owners needs root"
stage="$(mktemp -d "${TMPDIR:-/tmp}/rocketstore-base.XXXXXX")"
# shellcheck disable=SC2064
trap "rm -rf '$stage'" EXIT
tar --numeric-owner -C "$stage" -xf "$tarball"
if [ ${#ca_files[@]} -gt 0 ]; then
  # the host's bundle as the system bundle (Debian's pip and Python's ssl read it), and the
  # extra CAs where update-ca-certificates keeps them if anything in the image reruns it
  [ -r "$host_bundle" ] && install -m 0644 "$host_bundle" "$stage/etc/ssl/certs/ca-certificates.crt"
  for crt in "${extra_cas[@]}"; do
    install -m 0644 "$crt" "$stage/usr/local/share/ca-certificates/$(basename "$crt")"
  done
fi
note "importing $IMAGE_TAG ($identity)"
tar --numeric-owner -C "$stage" -c . | docker import \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV LANG=C.UTF-8" \
  --change "ENV PYTHON_VERSION=3.11" \
  --change "LABEL $LABEL_KEY=$identity" \
  --change 'CMD ["python3"]' \
  - "$IMAGE_TAG" >/dev/null
rm -rf "$stage"
trap - EXIT
note "imported $IMAGE_TAG: $(docker image inspect -f '{{.Size}}' "$IMAGE_TAG") bytes"
