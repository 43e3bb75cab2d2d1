#!/usr/bin/env bash
# Regenerate crates/tessera-cpu/tests/fixtures/ggml/{ops.bin,cases.txt}: op
# results computed by ggml's own CPU backend, the external oracle of
# crates/tessera-cpu/tests/ggml_fixtures.rs.
#
# Why: Tessera's CPU kernels and its conformance harness's f64 reference were
# both written from descriptions of ggml's semantics; a misreading shared by
# both passes both. These fixtures come from ggml itself.
#
# What it does (re-runnable; nothing upstream is committed):
#   1. downloads the llama-cpp-python sdist (which vendors llama.cpp/ggml) into
#      $LLAMA_SRC (default /tmp/llama-src) if it is not there yet;
#   2. installs cmake with pip if it is missing;
#   3. builds only ggml's `ggml-base` and `ggml-cpu` static libraries
#      (Release, GGML_NATIVE=OFF, no OpenMP) in $BUILD (default
#      /tmp/ggml-op-fixtures-build), through a two-line wrapper project: the
#      sdist's ggml lacks the ggml.pc.in that a standalone ggml configure needs;
#   4. compiles ggml_ops.c (this directory) against them and runs it, which
#      computes every case on the CPU backend with one thread and writes the
#      fixture file and a human-readable manifest. The file format is
#      documented at the top of ggml_ops.c.
#
# GGML_NATIVE=OFF on x86-64 still enables ggml's default instruction set
# (SSE4.2, AVX, AVX2, FMA, F16C, BMI2: "-msse4.2;-mf16c;-mfma;-mbmi2;-mavx;
# -mavx2", printed by cmake), i.e. what a release build of llama.cpp runs on
# any x86-64-v3 machine; results do not depend on the build machine's CPU
# beyond that.
#
# With GGML_SHARED=/path/to/dir (holding libggml-base.so, libggml-cpu.so and
# libggml.so of the same ggml, e.g. /tmp/llama-tools/bin), steps 1-3 are
# skipped and ggml_ops links against those (the MUL_MAT_ID/ADD_ID cases were
# added so; every earlier case came out byte-identical).
#
# Usage: scripts/ggml-op-fixtures/generate.sh   (from anywhere; needs gcc, g++, python3, pip)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
W="${LLAMA_SRC:-/tmp/llama-src}"
BUILD="${BUILD:-/tmp/ggml-op-fixtures-build}"
SDIST="$W/llama_cpp_python-$VERSION.tar.gz"
GGML="$W/llama_cpp_python-$VERSION/vendor/llama.cpp/ggml"
PYTHON="${PYTHON:-python3}"
OUT="$ROOT/crates/tessera-cpu/tests/fixtures/ggml"

if [ -n "${GGML_SHARED:-}" ]; then
    GGML="${GGML_SRC:-$W/llama_cpp_python-$VERSION/vendor/llama.cpp/ggml}"
    TMP="$(mktemp -d)"
    gcc -std=c11 -O2 -Wall -Wextra -c "$HERE/ggml_ops.c" -o "$TMP/ggml_ops.o" -I "$GGML/include"
    g++ "$TMP/ggml_ops.o" -o "$TMP/ggml_ops" -L"$GGML_SHARED" -lggml-cpu -lggml-base -lggml \
        -Wl,-rpath,"$GGML_SHARED" -lm -lpthread
    mkdir -p "$OUT"
    "$TMP/ggml_ops" "$OUT/ops.bin" "$OUT/cases.txt"
    ls -l "$OUT"
    exit 0
fi

mkdir -p "$W"
if [ ! -f "$SDIST" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$VERSION" -d "$W"
fi
if [ ! -f "$GGML/src/ggml.c" ]; then
    tar xzf "$SDIST" -C "$W"
fi
if ! command -v cmake >/dev/null 2>&1; then
    "$PYTHON" -m pip install cmake
fi

mkdir -p "$BUILD/wrap"
cat > "$BUILD/wrap/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.14)
project(ggml_op_fixtures C CXX)
add_subdirectory("$GGML" ggml)
EOF
cmake -S "$BUILD/wrap" -B "$BUILD/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF \
    >"$BUILD/cmake.log"
grep -E "CPU backend variant|ggml version|ggml commit" "$BUILD/cmake.log" || true
cmake --build "$BUILD/build" --target ggml-base ggml-cpu -j2 >"$BUILD/build.log"

LIBS="$BUILD/build/ggml/src"
gcc -std=c11 -O2 -Wall -Wextra -c "$HERE/ggml_ops.c" -o "$BUILD/ggml_ops.o" -I "$GGML/include"
g++ "$BUILD/ggml_ops.o" -o "$BUILD/ggml_ops" "$LIBS/libggml-cpu.a" "$LIBS/libggml-base.a" -lm -lpthread

mkdir -p "$OUT"
"$BUILD/ggml_ops" "$OUT/ops.bin" "$OUT/cases.txt"
ls -l "$OUT"
