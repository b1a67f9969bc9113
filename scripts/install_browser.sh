#!/usr/bin/env bash
# Installs Debian's Chromium and its WebDriver (chromium, chromium-driver) for the serve page's
# browser test (tests/test_serve_browser.py). Idempotent: does nothing when both are there; runs
# `apt-get update` first only when apt has no package list for them yet. Needs root (or sudo).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "error: apt-get not found; install Chromium and chromedriver with your system's package" \
       "manager (the browser test looks for chromium and chromedriver on PATH)" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then
    SUDO="sudo"
  else
    echo "error: installing chromium needs root: run this script as root or install sudo" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show chromium chromium-driver >/dev/null 2>&1; then
  $SUDO apt-get update
fi
$SUDO apt-get install -y --no-install-recommends chromium chromium-driver
