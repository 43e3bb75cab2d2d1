#!/usr/bin/env bash
# Prepare a GPU session's device check (run here, on the build machine).
#
# The device machine of a session with a GPU is lent for minutes, starts
# bare, and receives only the working tree plus up to 8 carried paths
# (64 MiB in all). This script puts everything `run.sh` needs into `.gpu/`
# (ignored through .git/info/exclude), so that one call does the whole
# check:
#   run(command="bash scripts/gpu-session/run.sh", carry=[".gpu"], timeout_s=600)
#
# What goes in .gpu/ (stripped release builds of this tree):
#   bin/tessera     the CLI (conformance, bench ops, bench model, run)
#   bin/synth       writes the Llama-3.2-1B-shaped benchmark files there
#   bin/wgpu-unit   tessera-wgpu's unit tests (merging, fusions, rounding)
#   vocab.gguf      the vocabulary synth needs (llama.cpp's llama-bpe)
#   gl/*.deb        the Vulkan loader, unpacked there if it has none
#   llama/          optional: llama.cpp built with -DGGML_VULKAN=ON
#                   (test-backend-ops, llama-bench and their libraries),
#                   from LLAMA_VULKAN_BIN=dir, for live comparisons
#
# Environment: VOCAB (default: the llama-bpe vocabulary of the ggml-bench
# checkout, scripts/ggml-bench/build.sh), LLAMA_VULKAN_BIN (optional).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
OUTDIR=.gpu
VOCAB=${VOCAB:-/tmp/ggml-bench/src/models/ggml-vocab-llama-bpe.gguf}

exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.gpu/' "$exclude" 2>/dev/null || {
    mkdir -p "$(dirname "$exclude")"
    echo '/.gpu/' >>"$exclude"
}
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/bin" "$OUTDIR/gl"

cargo build --release -j2 -p tessera-cli
cargo build --release -j2 -p tessera-llm --example synth
strip -o "$OUTDIR/bin/tessera" target/release/tessera
strip -o "$OUTDIR/bin/synth" target/release/examples/synth
# The unit-test binary of tessera-wgpu (release: the tests' own timing is
# not what is measured, but their kernels run faster).
unit=$(cargo test --release -j2 -p tessera-wgpu --lib --no-run --message-format=json 2>/tmp/gpu-prepare-unit.log |
    python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' | tail -1)
[ -x "$unit" ] || {
    echo "no unit-test binary found; cargo said:" >&2
    tail -20 /tmp/gpu-prepare-unit.log >&2
    exit 1
}
strip -o "$OUTDIR/bin/wgpu-unit" "$unit"

[ -f "$VOCAB" ] || { echo "vocabulary $VOCAB missing (scripts/ggml-bench/build.sh fetches it)" >&2; exit 1; }
cp "$VOCAB" "$OUTDIR/vocab.gguf"

# The Vulkan loader, as the device README says (its machines may lack it).
mkdir -p /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
# shellcheck disable=SC2086
apt-get $o update -qq >/dev/null
# shellcheck disable=SC2086
(cd "$OUTDIR/gl" && apt-get $o download -qq libvulkan1 >/dev/null)

if [ -n "${LLAMA_VULKAN_BIN:-}" ]; then
    mkdir -p "$OUTDIR/llama"
    for f in test-backend-ops llama-bench; do
        strip -o "$OUTDIR/llama/$f" "$LLAMA_VULKAN_BIN/$f"
    done
    for so in "$LLAMA_VULKAN_BIN"/*.so*; do
        if [ -L "$so" ]; then
            cp -P "$so" "$OUTDIR/llama/"
        elif [ -f "$so" ]; then
            strip --strip-unneeded -o "$OUTDIR/llama/$(basename "$so")" "$so"
        fi
    done
fi

du -sh "$OUTDIR"
bytes=$(du -sb "$OUTDIR" | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
if [ $((bytes + tree)) -gt $((62 * 1024 * 1024)) ]; then
    echo "error: .gpu ($((bytes / 1048576)) MiB) and the tree ($((tree / 1048576)) MiB) pass the 64 MiB a device call carries" >&2
    exit 1
fi
echo "ready: run(command=\"PART=1 bash scripts/gpu-session/run.sh\", carry=[\".gpu\"], timeout_s=600),"
echo "       then run(command=\"PART=2 bash scripts/gpu-session/run.sh\", carry=[\".gpu\"], timeout_s=<what is left>)"
