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
