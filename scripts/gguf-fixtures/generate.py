#!/usr/bin/env python3
"""Write crates/tessera-gguf/tests/fixtures/gguf_py.gguf with gguf-py's
GGUFWriter (the reference writer, `pip install gguf`): KVs of several types
and F32, F16 and Q8_0 tensors. tests/gguf_py_fixture.rs checks the values
written here; Python is not needed at test time.

Values: f32/f16 tensors hold (i % 17 - 8) / 4 (exact in f16); the Q8_0 tensor
is gguf-py's quantization of (i % 23 - 11) / 8.
"""
import pathlib

import numpy as np
import gguf

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/tessera-gguf/tests/fixtures/gguf_py.gguf"

w = gguf.GGUFWriter(str(OUT), "llama")
w.add_name("tessera-fixture")
w.add_block_count(2)                       # llama.block_count u32
w.add_context_length(128)                  # llama.context_length u32
w.add_layer_norm_rms_eps(1e-5)             # llama.attention.layer_norm_rms_epsilon f32
w.add_int8("t.i8", -7)
w.add_uint16("t.u16", 65000)
w.add_int32("t.i32", -123456)
w.add_uint64("t.u64", 1 << 40)
w.add_int64("t.i64", -(1 << 40))
w.add_float64("t.f64", 0.125)
w.add_bool("t.bool", True)
w.add_array("t.tokens", ["<s>", "</s>", "héllo"])
w.add_array("t.ints", [1, 2, 3])           # gguf-py stores Python ints as i32

f32 = ((np.arange(24) % 17 - 8) / 4).astype(np.float32).reshape(4, 6)   # ne [6, 4]
w.add_tensor("f32", f32)
w.add_tensor("f16", f32.astype(np.float16).reshape(24))                   # ne [24]
q_src = ((np.arange(64) % 23 - 11) / 8).astype(np.float32).reshape(2, 32)
q = gguf.quants.quantize(q_src, gguf.GGMLQuantizationType.Q8_0)
w.add_tensor("q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)          # ne [32, 2]

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(OUT, OUT.stat().st_size, "bytes")
