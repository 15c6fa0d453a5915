#!/usr/bin/env bash
# Put this checkout's codespec where editors look for it: a link at ~/.local/bin/codespec (where
# pipx and `pip install --user` put programs; both editor plugins look there, and an editor
# started from a desktop launcher may not have .venv/bin on its PATH). Run by scripts/setup.sh.
# A link that works is left alone, whatever it points to; a missing or dangling one is made.
# CODESPEC_NO_LINK=1 leaves ~/.local/bin untouched.
set -euo pipefail
cd "$(dirname "$0")/.."

OURS="$PWD/.venv/bin/codespec"
BIN="$HOME/.local/bin"
LINK="$BIN/codespec"
if [ -n "${CODESPEC_NO_LINK:-}" ]; then
  echo "codespec setup: editors: set codespec.serverPath (VS Code) or cmd (Neovim) to $OURS" >&2
elif [ -e "$LINK" ]; then
  if [ "$(readlink -f "$LINK")" = "$(readlink -f "$OURS")" ]; then
    echo "codespec setup: editors find it at $LINK" >&2
  else
    echo "codespec setup: editors find another codespec at $LINK; for this checkout's, set" \
      "codespec.serverPath (VS Code) or cmd (Neovim) to $OURS" >&2
  fi
else
  mkdir -p "$BIN"
  ln -sfn "$OURS" "$LINK"
  echo "codespec setup: linked $LINK -> $OURS (where both editor plugins look)" >&2
fi
