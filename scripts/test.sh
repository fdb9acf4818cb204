#!/usr/bin/env bash
# Set up (engine, images, venv) and run the whole test suite against a real Docker engine.
# SANDBOX_REQUIRE_DOCKER=1 makes a missing engine a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/server-image.sh --if-stale  # the team stack's server image (tests/integration/test_compose.py)
export SANDBOX_REQUIRE_DOCKER=1
.venv/bin/ruff check sandbox tests bench
.venv/bin/mypy
.venv/bin/pytest -q -p no:cacheprovider "$@"

# The Podman tier: the integration and security suites again, against Podman's Docker-compatible
# socket (tests marked docker_only need Docker itself: the compose stack, engine restarts).
if [ "${SANDBOX_PODMAN_TIER:-1}" = 1 ] && [ $# -eq 0 ]; then
  DOCKER_HOST=$(bash scripts/podman.sh | tail -1)
  echo "[test] the Podman tier on $DOCKER_HOST" >&2
  DOCKER_HOST=$DOCKER_HOST .venv/bin/pytest -q -p no:cacheprovider -m "not docker_only" \
    tests/integration tests/security
fi
