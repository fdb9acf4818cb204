#!/usr/bin/env bash
# The Podman tier, idempotently: Podman's Docker-compatible API socket with the images the
# tests use. As root on Debian it installs podman and catatonit (Podman's --init), caps
# Podman's default ulimits at this machine's hard limits, starts `podman system service` on
# $SANDBOX_PODMAN_SOCKET (default /run/podman/podman.sock) and loads the images from Docker
# when Podman lacks them or has other ones. Elsewhere it says what to install.
# The last line it prints is the DOCKER_HOST to use.
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK=${SANDBOX_PODMAN_SOCKET:-/run/podman/podman.sock}
IMAGES=(sandbox-session:latest debian:bookworm-slim)
say() { echo "[podman] $*" >&2; }

if ! command -v podman >/dev/null 2>&1 || ! command -v catatonit >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's podman and catatonit"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman catatonit >/dev/null \
      || { apt-get update -q >/dev/null \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman catatonit >/dev/null; }
  else
    say "install podman (4.3 or newer) and catatonit, then start its API socket:"
    say "  rootful: sudo systemctl enable --now podman.socket   (DOCKER_HOST=unix:///run/podman/podman.sock)"
    say "  rootless: systemctl --user enable --now podman.socket (DOCKER_HOST=unix://\$XDG_RUNTIME_DIR/podman/podman.sock);"
    say "  rootless needs subuid/subgid ranges for the user and cgroup v2 with the cpu, memory"
    say "  and pids controllers delegated to it, or the limits cannot be set."
    exit 1
  fi
fi

# Podman's default ulimits may exceed what this machine allows (a hard open-files limit of
# 20000 here), and then every container fails with "error setting rlimit type 7".
conf=/etc/containers/containers.conf
if [ "$(id -u)" = 0 ] && ! grep -qs '^[[:space:]]*default_ulimits' "$conf"; then
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ] && nproc=4096
  ulimits="default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
  say "capping Podman's default ulimits in $conf (nofile=$nofile, nproc=$nproc)"
  mkdir -p "$(dirname "$conf")"
  if grep -qs '^\[containers\]' "$conf"; then
    sed -i "/^\[containers\]/a $ulimits" "$conf"
  else
    printf '\n[containers]\n%s\n' "$ulimits" >>"$conf"
  fi
  pkill -f "podman system service .*unix://$SOCK" 2>/dev/null || true  # reread on start
fi

ping() { curl -fsS --max-time 2 --unix-socket "$SOCK" http://podman/_ping >/dev/null 2>&1; }
if ! ping; then
  say "starting the API service on unix://$SOCK"
  mkdir -p "$(dirname "$SOCK")"
  # from the socket's folder: conmon writes an empty file named "oom" into its working
  # directory when a container's process is OOM-killed, and its working directory is ours
  (cd "$(dirname "$SOCK")" && exec nohup podman system service --time=0 "unix://$SOCK" >/var/log/sandbox-podman.log 2>&1) &
  for _ in $(seq 100); do ping && break; sleep 0.2; done
  ping || { say "the service did not answer; see /var/log/sandbox-podman.log"; exit 1; }
fi

# Nothing can be pulled here: the images come from Docker's store (same image IDs).
for image in "${IMAGES[@]}"; do
  want=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null | sed 's/^sha256://') || want=
  [ -n "$want" ] || { say "Docker has no $image to load"; continue; }
  have=$(podman image inspect -f '{{.Id}}' "$image" 2>/dev/null | sed 's/^sha256://') || have=
  if [ "$have" != "$want" ]; then
    say "loading $image from Docker"
    docker save "$image" | podman load -q >/dev/null
  fi
done
echo "unix://$SOCK"
