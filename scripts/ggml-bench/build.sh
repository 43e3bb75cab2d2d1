#!/usr/bin/env bash
# Build llama.cpp's test-backend-ops (the ggml that llama-cpp-python 0.3.36
# vendors) with two throw-away additions, so that `tessera bench ops --ggml`
# can measure ggml live, beside Tessera, on the same machine:
#   - GGML_N_THREADS=N sets the CPU backend's thread count (upstream uses half
#     the cores);
#   - TESSERA_CASES=1 makes `perf` mode run exactly Tessera's bench cases
#     (same ops, shapes and parameters as crates/tessera-cli/src/bench/cases.rs).
# Nothing of ggml is committed: the source is downloaded into $WORK and
# patched there.
#
#   scripts/ggml-bench/build.sh            # builds $WORK/build/bin/test-backend-ops
#   WORK=/some/dir scripts/ggml-bench/build.sh
#   EXTRA_TARGETS="llama-bench llama-quantize" scripts/ggml-bench/build.sh
set -euo pipefail
WORK=${WORK:-/tmp/ggml-bench}
VER=0.3.36
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
if [ ! -d "$WORK/llama_cpp_python-$VER" ]; then
  # Only this package as source: ":all:" would also build its build
  # dependencies (CMake itself) from source, which takes the better part of
  # an hour on two cores.
  pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VER" -d "$WORK"
  tar xzf "$WORK/llama_cpp_python-$VER.tar.gz" -C "$WORK"
fi
SRC="$WORK/src"
rm -rf "$SRC"
cp -r "$WORK/llama_cpp_python-$VER/vendor/llama.cpp" "$SRC"
python3 "$HERE/patch_cases.py" "$SRC/tests/test-backend-ops.cpp"
command -v cmake >/dev/null || pip install cmake
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_CURL=OFF >/dev/null
cmake --build "$WORK/build" -j"${JOBS:-2}" --target test-backend-ops ${EXTRA_TARGETS:-}
echo "built $WORK/build/bin/test-backend-ops"
echo "run:  cargo run --release -p tessera-cli -- bench ops --ggml $WORK/build/bin/test-backend-ops"
