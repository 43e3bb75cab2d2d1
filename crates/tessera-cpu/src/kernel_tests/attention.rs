//! FLASH_ATTN_EXT kernel tests: the kernel is called directly through a
//! `NodeCtx` over `Vec`-backed memory, on 1, 2 and 3 threads and every
//! available ISA, and compared with a naive f64 attention (two-pass softmax,
//! ALiBi slopes computed as powers of two in f64) over the stored values.
//! Error measure: NMSE, 1e-5 when K is F16 (the kernel rounds q to f16, as
//! ggml does; measured ~1e-7, ggml's own threshold is 5e-4) and 1e-9 when K
//! is F32 (f32 accumulation only; measured ~1e-13).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Mutex;

use crate::isa::Isa;
use crate::kernels::attention::{flash_attn_ext, flash_attn_scratch_size, flash_attn_supported};
use crate::kernels::{NodeCtx, Scratch, TensorRef};
use crate::pool::ThreadPool;
use tessera::{DType, Layout, MAX_SRC, Op};

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

pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
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

/// A tensor: memory and a layout (possibly a strided view) over it.
pub(super) struct Tensor {
    mem: Mem,
    layout: Layout,
}

impl Tensor {
    /// A view `[ne0, ne1, ne2, ne3]` of `t` values whose dims are stored in
    /// memory order `order`, with `pad1` extra (unused) entries along dim 1
    /// (a KV-cache view longer than `ne1`), filled by `fill`.
    pub(super) fn new(
        t: DType,
        ne: [usize; 4],
        order: [usize; 4],
        pad1: usize,
        mut fill: impl FnMut() -> f32,
    ) -> Self {
        let mut nb = [0; 4];
        let mut stride = t.type_size();
        for &d in &order {
            nb[d] = stride;
            stride *= if d == 1 { ne[d] + pad1 } else { ne[d] };
        }
        let layout = Layout { dtype: t, ne, nb };
        let mut mem = Mem::new(stride);
        let bytes = mem.bytes();
        for e in bytes[..stride].chunks_exact_mut(t.type_size()) {
            let v = fill();
            match t {
                DType::F32 => e.copy_from_slice(&v.to_le_bytes()),
                _ => e.copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes()),
            }
        }
        Tensor { mem, layout }
    }

    pub(super) fn contiguous(t: DType, ne: [usize; 4], fill: impl FnMut() -> f32) -> Self {
        Tensor::new(t, ne, [0, 1, 2, 3], 0, fill)
    }

    fn get(&mut self, i: [usize; 4]) -> f64 {
        let off = self.layout.offset_of(i);
        let b = &self.mem.bytes()[off..];
        match self.layout.dtype {
            DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => f64::from(half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
        }
    }

    fn tref(&mut self) -> TensorRef {
        TensorRef {
            ptr: self.mem.ptr(),
            layout: self.layout,
            packing: crate::repack::Packing::Standard,
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct Params {
    pub scale: f32,
    pub max_bias: f32,
    pub softcap: f32,
}

/// The f64 reference, in dst order `[dv, n_head, n_q, ne3]`.
pub(super) fn reference(
    q: &mut Tensor,
    k: &mut Tensor,
    v: &mut Tensor,
    mut mask: Option<&mut Tensor>,
    p: Params,
) -> Vec<f64> {
    let [dk, n_q, n_head, ne3] = q.layout.ne;
    let [dv, n_kv, n_head_kv, _] = v.layout.ne;
    let n_log2 = 1usize << n_head.ilog2();
    let mut out = vec![0f64; dv * n_head * n_q * ne3];
    for i3 in 0..ne3 {
        for h in 0..n_head {
            let hk = h / (n_head / n_head_kv);
            let slope = if p.max_bias == 0.0 {
                1.0
            } else if h < n_log2 {
                2f64.powf(-f64::from(p.max_bias) * (h + 1) as f64 / n_log2 as f64)
            } else {
                2f64.powf(
                    -f64::from(p.max_bias) / 2.0 * (2 * (h - n_log2) + 1) as f64 / n_log2 as f64,
                )
            };
            for i1 in 0..n_q {
                let mut s = vec![f64::NEG_INFINITY; n_kv];
                for (j, sj) in s.iter_mut().enumerate() {
                    let m = match mask.as_deref_mut() {
                        Some(m) => {
                            let (m2, m3) = (m.layout.ne[2], m.layout.ne[3]);
                            m.get([j, i1, h % m2, i3 % m3])
                        }
                        None => 0.0,
                    };
                    if m == f64::NEG_INFINITY {
                        continue;
                    }
                    let dot: f64 = (0..dk)
                        .map(|d| q.get([d, i1, h, i3]) * k.get([d, j, hk, i3]))
                        .sum();
                    let mut x = f64::from(p.scale) * dot;
                    if p.softcap != 0.0 {
                        let c = f64::from(p.softcap);
                        x = c * (x / c).tanh();
                    }
                    *sj = x + slope * m;
                }
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    continue; // fully masked: zeros, as ggml
                }
                let w: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = w.iter().sum();
                let base = ((i3 * n_q + i1) * n_head + h) * dv;
                for d in 0..dv {
                    // Masked keys are not read (as ggml): their V rows
                    // may hold anything.
                    let acc: f64 = (0..n_kv)
                        .filter(|&j| s[j] != f64::NEG_INFINITY)
                        .map(|j| w[j] * v.get([d, j, hk, i3]))
                        .sum();
                    out[base + d] = acc / sum;
                }
            }
        }
    }
    out
}

/// Run the kernel on `nth` threads; the output, or the errors.
pub(super) fn run(
    pool: &ThreadPool,
    ops: (&mut Tensor, &mut Tensor, &mut Tensor, Option<&mut Tensor>),
    p: Params,
    nth: usize,
    isa: Isa,
) -> Result<Vec<f32>, Vec<String>> {
    run_short(pool, ops, p, (nth, isa), 0)
}

/// [`run`] with `short` bytes less scratch than the kernel asks for.
fn run_short(
    pool: &ThreadPool,
    (q, k, v, mask): (&mut Tensor, &mut Tensor, &mut Tensor, Option<&mut Tensor>),
    p: Params,
    (nth, isa): (usize, Isa),
    short: usize,
) -> Result<Vec<f32>, Vec<String>> {
    let [_, n_q, n_head, ne3] = q.layout.ne;
    let dst = Layout::contiguous4(DType::F32, [v.layout.ne[0], n_head, n_q, ne3]).unwrap();
    let mut out = Mem::new(dst.nbytes() + 64);
    out.bytes().fill(0xA5);
    let len = flash_attn_scratch_size(&q.layout, &k.layout, &v.layout, nth) - short;
    let mut scratch_mem = Mem::new(len);
    let scratch = Scratch {
        ptr: scratch_mem.ptr(),
        len,
    };
    let mut src = [None; MAX_SRC];
    src[0] = Some(q.tref());
    src[1] = Some(k.tref());
    src[2] = Some(v.tref());
    src[3] = mask.map(|m| m.tref());
    let dst_ref = TensorRef {
        ptr: out.ptr(),
        layout: dst,
        packing: crate::repack::Packing::Standard,
    };
    let op = Op::FlashAttnExt {
        scale: p.scale,
        max_bias: p.max_bias,
        logit_softcap: p.softcap,
    };
    let errors = Mutex::new(Vec::new());
    let ok = pool.run(nth, &|w| {
        let ctx = NodeCtx {
            op,
            dst: dst_ref,
            src,
            ith: w.ith,
            nth: w.nth,
            scratch,
            table: None,
            barrier: w.barrier,
            isa,
        };
        if let Err(e) = flash_attn_ext(&ctx) {
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
        bytes[n..n + 64].iter().all(|&g| g == 0xA5),
        "write past the output"
    );
    Ok(bytes[..n]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

pub(super) fn nmse(out: &[f32], want: &[f64]) -> f64 {
    assert_eq!(out.len(), want.len());
    let err: f64 = out
        .iter()
        .zip(want)
        .map(|(o, w)| (f64::from(*o) - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm
}

/// One case on 1, 2, 3 threads and every ISA; returns the reference.
pub(super) fn check(
    pool: &ThreadPool,
    what: &str,
    q: &mut Tensor,
    k: &mut Tensor,
    v: &mut Tensor,
    mut mask: Option<&mut Tensor>,
    p: Params,
) -> Vec<f64> {
    let ml = mask.as_ref().map(|m| m.layout);
    assert!(
        flash_attn_supported(&q.layout, &k.layout, &v.layout, ml.as_ref()),
        "{what}"
    );
    let want = reference(q, k, v, mask.as_deref_mut(), p);
    let tol = if k.layout.dtype == DType::F32 {
        1e-9
    } else {
        1e-5
    };
    for isa in Isa::all_available() {
        for nth in 1..=3 {
            let out = run(pool, (q, k, v, mask.as_deref_mut()), p, nth, isa)
                .unwrap_or_else(|e| panic!("{what} {isa:?} nth={nth}: {e:?}"));
            let e = nmse(&out, &want);
            assert!(e <= tol, "{what} {isa:?} nth={nth}: NMSE {e:e} > {tol:e}");
        }
    }
    want
}

/// A causal-style F16 mask `[n_kv, n_q_pad, m2, 1]`: key `j` is visible to
/// query `i` when `j <= n_kv - n_q + i`, with random biases in `(-amp, amp)`; query
/// `hidden` (if any) sees nothing.
pub(super) fn mask(
    n_kv: usize,
    n_q: usize,
    m2: usize,
    hidden: Option<usize>,
    amp: f32,
    rng: &mut Rng,
) -> Tensor {
    let pad = n_q.next_multiple_of(8);
    let mut t = Tensor::contiguous(DType::F16, [n_kv, pad, m2, 1], || 0.0);
    let row = t.layout.nb[1];
    for h in 0..m2 {
        for i in 0..pad {
            for j in 0..n_kv {
                let visible = j + n_q <= n_kv + i && Some(i) != hidden;
                let v = if visible {
                    rng.f32() * amp
                } else {
                    f32::NEG_INFINITY
                };
                let off = h * t.layout.nb[2] + i * row + 2 * j;
                t.mem.bytes()[off..off + 2]
                    .copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
            }
        }
    }
    t
}

pub(super) const KV_TYPES: [(DType, DType); 4] = [
    (DType::F16, DType::F16),
    (DType::F32, DType::F32),
    (DType::F16, DType::F32),
    (DType::F32, DType::F16),
];

#[test]
fn gqa_with_mask_odd_lengths_and_every_kv_type() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(11);
    for (tk, tv) in KV_TYPES {
        for (n_q, n_kv) in [(1usize, 33usize), (5, 33), (3, 150)] {
            let (d, n_head, n_head_kv) = (64, 8, 2);
            let mut q = Tensor::contiguous(DType::F32, [d, n_q, n_head, 1], || rng.f32());
            let mut k = Tensor::contiguous(tk, [d, n_kv, n_head_kv, 1], || rng.f32());
            let mut v = Tensor::contiguous(tv, [d, n_kv, n_head_kv, 1], || rng.f32());
            let mut m = mask(n_kv, n_q, 1, None, 0.5, &mut rng);
            let p = Params {
                scale: 1.0 / (d as f32).sqrt(),
                max_bias: 0.0,
                softcap: 0.0,
            };
            let what = format!("{tk}/{tv} n_q={n_q} n_kv={n_kv}");
            check(&pool, &what, &mut q, &mut k, &mut v, Some(&mut m), p);
            check(
                &pool,
                &format!("{what} no mask"),
                &mut q,
                &mut k,
                &mut v,
                None,
                p,
            );
        }
    }
}

#[test]
fn alibi_softcap_and_head_broadcast_of_the_mask() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(12);
    // 12 heads: heads 8..11 use the second ALiBi slope series (m1).
    let (d, n_q, n_kv, n_head, n_head_kv) = (32, 4, 37, 12, 3);
    for (tk, tv) in KV_TYPES {
        let mut q = Tensor::contiguous(DType::F32, [d, n_q, n_head, 2], || rng.f32() * 2.0);
        let mut k = Tensor::contiguous(tk, [d, n_kv, n_head_kv, 2], || rng.f32() * 2.0);
        let mut v = Tensor::contiguous(tv, [d, n_kv, n_head_kv, 2], || rng.f32());
        let mut m = mask(n_kv, n_q, 2, None, 4.0, &mut rng);
        let alibi = Params {
            scale: 0.3,
            max_bias: 8.0,
            softcap: 0.0,
        };
        check(
            &pool,
            &format!("{tk}/{tv} alibi"),
            &mut q,
            &mut k,
            &mut v,
            Some(&mut m),
            alibi,
        );
        // Scores up to ~|d * 4| = 128 before capping at 5.
        let capped = Params {
            scale: 1.0,
            max_bias: 0.0,
            softcap: 5.0,
        };
        check(
            &pool,
            &format!("{tk}/{tv} softcap"),
            &mut q,
            &mut k,
            &mut v,
            Some(&mut m),
            capped,
        );
        let both = Params {
            scale: 0.5,
            max_bias: 4.0,
            softcap: 10.0,
        };
        check(
            &pool,
            &format!("{tk}/{tv} alibi+softcap"),
            &mut q,
            &mut k,
            &mut v,
            Some(&mut m),
            both,
        );
    }
}

#[test]
fn non_contiguous_kv_views_and_a_different_v_size() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(13);
    let (dk, dv, n_q, n_kv, n_head, n_head_kv) = (64, 48, 3, 45, 8, 2);
    for (tk, tv) in KV_TYPES {
        // llama.cpp's cache layout: one row of n_head_kv * d per position,
        // viewed as [d, n_kv, n_head_kv] (nb1 = n_head_kv * d, nb2 = d), with
        // room for 19 more positions than used.
        let mut k = Tensor::new(tk, [dk, n_kv, n_head_kv, 1], [0, 2, 1, 3], 19, || rng.f32());
        let mut v = Tensor::new(tv, [dv, n_kv, n_head_kv, 1], [0, 2, 1, 3], 19, || rng.f32());
        // q permuted too: [d, n_q, n_head] stored as [d, n_head, n_q].
        let mut q = Tensor::new(DType::F32, [dk, n_q, n_head, 1], [0, 2, 1, 3], 0, || {
            rng.f32()
        });
        let mut m = mask(n_kv, n_q, 1, None, 0.5, &mut rng);
        let p = Params {
            scale: 0.125,
            max_bias: 0.0,
            softcap: 0.0,
        };
        check(
            &pool,
            &format!("{tk}/{tv} views"),
            &mut q,
            &mut k,
            &mut v,
            Some(&mut m),
            p,
        );
    }
}

#[test]
fn wide_gqa_groups_odd_head_sizes_and_dropped_keys() {
    // 12 query heads on one KV head: with 2 queries, 24 rows share K/V and
    // are computed in groups of at most GROUP_ROWS; head sizes with vector
    // tails (dk = 72, dv = 40); a causal mask drops the last keys for the
    // groups of the first query, and n_kv = 200 spans several KV blocks.
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(15);
    let (dk, dv, n_q, n_kv, n_head, n_head_kv) = (72, 40, 2, 200, 12, 1);
    for (tk, tv) in KV_TYPES {
        let mut q = Tensor::contiguous(DType::F32, [dk, n_q, n_head, 1], || rng.f32());
        let mut k = Tensor::contiguous(tk, [dk, n_kv, n_head_kv, 1], || rng.f32());
        let mut v = Tensor::contiguous(tv, [dv, n_kv, n_head_kv, 1], || rng.f32());
        let mut m = mask(n_kv, n_q, 1, None, 0.5, &mut rng);
        let p = Params {
            scale: 1.0 / (dk as f32).sqrt(),
            max_bias: 0.0,
            softcap: 0.0,
        };
        let what = format!("{tk}/{tv} wide groups");
        check(&pool, &what, &mut q, &mut k, &mut v, Some(&mut m), p);
        check(
            &pool,
            &format!("{what} no mask"),
            &mut q,
            &mut k,
            &mut v,
            None,
            p,
        );
    }
}

#[test]
fn a_fully_masked_row_outputs_zeros() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(14);
    let (d, n_q, n_kv, n_head) = (32, 4, 20, 2);
    let mut q = Tensor::contiguous(DType::F32, [d, n_q, n_head, 1], || rng.f32());
    let mut k = Tensor::contiguous(DType::F16, [d, n_kv, n_head, 1], || rng.f32());
    let mut v = Tensor::contiguous(DType::F16, [d, n_kv, n_head, 1], || rng.f32() + 2.0);
    let mut m = mask(n_kv, n_q, 1, Some(2), 0.5, &mut rng);
    let p = Params {
        scale: 0.2,
        max_bias: 0.0,
        softcap: 0.0,
    };
    let want = check(
        &pool,
        "hidden query",
        &mut q,
        &mut k,
        &mut v,
        Some(&mut m),
        p,
    );
    let out = run(
        &pool,
        (&mut q, &mut k, &mut v, Some(&mut m)),
        p,
        2,
        Isa::Scalar,
    )
    .unwrap();
    for h in 0..n_head {
        for i in 0..n_q {
            let row = &out[(i * n_head + h) * d..][..d];
            // V values are >= 1, so a visible row is never zero.
            assert_eq!(row.iter().all(|&x| x == 0.0), i == 2, "query {i} head {h}");
            assert_eq!(want[(i * n_head + h) * d] == 0.0, i == 2);
        }
    }
}

#[test]
fn unsupported_operands_are_refused() {
    let q = Layout::contiguous(DType::F32, &[64, 2, 8]).unwrap();
    let k = Layout::contiguous(DType::F16, &[64, 10, 2]).unwrap();
    let v = Layout::contiguous(DType::F16, &[64, 10, 2]).unwrap();
    let m = Layout::contiguous(DType::F16, &[10, 8]).unwrap();
    assert!(flash_attn_supported(&q, &k, &v, Some(&m)));
    assert!(flash_attn_supported(&q, &k, &v, None));
    // A Q8_0 cache is read; other quantized K, f16 q, mismatched head
    // size, heads not a multiple, short mask, f32 mask are not.
    let q8 = Layout::contiguous(DType::Q8_0, &[64, 10, 2]).unwrap();
    assert!(flash_attn_supported(&q, &q8, &q8, Some(&m)));
    assert!(!flash_attn_supported(
        &q,
        &Layout::contiguous(DType::Q4_0, &[64, 10, 2]).unwrap(),
        &v,
        None
    ));
    assert!(!flash_attn_supported(
        &Layout {
            dtype: DType::F16,
            ..k
        },
        &k,
        &v,
        None
    ));
    assert!(!flash_attn_supported(
        &q,
        &Layout::contiguous(DType::F16, &[32, 10, 2]).unwrap(),
        &v,
        None
    ));
    assert!(!flash_attn_supported(
        &q,
        &Layout::contiguous(DType::F16, &[64, 10, 3]).unwrap(),
        &Layout::contiguous(DType::F16, &[64, 10, 3]).unwrap(),
        None
    ));
    assert!(!flash_attn_supported(
        &q,
        &k,
        &v,
        Some(&Layout::contiguous(DType::F16, &[9, 8]).unwrap())
    ));
    assert!(!flash_attn_supported(
        &q,
        &k,
        &v,
        Some(&Layout::contiguous(DType::F32, &[10, 8]).unwrap())
    ));
    // Every thread gets its own padded part: the scratch grows with threads.
    assert!(flash_attn_scratch_size(&q, &k, &v, 3) > flash_attn_scratch_size(&q, &k, &v, 1));
}

/// Scratch one byte short: every thread with work reports it (none waits
/// at the counter's barrier for a thread that left), on 1..3 threads, with
/// more groups than threads (the counter's path: every thread) and with one
/// group (thread 0 only; the others have nothing to do).
#[test]
fn a_short_scratch_is_an_error_on_every_thread() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(17);
    for n_q in [1, 40] {
        let mut q = Tensor::contiguous(DType::F32, [64, n_q, 4, 1], || rng.f32());
        let mut k = Tensor::contiguous(DType::F16, [64, 32, 1, 1], || rng.f32());
        let mut v = Tensor::contiguous(DType::F16, [64, 32, 1, 1], || rng.f32());
        let p = Params {
            scale: 0.125,
            max_bias: 0.0,
            softcap: 0.0,
        };
        for nth in 1..=3 {
            let ops = (&mut q, &mut k, &mut v, None);
            let errs = run_short(&pool, ops, p, (nth, Isa::best()), 1).unwrap_err();
            let want = if n_q == 1 { 1 } else { nth };
            assert_eq!(errs.len(), want, "n_q={n_q} nth={nth}: {errs:?}");
            assert!(errs.iter().all(|e| e.contains("scratch")), "{errs:?}");
            // The full scratch works.
            let ops = (&mut q, &mut k, &mut v, None);
            assert!(run(&pool, ops, p, nth, Isa::best()).is_ok());
        }
    }
}
