#!/usr/bin/env bash
# llama.cpp's own llama-server, built from the llama.cpp that llama-cpp-python vendors, with the
# options of the wheel scripts/setup.sh builds (scripts/llama-cpp.sh): the peer for
# `codespec bench --peer llama.cpp --peer-server PATH`, which measures llama.cpp's draft-model
# speculation (llama-cpp-python exposes only its prompt lookup). Once per machine, into the
# user cache; prints the binary's path. Not part of the set-up: only that benchmark needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/llama-cpp.sh
HOME_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/codespec/llama-server/$LLAMA_BUILD_KEY"
BIN="$HOME_DIR/build/bin/llama-server"
if [ ! -x "$BIN" ]; then
  if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then
    echo "build-llama-server: needs cmake and a C++ compiler" >&2
    exit 1
  fi
  SRC="$HOME_DIR/src"
  if [ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
    echo "build-llama-server: fetching the $LLAMA_CPP source (PyPI)" >&2
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: "$LLAMA_CPP" -d "$TMP" >&2
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar xzf "$TMP"/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz -C "$SRC" --strip-components=1
  fi
  echo "build-llama-server: building llama-server (minutes)" >&2
  # the binary finds its libraries by its build folder's path: it stays where it is built
  # shellcheck disable=SC2086
  cmake -S "$SRC/vendor/llama.cpp" -B "$HOME_DIR/build" $LLAMA_CMAKE -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$LLAMA_CFLAGS" -DCMAKE_CXX_FLAGS="$LLAMA_CFLAGS" >&2
  cmake --build "$HOME_DIR/build" -j"$(nproc)" --target llama-server >&2
fi
echo "$BIN"
