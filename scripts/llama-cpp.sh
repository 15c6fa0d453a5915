# Sourced by scripts/setup.sh and scripts/build-llama-server.sh: which llama.cpp codespec builds
# and with which options, so the wheel (the ggml backend) and llama.cpp's own server (the bench's
# peer) run the same kernels. The build uses the CPU's own instructions. ggml's AMX kernels are
# left out: on a CPU that reports AMX they crashed the first batched pass with SIGILL
# (docs/benchmarks.md, "ggml as a verifier"), while the AVX-512 ones run.
LLAMA_CPP_VERSION=0.3.36
LLAMA_CPP=llama-cpp-python==$LLAMA_CPP_VERSION
LLAMA_CMAKE="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF"
LLAMA_CFLAGS=""
grep -qw amx_tile /proc/cpuinfo 2>/dev/null && LLAMA_CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# what a build is kept under: the CPU's flags and the options above
LLAMA_BUILD_KEY=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null; echo "$LLAMA_CPP $LLAMA_CMAKE $LLAMA_CFLAGS") \
  | sha256sum | cut -c1-12)
