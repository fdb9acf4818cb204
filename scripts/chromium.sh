#!/usr/bin/env bash
# The browser of the web view's tests (tests/browser): Debian's chromium, driven by Playwright
# for Python (a dev extra) pointed at /usr/bin/chromium; Playwright never downloads a browser.
# Installs it when we are root on Debian; elsewhere says what to install.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[chromium] installing Debian's chromium" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
else
  echo "[chromium] the browser tests need chromium at /usr/bin/chromium (Debian/Ubuntu:" \
    "sudo apt-get install chromium), or SANDBOX_TEST_CHROMIUM=/path/to/chromium" >&2
  exit 1
fi
