#!/usr/bin/env bash
# Build the team server image sandbox-server:latest in one step:
#   1. the wheelhouse build/wheels, made on the host: the project's wheel and the wheels of all
#      its dependencies (and of its build backend), for the image's Python (Debian bookworm:
#      CPython 3.11) and the engine's architecture, whatever Python the host runs;
#   2. the image, from images/server/Dockerfile with the repository root as the context; it
#      installs from the wheelhouse with --no-index, so the build never needs a package index
#      (containers may not reach one: TLS interception, air gap).
# Also builds the session image sandbox-session:latest when it is missing.
#
# Usage: scripts/server-image.sh [--if-stale]
#   --if-stale   do nothing when sandbox-server:latest is newer than every source file
# Environment: PYTHON (default .venv/bin/python, else python3), SERVER_IMAGE
#   (default sandbox-server:latest).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${SERVER_IMAGE:-sandbox-server:latest}
WHEELS=build/wheels
PY_VERSION=3.11   # the python3 of debian:bookworm-slim, the image's base

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi

say() { echo "[server-image] $*" >&2; }

if [ "${1:-}" = "--if-stale" ]; then
  created=$(docker image inspect -f '{{.Created}}' "$IMAGE" 2>/dev/null || true)
  if [ -n "$created" ]; then
    newer=$(find pyproject.toml README.md sandbox images/server -newermt "$created" \
              -not -path '*/__pycache__*' -print -quit 2>/dev/null || true)
    if [ -z "$newer" ]; then
      say "$IMAGE is up to date"
      exit 0
    fi
    say "$newer changed since $IMAGE was built: rebuilding"
  fi
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/server-image.sh [--if-stale]" >&2
  exit 2
fi

case "$(docker version -f '{{.Server.Arch}}')" in
  amd64 | x86_64) ARCH=x86_64 ;;
  arm64 | aarch64) ARCH=aarch64 ;;
  *) echo "[server-image] unsupported engine architecture: $(docker version -f '{{.Server.Arch}}')" >&2
     exit 1 ;;
esac

say "making the wheelhouse $WHEELS (CPython $PY_VERSION, manylinux $ARCH) with $PY"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
build_log=$(mktemp)
if ! "$PY" -m pip wheel -q --no-deps -w "$WHEELS" . >"$build_log" 2>&1; then
  cat "$build_log" >&2
  rm -f "$build_log"
  exit 1
fi
rm -f "$build_log"
project_wheel=$(ls "$WHEELS"/sandbox-*.whl)
platforms=()
for tag in manylinux2014 manylinux_2_17 manylinux_2_28 manylinux_2_34 linux; do
  platforms+=(--platform "${tag}_${ARCH}")
done
"$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: \
  --implementation cp --python-version "$PY_VERSION" --abi "cp${PY_VERSION/./}" "${platforms[@]}" \
  "$project_wheel" 'setuptools>=68' wheel
say "$(find "$WHEELS" -name '*.whl' | wc -l | tr -d ' ') wheels in $WHEELS"

version=$("$PY" -c 'import re,pathlib; print(re.search(r"__version__\s*=\s*\"([^\"]+)\"", pathlib.Path("sandbox/version.py").read_text()).group(1))')
say "building $IMAGE (and sandbox-server:$version)"
docker build -f images/server/Dockerfile -t "$IMAGE" -t "sandbox-server:$version" .
# Untagged leftovers of earlier builds: the build stage, and server images replaced by this one.
docker image prune -f --filter label=sandbox.build-stage=server >/dev/null
docker image prune -f --filter label=org.opencontainers.image.title=sandbox-server >/dev/null

if ! docker image inspect sandbox-session:latest >/dev/null 2>&1; then
  say "building the session image sandbox-session:latest"
  docker build -t sandbox-session:latest -t "sandbox-session:$version" sandbox/images/session
fi
say "done: $IMAGE. The team stack: docs/TEAMS.md (this host: DOCKER_GID=$(stat -c %g /var/run/docker.sock 2>/dev/null || echo "?"))"
