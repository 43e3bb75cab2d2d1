"""Per-tensor digests of gguf-py's dequantization of a GGUF file.

For every tensor of FILE, `gguf.quants.dequantize` (llama.cpp's gguf-py)
gives float32 values; this prints one line per tensor with the name, the
type, the element count and a 64-bit digest of the values' f32 bit patterns
(see `digest`), which Tessera's test recomputes from its own
dequantization. Usage: python3 make-ref.py FILE > tensors.ref
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

OFFSET = 0xCBF29CE484222325
PRIME = 0x100000001B3


def digest(values: np.ndarray) -> int:
    """XOR over i of ((bits_i ^ (i * P)) * P) mod 2^64, XOR OFFSET, where
    bits_i is value i's f32 bit pattern: order-sensitive, vectorised."""
    words = values.astype("<f4").view("<u4").astype(np.uint64)
    idx = np.arange(words.size, dtype=np.uint64)
    prime = np.uint64(PRIME)
    with np.errstate(over="ignore"):
        mixed = (words ^ (idx * prime)) * prime
    acc = np.bitwise_xor.reduce(mixed) if words.size else np.uint64(0)
    return int(acc) ^ OFFSET


def main() -> None:
    r = GGUFReader(sys.argv[1])
    print(f"# gguf-py dequantize digests of {sys.argv[1].rsplit('/', 1)[-1]}")
    for t in r.tensors:
        v = dequantize(t.data, t.tensor_type).reshape(-1)
        print(f"{t.name} {t.tensor_type.name} {v.size} {digest(v):016x}")


if __name__ == "__main__":
    main()
