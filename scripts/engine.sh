#!/usr/bin/env bash
# Make sure a Docker engine answers and the base image of the session image exists.
#
# - If `docker info` answers, nothing is installed.
# - Else, if we are root on Debian, install Debian's docker.io and start dockerd in the background.
# - Else, say exactly what to install and fail.
# - If `debian:bookworm-slim` is missing and cannot be pulled, make it locally with mmdebstrap
#   (it uses the host's own apt sources) and `docker import` it.
set -euo pipefail

log() { printf '[engine] %s\n' "$*" >&2; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

is_debian_root() { [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; }

apt_install() {
  if [ ! -f /var/lib/apt/lists/.sandbox-updated ] || [ -z "$(ls /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial | head -1)" ]; then
    apt-get update -qq && touch /var/lib/apt/lists/.sandbox-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

start_engine() {
  if ! command -v dockerd >/dev/null; then
    log "installing Debian's docker.io"
    apt_install docker.io iptables ca-certificates
  fi
  log "starting dockerd in the background (log: /var/log/sandbox-dockerd.log)"
  mkdir -p /etc/docker
  nohup dockerd >/var/log/sandbox-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    if engine_answers; then log "engine answers"; return 0; fi
    sleep 1
  done
  log "dockerd did not answer within 60 s; last lines of its log:"
  tail -n 30 /var/log/sandbox-dockerd.log >&2 || true
  return 1
}

ensure_engine() {
  if engine_answers; then return 0; fi
  if [ -n "${DOCKER_HOST:-}" ]; then
    log "DOCKER_HOST=$DOCKER_HOST does not answer; fix it or unset it"; return 1
  fi
  if is_debian_root; then start_engine; return; fi
  cat >&2 <<'MSG'
[engine] No Docker engine answers. Install and start one, then run this again:
  - Linux: Docker Engine (https://docs.docker.com/engine/install/) or Podman with its
    Docker-compatible socket (systemctl --user enable --now podman.socket;
    export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock)
  - macOS: Docker Desktop, or Podman Desktop / `podman machine start`
MSG
  return 1
}

ensure_base_image() {
  local base=debian:bookworm-slim
  if docker image inspect "$base" >/dev/null 2>&1; then return 0; fi
  if timeout 60 docker pull -q "$base" >/dev/null 2>&1; then return 0; fi
  if ! is_debian_root; then
    log "cannot pull $base and cannot build it here: pull it on a machine with registry access"; return 1
  fi
  command -v mmdebstrap >/dev/null || { log "installing mmdebstrap"; apt_install mmdebstrap; }
  local tmp; tmp=$(mktemp -d)
  log "making $base locally with mmdebstrap (about a minute)"
  mmdebstrap --quiet --variant=minbase bookworm "$tmp/rootfs.tar"
  docker import "$tmp/rootfs.tar" "$base" >/dev/null
  rm -rf "$tmp"
  log "imported $base"
}

# gVisor: where we provision the engine ourselves (root on Debian, the engine on this host),
# install Debian's runsc and register it as the runtime "runsc" (networking off: this build
# cannot do more), reloading dockerd with SIGHUP: running containers are not touched.
# SANDBOX_GVISOR=0 skips it.
runsc_registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

ensure_runsc() {
  [ "${SANDBOX_GVISOR:-1}" = 1 ] || return 0
  is_debian_root || return 0
  [ -z "${DOCKER_HOST:-}" ] || return 0
  local pid; pid=$(pidof dockerd 2>/dev/null | awk '{print $1}') || true
  [ -n "$pid" ] || return 0
  if runsc_registered; then return 0; fi
  if ! command -v runsc >/dev/null; then
    log "installing Debian's runsc (the gVisor tier)"
    apt_install runsc || { log "runsc could not be installed: the gVisor tier is skipped"; return 0; }
  fi
  log "registering runsc with dockerd (daemon.json, SIGHUP)"
  mkdir -p /etc/docker
  python3 - "$(command -v runsc)" <<'PY'
import json, pathlib, sys
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text() or "{}") if path.exists() else {}
config.setdefault("runtimes", {})["runsc"] = {"path": sys.argv[1], "runtimeArgs": ["--network=none"]}
path.write_text(json.dumps(config, indent=2) + "\n")
PY
  kill -HUP "$pid"
  for _ in $(seq 1 20); do
    if runsc_registered; then log "runsc registered"; return 0; fi
    sleep 0.5
  done
  log "dockerd did not pick up runsc (see its log): the gVisor tier is skipped"
}

ensure_engine
ensure_base_image
ensure_runsc
