#!/usr/bin/env bash
# Tools for the end-to-end tests, installed once per machine (a second run takes seconds):
# Debian's chromium, driven by Playwright (installed into .venv by scripts/setup.sh) through its
# executable path: no browser download.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  echo "codespec e2e setup: installing Debian's chromium" >&2
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    || { "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
fi
.venv/bin/python -c "import playwright" 2>/dev/null || .venv/bin/python -m pip install -q playwright
echo "codespec e2e setup: ready (chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'))" >&2
