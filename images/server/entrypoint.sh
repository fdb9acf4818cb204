#!/bin/sh
# sandbox-server entrypoint: check that the engine answers to this unprivileged user, then
# exec `sandbox "$@"` (by default: serve --host 0.0.0.0 --port 8765).
#
# The server reaches the engine through the socket's group, whose id differs per host. When the
# container was started without that group, say exactly which group to add instead of letting
# the server fail later with a bare "permission denied".
set -eu

case "${DOCKER_HOST:-unix:///var/run/docker.sock}" in
  unix://*)
    sock=${DOCKER_HOST:-unix:///var/run/docker.sock}
    sock=${sock#unix://}
    if [ ! -S "$sock" ]; then
      echo "sandbox-server: no engine socket at $sock." >&2
      echo "  Mount the host's socket: -v /var/run/docker.sock:$sock" \
           "(compose.yaml does; DOCKER_SOCKET names another host path)." >&2
      exit 78
    fi
    if [ ! -w "$sock" ] || [ ! -r "$sock" ]; then
      gid=$(stat -c %g "$sock")
      echo "sandbox-server: user $(id -u) (groups $(id -G)) cannot use $sock," \
           "which belongs to group $gid." >&2
      echo "  Add that group to the container:" >&2
      echo "    compose:    DOCKER_GID=$gid docker compose up -d" \
           "(or put DOCKER_GID=$gid in .env)" >&2
      echo "    docker run: --group-add $gid" >&2
      echo "  On the host, the same number is: stat -c %g /var/run/docker.sock" >&2
      exit 77
    fi
    ;;
esac

exec sandbox "$@"
