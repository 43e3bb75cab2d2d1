#!/usr/bin/env bash
# Build llama.cpp's ggml-rpc-server (protocol 7.0.0) and a small ggml-rpc
# client from the llama.cpp vendored by the PyPI sdist llama-cpp-python
# 0.3.36, for the interoperability checks in run.sh.
#
# Usage: scripts/rpc-interop/build.sh [WORKDIR]   (default /tmp/rpc-interop)
# Needs: pip, cmake (pip install cmake), a C++17 compiler.
set -euo pipefail
WORK=${1:-/tmp/rpc-interop}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
SRC="$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp"
if [ ! -d "$SRC" ]; then
  # --no-binary for the package only: build dependencies may be wheels.
  pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$WORK"
  tar xzf "$WORK/llama_cpp_python-0.3.36.tar.gz" -C "$WORK"
fi
grep -q 'RPC_PROTO_MAJOR_VERSION    7' "$SRC/ggml/include/ggml-rpc.h"
cmake -S "$SRC" -B "$WORK/build" -DGGML_RPC=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log"
nice -n 19 cmake --build "$WORK/build" --target ggml-rpc-server -j "${JOBS:-2}"
# LLAMA_COMPLETION=1: also llama.cpp's llama-completion (about 15 min on 2
# cores), for run.sh's model-level check against Tessera's server.
if [ "${LLAMA_COMPLETION:-0}" = 1 ]; then
  nice -n 19 cmake --build "$WORK/build" --target llama-completion -j "${JOBS:-2}"
fi
# The client: a graph on an RPC backend compared with the local CPU backend.
LIB="$WORK/build/bin"
nice -n 19 g++ -std=c++17 -O2 "$HERE/ggml_rpc_client.cpp" -o "$WORK/ggml-rpc-client" \
  -I "$SRC/ggml/include" -L "$LIB" -lggml -lggml-base -lggml-cpu -lggml-rpc -Wl,-rpath,"$LIB"
echo "built: $LIB/ggml-rpc-server $WORK/ggml-rpc-client"
