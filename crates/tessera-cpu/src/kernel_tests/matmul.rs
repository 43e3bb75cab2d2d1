//! MUL_MAT kernel tests: the kernel is called directly through a `NodeCtx`
//! over `Vec`-backed memory, on 1, 2 and 3 threads and every available ISA,
//! and compared with a naive f64 product of the dequantized weights
//! (`tessera::quant::to_f32`, or exact widening for the float types) and the
//! unconverted f32 activations. Error measure: NMSE = sum (out - ref)^2 /
//! sum ref^2, with ggml's MUL_MAT threshold 5e-4 for quantized weights and
//! tighter ones for float weights (the only error is the conversion of the
//! activations: f16 rounding ~1e-7, bf16 ~1e-5, none for f32).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Mutex;

use crate::isa::Isa;
use crate::kernels::act_quant::{convert_row, convert_row_isa};
use crate::kernels::matmul::{mul_mat, mul_mat_scratch_size, mul_mat_supported};
use crate::kernels::{NodeCtx, Scratch, TensorRef};
use crate::pool::ThreadPool;
use tessera::{DType, Layout, MAX_SRC, MUL_MAT_WEIGHT_TYPES, Op};

/// 64-byte aligned memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

struct Mem(Vec<Line>);

impl Mem {
    fn new(bytes: usize) -> Self {
        Mem(vec![Line([0; 64]); bytes.div_ceil(64).max(1)])
    }
    fn bytes(&mut self) -> &mut [u8] {
        let n = self.0.len() * 64;
        // SAFETY: `Line` is 64 plain bytes; the Vec holds n bytes.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), n) }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// `values` stored as `t` (one row of whole blocks).
fn encode(t: DType, values: &[f32]) -> Vec<u8> {
    match t {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let mut out = vec![0u8; t.row_size(values.len()).unwrap()];
            tessera::quant::from_f32(t, values, &mut out).unwrap();
            out
        }
    }
}

/// The values a row of `t` holds (the reference dequantization).
fn decode(t: DType, bytes: &[u8], n: usize) -> Vec<f64> {
    match t {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f64::from(half::f16::from_le_bytes([b[0], b[1]]).to_f32()))
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|b| f64::from(half::bf16::from_le_bytes([b[0], b[1]]).to_f32()))
            .collect(),
        _ => {
            let mut out = vec![0f32; n];
            tessera::quant::to_f32(t, bytes, &mut out).unwrap();
            out.into_iter().map(f64::from).collect()
        }
    }
}

/// A tensor: memory plus a (possibly permuted) view layout over it.
struct Tensor {
    mem: Mem,
    layout: Layout,
}

impl Tensor {
    fn tref(&mut self) -> TensorRef {
        TensorRef {
            ptr: self.mem.ptr(),
            layout: self.layout,
            packing: crate::repack::Packing::Standard,
        }
    }
}

/// Contiguous weights `t [k, m, ne2, ne3]`, listed in memory order `order`
/// (a permutation of dims 1..3: `[1, 2, 3]` is contiguous, `[2, 1, 3]`
/// stores dim 2 before dim 1), and their dequantized values by (i1, i2, i3).
fn weights(t: DType, ne: [usize; 4], order: [usize; 3], rng: &mut Rng) -> (Tensor, Vec<Vec<f64>>) {
    let row = t.row_size(ne[0]).unwrap();
    let mut nb = [t.type_size(), 0, 0, 0];
    let mut stride = row;
    for &d in &order {
        nb[d] = stride;
        stride *= ne[d];
    }
    let layout = Layout { dtype: t, ne, nb };
    let mut mem = Mem::new(layout.nbytes());
    let mut deq = vec![Vec::new(); ne[1] * ne[2] * ne[3]];
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let v: Vec<f32> = (0..ne[0]).map(|_| rng.f32()).collect();
                let bytes = encode(t, &v);
                let off = layout.offset_of([0, i1, i2, i3]);
                mem.bytes()[off..off + row].copy_from_slice(&bytes);
                deq[(i3 * ne[2] + i2) * ne[1] + i1] = decode(t, &bytes, ne[0]);
            }
        }
    }
    (Tensor { mem, layout }, deq)
}

/// F32 activations `[k, n, ne2, ne3]` whose dims are stored in memory order
/// `order` (a permutation of 0..4; `[0, 1, 2, 3]` is contiguous, `[1, 0, 2, 3]`
/// transposed, `[0, 2, 1, 3]` permuted), filled with random values.
fn activations(ne: [usize; 4], order: [usize; 4], rng: &mut Rng) -> Tensor {
    let mut nb = [0; 4];
    let mut stride = 4;
    for &d in &order {
        nb[d] = stride;
        stride *= ne[d];
    }
    let layout = Layout {
        dtype: DType::F32,
        ne,
        nb,
    };
    let mut mem = Mem::new(layout.nbytes());
    for v in mem.bytes().chunks_exact_mut(4) {
        v.copy_from_slice(&rng.f32().to_le_bytes());
    }
    Tensor { mem, layout }
}

fn f32_at(t: &mut Tensor, i: [usize; 4]) -> f64 {
    let off = t.layout.offset_of(i);
    let b = &t.mem.bytes()[off..off + 4];
    f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The f64 reference product.
fn reference(a: &Tensor, deq: &[Vec<f64>], b: &mut Tensor) -> Vec<f64> {
    let (la, lb) = (a.layout, b.layout);
    let (k, m) = (la.ne[0], la.ne[1]);
    let (r2, r3) = (lb.ne[2] / la.ne[2], lb.ne[3] / la.ne[3]);
    let mut out = Vec::new();
    for i13 in 0..lb.ne[3] {
        for i12 in 0..lb.ne[2] {
            for j in 0..lb.ne[1] {
                let col: Vec<f64> = (0..k).map(|l| f32_at(b, [l, j, i12, i13])).collect();
                for i in 0..m {
                    let row = &deq[((i13 / r3) * la.ne[2] + i12 / r2) * m + i];
                    out.push(row.iter().zip(&col).map(|(x, y)| x * y).sum());
                }
            }
        }
    }
    out
}

const GUARD: usize = 64;

/// Run the kernel on `nth` threads; the output values, or the errors.
fn run(
    pool: &ThreadPool,
    a: &mut Tensor,
    b: &mut Tensor,
    dst: Layout,
    nth: usize,
    isa: Isa,
) -> Result<Vec<f32>, Vec<String>> {
    let mut out = Mem::new(dst.nbytes() + GUARD);
    out.bytes().fill(0xA5);
    let mut scratch_mem = Mem::new(mul_mat_scratch_size(&a.layout, &b.layout, nth, isa));
    let scratch = Scratch {
        ptr: scratch_mem.ptr(),
        len: mul_mat_scratch_size(&a.layout, &b.layout, nth, isa),
    };
    let mut src = [None; MAX_SRC];
    src[0] = Some(a.tref());
    src[1] = Some(b.tref());
    let dst_ref = TensorRef {
        ptr: out.ptr(),
        layout: dst,
        packing: crate::repack::Packing::Standard,
    };
    let errors = Mutex::new(Vec::new());
    let ok = pool.run(nth, &|w| {
        let ctx = NodeCtx {
            op: Op::MulMat,
            dst: dst_ref,
            src,
            ith: w.ith,
            nth: w.nth,
            scratch,
            table: None,
            barrier: w.barrier,
            isa,
        };
        if let Err(e) = mul_mat(&ctx) {
            errors.lock().unwrap().push(e.to_string());
        }
    });
    assert!(ok, "a kernel thread panicked");
    let errors = errors.into_inner().unwrap();
    if !errors.is_empty() {
        return Err(errors);
    }
    let n = dst.nbytes();
    let bytes = out.bytes();
    assert!(
        bytes[n..n + GUARD].iter().all(|&g| g == 0xA5),
        "write past the output"
    );
    Ok(bytes[..n]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn nmse(out: &[f32], want: &[f64]) -> f64 {
    assert_eq!(out.len(), want.len());
    let err: f64 = out
        .iter()
        .zip(want)
        .map(|(o, w)| (f64::from(*o) - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm
}

fn tolerance(t: DType) -> f64 {
    match t {
        DType::F32 => 1e-10,
        DType::F16 => 1e-6,
        DType::BF16 => 5e-5,
        _ => 5e-4,
    }
}

/// One case on 1, 2, 3 threads and every ISA.
fn check(pool: &ThreadPool, what: &str, a: &mut Tensor, deq: &[Vec<f64>], b: &mut Tensor) {
    let t = a.layout.dtype;
    assert!(
        mul_mat_supported(&a.layout, &b.layout),
        "{what}: {t} not supported"
    );
    let want = reference(a, deq, b);
    let dst = Layout::contiguous4(
        DType::F32,
        [
            a.layout.ne[1],
            b.layout.ne[1],
            b.layout.ne[2],
            b.layout.ne[3],
        ],
    )
    .unwrap();
    for isa in Isa::all_available() {
        for nth in 1..=3 {
            let out = run(pool, a, b, dst, nth, isa)
                .unwrap_or_else(|e| panic!("{what} {t} {isa:?} nth={nth}: {e:?}"));
            let e = nmse(&out, &want);
            assert!(
                e <= tolerance(t),
                "{what} {t} {isa:?} nth={nth}: NMSE {e:e}"
            );
        }
    }
}

/// Row lengths valid for `t`'s block size, from the brief: 64, 256, 512.
fn lengths(t: DType) -> Vec<usize> {
    [64, 256, 512]
        .into_iter()
        .filter(|k| k % t.block_size() == 0)
        .collect()
}

/// Every shape of the brief for weights of type `t`: odd m = 7 and n = 3,
/// mat-vec (n = 1), k = 64/256/512 as blocks allow, broadcasting over dims 2
/// and 3 (ne12 = 2 ne02, ne13 = 3 ne03), permuted and transposed `b`,
/// permuted `a`, and an output of many chunks.
fn all_shapes(t: DType, seed: u64) {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(seed);
    for k in lengths(t) {
        for n in [3usize, 1] {
            // a [k, 7, 2, 1] broadcast over b [k, n, 4, 3].
            let (mut a, deq) = weights(t, [k, 7, 2, 1], [1, 2, 3], &mut rng);
            let mut b = activations([k, n, 4, 3], [0, 1, 2, 3], &mut rng);
            let what = format!("k={k} n={n} broadcast");
            check(&pool, &what, &mut a, &deq, &mut b);
        }
    }
    let k = 256;
    let (mut a, deq) = weights(t, [k, 7, 2, 1], [1, 2, 3], &mut rng);
    // permute(0, 2, 1, 3) view: dims 1 and 2 swapped in memory.
    let mut b = activations([k, 3, 4, 1], [0, 2, 1, 3], &mut rng);
    check(&pool, "permuted b", &mut a, &deq, &mut b);
    // transposed view: rows of b are strided (nb0 = n * 4).
    let mut b = activations([k, 3, 2, 1], [1, 0, 2, 3], &mut rng);
    check(&pool, "transposed b", &mut a, &deq, &mut b);
    // Weights with dims 1 and 2 swapped in memory (a permuted view).
    let (mut a, deq) = weights(t, [k, 5, 3, 2], [2, 1, 3], &mut rng);
    let mut b = activations([k, 2, 3, 4], [0, 1, 2, 3], &mut rng);
    check(&pool, "permuted a", &mut a, &deq, &mut b);
    // Rows longer than the k slices of the multi-column kernels (1024 f32
    // or 2048 quantized values): several slices, the last one partial.
    let kl = 2048 + 768;
    let (mut a, deq) = weights(t, [kl, 6, 1, 1], [1, 2, 3], &mut rng);
    let mut b = activations([kl, 5, 1, 1], [0, 1, 2, 3], &mut rng);
    check(&pool, "long rows", &mut a, &deq, &mut b);
    // 67 x 35 outputs in 16 x 16 chunks: 15 chunks, more than 4 per thread
    // for 1..3 threads, so threads take chunks from the shared counter.
    let (mut a, deq) = weights(t, [k, 67, 1, 1], [1, 2, 3], &mut rng);
    let mut b = activations([k, 35, 1, 1], [0, 1, 2, 3], &mut rng);
    check(&pool, "many chunks", &mut a, &deq, &mut b);
    // One column over 2,051 short rows: several chunks of 64-512 rows (at
    // least four per thread), the last one partial, each read as four row
    // streams whose last tiles have fewer rows (2,051 is odd).
    let (mut a, deq) = weights(t, [k, 2051, 1, 1], [1, 2, 3], &mut rng);
    let mut b = activations([k, 1, 1, 1], [0, 1, 2, 3], &mut rng);
    check(&pool, "one column, many short rows", &mut a, &deq, &mut b);
}

#[test]
fn f32_weights() {
    all_shapes(DType::F32, 1);
}

#[test]
fn f16_weights() {
    all_shapes(DType::F16, 2);
}

#[test]
fn bf16_weights() {
    all_shapes(DType::BF16, 3);
}

#[test]
fn q8_0_weights() {
    all_shapes(DType::Q8_0, 4);
}

#[test]
fn q4_0_weights() {
    all_shapes(DType::Q4_0, 5);
}

#[test]
fn q5_0_weights() {
    all_shapes(DType::Q5_0, 8);
}

#[test]
fn q4_1_weights() {
    all_shapes(DType::Q4_1, 9);
}

#[test]
fn q5_1_weights() {
    all_shapes(DType::Q5_1, 10);
}

#[test]
fn q4_k_weights() {
    all_shapes(DType::Q4K, 6);
}

#[test]
fn q6_k_weights() {
    all_shapes(DType::Q6K, 7);
}

#[test]
fn q2_k_weights() {
    all_shapes(DType::Q2K, 11);
}

#[test]
fn q3_k_weights() {
    all_shapes(DType::Q3K, 12);
}

#[test]
fn q5_k_weights() {
    all_shapes(DType::Q5K, 13);
}

#[test]
fn iq4_nl_weights() {
    all_shapes(DType::IQ4NL, 14);
}

#[test]
fn iq4_xs_weights() {
    all_shapes(DType::IQ4XS, 15);
}

#[test]
fn every_weight_type_is_supported() {
    for t in MUL_MAT_WEIGHT_TYPES {
        let a = Layout::contiguous(t, &[256, 4, 2]).unwrap();
        let b = Layout::contiguous(DType::F32, &[256, 3, 6, 5]).unwrap();
        assert!(mul_mat_supported(&a, &b), "{t}");
    }
}

#[test]
fn unsupported_operands_are_refused_and_bad_nodes_fail_on_every_thread() {
    let a = Layout::contiguous(DType::Q4_0, &[64, 4]).unwrap();
    let b = Layout::contiguous(DType::F32, &[64, 2]).unwrap();
    assert!(mul_mat_supported(&a, &b));
    assert!(!mul_mat_supported(
        &a,
        &Layout::contiguous(DType::F16, &[64, 2]).unwrap()
    ));
    assert!(!mul_mat_supported(
        &a,
        &Layout::contiguous(DType::F32, &[96, 2]).unwrap()
    ));
    assert!(!mul_mat_supported(
        &Layout::contiguous(DType::Q8K, &[256, 4]).unwrap(),
        &Layout::contiguous(DType::F32, &[256, 2]).unwrap()
    ));
    // Broadcast must divide: a has 2 matrices, b 3.
    let a2 = Layout::contiguous(DType::F32, &[64, 4, 2]).unwrap();
    assert!(!mul_mat_supported(
        &a2,
        &Layout::contiguous(DType::F32, &[64, 2, 3]).unwrap()
    ));
    // Transposed weights (nb0 != type size) are not supported.
    let at = Layout {
        ne: [4, 64, 1, 1],
        nb: [256, 4, 1024, 1024],
        ..a2
    };
    assert!(!mul_mat_supported(
        &at,
        &Layout::contiguous(DType::F32, &[4, 2]).unwrap()
    ));
    // Scratch covers the converted activations: Q8_0 rows of 64 values are 68 bytes.
    assert!(mul_mat_scratch_size(&a, &b, 3, Isa::best()) >= 2 * 68);

    // A wrong dst shape fails on every thread, after the same barrier count
    // (a deadlock would hang the test).
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(4);
    let (mut a, _) = weights(DType::F32, [64, 4, 1, 1], [1, 2, 3], &mut rng);
    let mut b = activations([64, 2, 1, 1], [0, 1, 2, 3], &mut rng);
    let bad = Layout::contiguous(DType::F32, &[4, 3]).unwrap();
    for nth in 1..=3 {
        let errs = run(&pool, &mut a, &mut b, bad, nth, Isa::Scalar).unwrap_err();
        assert_eq!(errs.len(), nth);
    }
}

#[test]
fn activation_conversion_is_bit_identical_to_the_reference_quantizer() {
    let mut rng = Rng(5);
    for t in [
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q8K,
    ] {
        // Random values, plus blocks built to hit the rounding edges: with a
        // largest magnitude of 127 the Q8 scales are exactly 1, so x.5
        // values are ties (away from zero for Q8_0, to even for Q8K), and
        // both signs of the largest magnitude appear.
        let mut x: Vec<f32> = (0..1024).map(|_| rng.f32() * 3.0).collect();
        x.extend((0..256).map(|i| match i % 8 {
            0 => 127.0,
            1 => -127.0,
            2 => (i % 64) as f32 - 31.5,
            3 => -0.0,
            _ => ((i * 7) % 255) as f32 * 0.5 - 63.5,
        }));
        x.extend((0..256).map(|i| if i == 3 { -127.0 } else { (i % 9) as f32 - 4.5 }));
        x.extend([0.0f32; 256]);
        let n = t.row_size(x.len()).unwrap();
        let (mut mine, mut theirs) = (vec![0u8; n], vec![0u8; n]);
        tessera::quant::from_f32(t, &x, &mut theirs).unwrap();
        convert_row(t, &x, &mut mine).unwrap();
        assert_eq!(mine, theirs, "{t}");
        for isa in Isa::all_available() {
            // Odd lengths too (whole blocks of the type).
            for len in [x.len(), 256, 512 + 256, t.block_size()] {
                let m = t.row_size(len).unwrap();
                let mut out = vec![0u8; m];
                convert_row_isa(isa, t, &x[..len], &mut out).unwrap();
                assert_eq!(out, theirs[..m], "{t} {isa:?} len={len}");
            }
        }
    }
}

#[test]
fn activation_conversion_of_non_finite_values_matches_on_every_isa() {
    let mut x: Vec<f32> = (0..256).map(|i| (i as f32 - 100.0) * 0.37).collect();
    x[5] = f32::NAN;
    x[40] = f32::INFINITY;
    x[77] = f32::NEG_INFINITY;
    x[200] = -f32::NAN;
    // A block of NaNs and zeros only.
    x.extend((0..256).map(|i| if i % 3 == 0 { f32::NAN } else { 0.0 }));
    for t in [
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q8K,
    ] {
        let n = t.row_size(x.len()).unwrap();
        let mut want = vec![0u8; n];
        convert_row(t, &x, &mut want).unwrap();
        for isa in Isa::all_available() {
            let mut got = vec![0u8; n];
            convert_row_isa(isa, t, &x, &mut got).unwrap();
            assert_eq!(got, want, "{t} {isa:?}");
        }
    }
}

/// On the GEMM (64 columns), a row's result does not depend on the rows
/// around it: weights cut into two matrices at a row that is not a
/// multiple of any panel height (as a tensor split cuts them) give the
/// whole matrix's outputs bit for bit, for every weight type on every ISA,
/// 1..3 threads. (The one-column dot-product tiles group rows differently
/// at a matrix's tail, so their last bits may differ there.)
#[test]
fn rows_cut_off_give_the_same_bits() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(99);
    for (k, m, cut) in [(512, 40, 23), (256, 40, 5), (256, 40, 1), (768, 24, 16)] {
        for t in MUL_MAT_WEIGHT_TYPES {
            if !mul_mat_supported(
                &Layout::contiguous(t, &[k, m]).unwrap(),
                &Layout::contiguous(DType::F32, &[k, 1]).unwrap(),
            ) {
                continue;
            }
            let (mut a, _) = weights(t, [k, m, 1, 1], [1, 2, 3], &mut rng);
            let row = t.row_size(k).unwrap();
            let mut part = |rows: std::ops::Range<usize>| {
                let layout = Layout::contiguous(t, &[k, rows.len()]).unwrap();
                let mut mem = Mem::new(layout.nbytes());
                let src = a.mem.bytes()[rows.start * row..rows.end * row].to_vec();
                mem.bytes()[..src.len()].copy_from_slice(&src);
                Tensor { mem, layout }
            };
            let (mut lo, mut hi) = (part(0..cut), part(cut..m));
            {
                let n = 64usize;
                let mut b = activations([k, n, 1, 1], [0, 1, 2, 3], &mut rng);
                let dst = |rows: usize| Layout::contiguous(DType::F32, &[rows, n]).unwrap();
                for isa in Isa::all_available() {
                    for nth in 1..=3 {
                        let what = format!("{t} n={n} {isa:?} nth={nth}");
                        let whole = run(&pool, &mut a, &mut b, dst(m), nth, isa).unwrap();
                        let top = run(&pool, &mut lo, &mut b, dst(cut), nth, isa).unwrap();
                        let bottom = run(&pool, &mut hi, &mut b, dst(m - cut), nth, isa).unwrap();
                        for j in 0..n {
                            let got: Vec<u32> = top[j * cut..(j + 1) * cut]
                                .iter()
                                .chain(&bottom[j * (m - cut)..(j + 1) * (m - cut)])
                                .map(|v| v.to_bits())
                                .collect();
                            let want: Vec<u32> = whole[j * m..(j + 1) * m]
                                .iter()
                                .map(|v| v.to_bits())
                                .collect();
                            assert_eq!(got, want, "{what} k={k} m={m} cut={cut}: column {j}");
                        }
                    }
                }
            }
        }
    }
}
