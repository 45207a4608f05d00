#!/usr/bin/env bash
# Make sure a Docker engine answers, starting our own dockerd only when none does.
#
#   eval "$(tests/image/dockerd.sh start [STATE_DIR])"   # prints DOCKER_HOST=... and DOCKERD_STARTED=0|1
#   tests/image/dockerd.sh stop [STATE_DIR]              # stops the engine only if `start` started it
#
# When `docker info` already answers (a system engine, or DOCKER_HOST pointing at one), `start`
# changes nothing and prints that engine's DOCKER_HOST. Otherwise it starts dockerd as a child of
# nobody (setsid) with
#   --data-root  ${ROCKETSTORE_DOCKER_DATA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/docker}
#                (kept, so imported base images and build layers survive between runs)
#   --exec-root, socket, pid file and log in STATE_DIR (default /tmp/rocketstore-dockerd-UID: short,
#                as unix socket paths are limited to 107 bytes, and fixed, so that an engine left
#                running by a killed run is found and adopted instead of a second dockerd being
#                started on the same data root)
# waits until the engine answers (up to ROCKETSTORE_DOCKERD_TIMEOUT seconds, default 60) and
# records the pid in STATE_DIR/started. `stop` sends SIGTERM to that pid, waits up to 30 s,
# then SIGKILL, and removes STATE_DIR's runtime files. Needs root.
set -euo pipefail

die() { echo "dockerd.sh: error: $*" >&2; exit 1; }
note() { echo "dockerd.sh: $*" >&2; }

cmd="${1:-}"
state="${2:-/tmp/rocketstore-dockerd-$(id -u)}"

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

start() {
  command -v docker >/dev/null 2>&1 || die "the docker client is not installed (Debian: apt-get install docker.io)"
  if engine_answers; then
    note "an engine already answers at ${DOCKER_HOST:-the default socket}; not starting one"
    echo "DOCKER_HOST=${DOCKER_HOST:-}"
    echo "DOCKERD_STARTED=0"
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 \
    || die "no Docker engine answers and dockerd is not installed (Debian: apt-get install docker.io)"
  [ "$(id -u)" = 0 ] || die "no Docker engine answers, and starting dockerd needs root"
  mkdir -p "$state"
  state="$(cd "$state" && pwd)"
  local sock="$state/docker.sock"
  if [ -f "$state/started" ]; then
    local old
    old="$(cat "$state/started")"
    if kill -0 "$old" 2>/dev/null && DOCKER_HOST="unix://$sock" engine_answers; then
      note "adopting dockerd pid $old left running from $state by an earlier run"
      echo "DOCKER_HOST=unix://$sock"
      echo "DOCKERD_STARTED=1"
      return 0
    fi
    stop_pid "$old"
    rm -f "$state/started"
  fi
  [ ${#sock} -le 100 ] || die "STATE_DIR path too long for a unix socket: $sock"
  local data_root="${ROCKETSTORE_DOCKER_DATA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketstore/docker}"
  mkdir -p "$data_root"
  # a data root is used by one engine at a time; a stale pid file from a killed run is harmless
  setsid dockerd \
    --data-root "$data_root" \
    --exec-root "$state/exec" \
    --pidfile "$state/docker.pid" \
    --host "unix://$sock" \
    </dev/null >"$state/dockerd.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$state/started"
  local deadline=$(( SECONDS + ${ROCKETSTORE_DOCKERD_TIMEOUT:-60} ))
  until DOCKER_HOST="unix://$sock" engine_answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$state/dockerd.log" >&2 || true
      rm -f "$state/started"
      die "dockerd exited during start-up (log: $state/dockerd.log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$state/dockerd.log" >&2 || true
      stop_pid "$pid"
      rm -f "$state/started"
      die "dockerd did not answer within ${ROCKETSTORE_DOCKERD_TIMEOUT:-60} s (log: $state/dockerd.log)"
    fi
    sleep 0.5
  done
  # the engine's own pid file is the authority (setsid may have forked)
  if [ -s "$state/docker.pid" ]; then
    pid="$(cat "$state/docker.pid")"
    echo "$pid" >"$state/started"
  fi
  note "started dockerd pid $pid (data root $data_root, socket $sock)"
  echo "DOCKER_HOST=unix://$sock"
  echo "DOCKERD_STARTED=1"
}

stop_pid() {
  local pid="$1"
  # only a dockerd: a pid recorded by a run before a reboot may belong to anything now
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  note "dockerd pid $pid did not stop in 30 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  if [ ! -f "$state/started" ]; then
    note "no engine started from $state: nothing to stop"
    return 0
  fi
  local pid
  pid="$(cat "$state/started")"
  stop_pid "$pid"
  rm -f "$state/started" "$state/docker.sock" "$state/docker.pid"
  rm -rf "$state/exec"
  note "stopped dockerd pid $pid"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start [STATE_DIR] | stop [STATE_DIR]" ;;
esac
