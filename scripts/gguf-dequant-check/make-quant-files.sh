#!/usr/bin/env bash
# Make the small GGUF files of crates/tessera-llm/tests/data/quant-files:
# one llama layer of 256- and 512-wide rows (synthetic, F32, made-up
# 300-token vocabulary) quantized by llama.cpp's llama-quantize to Q4_1,
# Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS (llama-quantize mixes in other
# types for some tensors, as it does for real models), and the digests of
# gguf-py's dequantization of every tensor (make-ref.py).
#
# Usage: LLAMA_BIN=/path/to/llama.cpp/bin scripts/gguf-dequant-check/make-quant-files.sh
# (the bin folder of a llama.cpp build holding llama-quantize and its
# libraries: see scripts/llama-crosscheck/make-refs.sh for building one
# from the llama-cpp-python source package). Needs pip's gguf and numpy.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${LLAMA_BIN:-/tmp/llama-tools/bin}"
OUT="$ROOT/crates/tessera-llm/tests/data/quant-files"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT

python3 - "$W/vocab300.gguf" <<'PY'
import sys, gguf
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_tokenizer_model("llama")
w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, 300)])
w.add_token_scores([0.0] * 300)
w.add_token_types([2, 3, 3] + [1] * 297)
w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
(cd "$ROOT" && cargo run --release -q -p tessera-llm --example synth -- \
    llama f32 "$W/vocab300.gguf" "$W/base-f32.gguf" rows-256)
mkdir -p "$OUT"
for t in Q4_1 Q5_1 Q2_K Q3_K Q5_K IQ4_NL IQ4_XS; do
    f="$(echo "$t" | tr 'A-Z' 'a-z')"
    LD_LIBRARY_PATH="$BIN" "$BIN/llama-quantize" "$W/base-f32.gguf" "$OUT/$f.gguf" "$t" 1 >/dev/null 2>&1
    python3 "$HERE/make-ref.py" "$OUT/$f.gguf" > "$OUT/$f.ref"
done
echo "wrote $(ls "$OUT" | wc -l) files to $OUT"
