#!/usr/bin/env bash
# Reference outputs of llama.cpp for Tessera's model tests
# (crates/tessera-llm/tests/data/*.ref), made on the same files Tessera runs:
#   - synthetic models of every architecture and weight type (the
#     mixture-of-experts qwen3moe in synthetic-moe.ref) (written by
#     `cargo run --example synth`, deterministic, with real vocabularies
#     from llama.cpp's models/ folder): prompt ids, greedy ids, first logits;
#   - the real Gemma 3 270M Q4_K_M (the default model): prompt ids and 48
#     greedy tokens for a few prompts.
# Needs llama.cpp's libraries (scripts/ggml-bench/build.sh's checkout, or
# LLAMA_BUILD=/path/to/build with bin/libllama.so) and the llama-cpp-python
# source (LLAMA_SRC=.../vendor/llama.cpp).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LLAMA_SRC=${LLAMA_SRC:-/tmp/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-/tmp/llama-tools}
GEMMA=${GEMMA:-$HOME/.cache/tessera/models/gemma-3-270m-q4_k_m.gguf}
OUT=$ROOT/crates/tessera-llm/tests/data
WORK=${WORK:-/tmp/tessera-crosscheck}
mkdir -p "$WORK" "$OUT"
REF=$WORK/llama_ref
gcc -O2 -o "$REF" "$HERE/llama_ref.c" -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  -L"$LLAMA_BUILD/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA_BUILD/bin"
(cd "$ROOT" && cargo build --release -q -p tessera-llm --example synth)
SYNTH=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/synth
PROMPT="Hello world, this is a test of the synthetic model"
{
  echo "# llama.cpp (of llama-cpp-python 0.3.36) on synthetic models: arch wtype vocab"
  echo "# (flash attention off), prompt \"$PROMPT\", 32 greedy tokens, the first 64 logits after the prompt"
  for arch in llama qwen2 qwen3 gemma3; do
    vocab=llama-spm
    [ "$arch" = qwen2 ] && vocab=qwen2
    for wtype in f32 f16 q8_0 q4_0; do
      f=$WORK/$arch-$wtype.gguf
      "$SYNTH" "$arch" "$wtype" "$LLAMA_SRC/models/ggml-vocab-$vocab.gguf" "$f"
      echo "model: $arch $wtype $vocab"
      # Without flash attention: ggml's CPU flash attention accumulates V in
      # f16, the plain path (and Tessera's kernel) in f32.
      LLAMA_REF_NO_FA=1 "$REF" "$f" 32 "$PROMPT" --logits 64
    done
  done
} > "$OUT/synthetic.ref"
{
  echo "# llama.cpp (of llama-cpp-python 0.3.36) on synthetic mixture-of-experts models"
  echo "# (qwen3moe: 8 experts, 2 used): arch wtype vocab (flash attention off),"
  echo "# prompt \"$PROMPT\", 32 greedy tokens, the first 64 logits after the prompt"
  for wtype in f32 f16 q8_0 q4_0; do
    f=$WORK/qwen3moe-$wtype.gguf
    "$SYNTH" qwen3moe "$wtype" "$LLAMA_SRC/models/ggml-vocab-qwen2.gguf" "$f"
    echo "model: qwen3moe $wtype qwen2"
    LLAMA_REF_NO_FA=1 "$REF" "$f" 32 "$PROMPT" --logits 64
  done
} > "$OUT/synthetic-moe.ref"
{
  echo "# llama.cpp (default settings: flash attention on) on gemma-3-270m-q4_k_m.gguf:"
  echo "# the 16 largest logits after the prompt, 48 greedy tokens; 'noise' is the largest"
  echo "# difference of any logit between llama.cpp's two attention paths (flash on / off)"
  while IFS= read -r p; do
    echo "text: $p"
    "$REF" "$GEMMA" 48 "$p" --top 16
    LLAMA_REF_NO_FA=1 "$REF" "$GEMMA" 0 "$p" --logits 262144 | grep logits: > "$WORK/nofa.txt"
    "$REF" "$GEMMA" 0 "$p" --logits 262144 | grep logits: > "$WORK/fa.txt"
    python3 -c "
import sys
a, b = (open(f).read().split()[1:] for f in sys.argv[1:3])
print('noise: %.4f' % max(abs(float(x) - float(y)) for x, y in zip(a, b)))" "$WORK/fa.txt" "$WORK/nofa.txt"
  done <<'PROMPTS'
The capital of France is
Once upon a time
def fibonacci(n):
Les plus beaux paysages du monde sont
PROMPTS
} > "$OUT/gemma3-270m.ref"
echo "wrote $OUT/synthetic.ref $OUT/synthetic-moe.ref $OUT/gemma3-270m.ref"
