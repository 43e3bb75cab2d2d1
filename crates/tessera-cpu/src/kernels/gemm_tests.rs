//! Unit tests of the GEMM's building blocks, for every kernel set this CPU
//! can run (portable, AVX2, AVX-512): micro-kernels against an f64 product
//! on odd depths, partial tiles and both store modes (with guards around the
//! tile); transposers and dequantizers bit for bit against the portable
//! transposition and `tessera::quant::to_f32`; strided B packing; and the
//! driver (either path) on products that need several packed-B blocks (the
//! test build caps a block at 64 KiB) on 1 to 3 threads, against an f64
//! product (of the quantized activations on the integer path), NMSE < 1e-11.
//! The integer path's own pieces are tested in `gemm_q8_tests`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Mutex;

use tessera::{DType, Layout, MAX_SRC, Op};

use super::gemm::Path;
use super::gemm_pack::{Kernels, MR_MAX, Tile, pack_b};
use super::{NodeCtx, Scratch, TensorRef};
use crate::isa::Isa;
use crate::pool::ThreadPool;
use crate::repack::Packing;

/// Every kernel set usable here, with a name.
fn sets() -> Vec<(&'static str, &'static Kernels)> {
    let mut v = vec![("portable", &super::gemm_portable::KERNELS)];
    v.extend(super::gemm_avx2::kernels().map(|k| ("avx2", k)));
    v.extend(super::gemm_avx512::kernels(crate::isa::Isa::Avx512).map(|k| ("avx512", k)));
    v
}

/// 64-byte aligned f32 storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line([f32; 16]);

pub(super) struct Buf(pub(super) Vec<Line>);

impl Buf {
    pub(super) fn new(n: usize) -> Self {
        Buf(vec![Line([0.0; 16]); n.div_ceil(16).max(1)])
    }
    pub(super) fn as_mut(&mut self) -> &mut [f32] {
        let n = self.0.len() * 16;
        // SAFETY: `Line` is 16 plain f32; the Vec holds n of them.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), n) }
    }
    pub(super) fn ptr(&mut self) -> *mut f32 {
        self.0.as_mut_ptr().cast()
    }
}

pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(super) fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

#[test]
fn micro_kernels_match_an_f64_product() {
    let mut rng = Rng(1);
    for (name, ks) in sets() {
        let mr_full = ks.mr;
        for (idx, &nr) in ks.nr.iter().enumerate() {
            for kc in [0usize, 1, 5, 8, 37, 256] {
                for mr in [1, mr_full - 3, mr_full] {
                    for ncols in [1, nr - 1, nr] {
                        for accumulate in [false, true] {
                            let mut a = Buf::new(kc * mr_full);
                            for (i, v) in a.as_mut().iter_mut().enumerate().take(kc * mr_full) {
                                // Rows past `mr` are zero, as packing leaves them.
                                *v = if i % mr_full < mr { rng.f32() } else { 0.0 };
                            }
                            let b: Vec<f32> = (0..kc * nr).map(|_| rng.f32()).collect();
                            // Output: columns of `ld` values, the tile at row 3
                            // of each; everything else is a guard.
                            let ld = mr_full + 8;
                            let c0: Vec<f32> = (0..ld * (nr + 1)).map(|_| rng.f32()).collect();
                            let mut c = c0.clone();
                            let base = c.as_mut_ptr();
                            // SAFETY: column j < nr + 1 of `ld` values.
                            let cols: Vec<*mut f32> =
                                (0..ncols).map(|j| unsafe { base.add(j * ld) }).collect();
                            let t = Tile {
                                kc,
                                a: a.ptr(),
                                b: b.as_ptr(),
                                c: &cols,
                                row: 3,
                                mr,
                                accumulate,
                            };
                            // SAFETY: full panels, tile inside `c`, the set
                            // is usable on this CPU.
                            unsafe { (ks.kernel[idx])(&t) };
                            let av = a.as_mut();
                            for j in 0..=nr {
                                for r in 0..ld {
                                    let got = c[j * ld + r];
                                    let inside = j < ncols && (3..3 + mr).contains(&r);
                                    if !inside {
                                        assert_eq!(got, c0[j * ld + r], "{name} guard");
                                        continue;
                                    }
                                    let i = r - 3;
                                    let mut want = if accumulate {
                                        f64::from(c0[j * ld + r])
                                    } else {
                                        0.0
                                    };
                                    let mut mag = want.abs();
                                    for l in 0..kc {
                                        let p = f64::from(av[l * mr_full + i])
                                            * f64::from(b[l * nr + j]);
                                        want += p;
                                        mag += p.abs();
                                    }
                                    assert!(
                                        (f64::from(got) - want).abs() <= 1e-6 * (mag + 1.0),
                                        "{name} nr={nr} kc={kc} mr={mr} cols={ncols} \
                                         acc={accumulate}: ({i},{j}) {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn transposers_interleave_rows_exactly() {
    let mut rng = Rng(2);
    for (name, ks) in sets() {
        for kc in [0usize, 1, 7, 8, 9, 63, 256] {
            let rows: Vec<Vec<f32>> = (0..ks.mr)
                .map(|_| (0..kc + 1).map(|_| rng.f32()).collect())
                .collect();
            let ptrs: Vec<*const f32> = rows.iter().map(|r| r.as_ptr()).collect();
            let mut out = Buf::new(kc * ks.mr + 16);
            out.as_mut().fill(f32::NAN);
            // SAFETY: every row holds kc values, `out` kc * mr and is aligned.
            unsafe { (ks.transpose)(&ptrs, kc, out.ptr()) };
            let o = out.as_mut();
            for l in 0..kc {
                for (r, row) in rows.iter().enumerate() {
                    assert_eq!(
                        o[l * ks.mr + r].to_bits(),
                        row[l].to_bits(),
                        "{name} kc={kc}"
                    );
                }
            }
            assert!(o[kc * ks.mr].is_nan(), "{name}: wrote past the panel");
        }
    }
}

#[test]
fn half_transposers_convert_and_interleave_exactly() {
    let mut rng = Rng(5);
    let mut fused = 0;
    for (name, ks) in sets() {
        for t in [DType::F16, DType::BF16] {
            let Some(f) = (ks.half_transpose)(t) else {
                continue;
            };
            fused += 1;
            for kc in [0usize, 1, 7, 8, 9, 63, 256] {
                let rows: Vec<Vec<u8>> = (0..ks.mr).map(|_| encoded(t, kc + 1, &mut rng)).collect();
                let ptrs: Vec<*const u8> = rows.iter().map(|r| r.as_ptr()).collect();
                let mut out = Buf::new(kc * ks.mr + 16);
                out.as_mut().fill(f32::NAN);
                // SAFETY: every row holds kc + 1 values, `out` kc * mr and
                // is aligned.
                unsafe { f(&ptrs, kc, out.ptr()) };
                let o = out.as_mut();
                for (r, row) in rows.iter().enumerate() {
                    let mut want = vec![0f32; kc + 1];
                    tessera::quant::to_f32(t, row, &mut want).unwrap();
                    for (l, w) in want.iter().enumerate().take(kc) {
                        assert_eq!(
                            o[l * ks.mr + r].to_bits(),
                            w.to_bits(),
                            "{name} {t} kc={kc}"
                        );
                    }
                }
                assert!(o[kc * ks.mr].is_nan(), "{name} {t}: wrote past the panel");
            }
        }
    }
    // Each SIMD set fuses both types (none on a CPU without AVX2).
    let simd = sets().len() - 1;
    assert_eq!(fused, 2 * simd);
}

/// `n` values of `t` (whole blocks) encoded from random data.
pub(super) fn encoded(t: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let v: Vec<f32> = (0..n).map(|_| rng.f32() * 3.0).collect();
    let mut out = vec![0u8; t.row_size(n).unwrap()];
    tessera::quant::from_f32(t, &v, &mut out).unwrap();
    out
}

#[test]
fn dequantizers_match_the_reference() {
    let mut rng = Rng(3);
    let types = [
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ];
    for (name, ks) in sets() {
        assert!(
            (ks.dequant)(DType::F32).is_none(),
            "{name}: F32 is read in place"
        );
        for t in types {
            let bs = t.block_size();
            // Odd counts for the float types (vector tails), 1..3 blocks
            // from an offset for the block types.
            let (total, blk0, nblk) = if bs == 1 { (64, 3, 37) } else { (4 * bs, 1, 3) };
            let bytes = encoded(t, total, &mut rng);
            let mut want = vec![0f32; total];
            tessera::quant::to_f32(t, &bytes, &mut want).unwrap();
            let f = (ks.dequant)(t).unwrap_or_else(|| panic!("{name}: no {t} dequantizer"));
            let mut got = vec![f32::NAN; nblk * bs + 1];
            // SAFETY: blocks blk0..blk0 + nblk lie in `bytes`; `got` holds them.
            unsafe { f(bytes.as_ptr(), blk0, nblk, got.as_mut_ptr()) };
            for (i, g) in got.iter().enumerate().take(nblk * bs) {
                assert_eq!(
                    g.to_bits(),
                    want[blk0 * bs + i].to_bits(),
                    "{name} {t} value {i}"
                );
            }
            assert!(got[nblk * bs].is_nan(), "{name} {t}: wrote past the row");
        }
    }
}

#[test]
fn b_panels_read_any_stride_and_pad_with_zeros() {
    // Three columns of 10 values stored with a 3-value stride (interleaved,
    // like a transposed view), packed into a 4-wide panel.
    let data: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let base = data.as_ptr().cast::<u8>();
    // SAFETY: offsets inside `data`.
    let cols: Vec<*const u8> = (0..3).map(|c| unsafe { base.add(4 * c) }).collect();
    let mut out = vec![f32::NAN; 10 * 4];
    // SAFETY: each column holds 10 values at stride 12 bytes (the last at
    // element 2 + 27 < 40); `out` holds 10 * 4.
    unsafe { pack_b(&cols, 12, 4, 0, 10, out.as_mut_ptr()) };
    for l in 0..10 {
        for c in 0..4 {
            let want = if c < 3 { (3 * l + c) as f32 } else { 0.0 };
            assert_eq!(out[l * 4 + c], want, "l={l} c={c}");
        }
    }
    // Contiguous columns, a range of l only.
    // SAFETY: columns 0 and 1 of 20 contiguous values each.
    let cols: Vec<*const u8> = (0..2).map(|c| unsafe { base.add(80 * c) }).collect();
    let mut out = vec![f32::NAN; 20 * 2];
    // SAFETY: as above.
    unsafe { pack_b(&cols, 4, 2, 5, 20, out.as_mut_ptr()) };
    assert!(
        out[..10].iter().all(|v| v.is_nan()),
        "rows below l0 untouched"
    );
    for l in 5..20 {
        assert_eq!(out[l * 2], l as f32);
        assert_eq!(out[l * 2 + 1], (20 + l) as f32);
    }
}

/// A product through the driver: weights `t [k, m, bs2, bs3]` (values from
/// `rng`) times f32 `b [k, n, bs2 * r2, bs3 * r3]`; the result against an f64
/// product of the dequantized weights, on 1..3 threads for every ISA.
fn driver_case(
    t: DType,
    k: usize,
    m: usize,
    n: usize,
    bs: [usize; 2],
    r: [usize; 2],
    rng: &mut Rng,
) {
    let la = Layout::contiguous4(t, [k, m, bs[0], bs[1]]).unwrap();
    let lb = Layout::contiguous4(DType::F32, [k, n, bs[0] * r[0], bs[1] * r[1]]).unwrap();
    let ld = Layout::contiguous4(DType::F32, [m, n, lb.ne[2], lb.ne[3]]).unwrap();
    let rows = m * bs[0] * bs[1];
    let mut a_bytes = Vec::new();
    let mut a_vals = Vec::new();
    for _ in 0..rows {
        let e = encoded(t, k, rng);
        let mut v = vec![0f32; k];
        tessera::quant::to_f32(t, &e, &mut v).unwrap();
        a_bytes.extend_from_slice(&e);
        a_vals.extend(v.into_iter().map(f64::from));
    }
    let b_vals: Vec<f32> = (0..lb.nelements()).map(|_| rng.f32()).collect();
    let pool = ThreadPool::new(3).unwrap();
    for isa in Isa::all_available() {
        // The integer path quantizes the activations: its reference uses
        // the quantized values, so both paths are held to f32 rounding.
        let bq = match Path::choose(t, n * r[0] * r[1], isa, Packing::Standard) {
            Path::Q8 { sb: Some(_), .. } => quantized_q8k(&b_vals, k),
            Path::Q8 { .. } => quantized(&b_vals, k),
            _ => b_vals.clone(),
        };
        let want = reference(&a_vals, &bq, [k, m, n], bs, r, lb.ne);
        run_case(&pool, isa, t, [la, lb, ld], &a_bytes, &b_vals, &want);
    }
}

/// The activations as the integer path sees them: per column, blocks of
/// 32 values quantized to `d * q` with `d = max|x| / 127` (as `pack_b_q8`).
pub(super) fn quantized(b: &[f32], k: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(b.len());
    for col in b.chunks(k.max(1)) {
        for blk in col.chunks(32) {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(blk.iter().map(|v| d * f32::from((v * id).round() as i8)));
        }
    }
    out
}

/// The activations as the super-block integer path sees them: per column,
/// blocks of 256 values quantized as ggml's Q8_K (`pack_b_sb`), `d * q`.
pub(super) fn quantized_q8k(b: &[f32], k: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(b.len());
    let mut blk = [0u8; 292];
    for col in b.chunks(k.max(1)) {
        for x in col.chunks(256) {
            super::act_quant::convert_row(DType::Q8K, x, &mut blk).unwrap();
            let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
            out.extend(blk[4..4 + x.len()].iter().map(|&q| d * f32::from(q as i8)));
        }
    }
    out
}

/// The f64 product of the dequantized weights and `b`.
fn reference(
    a_vals: &[f64],
    b_vals: &[f32],
    [k, m, n]: [usize; 3],
    bs: [usize; 2],
    r: [usize; 2],
    ne_b: [usize; 4],
) -> Vec<f64> {
    let mut want = vec![0f64; m * n * ne_b[2] * ne_b[3]];
    for i13 in 0..ne_b[3] {
        for i12 in 0..ne_b[2] {
            for j in 0..n {
                for i in 0..m {
                    let arow = ((i13 / r[1] * bs[0] + i12 / r[0]) * m + i) * k;
                    let brow = ((i13 * ne_b[2] + i12) * n + j) * k;
                    let s: f64 = (0..k)
                        .map(|l| a_vals[arow + l] * f64::from(b_vals[brow + l]))
                        .sum();
                    want[((i13 * ne_b[2] + i12) * n + j) * m + i] = s;
                }
            }
        }
    }
    want
}

/// Run the GEMM on 1..3 threads with `isa` and compare with `want`.
fn run_case(
    pool: &ThreadPool,
    isa: Isa,
    t: DType,
    [la, lb, ld]: [Layout; 3],
    a_bytes: &[u8],
    b_vals: &[f32],
    want: &[f64],
) {
    let (k, m, n) = (la.ne[0], la.ne[1], lb.ne[1]);
    for nth in 1..=3 {
        let size = super::gemm::scratch_size(&la, &lb, nth);
        let mut scratch = Buf::new(size / 4 + 16);
        let mut out = Buf::new(ld.nelements() + 16);
        out.as_mut().fill(f32::NAN);
        let mut src = [None; MAX_SRC];
        src[0] = Some(TensorRef {
            ptr: a_bytes.as_ptr().cast_mut(),
            layout: la,
            packing: Packing::Standard,
        });
        src[1] = Some(TensorRef {
            ptr: b_vals.as_ptr().cast::<u8>().cast_mut(),
            layout: lb,
            packing: Packing::Standard,
        });
        let dst = TensorRef {
            ptr: out.ptr().cast(),
            layout: ld,
            packing: Packing::Standard,
        };
        let scratch = Scratch {
            ptr: scratch.ptr().cast(),
            len: size,
        };
        let errors = Mutex::new(Vec::new());
        let ok = pool.run(nth, &|w| {
            let ctx = NodeCtx {
                op: Op::MulMat,
                dst,
                src,
                ith: w.ith,
                nth: w.nth,
                scratch,
                table: None,
                barrier: w.barrier,
                isa,
            };
            if let Err(e) = super::gemm::mul_mat(&ctx) {
                errors.lock().unwrap().push(e.to_string());
            }
        });
        assert!(ok && errors.lock().unwrap().is_empty(), "{errors:?}");
        let o = out.as_mut();
        assert!(o[ld.nelements()].is_nan(), "wrote past dst");
        let (mut err, mut norm) = (0f64, 0f64);
        for (g, w) in o.iter().zip(want) {
            err += (f64::from(*g) - w).powi(2);
            norm += w * w;
        }
        let nmse = err / norm.max(f64::MIN_POSITIVE);
        assert!(
            nmse < 1e-11,
            "{t} k={k} m={m} n={n} {isa:?} nth={nth}: NMSE {nmse:e}"
        );
    }
}

#[test]
fn driver_covers_blocks_slices_and_edges() {
    let mut rng = Rng(4);
    // Several k slices with a short last one, rows and columns that are no
    // multiple of any MR or NR, and (with the test build's 64 KiB cap) many
    // packed-B blocks, each with its own barrier pair and counter.
    driver_case(DType::F32, 700, 77, 53, [1, 1], [1, 1], &mut rng);
    // Broadcast weights over dims 2 and 3; one column per matrix part.
    driver_case(DType::F32, 33, 5, 1, [2, 1], [2, 3], &mut rng);
    // 2-byte weights (converted and interleaved in one pass): slices whose
    // last one has an odd length (700 = 2 * 256 + 188), a partial panel.
    driver_case(DType::F16, 700, 45, 29, [1, 1], [1, 1], &mut rng);
    driver_case(DType::BF16, 261, 37, 14, [2, 1], [1, 2], &mut rng);
    // Quantized weights over two slices, small m (one unit per matrix).
    driver_case(DType::Q4K, 512, 9, 20, [1, 2], [1, 1], &mut rng);
    driver_case(DType::Q2K, 512, 9, 20, [1, 2], [1, 1], &mut rng);
    driver_case(DType::Q3K, 512, 9, 20, [1, 2], [1, 1], &mut rng);
    driver_case(DType::Q5K, 512, 9, 20, [1, 2], [1, 1], &mut rng);
    driver_case(DType::Q6K, 256, 40, 7, [1, 1], [1, 1], &mut rng);
    driver_case(DType::Q4_0, 288, 31, 13, [1, 1], [2, 1], &mut rng);
    driver_case(DType::Q5_0, 288, 19, 13, [1, 1], [1, 2], &mut rng);
    driver_case(DType::Q4_1, 256, 17, 12, [1, 1], [1, 1], &mut rng);
    driver_case(DType::Q5_1, 320, 9, 11, [2, 1], [1, 1], &mut rng);
    driver_case(DType::Q8_0, 320, 18, 30, [1, 1], [1, 1], &mut rng);
    driver_case(DType::IQ4NL, 288, 21, 13, [1, 1], [1, 1], &mut rng);
    driver_case(DType::IQ4XS, 512, 19, 11, [1, 1], [1, 2], &mut rng);
    // Several slices of the integer path (`KC_Q` values) and a shorter last one.
    driver_case(DType::Q4K, 1280, 33, 13, [1, 1], [1, 1], &mut rng);
    driver_case(DType::Q4_0, 1120, 17, 12, [1, 1], [1, 1], &mut rng);
    driver_case(DType::Q5K, 1536, 16, 9, [1, 1], [1, 1], &mut rng);
    // k <= 1024 in one slice where a unit's codes fit the A buffer: on one
    // thread units of 208 rows of 800 codes do not (two slices), on three
    // units of 48 rows do; Q3_K: one slice of 768 on any split.
    driver_case(DType::Q5_0, 800, 600, 14, [1, 1], [1, 1], &mut rng);
    driver_case(DType::Q3K, 768, 40, 9, [1, 1], [1, 1], &mut rng);
    // k = 0: the output is zeros.
    driver_case(DType::F32, 0, 6, 5, [1, 1], [1, 1], &mut rng);
}

#[test]
fn scratch_is_enough_for_every_kernel_set() {
    let la = Layout::contiguous(DType::Q4_0, &[4096, 4096]).unwrap();
    let lb = Layout::contiguous(DType::F32, &[4096, 512]).unwrap();
    let size = super::gemm::scratch_size(&la, &lb, 2);
    assert!(size < usize::MAX);
    assert!(size >= 2 * MR_MAX * super::gemm::KC * 4);
}

/// Each ISA picks its own kernels: `Avx2` never the AVX-512 or VNNI ones
/// (so that path is tested and measured on an AVX-512 CPU too), `Scalar`
/// the portable ones, `Avx512` the widest the CPU has.
#[test]
fn each_isa_takes_its_own_kernels() {
    let f32_set = |t: DType, isa: Isa| match Path::choose(t, 64, isa, Packing::Standard) {
        Path::F32 { ks, .. } => Some(ks as *const Kernels),
        Path::Q8 { .. } | Path::Packed { .. } => None,
    };
    let portable = &super::gemm_portable::KERNELS as *const Kernels;
    assert_eq!(f32_set(DType::F32, Isa::Scalar), Some(portable));
    assert_eq!(f32_set(DType::Q4_0, Isa::Scalar), Some(portable));
    if let Some(k) = super::gemm_avx2::kernels() {
        assert_eq!(f32_set(DType::F32, Isa::Avx2), Some(k as *const Kernels));
        // The integer path on AVX2 is the AVX2 one.
        match Path::choose(DType::Q4_0, 64, Isa::Avx2, Packing::Standard) {
            Path::Q8 { qk, .. } => {
                assert!(std::ptr::eq(qk, super::gemm_q8_avx2::kernels().unwrap()))
            }
            _ => panic!("q4_0 on avx2 should take the integer path"),
        }
    }
    if let Some(k) = super::gemm_avx512::kernels(Isa::Avx512) {
        assert_eq!(f32_set(DType::F16, Isa::Avx512), Some(k as *const Kernels));
        match Path::choose(DType::Q8_0, 64, Isa::Avx512, Packing::Standard) {
            Path::Q8 { qk, .. } => assert!(std::ptr::eq(
                qk,
                super::gemm_vnni::kernels(Isa::Avx512).unwrap()
            )),
            _ => panic!("q8_0 on avx512 should take the VNNI path"),
        }
    }
    // The K-quants and IQ4_XS take activations per 256 values (Q8_K) on
    // the VNNI kernels, the other types and the AVX2 kernels per 32.
    let sb = |t: DType, isa: Isa| match Path::choose(t, 64, isa, Packing::Standard) {
        Path::Q8 { sb, .. } => Some(sb.is_some()),
        _ => None,
    };
    let vnni = super::gemm_vnni::kernels(Isa::Avx512).is_some();
    for t in [
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4XS,
    ] {
        if vnni {
            assert_eq!(sb(t, Isa::Avx512), Some(true), "{t}");
        }
        if Isa::Avx2.available() && t != DType::IQ4XS {
            assert_eq!(sb(t, Isa::Avx2), Some(false), "{t} on avx2");
        }
    }
    if vnni {
        assert_eq!(sb(DType::Q4_0, Isa::Avx512), Some(false));
    }
    // Per 32 values, the types with one offset constant take the kernels
    // that start their sums at `c * sum q`, on both integer kernel sets;
    // the others (mins) the plain ones.
    let sym = |t: DType, isa: Isa| match Path::choose(t, 64, isa, Packing::Standard) {
        Path::Q8 {
            qk,
            kernel,
            s,
            sb: None,
            sym,
            ..
        } => {
            let table = if sym.is_some() {
                qk.kernel_sym
            } else {
                qk.kernel
            };
            let si = usize::from(s == 16);
            assert!(
                table[si].iter().any(|&k| k as usize == kernel as usize),
                "{t}"
            );
            Some(sym)
        }
        _ => None,
    };
    let cases = [
        (DType::Q4_0, Some(-8)),
        (DType::Q5_0, Some(-16)),
        (DType::Q8_0, Some(-128)),
        (DType::IQ4NL, Some(-128)),
        (DType::Q4_1, None),
        (DType::Q5_1, None),
    ];
    for (t, c) in cases {
        if vnni {
            assert_eq!(sym(t, Isa::Avx512), Some(c), "{t}");
        }
    }
    if Isa::Avx2.available() {
        assert_eq!(sym(DType::Q4_0, Isa::Avx2), Some(Some(-8)));
        assert_eq!(sym(DType::Q6K, Isa::Avx2), Some(Some(-32)));
        assert_eq!(sym(DType::Q3K, Isa::Avx2), Some(Some(-4)));
        assert_eq!(sym(DType::Q4K, Isa::Avx2), Some(None));
    }
}

/// The stream's family decides where the GEMM starts, as it decides the
/// kernels: IQ4_NL has an integer GEMM on VNNI only, so with 8 columns an
/// AVX-512 stream takes the GEMM and an AVX2 stream on the same CPU the dot
/// tiles, as an AVX2-only CPU does (before, the CPU's best family decided
/// and an AVX2 stream ran the f32 GEMM instead, 1.3x slower there).
#[test]
fn the_stream_family_decides_where_the_gemm_starts() {
    let a = Layout::contiguous(DType::IQ4NL, &[256, 64]).unwrap();
    let b = Layout::contiguous(DType::F32, &[256, 8]).unwrap();
    assert!(!super::gemm::applies(&a, &b, Isa::Avx2));
    assert!(!super::gemm::applies(&a, &b, Isa::Scalar));
    let vnni =
        super::gemm_vnni::kernels(Isa::Avx512).is_some_and(|k| k.types.contains(&DType::IQ4NL));
    assert_eq!(super::gemm::applies(&a, &b, Isa::Avx512), vnni);
    // Scratch sizing follows the same family: the tiles' conversion
    // scratch for AVX2, the GEMM's (much larger) where it applies.
    let small = super::matmul::mul_mat_scratch_size(&a, &b, 2, Isa::Avx2);
    let big = super::matmul::mul_mat_scratch_size(&a, &b, 2, Isa::Avx512);
    assert!(small < usize::MAX);
    assert_eq!(big > small, vnni);
}

/// The B packer of contiguous rows (vector transposes where the CPU has
/// AVX2) against the definition, every panel width, fewer rows than the
/// width, odd ranges of `l`; what lies outside the range is left alone.
#[test]
fn contiguous_b_panels_match_the_definition() {
    for nr in [4usize, 6, 8, 12, 16] {
        for ncols in [1, nr / 2, nr] {
            for (l0, l1) in [(0usize, 0usize), (0, 7), (3, 29), (8, 40), (5, 6)] {
                let cols: Vec<Vec<f32>> = (0..ncols)
                    .map(|c| (0..l1).map(|l| (c * 1000 + l) as f32 + 0.5).collect())
                    .collect();
                let ptrs: Vec<*const u8> = cols.iter().map(|c| c.as_ptr().cast()).collect();
                let mut out = vec![-1f32; l1 * nr + 1];
                // SAFETY: every column holds l1 f32; `out` holds l1 * nr.
                unsafe { pack_b(&ptrs, 4, nr, l0, l1, out.as_mut_ptr()) };
                for (i, &v) in out.iter().enumerate() {
                    let (l, c) = (i / nr, i % nr);
                    let want = if i >= l1 * nr || l < l0 {
                        -1.0
                    } else if c < ncols {
                        cols[c][l]
                    } else {
                        0.0
                    };
                    assert_eq!(
                        v, want,
                        "nr {nr} ncols {ncols} l {l0}..{l1}: step {l} column {c}"
                    );
                }
            }
        }
    }
}
