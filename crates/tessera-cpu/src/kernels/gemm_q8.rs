//! The integer path of the packed GEMM ([`super::gemm`]) for quantized
//! weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
//! IQ4_NL, IQ4_XS): weights stay 8-bit codes, activations
//! are quantized to 8 bits, and the micro-kernels (`gemm_vnni`:
//! `vpdpbusd`, 64 multiply-adds per instruction against 16 for an f32 FMA;
//! `gemm_q8_avx2`: `vpmaddubsw`) sum byte products exactly, scaling in f32
//! once per sub-block. This module holds the formats, the portable
//! unpacker, and the packing of both panels.
//!
//! Every supported weight type is written per sub-block `s` of `S` values
//! (`S` = 32, or 16 for Q5_0, Q5_1 and the K-quants but Q4_K) as `x = w_s * u + o_s` with unsigned codes
//! `u` (0..=255) and f32 `w_s`, `o_s`:
//!
//! | type | `u` | `w_s` | `o_s` |
//! |---|---|---|---|
//! | Q4_0 | nibble | `d` | `-8 d` |
//! | Q4_1 | nibble | `d` | `m` |
//! | Q5_0 | 5-bit `q` | `d` | `-16 d` (`S` = 16, see `gemm_q8_avx2`) |
//! | Q5_1 | 5-bit `q` | `d` | `m` (`S` = 16) |
//! | Q8_0 | `q + 128` | `d` | `-128 d` |
//! | Q2_K | 2-bit `q` | `d sc_s` | `-dmin m_s` (`S` = 16) |
//! | Q3_K | 3-bit `q + 4` | `d (sc_s - 32)` | `-4 w_s` (`S` = 16) |
//! | Q4_K | nibble | `d sc_s` | `-dmin m_s` |
//! | Q5_K | 5-bit `q` | `d sc_s` | `-dmin m_s` (`S` = 16, pairs share them) |
//! | Q6_K | 6-bit `q` | `d sc_s` | `-32 d sc_s` |
//! | IQ4_NL | `kvalues[q] + 128` | `d` | `-128 d` |
//! | IQ4_XS | `kvalues[q] + 128` | `d (ls_s - 32)` | `-128 w_s` |
//!
//! Activations are quantized per column in blocks of [`QB`] = 32 values,
//! `y = dy * q` with `dy = max|y| / 127` (ggml's Q8_0 rule, f32 scale), so
//! a sub-block's dot product is
//! `w_s dy (sum u q) + o_s (dy sum q)`: one exact integer sum and two FMAs.
//! (The VNNI kernels take the K-quants' and IQ4_XS's activations per 256
//! values instead, as ggml's Q8_K: [`super::gemm_sb`].)
//!
//! Panels (`MR` weight rows, `NR` columns):
//! - A, per `kc` slice: codes `[kc / 4][MR][4]` (4 consecutive values of a
//!   row per 32-bit lane, `vpdpbusd`'s unsigned operand), then scales
//!   `[kc / S][2][MR]` f32 (`w` then `o`).
//! - B, per column group, over all `k`: codes `[k / 4][NR][4]` i8 (a 32-bit
//!   broadcast per column and step), then scales `[k / S][NR][2]` 32-bit
//!   words: `dy` (f32) and `dy * sum q` (f32), or `c * sum q` (i32) for the
//!   kernels of [`Q8Kernels::kernel_sym`].
//!
//! **Constant offsets.** Where `o_s = c w_s` with one integer `c` for the
//! whole type ([`sym_offset`]: Q4_0, Q5_0, Q8_0, Q3_K, Q6_K, IQ4_NL,
//! IQ4_XS), a sub-block's product is `w_s dy (sum u q + c sum q)`: a kernel
//! of [`Q8Kernels::kernel_sym`] starts each integer sum at the B record's `c sum q`
//! and scales once (a conversion, a multiply, one FMA per column) instead
//! of adding `o_s (dy sum q)` with a second FMA. The sum stays exact
//! (`|sum| <= 32 * 255 * 127`) and is rounded once.

use tessera::DType;
use tessera::quant::{KVALUES_IQ4NL, get_scale_min_k4};

use super::gemm_pack::{PackBufs, TransposeFn};

/// Values per activation quantization block.
pub(crate) const QB: usize = 32;

/// One call of an integer micro-kernel: `C[0..mr, 0..nr] (+)= A B` over
/// `kc` values (a multiple of the kernel's `S`).
#[derive(Debug)]
pub(crate) struct QTile<'a> {
    pub kc: usize,
    /// A codes (`kc * MR` bytes, 64-byte aligned) and scales (`kc / S * 2 * MR` f32).
    pub a: *const u8,
    pub a_scales: *const f32,
    /// B codes (`kc * NR` bytes) and scales (`kc / S * NR * 2` f32; for the
    /// super-block kernels `kc / 256 * NR` records, see [`super::gemm_sb`]).
    pub b: *const u8,
    pub b_scales: *const f32,
    /// Output columns and first row, valid rows, store mode (as [`super::gemm_pack::Tile`]).
    pub c: &'a [*mut f32],
    pub row: usize,
    pub mr: usize,
    pub accumulate: bool,
}

/// An integer micro-kernel.
///
/// # Safety
/// The panels hold `t.kc` values in the layouts above, every
/// `c[j] + row .. + mr` is writable f32 no other thread touches, and the CPU
/// has the kernel's features.
pub(crate) type QKernelFn = unsafe fn(t: &QTile);

/// The super-block kernel of a kernel set for an offset kind and a
/// sub-block size ([`super::gemm_sb`]).
pub(crate) type SbKernelFn = fn(super::gemm_sb::Sb, usize) -> QKernelFn;

/// What an instruction set brings to the integer path.
#[derive(Debug)]
pub(crate) struct Q8Kernels {
    /// Rows per A panel (16).
    pub mr: usize,
    /// Columns per B panel: wide and narrow kernel.
    pub nr: [usize; 2],
    /// Kernels by sub-block size (`[S = 32, S = 16]`) and width.
    pub kernel: [[QKernelFn; 2]; 2],
    /// Dword transposer for the A codes (as f32 bit patterns).
    pub transpose: TransposeFn,
    /// Row unpacker per weight type (`None`: the portable one); it writes
    /// one `(w, o)` per sub-block of [`Q8Kernels::sub`] values.
    pub unpack: fn(DType) -> Option<UnpackFn>,
    /// Sub-block size per weight type (`S`: [`sub_size`], or 32 where the
    /// format's scales allow it and the kernel's sums do not overflow).
    pub sub: fn(DType) -> Option<usize>,
    /// The weight types the kernels handle.
    pub types: &'static [DType],
    /// The same kernels for B records holding `c * sum q` as i32 (types
    /// with [`sym_offset`], see the module docs).
    pub kernel_sym: [[QKernelFn; 2]; 2],
    /// The kernel over super-block activations ([`super::gemm_sb`]) for an
    /// offset kind and sub-block size, and their panel width; `None` where
    /// the set has none.
    pub sb: Option<(SbKernelFn, usize)>,
}

/// Unpack `nblk` whole blocks at `src` into `codes` (one byte per value) and
/// the `(w, o)` of each sub-block `j` into `w[j * stride]`, `o[j * stride]`.
///
/// # Safety
/// `src` holds the blocks, `codes` their values, `w` and `o` their
/// sub-blocks at `stride`; the CPU has the unpacker's features.
pub(crate) type UnpackFn =
    unsafe fn(src: *const u8, nblk: usize, codes: *mut u8, w: *mut f32, o: *mut f32, stride: usize);

/// The sub-block size of `t` on the integer path, or `None` if `t` has none
/// (what the portable unpacker writes scales for; a kernel set may use
/// 32 for Q5_0, Q5_1 and Q5_K, whose pairs of 16 share their scales).
pub(crate) fn sub_size(t: DType) -> Option<usize> {
    match t {
        DType::Q4_0 | DType::Q4_1 | DType::Q8_0 | DType::Q4K => Some(32),
        // Byte codes up to 241: the VNNI kernels only (`vpdpbusd` sums in
        // 32 bits; the AVX2 kernel's 16-bit pair sums would saturate).
        DType::IQ4NL | DType::IQ4XS => Some(32),
        // 5-bit codes: the AVX2 kernel's 16-bit sums must be widened every
        // two steps, which its 16-value sub-block variant does.
        DType::Q6K | DType::Q5_0 | DType::Q5_1 | DType::Q5K => Some(16),
        // 16-value sub-blocks of their own.
        DType::Q2K | DType::Q3K => Some(16),
        _ => None,
    }
}

/// The constant `c` of weight type `t` if every sub-block's offset is
/// `o_s = c w_s` on the integer path (the table above).
pub(crate) fn sym_offset(t: DType) -> Option<i32> {
    match t {
        DType::Q4_0 => Some(-8),
        DType::Q5_0 => Some(-16),
        DType::Q8_0 | DType::IQ4NL | DType::IQ4XS => Some(-128),
        DType::Q3K => Some(-4),
        DType::Q6K => Some(-32),
        _ => None,
    }
}

/// Bytes of one B panel group of `nr` columns over `k` values.
pub(crate) fn b_group_bytes(k: usize, nr: usize, s: usize) -> Option<usize> {
    let codes = k.checked_mul(nr)?;
    let scales = (k / s.max(1)).checked_mul(nr)?.checked_mul(8)?;
    let n = codes.checked_add(scales)?;
    Some(n.checked_add(63)? / 64 * 64)
}

/// Quantize and pack `nr` columns (`cols`: element 0 of each, `nb0` bytes
/// between elements; missing columns are zeros) over `l` in `l0..l1`
/// (multiples of [`QB`]) into the B group at `out` for `k` values; with
/// `sym = Some(c)` each record's second word is `c * sum q` (i32, for the
/// [`Q8Kernels::kernel_sym`]), else `dy * sum q`.
///
/// # Safety
/// Each column holds `l1` f32 at stride `nb0`; `out` is the group
/// ([`b_group_bytes`]), 4-byte aligned, written by this thread only in the
/// rows `l0..l1`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pack_b_q8(
    cols: &[*const u8],
    nb0: usize,
    nr: usize,
    s: usize,
    sym: Option<i32>,
    k: usize,
    l0: usize,
    l1: usize,
    out: *mut u8,
) {
    // SAFETY: the scales follow the k * nr code bytes (4-byte aligned: k is
    // a multiple of 32).
    let scales = unsafe { out.add(k * nr) }.cast::<f32>();
    let quant = super::act_quant_avx2::quant_blocks_fn().unwrap_or(quant_blocks);
    // Up to CHUNK values of a column at a time (8 blocks: one vector
    // division for their scales).
    const CHUNK: usize = 8 * QB;
    let mut x = [0f32; CHUNK];
    let mut q = [0i8; CHUNK];
    let mut d = [0f32; CHUNK / QB];
    for c in 0..nr {
        let mut l = l0;
        while l < l1 {
            let len = (l1 - l).min(CHUNK);
            let src: &[f32] = match cols.get(c) {
                // A contiguous, aligned column is quantized where it lies.
                Some(&p) if nb0 == 4 && (p as usize).is_multiple_of(4) => {
                    // SAFETY: the column holds l1 f32 at stride 4 from `p`,
                    // which is 4-byte aligned; elements l..l + len < l1 are
                    // only read while this call runs.
                    unsafe { std::slice::from_raw_parts(p.add(l * 4).cast::<f32>(), len) }
                }
                Some(&p) => {
                    for (i, v) in x.iter_mut().enumerate().take(len) {
                        // SAFETY: element l + i < l1 of column c.
                        *v = unsafe { p.add((l + i) * nb0).cast::<f32>().read_unaligned() };
                    }
                    &x[..len]
                }
                None => {
                    x[..len].fill(0.0);
                    &x[..len]
                }
            };
            let nblk = len / QB;
            quant(src, &mut q[..len], &mut d[..nblk]);
            for (g, four) in q[..len].chunks_exact(4).enumerate() {
                let word = u32::from_le_bytes([
                    four[0] as u8,
                    four[1] as u8,
                    four[2] as u8,
                    four[3] as u8,
                ]);
                // SAFETY: codes (l / 4 + g, c, 0..4) of the group, l + 4g + 3 < l1 <= k.
                unsafe {
                    out.add((l / 4 + g) * nr * 4 + c * 4)
                        .cast::<u32>()
                        .write_unaligned(word)
                };
            }
            for (h, part) in q[..len].chunks_exact(s).enumerate() {
                let sum: i32 = part.iter().map(|&v| i32::from(v)).sum();
                let sb = (l + h * s) / s;
                let db = d[h * s / QB];
                let second = match sym {
                    // At most 32 * 127 * 128 in magnitude: no overflow.
                    Some(cst) => cst.wrapping_mul(sum) as u32,
                    None => (db * sum as f32).to_bits(),
                };
                // SAFETY: scales (sb, c) of the group, sb < k / s.
                unsafe {
                    *scales.add((sb * nr + c) * 2) = db;
                    scales
                        .add((sb * nr + c) * 2 + 1)
                        .cast::<u32>()
                        .write(second);
                }
            }
            l += len;
        }
    }
}

/// The portable [`super::act_quant_avx2::QuantBlocksFn`]: per block of
/// [`QB`], `q = round(x / d)` with `d = max|x| / 127`.
fn quant_blocks(x: &[f32], q: &mut [i8], d: &mut [f32]) {
    for ((xb, qb), db) in x.chunks_exact(QB).zip(q.chunks_exact_mut(QB)).zip(d) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        *db = amax / 127.0;
        let id = if *db != 0.0 { 1.0 / *db } else { 0.0 };
        for (o, v) in qb.iter_mut().zip(xb) {
            *o = (v * id).round() as i8;
        }
    }
}

/// Unpack whole blocks of type `t` (`src`) into codes (one byte per value)
/// and per-sub-block `(w, o)` pairs; extra output is left as is.
pub(crate) fn unpack_blocks(t: DType, src: &[u8], codes: &mut [u8], scales: &mut [(f32, f32)]) {
    let (ts, bs) = (t.type_size(), t.block_size());
    let nsub = bs / sub_size(t).unwrap_or(bs).max(1);
    let blocks = src
        .chunks_exact(ts)
        .zip(codes.chunks_exact_mut(bs))
        .zip(scales.chunks_exact_mut(nsub.max(1)));
    for ((x, out), sc) in blocks {
        match t {
            DType::Q4_0 => {
                let d = f16(x, 0);
                let (lo, hi) = out.split_at_mut(16);
                for ((l, h), &q) in lo.iter_mut().zip(hi).zip(x.iter().skip(2)) {
                    *l = q & 0x0F;
                    *h = q >> 4;
                }
                sc.fill((d, -8.0 * d));
            }
            DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => {
                // Offsets of qh (if any) and qs; the block's (w, o).
                let d = f16(x, 0);
                let (qh_at, qs_at, wo) = match t {
                    DType::Q4_1 => (None, 4, (d, f16(x, 2))),
                    DType::Q5_0 => (Some(2), 6, (d, -16.0 * d)),
                    _ => (Some(4), 8, (d, f16(x, 2))),
                };
                let qh = qh_at
                    .and_then(|i| x.get(i..i + 4))
                    .map_or(0, |h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]));
                let (lo, hi) = out.split_at_mut(16);
                let qs = x.iter().skip(qs_at);
                for (j, ((l, h), &q)) in lo.iter_mut().zip(hi).zip(qs).enumerate() {
                    *l = (q & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
                    *h = (q >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
                }
                sc.fill(wo);
            }
            DType::Q8_0 => {
                let d = f16(x, 0);
                for (o, &q) in out.iter_mut().zip(x.iter().skip(2)) {
                    *o = q ^ 0x80;
                }
                sc.fill((d, -128.0 * d));
            }
            DType::Q4K => {
                let (d, dmin) = (f16(x, 0), f16(x, 2));
                let mut packed = [0u8; 12];
                for (p, &v) in packed.iter_mut().zip(x.iter().skip(4)) {
                    *p = v;
                }
                // Bytes 32i..32i + 32 of qs: sub-block 2i (low nibbles) and
                // 2i + 1 (high nibbles).
                let qs = x.get(16..).unwrap_or(&[]);
                for (i, (o, q)) in out
                    .chunks_exact_mut(64)
                    .zip(qs.chunks_exact(32))
                    .enumerate()
                {
                    let (lo, hi) = o.split_at_mut(32);
                    for ((l, h), &v) in lo.iter_mut().zip(hi).zip(q) {
                        *l = v & 0x0F;
                        *h = v >> 4;
                    }
                    for (j, s) in sc.iter_mut().enumerate().skip(2 * i).take(2) {
                        let (scale, min) = get_scale_min_k4(j, &packed);
                        *s = (d * f32::from(scale), -dmin * f32::from(min));
                    }
                }
            }
            DType::Q2K => {
                let (d, dmin) = (f16(x, 80), f16(x, 82));
                let qs = x.get(16..80).unwrap_or(&[]);
                for (e, o) in out.iter_mut().enumerate() {
                    let byte = qs.get((e / 128) * 32 + e % 32).copied().unwrap_or(0);
                    *o = (byte >> (2 * ((e % 128) / 32))) & 3;
                }
                for (s, &v) in sc.iter_mut().zip(x) {
                    *s = (d * f32::from(v & 0xF), -dmin * f32::from(v >> 4));
                }
            }
            DType::Q3K => {
                let d = f16(x, 108);
                let (hm, qs) = (x.get(..32).unwrap_or(&[]), x.get(32..96).unwrap_or(&[]));
                for (e, o) in out.iter_mut().enumerate() {
                    let byte = qs.get((e / 128) * 32 + e % 32).copied().unwrap_or(0);
                    let h = hm.get(e % 32).map_or(0, |&h| (h >> (e / 32)) & 1);
                    *o = ((byte >> (2 * ((e % 128) / 32))) & 3) | (h << 2);
                }
                if let Some(s12) = x.get(96..108) {
                    for (j, s) in sc.iter_mut().enumerate() {
                        let lo = if j < 8 { s12[j] & 0xF } else { s12[j - 8] >> 4 };
                        let hi = (s12[8 + j % 4] >> (2 * (j / 4))) & 3;
                        let w = d * f32::from(i16::from(lo | (hi << 4)) - 32);
                        *s = (w, -4.0 * w);
                    }
                }
            }
            DType::Q5K => {
                let (d, dmin) = (f16(x, 0), f16(x, 2));
                let mut packed = [0u8; 12];
                for (p, &v) in packed.iter_mut().zip(x.iter().skip(4)) {
                    *p = v;
                }
                let (qh, qs) = (x.get(16..48).unwrap_or(&[]), x.get(48..).unwrap_or(&[]));
                for (e, o) in out.iter_mut().enumerate() {
                    let byte = qs.get((e / 64) * 32 + e % 32).copied().unwrap_or(0);
                    let low = if e % 64 < 32 { byte & 0xF } else { byte >> 4 };
                    let h = qh.get(e % 32).map_or(0, |&h| (h >> (e / 32)) & 1);
                    *o = low | (h << 4);
                }
                for (j, s) in sc.iter_mut().enumerate() {
                    let (scale, min) = get_scale_min_k4(j / 2, &packed);
                    *s = (d * f32::from(scale), -dmin * f32::from(min));
                }
            }
            DType::Q6K => {
                let d = f16(x, 208);
                let (ql, rest) = x.split_at(128.min(x.len()));
                let (qh, rest) = rest.split_at(64.min(rest.len()));
                for ((o, ql), qh) in out
                    .chunks_exact_mut(128)
                    .zip(ql.chunks_exact(64))
                    .zip(qh.chunks_exact(32))
                {
                    let (o01, o23) = o.split_at_mut(64);
                    let (o0, o1) = o01.split_at_mut(32);
                    let (o2, o3) = o23.split_at_mut(32);
                    let (la, lb) = ql.split_at(32);
                    let it = o0
                        .iter_mut()
                        .zip(o1)
                        .zip(o2)
                        .zip(o3)
                        .zip(la)
                        .zip(lb)
                        .zip(qh);
                    for ((((((q0, q1), q2), q3), &a), &b), &h) in it {
                        *q0 = (a & 0xF) | ((h & 3) << 4);
                        *q1 = (b & 0xF) | (((h >> 2) & 3) << 4);
                        *q2 = (a >> 4) | (((h >> 4) & 3) << 4);
                        *q3 = (b >> 4) | (((h >> 6) & 3) << 4);
                    }
                }
                for (s, &v) in sc.iter_mut().zip(rest) {
                    let w = d * f32::from(v as i8);
                    *s = (w, -32.0 * w);
                }
            }
            DType::IQ4NL | DType::IQ4XS => {
                // Table values as codes `kv + 128` (1..=241): `o = -128 w`.
                let (d, qs_at) = (f16(x, 0), if t == DType::IQ4NL { 2 } else { 8 });
                let qs = x.get(qs_at..).unwrap_or(&[]);
                let sh = x.get(2..4).map_or(0, |h| u16::from_le_bytes([h[0], h[1]]));
                let code = |q: u8| (KVALUES_IQ4NL[usize::from(q & 0x0F)] as u8) ^ 0x80;
                for (ib, ((o, q), s)) in out
                    .chunks_exact_mut(32)
                    .zip(qs.chunks_exact(16))
                    .zip(sc.iter_mut())
                    .enumerate()
                {
                    let (lo, hi) = o.split_at_mut(16);
                    for ((l, h), &v) in lo.iter_mut().zip(hi).zip(q) {
                        *l = code(v);
                        *h = code(v >> 4);
                    }
                    let w = if t == DType::IQ4NL {
                        d
                    } else {
                        let l = x
                            .get(4 + ib / 2)
                            .map_or(0, |&b| (b >> (4 * (ib % 2))) & 0x0F);
                        let h = ((sh >> (2 * ib)) & 3) as u8;
                        d * f32::from(i16::from(l | (h << 4)) - 32)
                    };
                    *s = (w, -128.0 * w);
                }
            }
            _ => {
                out.fill(0);
                sc.fill((0.0, 0.0));
            }
        }
    }
}

/// The little-endian f16 at byte `i` of `x`, as f32.
fn f16(x: &[u8], i: usize) -> f32 {
    match x.get(i..i + 2) {
        Some(b) => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
        None => 0.0,
    }
}

/// How many rows ahead of the one it unpacks [`pack_a_q8`] prefetches
/// (into L1) the slice it will unpack. The first unit of each of a
/// MUL_MAT_ID prompt's expert GEMMs comes from memory with nothing before
/// it to prefetch it into L2 (the driver's next-slice prefetch), and the
/// unpacking waited at each block's first byte. Measured on an AMD EPYC
/// Zen 5, 2 threads, Qwen3 30B-A3B's experts at 512 tokens (`tessera bench
/// ops --op MUL_MAT_ID`), ms an op, none / 1 / 2 / 4 / 8 rows ahead: Q4_K
/// 20.2-20.6 / 19.1 / 18.4-18.5 / 18.0-18.6 / 17.9-18.2; 4 rows: Q8_0 20.3
/// -> 18.6, Q4_0 20.3 -> 18.8, Q6_K 20.0 -> 19.9; the dense `n = 512`
/// products (whose slices are prefetched into L2 during the one before)
/// unchanged.
const PACK_ROWS_AHEAD: usize = 4;

/// Pack the integer A panel of `rows` weight rows (at `row0`, `nb1` apart,
/// type `t`) over `l` in `l0..l0 + kc` into `codes` / `scales`, with
/// `qk.mr` rows per panel (rows past `rows` are zeros).
///
/// # Safety
/// The rows hold `l0 + kc` values (whole blocks of `t`); `bufs.tmp` holds
/// `mr * kc_max` f32 (used as bytes) and `bufs.zeros` `kc_max` zeros with
/// `kc <= kc_max`; `codes` (64-byte aligned) holds `kc * mr` bytes and
/// `scales` `kc / S * 2 * mr` f32; the CPU has `qk`'s features. With
/// `scaled`, Q2_K rows are stored as [`super::gemm_sb::Sb::Scaled`] wants.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pack_a_q8(
    qk: &Q8Kernels,
    t: DType,
    row0: *const u8,
    nb1: usize,
    rows: usize,
    l0: usize,
    kc: usize,
    codes: *mut u8,
    scales: *mut f32,
    bufs: &PackBufs,
    scaled: bool,
) {
    let mr = qk.mr.min(super::gemm_pack::MR_MAX);
    let (bs, ts) = (t.block_size().max(1), t.type_size());
    let s = (qk.sub)(t).unwrap_or(32);
    let nsub = kc / s;
    // The portable unpacker's sub-blocks per kernel sub-block (1 or 2).
    let step = (s / sub_size(t).unwrap_or(s)).max(1);
    let unpack = (qk.unpack)(t);
    let mut ptrs = [bufs.zeros; super::gemm_pack::MR_MAX];
    let mut sc = [(0f32, 0f32); super::gemm::KC_Q / 16];
    for (r, p) in ptrs.iter_mut().enumerate().take(mr) {
        if r >= rows {
            for j in 0..nsub {
                // SAFETY: scales (j, 0 | 1, r) of the panel.
                unsafe {
                    *scales.add(j * 2 * mr + r) = 0.0;
                    *scales.add(j * 2 * mr + mr + r) = 0.0;
                }
            }
            continue;
        }
        // SAFETY: row r of tmp holds kc_max * 4 >= kc bytes; row r < rows of
        // the weights holds the blocks; the scales of row r are at stride
        // 2 * mr in the panel.
        unsafe {
            let tmp = bufs.tmp.add(r * bufs.kc_max).cast::<u8>();
            let src = row0.add(r * nb1 + l0 / bs * ts);
            // The slice of the row PACK_ROWS_AHEAD on (past the panel: the
            // next panel's, or nothing the unit reads; hints never fault).
            super::gemm_pack::prefetch_l1(src.wrapping_add(PACK_ROWS_AHEAD * nb1), kc / bs * ts);
            if let Some(f) = unpack {
                f(src, kc / bs, tmp, scales.add(r), scales.add(mr + r), 2 * mr);
            } else {
                let out = std::slice::from_raw_parts_mut(tmp, kc);
                unpack_blocks(
                    t,
                    std::slice::from_raw_parts(src, kc / bs * ts),
                    out,
                    &mut sc,
                );
                for (j, &(w, o)) in sc.iter().step_by(step).enumerate().take(nsub) {
                    *scales.add(j * 2 * mr + r) = w;
                    *scales.add(j * 2 * mr + mr + r) = o;
                }
            }
            if scaled && t == DType::Q2K {
                super::gemm_sb::scale_q2k(src, kc / bs, tmp, scales.add(r), 2 * mr);
            }
            *p = tmp.cast::<f32>();
        }
    }
    // SAFETY: each row pointer holds kc bytes = kc / 4 dwords (tmp rows or
    // zeros); `codes` holds kc / 4 * mr dwords, 64-byte aligned.
    unsafe { (qk.transpose)(&ptrs[..mr], kc / 4, codes.cast()) };
}

impl QTile<'_> {
    /// The f32 tile with the same outputs (for [`super::gemm_pack::store_tile`]).
    pub(crate) fn as_f32_tile(&self) -> super::gemm_pack::Tile<'_> {
        super::gemm_pack::Tile {
            kc: 0,
            a: std::ptr::null(),
            b: std::ptr::null(),
            c: self.c,
            row: self.row,
            mr: self.mr,
            accumulate: self.accumulate,
        }
    }
}
