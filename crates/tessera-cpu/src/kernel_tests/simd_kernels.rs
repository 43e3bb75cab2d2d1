//! The SIMD row primitives (`kernels::simd::Simd`) against the portable
//! ones and f64 references, on every instruction set this machine has, at
//! sizes that exercise every tail (0..=70 and a few large odd ones).
//!
//! Tolerances: binary ops, scaling, f16 conversions and the Q8_0/Q4_0
//! quantizers and dequantizers are bit-identical to the portable path (and
//! the quantizers to `tessera::quant`, NaN, infinity, subnormal and tie
//! cases included); f64 sums within 1e-12 relative of an f64 reference;
//! `exp` within 2 ulp (normal results) of the correctly rounded value; SILU
//! within 8 f32 ulp of an f64 reference.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::isa::Isa;
use crate::kernels::simd::{BinKind, Prefetch, Simd};
use half::f16;
use tessera::{DType, quant};

/// Prefetch hints at `v` and past its end (a hint never faults).
fn pf(v: &[f32]) -> Prefetch {
    Prefetch {
        rows: [v.as_ptr() as *const u8, std::ptr::null()],
        bytes: 8 * v.len() + 4096,
    }
}

/// Deterministic values in [lo, hi).
struct Rng(u64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
    fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next_u32() as f32 / u32::MAX as f32)
    }
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
}

fn sizes() -> impl Iterator<Item = usize> {
    (0..=70).chain([127, 128, 129, 1000, 4097])
}

fn simds() -> Vec<Simd> {
    Isa::all_available().into_iter().map(Simd::new).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn binary_ops_are_bit_identical_in_place_and_not() {
    let mut rng = Rng(1);
    let p = Simd::portable();
    for s in simds() {
        for op in [BinKind::Add, BinKind::Mul, BinKind::Div, BinKind::Sub] {
            for n in sizes() {
                let x = rng.vec(n, -4.0, 4.0);
                let y = rng.vec(n, 0.25, 4.0);
                let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                // SAFETY: all vectors hold `n` elements.
                unsafe {
                    p.binary(op, want.as_mut_ptr(), x.as_ptr(), y.as_ptr(), n);
                    s.binary(op, got.as_mut_ptr(), x.as_ptr(), y.as_ptr(), n);
                }
                assert_eq!(bits(&got), bits(&want), "{op:?} n={n}");
                // In place over x.
                let mut z = x.clone();
                // SAFETY: as above; the output is exactly the first input.
                unsafe { s.binary(op, z.as_mut_ptr(), z.as_ptr(), y.as_ptr(), n) };
                assert_eq!(bits(&z), bits(&want), "{op:?} in place n={n}");
                // Scalar operand.
                let c = rng.f32(0.5, 2.0);
                // SAFETY: as above.
                unsafe {
                    p.binary_scalar(op, want.as_mut_ptr(), x.as_ptr(), c, n);
                    s.binary_scalar(op, got.as_mut_ptr(), x.as_ptr(), c, n);
                }
                assert_eq!(bits(&got), bits(&want), "{op:?} scalar n={n}");
            }
        }
    }
}

#[test]
fn scaling_is_bit_identical() {
    let mut rng = Rng(2);
    let p = Simd::portable();
    for s in simds() {
        for n in sizes() {
            let mut x = rng.vec(n, -3.0, 3.0);
            if n > 3 {
                x[1] = -0.0;
                x[2] = f32::NAN;
                x[3] = f32::INFINITY;
            }
            for (m, sc, b) in [(0.0, 0.7, 0.0), (0.25, -1.5, 0.0), (0.0, 2.0, 0.5)] {
                let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                // SAFETY: all vectors hold `n` elements.
                unsafe {
                    p.sub_scale(want.as_mut_ptr(), x.as_ptr(), m, sc, n, Prefetch::NONE);
                    s.sub_scale(got.as_mut_ptr(), x.as_ptr(), m, sc, n, pf(&x));
                }
                assert_eq!(bits(&got), bits(&want), "sub_scale n={n}");
                // SAFETY: as above.
                unsafe {
                    p.scale_bias(want.as_mut_ptr(), x.as_ptr(), sc, b, n);
                    s.scale_bias(got.as_mut_ptr(), x.as_ptr(), sc, b, n);
                }
                assert_eq!(bits(&got), bits(&want), "scale_bias n={n}");
            }
        }
    }
}

#[test]
fn f64_sums_match_an_f64_reference() {
    let mut rng = Rng(3);
    for s in simds() {
        for n in sizes() {
            let x = rng.vec(n, -2.0, 2.0);
            let m = 0.125f32;
            let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
            let sq: f64 = x
                .iter()
                .map(|&v| {
                    let d = f64::from(v - m);
                    d * d
                })
                .sum();
            // SAFETY: `x` holds `n` elements.
            let (gs, gq) = unsafe { (s.sum_f64(x.as_ptr(), n), s.sum_sq_f64(x.as_ptr(), m, n)) };
            let scale: f64 = x.iter().map(|&v| f64::from(v).abs()).sum::<f64>() + 1e-300;
            assert!(
                (gs - sum).abs() <= 1e-12 * scale,
                "sum n={n}: {gs} vs {sum}"
            );
            assert!(
                (gq - sq).abs() <= 1e-12 * (sq + 1e-300),
                "sum sq n={n}: {gq} vs {sq}"
            );
        }
    }
}

/// Distance in ulps of two f32 of the same sign.
fn ulps(a: f32, b: f32) -> u32 {
    a.to_bits().abs_diff(b.to_bits())
}

#[test]
fn softmax_passes_match_references() {
    let mut rng = Rng(4);
    let p = Simd::portable();
    for s in simds() {
        for n in sizes().filter(|&n| n > 0) {
            let x = rng.vec(n, -30.0, 30.0);
            let mask32 = rng.vec(n, -2.0, 0.0);
            let mask16: Vec<f16> = mask32.iter().map(|&v| f16::from_f32(v)).collect();
            for (mask, f16m) in [(None, false), (Some(0), false), (Some(1), true)] {
                let m = mask.map(|k| {
                    let ptr = if k == 0 {
                        mask32.as_ptr() as *const u8
                    } else {
                        mask16.as_ptr() as *const u8
                    };
                    (ptr, f16m, 0.75f32)
                });
                let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                // SAFETY: all rows hold `n` elements of their types.
                let (wmax, gmax) = unsafe {
                    (
                        p.softmax_scale_max(want.as_mut_ptr(), x.as_ptr(), 0.5, m, n),
                        s.softmax_scale_max(got.as_mut_ptr(), x.as_ptr(), 0.5, m, n),
                    )
                };
                assert_eq!(bits(&got), bits(&want), "scale/mask n={n}");
                assert_eq!(gmax, wmax, "max n={n}");
                let before = got.clone();
                // SAFETY: `got` holds `n` elements.
                let sum = unsafe { s.exp_sub_sum(got.as_mut_ptr(), gmax, n, pf(&x)) };
                let mut want_sum = 0.0f64;
                for (i, (&g, &b)) in got.iter().zip(&before).enumerate() {
                    // The kernel rounds the difference to f32 first.
                    let e = f64::from(b - gmax).exp();
                    want_sum += f64::from(g);
                    let e32 = e as f32;
                    if e32 >= f32::MIN_POSITIVE {
                        assert!(ulps(g, e32) <= 2, "exp n={n} i={i}: {g} vs {e}");
                    } else {
                        assert!((f64::from(g) - e).abs() <= 1.5e-45, "exp n={n} i={i}");
                    }
                }
                assert!((sum - want_sum).abs() <= 1e-12 * want_sum, "sum n={n}");
            }
        }
    }
}

#[test]
fn softmax_specials_follow_ggml() {
    for s in simds() {
        // A fully masked row: every w is -inf, exp(-inf - -inf) is NaN.
        let mut y = vec![0f32; 13];
        let x = [f32::NEG_INFINITY; 13];
        // SAFETY: 13 elements each.
        unsafe {
            let max = s.softmax_scale_max(y.as_mut_ptr(), x.as_ptr(), 1.0, None, 13);
            assert_eq!(max, f32::NEG_INFINITY);
            let sum = s.exp_sub_sum(y.as_mut_ptr(), max, 13, Prefetch::NONE);
            assert!(sum.is_nan());
        }
        assert!(y.iter().all(|v| v.is_nan()));
        // -inf entries next to finite ones become exact zeros.
        let mut y: Vec<f32> = (0..21)
            .map(|i| {
                if i % 3 == 0 {
                    f32::NEG_INFINITY
                } else {
                    i as f32 * 0.1
                }
            })
            .collect();
        let max = 2.0f32;
        // SAFETY: 21 elements.
        unsafe { s.exp_sub_sum(y.as_mut_ptr(), max, 21, Prefetch::NONE) };
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v == 0.0, i % 3 == 0, "i={i}: {v}");
        }
    }
}

#[test]
fn silu_and_swiglu_match_an_f64_reference() {
    let mut rng = Rng(5);
    for s in simds() {
        for n in sizes() {
            let x = rng.vec(n, -12.0, 12.0);
            let g = rng.vec(n, -2.0, 2.0);
            let mut y = vec![0f32; n];
            let mut yg = vec![0f32; n];
            // SAFETY: all vectors hold `n` elements.
            unsafe {
                s.silu(y.as_mut_ptr(), x.as_ptr(), None, n);
                s.silu(yg.as_mut_ptr(), x.as_ptr(), Some(g.as_ptr()), n);
            }
            for i in 0..n {
                let xv = f64::from(x[i]);
                let want = xv / (1.0 + (-xv).exp());
                let tol = 8.0 * f64::from(f32::EPSILON) * want.abs() + 1e-30;
                assert!(
                    (f64::from(y[i]) - want).abs() <= tol,
                    "silu({xv}) = {}",
                    y[i]
                );
                let wg = want * f64::from(g[i]);
                assert!(
                    (f64::from(yg[i]) - wg).abs() <= 2.0 * tol * f64::from(g[i]).abs() + 1e-30,
                    "swiglu i={i}"
                );
            }
        }
    }
}

#[test]
fn f16_conversions_are_bit_identical_to_the_reference() {
    let mut rng = Rng(6);
    for s in simds() {
        // Random bit patterns: NaNs (any payload, both signs), infinities,
        // subnormals, values that overflow f16 or round to its subnormals.
        for n in sizes() {
            let x: Vec<f32> = (0..n).map(|_| f32::from_bits(rng.next_u32())).collect();
            let mut got = vec![f16::ZERO; n];
            // SAFETY: `n` elements each.
            unsafe { s.f32_to_f16(got.as_mut_ptr(), x.as_ptr(), n) };
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    quant::f32_to_f16(v).to_bits(),
                    "n={n} i={i} x={:#x}",
                    v.to_bits()
                );
            }
        }
        // Values in f16's range with every rounding case (ties to even).
        let x: Vec<f32> = (0..1 << 16)
            .map(|i| f32::from_bits(0x3800_0000 + (i << 9) + (i & 0x1ff)))
            .collect();
        let mut got = vec![f16::ZERO; x.len()];
        // SAFETY: `x.len()` elements each.
        unsafe { s.f32_to_f16(got.as_mut_ptr(), x.as_ptr(), x.len()) };
        for (g, &v) in got.iter().zip(&x) {
            assert_eq!(g.to_bits(), quant::f32_to_f16(v).to_bits(), "{v:e}");
        }
        // Every f16 widens exactly (NaNs keep their bits as `half` does).
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0f32; all.len()];
        // SAFETY: 65536 elements each.
        unsafe { s.f16_to_f32(wide.as_mut_ptr(), all.as_ptr(), all.len()) };
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(w.to_bits(), h.to_f32().to_bits(), "{:#x}", h.to_bits());
        }
    }
}

/// Blocks of 32 values that stress every corner of the Q8_0/Q4_0 rules.
fn quant_blocks(rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut blocks = Vec::new();
    let plain = |rng: &mut Rng, lo, hi| rng.vec(32, lo, hi);
    for _ in 0..64 {
        blocks.push(plain(rng, -1.0, 1.0));
    }
    blocks.push(vec![0.0; 32]);
    blocks.push(vec![-0.0; 32]);
    // Ties: with amax 127 (d = 1) the values k + 0.5 are exact ties of roundf.
    let mut ties: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 3.0 + 0.5).collect();
    ties[0] = 127.0;
    blocks.push(ties);
    // Just below and above ties.
    let mut near: Vec<f32> = (0..32)
        .map(|i| {
            let t = (i as f32 - 16.0) * 2.0 + 0.5;
            if i % 2 == 0 {
                t.next_down()
            } else {
                t.next_up()
            }
        })
        .collect();
    near[31] = -127.0;
    blocks.push(near);
    // Equal magnitudes of both signs (Q4_0 keeps the first).
    let mut pm = plain(rng, -0.5, 0.5);
    pm[5] = -3.0;
    pm[9] = 3.0;
    blocks.push(pm.clone());
    pm[5] = 3.0;
    pm[9] = -3.0;
    blocks.push(pm);
    // Specials: NaN first, last, in the middle; infinities; subnormals;
    // tiny magnitudes whose inverse scale overflows; huge values.
    for (at, v) in [
        (0, f32::NAN),
        (31, f32::NAN),
        (13, -f32::NAN),
        (7, f32::INFINITY),
        (7, f32::NEG_INFINITY),
    ] {
        let mut b = plain(rng, -1.0, 1.0);
        b[at] = v;
        blocks.push(b);
    }
    let mut both = plain(rng, -1.0, 1.0);
    both[3] = f32::NAN;
    both[20] = f32::INFINITY;
    blocks.push(both);
    for scale in [1e-38f32, 1e-37, 3e-37, 1e-36, 1e-30, 1e30, 3e38] {
        blocks.push(plain(rng, -1.0, 1.0).iter().map(|v| v * scale).collect());
    }
    blocks.push((0..32).map(|i| f32::from_bits(i * 7 + 1)).collect());
    blocks.push((0..32).map(|i| if i == 4 { 1e-45 } else { 0.0 }).collect());
    blocks
}

#[test]
fn q8_0_and_q4_0_rows_are_bit_identical_to_the_reference() {
    let mut rng = Rng(7);
    let blocks = quant_blocks(&mut rng);
    for s in simds() {
        for dtype in [DType::Q8_0, DType::Q4_0, DType::F16] {
            // One row per block, and all blocks in one row.
            let mut rows: Vec<Vec<f32>> = blocks.clone();
            rows.push(blocks.concat());
            for (r, row) in rows.iter().enumerate() {
                let bytes = dtype.row_size(row.len()).unwrap();
                let (mut want, mut got) = (vec![0u8; bytes], vec![0xA5u8; bytes]);
                quant::from_f32(dtype, row, &mut want).unwrap();
                s.quantize_row(dtype, row, &mut got).unwrap();
                assert_eq!(got, want, "{dtype} row {r}: {:?}", &row[..4]);
            }
        }
    }
}

#[test]
fn q8_0_and_q4_0_dequantization_is_bit_identical_to_the_reference() {
    let mut rng = Rng(8);
    for s in simds() {
        for dtype in [DType::Q8_0, DType::Q4_0, DType::F16] {
            for nblocks in [1usize, 2, 3, 17] {
                let n = nblocks * 32;
                // Any bytes are a valid block (NaN and infinite scales too).
                let q: Vec<u8> = (0..dtype.row_size(n).unwrap())
                    .map(|_| rng.next_u32() as u8)
                    .collect();
                let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                quant::to_f32(dtype, &q, &mut want).unwrap();
                s.dequantize_row(dtype, &q, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{dtype} x{nblocks}");
            }
        }
        // Mismatched lengths are errors, not panics.
        let mut out = vec![0f32; 32];
        assert!(s.dequantize_row(DType::Q8_0, &[0u8; 33], &mut out).is_err());
        assert!(
            s.quantize_row(DType::Q4_0, &[0f32; 31], &mut [0u8; 18])
                .is_err()
        );
    }
}
