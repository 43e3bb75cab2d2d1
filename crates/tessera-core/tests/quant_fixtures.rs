//! Byte-for-byte comparison of Tessera's quantization with upstream ggml.
//!
//! The fixtures in `tests/fixtures/quant/` were made by upstream code only:
//! ggml's C reference quantizers (`quantize_row_*_ref`, `dequantize_row_*`,
//! `GGML_FP32_TO_FP16`) for F16, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL and IQ4_XS, and gguf-py (llama.cpp's
//! Python port) for BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1. Regenerate them with
//! `scripts/quant-fixtures/generate.sh`, whose `generate.py` documents the
//! format and the input kinds (normal, uniform, outliers, tiny, zeros, single
//! non-zero, negative maxima, ties, subnormal, huge, NaN/inf for the floats...).
//!
//! For every type: `from_f32` of the inputs must equal upstream's bytes, and
//! `to_f32` of upstream's bytes must equal upstream's f32 bit for bit, both
//! over all rows at once and row by row.
//!
//! The generator also runs ggml's C (`quantize_row_q4_1_ref`,
//! `quantize_row_q5_0_ref`, `quantize_row_q5_1_ref`, `dequantize_row_*`) on
//! the same inputs as gguf-py for Q4_1, Q5_0 and Q5_1, and reports any
//! disagreement: at llama-cpp-python 0.3.36 / gguf 0.19.0 there is none, on
//! every segment kind (NaN-free inputs; subnormal, huge and f16-overflowing
//! blocks included), so these fixtures are also ggml's C output.

#![allow(clippy::unwrap_used, clippy::panic)] // tests: failing loudly is the point

use tessera_core::DType;
use tessera_core::quant::{from_f32, to_f32};

/// Segment kinds of the quantized fixtures (`SEGMENT_KINDS` in generate.py).
const SEGMENT_KINDS: [&str; 16] = [
    "normal",
    "uniform",
    "outliers",
    "tiny",
    "zeros",
    "single_nonzero",
    "sparse",
    "negative_max",
    "positive",
    "constant",
    "mixed_scale",
    "ties",
    "subnormal",
    "huge",
    "f16_overflow",
    "ramp",
];

/// Row kinds of the F16/BF16 fixtures (`FLOAT_ROW_KINDS` in generate.py).
const FLOAT_ROW_KINDS: [&str; 6] = [
    "normal",
    "f16_range",
    "f32_range",
    "specials",
    "ties",
    "random_bits",
];

struct Fixture {
    dtype: DType,
    n_rows: usize,
    n_per_row: usize,
    row_bytes: usize,
    seg_len: usize,
    tags: Vec<u32>,
    input: Vec<f32>,
    quantized: Vec<u8>,
    dequant: Vec<f32>,
}

/// A little-endian reader over a fixture file.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn usize(&mut self) -> usize {
        self.u32() as usize
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

fn parse(name: &str, bytes: &[u8]) -> Fixture {
    let mut r = Reader { bytes, pos: 0 };
    assert_eq!(r.take(4), b"TQFX", "{name}: magic");
    assert_eq!(r.u32(), 1, "{name}: version");
    let dtype = DType::from_ggml_id(r.u32()).unwrap();
    let (n_rows, n_per_row, row_bytes, seg_len, n_tags) =
        (r.usize(), r.usize(), r.usize(), r.usize(), r.usize());
    assert_eq!(
        dtype.row_size(n_per_row).unwrap(),
        row_bytes,
        "{name}: row size"
    );
    assert_eq!(n_tags * seg_len, n_rows * n_per_row, "{name}: tags");
    let tags = (0..n_tags).map(|_| r.u32()).collect();
    let input = r.f32s(n_rows * n_per_row);
    let quantized = r.take(n_rows * row_bytes).to_vec();
    let dequant = r.f32s(n_rows * n_per_row);
    assert_eq!(r.pos, bytes.len(), "{name}: trailing bytes");
    Fixture {
        dtype,
        n_rows,
        n_per_row,
        row_bytes,
        seg_len,
        tags,
        input,
        quantized,
        dequant,
    }
}

impl Fixture {
    fn kind(&self, segment: usize) -> &'static str {
        let names: &[&str] = if self.dtype.is_quantized() {
            &SEGMENT_KINDS
        } else {
            &FLOAT_ROW_KINDS
        };
        names
            .get(self.tags[segment] as usize)
            .copied()
            .unwrap_or("?")
    }

    /// Panics naming the first segment where `ours` and `theirs` differ.
    fn assert_bytes(&self, what: &str, ours: &[u8], theirs: &[u8]) {
        assert_eq!(ours.len(), theirs.len());
        let Some(i) = ours.iter().zip(theirs).position(|(a, b)| a != b) else {
            return;
        };
        let seg_bytes = theirs.len() / self.tags.len();
        let seg = i / seg_bytes;
        let s = seg * seg_bytes;
        panic!(
            "{} {what}: first difference at byte {i} (segment {seg}, kind '{}', offset {})\n\
             ours:     {:02x?}\nupstream: {:02x?}",
            self.dtype,
            self.kind(seg),
            i - s,
            &ours[i.saturating_sub(4).max(s)..(i + 8).min(s + seg_bytes)],
            &theirs[i.saturating_sub(4).max(s)..(i + 8).min(s + seg_bytes)],
        );
    }

    fn assert_f32_bits(&self, what: &str, ours: &[f32], theirs: &[f32]) {
        assert_eq!(ours.len(), theirs.len());
        let Some(i) = ours
            .iter()
            .zip(theirs)
            .position(|(a, b)| a.to_bits() != b.to_bits())
        else {
            return;
        };
        let seg = i / self.seg_len;
        panic!(
            "{} {what}: first difference at value {i} (segment {seg}, kind '{}'): \
             ours {} ({:#010x}), upstream {} ({:#010x}), input {}",
            self.dtype,
            self.kind(seg),
            ours[i],
            ours[i].to_bits(),
            theirs[i],
            theirs[i].to_bits(),
            self.input[i],
        );
    }

    /// IQ4_NL blocks whose largest magnitude is below `GROUP_MAX_EPS` (1e-15):
    /// ggml writes d = 0 and leaves their indices as its scratch held them
    /// (stale from an earlier block), so only their d is compared. Copies
    /// upstream's indices of those blocks into `ours` after checking d = 0.
    fn forgive_stale_indices(&self, input: &[f32], ours: &mut [u8], theirs: &[u8]) {
        if self.dtype != DType::IQ4NL {
            return;
        }
        for ((x, o), t) in input
            .chunks_exact(32)
            .zip(ours.chunks_exact_mut(18))
            .zip(theirs.chunks_exact(18))
        {
            if x.iter().all(|v| v.is_nan() || v.abs() < 1e-15) {
                assert_eq!(&o[..2], &[0, 0], "tiny IQ4_NL block: d = 0");
                o[2..].copy_from_slice(&t[2..]);
            }
        }
    }

    fn check(&self) {
        // All rows at once.
        let mut q = vec![0u8; self.quantized.len()];
        from_f32(self.dtype, &self.input, &mut q).unwrap();
        self.forgive_stale_indices(&self.input, &mut q, &self.quantized);
        self.assert_bytes("from_f32", &q, &self.quantized);
        let mut y = vec![0.0f32; self.input.len()];
        to_f32(self.dtype, &self.quantized, &mut y).unwrap();
        self.assert_f32_bits("to_f32", &y, &self.dequant);

        // Row by row, into buffers at odd offsets.
        let mut buf = vec![0u8; self.row_bytes + 1];
        for r in 0..self.n_rows {
            let x = &self.input[r * self.n_per_row..(r + 1) * self.n_per_row];
            let want = &self.quantized[r * self.row_bytes..(r + 1) * self.row_bytes];
            from_f32(self.dtype, x, &mut buf[1..]).unwrap();
            self.forgive_stale_indices(x, &mut buf[1..], want);
            assert_eq!(&buf[1..], want, "{} row {r}", self.dtype);
            buf[1..].copy_from_slice(want);
            let mut y = vec![0.0f32; self.n_per_row];
            to_f32(self.dtype, &buf[1..], &mut y).unwrap();
            let dq = &self.dequant[r * self.n_per_row..(r + 1) * self.n_per_row];
            assert!(
                y.iter().zip(dq).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} row {r} to_f32",
                self.dtype
            );
        }
    }
}

macro_rules! fixture_test {
    ($name:ident, $file:literal, $dtype:expr) => {
        #[test]
        fn $name() {
            let f = parse($file, include_bytes!(concat!("fixtures/quant/", $file)));
            assert_eq!(f.dtype, $dtype);
            f.check();
        }
    };
}

fixture_test!(f16_matches_ggml, "f16.bin", DType::F16);
fixture_test!(bf16_matches_gguf_py, "bf16.bin", DType::BF16);
fixture_test!(q8_0_matches_gguf_py, "q8_0.bin", DType::Q8_0);
fixture_test!(q4_0_matches_gguf_py, "q4_0.bin", DType::Q4_0);
fixture_test!(q4_1_matches_gguf_py, "q4_1.bin", DType::Q4_1);
fixture_test!(q5_0_matches_gguf_py, "q5_0.bin", DType::Q5_0);
fixture_test!(q5_1_matches_gguf_py, "q5_1.bin", DType::Q5_1);
fixture_test!(q2_k_matches_ggml, "q2_k.bin", DType::Q2K);
fixture_test!(q3_k_matches_ggml, "q3_k.bin", DType::Q3K);
fixture_test!(q4_k_matches_ggml, "q4_k.bin", DType::Q4K);
fixture_test!(q5_k_matches_ggml, "q5_k.bin", DType::Q5K);
fixture_test!(q6_k_matches_ggml, "q6_k.bin", DType::Q6K);
fixture_test!(q8_k_matches_ggml, "q8_k.bin", DType::Q8K);
fixture_test!(q8_1_matches_ggml, "q8_1.bin", DType::Q8_1);
fixture_test!(iq4_nl_matches_ggml, "iq4_nl.bin", DType::IQ4NL);
fixture_test!(iq4_xs_matches_ggml, "iq4_xs.bin", DType::IQ4XS);

/// The fixtures cover every kind they claim to (a regenerated fixture that
/// lost a kind would silently test less).
#[test]
fn fixtures_cover_all_kinds() {
    for (file, bytes) in [
        ("q4_0.bin", &include_bytes!("fixtures/quant/q4_0.bin")[..]),
        ("q4_1.bin", &include_bytes!("fixtures/quant/q4_1.bin")[..]),
        ("q5_0.bin", &include_bytes!("fixtures/quant/q5_0.bin")[..]),
        ("q5_1.bin", &include_bytes!("fixtures/quant/q5_1.bin")[..]),
        ("q8_1.bin", &include_bytes!("fixtures/quant/q8_1.bin")[..]),
        ("q2_k.bin", &include_bytes!("fixtures/quant/q2_k.bin")[..]),
        ("q3_k.bin", &include_bytes!("fixtures/quant/q3_k.bin")[..]),
        ("q4_k.bin", &include_bytes!("fixtures/quant/q4_k.bin")[..]),
        ("q5_k.bin", &include_bytes!("fixtures/quant/q5_k.bin")[..]),
        (
            "iq4_nl.bin",
            &include_bytes!("fixtures/quant/iq4_nl.bin")[..],
        ),
        (
            "iq4_xs.bin",
            &include_bytes!("fixtures/quant/iq4_xs.bin")[..],
        ),
    ] {
        let f = parse(file, bytes);
        let mut seen: Vec<u32> = f.tags.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), SEGMENT_KINDS.len(), "{file}");
    }
    let f = parse("f16.bin", include_bytes!("fixtures/quant/f16.bin"));
    assert_eq!(f.tags.len(), FLOAT_ROW_KINDS.len());
    assert!(f.input.iter().any(|v| v.is_nan()) && f.input.iter().any(|v| v.is_infinite()));
}
