#!/usr/bin/env python3
"""Regenerate Tessera's quantization fixtures from upstream code (never from Tessera).

Usage (normally through generate.sh, which fetches the sources first):

    python3 generate.py --ggml-dir /tmp/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml \
                        --out crates/tessera-core/tests/fixtures/quant

Who computes what
-----------------
* BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: quantized and dequantized by gguf-py (`gguf.quants`), the
  Python port that llama.cpp maintains.
* F16, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS: quantized (`GGML_FP32_TO_FP16`, `quantize_row_*_ref`)
  and dequantized (`GGML_FP16_TO_FP32`, `dequantize_row_*`) by ggml's own C,
  through `ggml_ref.c`, compiled here in a temporary directory against the
  sdist's `ggml-quants.c` (gcc -O2 -DNDEBUG -ffp-contract=off, as a release
  x86-64 build without FMA contraction). gguf-py cannot quantize K-quants
  (nor Q8_1, whose dequantization ggml lacks: the helper writes `d * q`).
* Every type is also computed the other way where both exist (C for the
  gguf-py types, gguf-py or numpy for the C ones) and disagreements are
  printed, so a drift between upstream's two implementations shows up here.

Inputs
------
Deterministic (splitmix64 + Box-Muller written out below, no numpy RNG), in
256-value *segments* of one kind each (tags in `SEGMENT_KINDS`). Q4_0/Q8_0
(and Q4_1/Q5_0/Q5_1, IQ4_NL) rows are one segment (8 blocks), K-quant and IQ4_XS rows two
segments (2 super-blocks).
F16/BF16 use 64-value rows of their own kinds (`FLOAT_ROW_KINDS`), with NaN,
inf, ties and subnormals.

File format (`<type>.bin`, all little-endian)
----------------------------------------------
    magic      4 bytes  b"TQFX"
    version    u32      1
    ggml_type  u32      ggml's type id (F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8,
                        Q8_1=9, Q2_K=10, Q3_K=11, Q4_K=12, Q5_K=13,
                        Q6_K=14, Q8_K=15, IQ4_NL=20, IQ4_XS=23, BF16=30)
    n_rows     u32
    n_per_row  u32      f32 values per row
    row_bytes  u32      quantized bytes per row
    seg_len    u32      values per tagged segment (divides n_per_row)
    n_tags     u32      = n_rows * n_per_row / seg_len
    tags       u32 * n_tags               kind of each segment (see the tables)
    input      f32 * (n_rows * n_per_row) the values given to the quantizer
    quantized  u8  * (n_rows * row_bytes) upstream's quantized bytes
    dequant    f32 * (n_rows * n_per_row) upstream's dequantization of `quantized`
"""

from __future__ import annotations

import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

MAGIC = b"TQFX"
VERSION = 1
SEG = 256
MASK64 = (1 << 64) - 1

# tag -> name; documented in the file format above and printed by the tests.
SEGMENT_KINDS = [
    "normal",         # 0: N(0,1)
    "uniform",        # 1: U(-1,1)
    "outliers",       # 2: N(0,1) with 4 values x100
    "tiny",           # 3: N(0,1) * 1e-30
    "zeros",          # 4: all zero
    "single_nonzero", # 5: zeros but x[37] = 0.6 (one non-zero block / super-block)
    "sparse",         # 6: zeros but three scattered values of different size
    "negative_max",   # 7: N(0,1), the largest |x| of every 16 values is negative
    "positive",       # 8: U(0.5, 2): min > 0 path of the K-quant min search
    "constant",       # 9: each 32-block constant (incl. negative and zero)
    "mixed_scale",    # 10: N(0,1) * 10^(b%5-2) per 32-block b
    "ties",           # 11: x = k + 0.5 with a -127 per block: roundf vs nearest_int ties
    "subnormal",      # 12: N(0,1) * 1e-40 (f32 subnormals; scales overflow to inf)
    "huge",           # 13: N(0,1) * 1e30 (x*x overflows, f16 scales are inf)
    "f16_overflow",   # 14: N(0,1) * 3e6 (block scale above f16 max)
    "ramp",           # 15: (j - 127.5) / 128
]

FLOAT_ROW_KINDS = [
    "normal",       # 0
    "f16_range",    # 1: magnitudes 2^-27 .. 2^17 (f16 subnormals and overflow)
    "f32_range",    # 2: random finite f32 bit patterns (all exponents)
    "specials",     # 3: +-0, +-inf, NaNs with payloads, f16/bf16 limits
    "ties",         # 4: exact halfway cases for f16 and bf16
    "random_bits",  # 5: random u32 patterns, a few forced NaNs
]
FLOAT_ROW = 64


class Rng:
    """splitmix64: fully specified here, so the inputs never depend on numpy's RNG."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK64

    def u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def u32(self) -> int:
        return self.u64() >> 32

    def uniform(self, lo: float = 0.0, hi: float = 1.0) -> float:
        return lo + (hi - lo) * ((self.u64() >> 11) * 2.0**-53)

    def normal(self) -> float:
        u1 = 1.0 - self.uniform()  # (0, 1]
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def below(self, n: int) -> int:
        return self.u64() % n


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(np.float32)


def bits_to_f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def segment(kind: int, rng: Rng) -> np.ndarray:
    name = SEGMENT_KINDS[kind]
    normal = lambda: [rng.normal() for _ in range(SEG)]  # noqa: E731
    if name == "normal":
        return f32(normal())
    if name == "uniform":
        return f32([rng.uniform(-1, 1) for _ in range(SEG)])
    if name == "outliers":
        x = normal()
        for _ in range(4):
            x[rng.below(SEG)] *= 100.0
        return f32(x)
    if name == "tiny":
        return f32([v * 1e-30 for v in normal()])
    if name == "zeros":
        return np.zeros(SEG, dtype=np.float32)
    if name == "single_nonzero":
        x = np.zeros(SEG, dtype=np.float32)
        x[37] = 0.6
        return x
    if name == "sparse":
        x = np.zeros(SEG, dtype=np.float32)
        x[37], x[130], x[200] = 0.6, 1e-3, -2.5
        return x
    if name == "negative_max":
        x = np.array(normal())
        for g in range(0, SEG, 16):
            i = g + int(np.argmax(np.abs(x[g : g + 16])))
            x[i] = -1.25 * abs(x[i])
        return f32(x)
    if name == "positive":
        return f32([rng.uniform(0.5, 2.0) for _ in range(SEG)])
    if name == "constant":
        levels = [-0.3, 0.7, 0.0, 1.0, -1.0, 0.25, -0.3, 2.0]
        return f32([levels[j // 32] for j in range(SEG)])
    if name == "mixed_scale":
        return f32([v * 10.0 ** ((j // 32) % 5 - 2) for j, v in enumerate(normal())])
    if name == "ties":
        x = [(j % 32) - 16 + 0.5 for j in range(SEG)]
        for b in range(0, SEG, 32):
            x[b] = -127.0
        return f32(x)
    if name == "subnormal":
        return f32([v * 1e-40 for v in normal()])
    if name == "huge":
        return f32([v * 1e30 for v in normal()])
    if name == "f16_overflow":
        return f32([v * 3e6 for v in normal()])
    if name == "ramp":
        return f32([(j - 127.5) / 128.0 for j in range(SEG)])
    raise ValueError(name)


def float_row(kind: int, rng: Rng) -> np.ndarray:
    name = FLOAT_ROW_KINDS[kind]
    n = FLOAT_ROW
    if name == "normal":
        return f32([rng.normal() for _ in range(n)])
    if name == "f16_range":
        return f32(
            [
                (-1 if rng.below(2) else 1) * (1 + rng.uniform()) * 2.0 ** rng.uniform(-27, 17)
                for _ in range(n)
            ]
        )
    if name == "f32_range":
        # sign | exponent 0..254 | mantissa: every finite float, subnormals included
        return bits_to_f32(
            [(rng.below(2) << 31) | (rng.below(255) << 23) | rng.below(1 << 23) for _ in range(n)]
        )
    if name == "specials":
        bits = [
            0x00000000, 0x80000000,  # +-0
            0x7F800000, 0xFF800000,  # +-inf
            0x7FC00000, 0xFFC00000,  # quiet NaNs
            0x7F800001, 0xFF800001,  # signalling NaNs, tiny payload
            0x7FFFFFFF, 0xFFFFFFFF,  # NaNs, full payload
            0x7FA00000, 0x7F812345,  # sNaN payloads that survive a 16-bit shift
            0x7F7FFFFF, 0xFF7FFFFF,  # +-f32 max
            0x00000001, 0x80000001,  # +-smallest f32 subnormal
            0x00800000, 0x007FFFFF,  # smallest f32 normal, largest subnormal
        ]
        vals = [
            65504.0, -65504.0,  # f16 max
            65519.99, 65520.0, -65520.0,  # just below / at f16 overflow
            2.0**-24, -(2.0**-24),  # smallest f16 subnormal
            2.0**-25, 2.0**-25 * 1.0001, 3 * 2.0**-25,  # f16 subnormal ties / near ties
            2.0**-14, 2.0**-14 - 2.0**-25,  # smallest f16 normal, its tie below
            1.0 / 3.0, -1.0 / 3.0, 0.1, 1e-8, 1e8, 3.0e38,
        ]
        row = list(bits_to_f32(bits)) + list(f32(vals))
        while len(row) < n:
            row.append(bits_to_f32([rng.u32()])[0])
        return np.array(row[:n], dtype=np.float32)
    if name == "ties":
        row = []
        for k in range(n // 2):
            # f16 ties: 1 + (2m+1) * 2^-11 scaled by 2^e, both parities of the kept bit
            m = rng.below(1024)
            e = rng.below(30) - 14
            row.append((-1 if k % 2 else 1) * (1 + (2 * m + 1) * 2.0**-11) * 2.0**e)
        ties = list(f32(row))
        for k in range(n - len(ties)):
            # bf16 ties: low half exactly 0x8000, odd and even upper halves
            upper = (rng.below(0x7F00) & ~1) | (k & 1) | ((k & 2) << 14)
            ties.append(bits_to_f32([(upper << 16) | 0x8000])[0])
        return np.array(ties, dtype=np.float32)
    if name == "random_bits":
        bits = [rng.u32() for _ in range(n)]
        for i in range(0, n, 16):
            bits[i] = 0x7F800000 | (rng.below(2) << 31) | (1 + rng.below((1 << 23) - 1))
        return bits_to_f32(bits)
    raise ValueError(name)


class GgmlRef:
    """The compiled ggml_ref helper."""

    def __init__(self, ggml_dir: Path, workdir: Path, cc: str) -> None:
        src = Path(__file__).with_name("ggml_ref.c")
        helper_src = workdir / "ggml_ref.c"
        helper_src.write_bytes(src.read_bytes())
        self.exe = workdir / "ggml_ref"
        cmd = [
            cc, "-O2", "-std=gnu11", "-DNDEBUG", "-ffp-contract=off", "-w",
            f"-I{ggml_dir / 'include'}", f"-I{ggml_dir / 'src'}",
            str(helper_src), str(ggml_dir / "src" / "ggml-quants.c"),
            "-lm", "-o", str(self.exe),
        ]
        subprocess.run(cmd, check=True)

    def _run(self, op: str, tname: str, n: int, data: bytes) -> bytes:
        out = subprocess.run([str(self.exe), op, tname, str(n)], input=data, capture_output=True, check=True)
        return out.stdout

    def quant(self, tname: str, x: np.ndarray) -> np.ndarray:
        return np.frombuffer(self._run("quant", tname, x.size, x.astype("<f4").tobytes()), dtype=np.uint8)

    def dequant(self, tname: str, q: np.ndarray, n: int) -> np.ndarray:
        return np.frombuffer(self._run("dequant", tname, n, q.tobytes()), dtype="<f4")


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all(a.view(np.uint32) == b.view(np.uint32)))


def report(what: str, a: np.ndarray, b: np.ndarray, tags: list[int], per_tag: int, names: list[str]) -> None:
    """Print the segments where two upstream implementations disagree."""
    a = a.reshape(len(tags), -1)
    b = b.reshape(len(tags), -1)
    bad = [i for i in range(len(tags)) if not np.array_equal(a[i], b[i])]
    if not bad:
        print(f"  {what}: identical")
        return
    kinds = sorted({names[tags[i]] for i in bad})
    print(f"  {what}: DIFFER in {len(bad)} of {len(tags)} segments ({', '.join(kinds)})")


def write_fixture(path: Path, type_id: int, x: np.ndarray, q: np.ndarray, deq: np.ndarray,
                  n_rows: int, seg_len: int, tags: list[int]) -> None:
    n_per_row = x.size // n_rows
    row_bytes = q.size // n_rows
    assert x.size == n_rows * n_per_row and q.size == n_rows * row_bytes and deq.size == x.size
    assert len(tags) * seg_len == x.size
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<7I", VERSION, type_id, n_rows, n_per_row, row_bytes, seg_len, len(tags)))
        f.write(struct.pack(f"<{len(tags)}I", *tags))
        f.write(x.astype("<f4").tobytes())
        f.write(q.astype(np.uint8).tobytes())
        f.write(deq.astype("<f4").tobytes())
    print(f"  wrote {path} ({path.stat().st_size} bytes)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggml-dir", type=Path, required=True, help="the sdist's vendor/llama.cpp/ggml")
    ap.add_argument("--out", type=Path, required=True, help="fixture directory to (re)write")
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rng = Rng(0x7E55E4A)
    tags = list(range(len(SEGMENT_KINDS)))
    x = np.concatenate([segment(k, rng) for k in tags])
    float_tags = list(range(len(FLOAT_ROW_KINDS)))
    xf = np.concatenate([float_row(k, rng) for k in float_tags])

    with tempfile.TemporaryDirectory(prefix="tessera-quant-fixtures-") as tmp:
        ref = GgmlRef(args.ggml_dir, Path(tmp), args.cc)

        # --- F16: ggml's C conversion (numpy's astype is printed for comparison)
        print("F16 (ggml C):")
        q = ref.quant("f16", xf)
        deq = ref.dequant("f16", q, xf.size)
        with np.errstate(all="ignore"):
            np_f16 = xf.astype("<f2").view(np.uint8)
        report("numpy astype(float16) vs ggml bytes", np_f16, q,
               float_tags, FLOAT_ROW, FLOAT_ROW_KINDS)
        report("numpy float16->f32 vs ggml", q.view("<f2").astype(np.float32).view(np.uint32),
               deq.view(np.uint32), float_tags, FLOAT_ROW, FLOAT_ROW_KINDS)
        write_fixture(args.out / "f16.bin", 1, xf, q, deq, len(float_tags), FLOAT_ROW, float_tags)

        # --- BF16: gguf-py (C for comparison)
        print("BF16 (gguf-py):")
        q = quants.quantize(xf, T.BF16).reshape(-1)
        deq = quants.dequantize(q, T.BF16).reshape(-1)
        report("ggml C vs gguf-py bytes", ref.quant("bf16", xf), q, float_tags, FLOAT_ROW, FLOAT_ROW_KINDS)
        report("ggml C vs gguf-py dequant", ref.dequant("bf16", q, xf.size).view(np.uint32),
               deq.view(np.uint32), float_tags, FLOAT_ROW, FLOAT_ROW_KINDS)
        write_fixture(args.out / "bf16.bin", 30, xf, q, deq, len(float_tags), FLOAT_ROW, float_tags)

        # --- Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: gguf-py (C for comparison); rows of one segment
        for name, qt, tid in (("q8_0", T.Q8_0, 8), ("q4_0", T.Q4_0, 2), ("q4_1", T.Q4_1, 3),
                              ("q5_0", T.Q5_0, 6), ("q5_1", T.Q5_1, 7)):
            print(f"{name.upper()} (gguf-py):")
            with np.errstate(all="ignore"):
                q = quants.quantize(x.reshape(len(tags), SEG), qt).reshape(-1)
                deq = quants.dequantize(q.reshape(len(tags), -1), qt).reshape(-1)
            report("ggml C vs gguf-py bytes", ref.quant(name, x), q, tags, SEG, SEGMENT_KINDS)
            report("ggml C vs gguf-py dequant", ref.dequant(name, q, x.size).view(np.uint32),
                   deq.view(np.uint32), tags, SEG, SEGMENT_KINDS)
            write_fixture(args.out / f"{name}.bin", tid, x, q, deq, len(tags), SEG, tags)

        # --- Q8_1 (an activation type; gguf-py has none): ggml C; rows of one segment
        print("Q8_1 (ggml C):")
        q = ref.quant("q8_1", x)
        deq = ref.dequant("q8_1", q, x.size)
        write_fixture(args.out / "q8_1.bin", 9, x, q, deq, len(tags), SEG, tags)

        # --- K-quants: ggml C (gguf-py dequantization for comparison); rows of two segments
        for name, qt, tid in (("q2_K", T.Q2_K, 10), ("q3_K", T.Q3_K, 11), ("q4_K", T.Q4_K, 12),
                              ("q5_K", T.Q5_K, 13), ("q6_K", T.Q6_K, 14), ("q8_K", None, 15)):
            print(f"{name} (ggml C):")
            q = ref.quant(name, x)
            deq = ref.dequant(name, q, x.size)
            if qt is not None:
                with np.errstate(all="ignore"):
                    py = quants.dequantize(q.reshape(len(tags), -1), qt).reshape(-1)
                report("gguf-py vs ggml C dequant", py.view(np.uint32), deq.view(np.uint32),
                       tags, SEG, SEGMENT_KINDS)
            write_fixture(args.out / f"{name.lower()}.bin", tid, x, q, deq, len(tags) // 2, SEG, tags)

        # --- IQ4_NL (rows of one segment) and IQ4_XS (rows of two): ggml C
        # (quantize_row_iq4_*_ref, dequantize_row_iq4_*), gguf-py's
        # dequantization for comparison.
        for name, qt, tid, per_row in (("iq4_nl", T.IQ4_NL, 20, 1), ("iq4_xs", T.IQ4_XS, 23, 2)):
            print(f"{name} (ggml C):")
            q = ref.quant(name, x)
            deq = ref.dequant(name, q, x.size)
            with np.errstate(all="ignore"):
                py = quants.dequantize(q.reshape(len(tags), -1), qt).reshape(-1)
            report("gguf-py vs ggml C dequant", py.view(np.uint32), deq.view(np.uint32),
                   tags, SEG, SEGMENT_KINDS)
            write_fixture(args.out / f"{name}.bin", tid, x, q, deq, len(tags) // per_row, SEG, tags)

    total = sum(p.stat().st_size for p in args.out.glob("*.bin"))
    print(f"total fixture size: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
