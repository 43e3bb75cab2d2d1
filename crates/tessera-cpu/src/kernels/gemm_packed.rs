//! Micro-kernels of the packed GEMM for repacked weights
//! ([`crate::repack`]): the A panels are the weights themselves, 16 rows
//! interleaved per Q4_0 block (288 bytes: 16 f16 scales, then four 64-byte
//! chunks of code bytes), so nothing is packed per call.
//!
//! B panels are the integer path's ([`super::gemm_q8`]): activation codes
//! `[k / 4][NR][4]` i8, then `[k / 32][NR][2]` f32 (`dy`, `dy * sum q`). A
//! block's contribution to row `r`, column `j` is
//! `d_r * (dy * sum (u q) - 8 * dy * sum q)` with `u` the unsigned nibbles,
//! the exact integer sum taken by `vpdpbusd` (AVX-512 VNNI) or by the
//! portable kernel, which any instruction set can run (a stream without
//! VNNI still computes with repacked weights, slowly).
//!
//! The widths go down to one column: with repacked weights every MUL_MAT
//! takes the GEMM (a one-column product reads each weight byte once, 16
//! rows per vector, with no horizontal sums). Above [`DIRECT_MAX_COLS`]
//! columns the VNNI path's own kernels run instead, on panels unpacked from
//! the weights by [`panel_from_packed`] (a mask and a shift per 64 bytes,
//! far cheaper than packing from the file's layout): on a Xeon with
//! AVX-512 (Emerald Rapids, 2 threads, `benches/gemm.rs`) the direct
//! kernels were 2x faster than the file's layout at 8 columns, equal at
//! 64 and 20-40 % slower at 512.

use super::gemm_q8::{QKernelFn, QTile};
use crate::isa::Isa;

/// Rows per panel.
pub(crate) const MR: usize = crate::repack::ROWS;
/// Bytes of one block of a panel.
pub(crate) const BLOCK: usize = crate::repack::Q4_0_GROUP_BLOCK;

/// Most columns for which the direct kernels run.
pub(crate) const DIRECT_MAX_COLS: usize = 32;

/// Write the VNNI A panel (codes `[kc / 4][16][4]`, then `(w, o)` per 32
/// values as `[kc / 32][2][16]` f32, see `gemm_q8`) of the 16 repacked rows
/// whose group starts at `group`, values `l0..l0 + kc`.
///
/// # Safety
/// `group` holds the group's blocks through `l0 + kc` values; `codes` and
/// `scales` hold the panel (`kc * 16` bytes, `kc / 32 * 32` f32).
pub(crate) unsafe fn panel_from_packed(
    group: *const u8,
    l0: usize,
    kc: usize,
    codes: *mut u8,
    scales: *mut f32,
) {
    for blk in 0..kc / 32 {
        // SAFETY: block `l0 / 32 + blk` of the group and the panel's parts
        // for it (caller's contract).
        let (a, out, sc) = unsafe {
            (
                std::slice::from_raw_parts(group.add((l0 / 32 + blk) * BLOCK), BLOCK),
                std::slice::from_raw_parts_mut(codes.add(blk * 32 * MR), 32 * MR),
                std::slice::from_raw_parts_mut(scales.add(blk * 2 * MR), 2 * MR),
            )
        };
        let (lo, hi) = out.split_at_mut(16 * MR);
        for (i, &u) in a[32..].iter().enumerate() {
            lo[i] = u & 15;
            hi[i] = u >> 4;
        }
        let (w, o) = sc.split_at_mut(MR);
        for r in 0..MR {
            w[r] = half::f16::from_le_bytes([a[2 * r], a[2 * r + 1]]).to_f32();
            o[r] = -8.0 * w[r];
        }
    }
}

/// A one-column kernel over four panels at once (`stride` bytes apart;
/// `t.a` the first, `t.row` its first output row, 64 rows of output): four
/// streams of weights in flight, where one panel at a time is one stream,
/// too few reads in flight to reach the memory's bandwidth.
///
/// # Safety
/// As for [`QKernelFn`], for each of the four panels.
pub(crate) type QuadFn = unsafe fn(t: &QTile, stride: usize);

/// A kernel set: widths (largest first) and their kernels.
#[derive(Debug)]
pub(crate) struct PackedKernels {
    pub nr: [usize; 5],
    pub kernel: [QKernelFn; 5],
    /// The one-column kernel over four panels, if the set has one.
    pub quad: Option<QuadFn>,
}

static PORTABLE: PackedKernels = PackedKernels {
    nr: [12, 8, 4, 2, 1],
    kernel: [
        portable::<12>,
        portable::<8>,
        portable::<4>,
        portable::<2>,
        portable::<1>,
    ],
    quad: None,
};

/// The kernels a stream running `isa` uses.
pub(crate) fn kernels(isa: Isa) -> &'static PackedKernels {
    imp::kernels(isa).unwrap_or(&PORTABLE)
}

/// Every kernel set of this CPU (for scratch sizing).
pub(crate) fn all() -> impl Iterator<Item = &'static PackedKernels> {
    std::iter::once(&PORTABLE).chain(imp::kernels(Isa::best()))
}

/// The width for `ncol` columns: the narrowest that holds them, else the
/// one of 12 and 8 that wastes least.
pub(crate) fn width(ks: &PackedKernels, ncol: usize) -> usize {
    if let Some(i) = (1..ks.nr.len()).rev().find(|&i| ks.nr[i] >= ncol) {
        return i;
    }
    let cost = |i: usize| ncol.div_ceil(ks.nr[i]) * ks.nr[i] * if i == 0 { 10 } else { 11 };
    usize::from(cost(1) < cost(0))
}

/// One tile in plain Rust.
///
/// # Safety
/// As for [`QKernelFn`], with `t.a` at `t.kc / 32` packed blocks.
unsafe fn portable<const NR: usize>(t: &QTile) {
    let mut acc = [[0f32; MR]; NR];
    for blk in 0..t.kc / 32 {
        // SAFETY: block `blk` of the panel (BLOCK bytes) and of the B group
        // (32 * NR code bytes, 2 * NR scales) are in the tile's ranges.
        let (a, b, bsc) = unsafe {
            (
                std::slice::from_raw_parts(t.a.add(blk * BLOCK), BLOCK),
                std::slice::from_raw_parts(t.b.add(blk * 32 * NR).cast::<i8>(), 32 * NR),
                std::slice::from_raw_parts(t.b_scales.add(blk * 2 * NR), 2 * NR),
            )
        };
        for r in 0..MR {
            let d = half::f16::from_le_bytes([a[2 * r], a[2 * r + 1]]).to_f32();
            for (j, acc) in acc.iter_mut().enumerate() {
                let mut isum = 0i32;
                for c in 0..4 {
                    for v in 0..4 {
                        let u = a[32 + 64 * c + 4 * r + v];
                        let lo = b[c * 4 * NR + 4 * j + v];
                        let hi = b[(c + 4) * 4 * NR + 4 * j + v];
                        isum +=
                            i32::from(u & 15) * i32::from(lo) + i32::from(u >> 4) * i32::from(hi);
                    }
                }
                let (dy, bs) = (bsc[2 * j], bsc[2 * j + 1]);
                acc[r] += d * (isum as f32 * dy - 8.0 * bs);
            }
        }
    }
    // SAFETY: forwarded contract (the tile's outputs).
    unsafe { super::gemm_pack::store_tile(&t.as_f32_tile(), acc.as_flattened(), MR) };
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::PackedKernels;

    pub(super) fn kernels(_isa: crate::isa::Isa) -> Option<&'static PackedKernels> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::{BLOCK, MR, PackedKernels};
    use crate::isa::Isa;
    use crate::kernels::gemm_q8::QTile;
    use crate::kernels::gemm_vnni::imp::store_zmm_tile;

    static VNNI: PackedKernels = PackedKernels {
        nr: [12, 8, 4, 2, 1],
        kernel: [
            kernel::<12>,
            kernel::<8>,
            kernel::<4>,
            kernel::<2>,
            kernel::<1>,
        ],
        quad: Some(quad),
    };

    /// The VNNI set on [`Isa::Avx512`] (which includes VNNI).
    pub(super) fn kernels(isa: Isa) -> Option<&'static PackedKernels> {
        isa.has_avx512().then_some(&VNNI)
    }

    /// `C (+)= A B` for one 16 x NR tile: per block, four 64-byte loads give
    /// eight steps' unsigned codes (mask, shift and mask), each multiplied
    /// by every column's 4 broadcast activation codes.
    ///
    /// # Safety
    /// See [`super::portable`]; AVX-512F/BW/VNNI and F16C present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn kernel<const NR: usize>(t: &QTile) {
        let mut acc = [_mm512_setzero_ps(); NR];
        let (mut a, mut b, mut bsc) = (t.a, t.b, t.b_scales);
        let mask = _mm512_set1_epi8(0x0F);
        for _ in 0..t.kc / 32 {
            let mut isum = [_mm512_setzero_si512(); NR];
            // SAFETY: one block of the panel (BLOCK bytes at `a`) and of the
            // B group (32 * NR codes at `b`, 2 * NR scales at `bsc`).
            unsafe {
                let w = _mm512_cvtph_ps(_mm256_loadu_si256(a.cast()));
                for c in 0..4 {
                    let x = _mm512_loadu_si512(a.add(32 + 64 * c).cast());
                    let lo = _mm512_and_si512(x, mask);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), mask);
                    for (j, s) in isum.iter_mut().enumerate() {
                        let bl = b.add(c * 4 * NR + 4 * j).cast::<i32>().read_unaligned();
                        let bh = b
                            .add((c + 4) * 4 * NR + 4 * j)
                            .cast::<i32>()
                            .read_unaligned();
                        *s = _mm512_dpbusd_epi32(*s, lo, _mm512_set1_epi32(bl));
                        *s = _mm512_dpbusd_epi32(*s, hi, _mm512_set1_epi32(bh));
                    }
                }
                for (j, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                    let dy = _mm512_set1_ps(*bsc.add(2 * j));
                    let m8 = _mm512_set1_ps(-8.0 * *bsc.add(2 * j + 1));
                    let v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dy, m8);
                    *acc = _mm512_fmadd_ps(w, v, *acc);
                }
                a = a.add(BLOCK);
                b = b.add(32 * NR);
                bsc = bsc.add(2 * NR);
            }
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_zmm_tile(t, acc) };
    }

    /// [`super::QuadFn`]: one column, four panels, the column's codes
    /// broadcast once per block for all four.
    ///
    /// # Safety
    /// See [`super::QuadFn`]; AVX-512F/BW/VNNI and F16C present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn quad(t: &QTile, stride: usize) {
        let mut acc = [_mm512_setzero_ps(); 4];
        let (mut b, mut bsc) = (t.b, t.b_scales);
        let mut a = [t.a; 4];
        for (p, a) in a.iter_mut().enumerate() {
            *a = a.wrapping_add(p * stride);
        }
        let mask = _mm512_set1_epi8(0x0F);
        for _ in 0..t.kc / 32 {
            // SAFETY: one block of each panel (BLOCK bytes at each `a[p]`)
            // and of the one-column B group (32 codes at `b`, 2 scales).
            unsafe {
                let mut bv = [_mm512_setzero_si512(); 8];
                for (s, v) in bv.iter_mut().enumerate() {
                    *v = _mm512_set1_epi32(b.add(4 * s).cast::<i32>().read_unaligned());
                }
                let dy = _mm512_set1_ps(*bsc);
                let m8 = _mm512_set1_ps(-8.0 * *bsc.add(1));
                for (ap, acc) in a.iter_mut().zip(acc.iter_mut()) {
                    let w = _mm512_cvtph_ps(_mm256_loadu_si256(ap.cast()));
                    let mut isum = [_mm512_setzero_si512(); 2];
                    for c in 0..4 {
                        let x = _mm512_loadu_si512(ap.add(32 + 64 * c).cast());
                        let lo = _mm512_and_si512(x, mask);
                        let hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), mask);
                        isum[0] = _mm512_dpbusd_epi32(isum[0], lo, bv[c]);
                        isum[1] = _mm512_dpbusd_epi32(isum[1], hi, bv[c + 4]);
                    }
                    let s = _mm512_cvtepi32_ps(_mm512_add_epi32(isum[0], isum[1]));
                    *acc = _mm512_fmadd_ps(w, _mm512_fmadd_ps(s, dy, m8), *acc);
                    *ap = ap.add(BLOCK);
                }
                b = b.add(32);
                bsc = bsc.add(2);
            }
        }
        let Some(&col) = t.c.first() else { return };
        for (p, v) in acc.into_iter().enumerate() {
            // SAFETY: rows row..row + 64 of the column are the call's.
            unsafe {
                let out = col.add(t.row + MR * p);
                let v = if t.accumulate {
                    _mm512_add_ps(v, _mm512_loadu_ps(out))
                } else {
                    v
                };
                _mm512_storeu_ps(out, v);
            }
        }
    }
}
