#!/usr/bin/env bash
# Node.js and npm, and the conformance suite's node modules (the official MCP TypeScript SDK and
# the MCP Inspector, pinned by tests/conformance/package-lock.json), idempotently.
# Installs Debian's nodejs and npm when we are root on Debian; elsewhere says what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[node] installing Debian's nodejs and npm" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >/dev/null; }
  else
    echo "[node] Node.js 18+ and npm are needed for tests/conformance: install them" \
      "(Debian/Ubuntu: sudo apt-get install nodejs npm; macOS: brew install node)" >&2
    exit 1
  fi
fi

dir=tests/conformance
if [ ! -d "$dir/node_modules/@modelcontextprotocol/sdk" ] \
   || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
  echo "[node] installing the conformance suite's node modules (npm ci)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
