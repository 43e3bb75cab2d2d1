#!/usr/bin/env bash
# Regenerate crates/tessera-core/tests/fixtures/quant/*.bin from upstream code.
#
# Why: Tessera's quantizers must be byte-identical to ggml's. The fixtures are
# made by ggml's own C reference quantizers and by gguf-py, never by Tessera.
#
# What it does (re-runnable; nothing upstream is committed):
#   1. downloads the llama-cpp-python sdist (which vendors llama.cpp/ggml) into
#      $LLAMA_SRC (default /tmp/llama-src) if it is not there yet;
#   2. installs gguf-py and numpy with pip if they are missing;
#   3. runs generate.py, which compiles ggml_ref.c against the sdist's
#      ggml-quants.c in a temporary directory and rewrites the fixtures.
#
# Usage: scripts/quant-fixtures/generate.sh   (from anywhere; needs gcc, python3, pip)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
W="${LLAMA_SRC:-/tmp/llama-src}"
SDIST="$W/llama_cpp_python-$VERSION.tar.gz"
GGML="$W/llama_cpp_python-$VERSION/vendor/llama.cpp/ggml"
PYTHON="${PYTHON:-python3}"

mkdir -p "$W"
if [ ! -f "$SDIST" ]; then
    # --no-binary for this one package only: its build dependencies (cmake,
    # ninja) may come as wheels, which keeps the metadata step fast.
    "$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$VERSION" -d "$W"
fi
if [ ! -f "$GGML/src/ggml-quants.c" ]; then
    tar xzf "$SDIST" -C "$W"
fi
if ! "$PYTHON" -c 'import gguf, numpy' 2>/dev/null; then
    "$PYTHON" -m pip install gguf numpy
fi

exec "$PYTHON" "$HERE/generate.py" --ggml-dir "$GGML" \
    --out "$ROOT/crates/tessera-core/tests/fixtures/quant"
