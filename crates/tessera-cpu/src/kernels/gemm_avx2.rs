//! AVX2/FMA/F16C kernels of the packed GEMM ([`super::gemm`]): the 16 x NR
//! micro-kernels (NR = 6 or 4: 12 or 8 accumulators, two 8-lane A loads and
//! NR broadcasts per step of `k`), the 8 x 8 in-register transposer that
//! interleaves A panels (also used, on 32-bit groups of codes, by the
//! integer path), and the per-type row dequantizers that feed it.
//!
//! Every function here is compiled with `#[target_feature]`; [`kernels`]
//! hands them out only after checking the CPU, which is what makes the
//! function pointers in [`Kernels`] sound to call. The dequantizers compute
//! the same formulas, in the same order, as `tessera::quant`'s reference
//! (`(q - 8) * d`, `d * sc * q - dmin * m`, ...), so packed panels hold the
//! values ggml's `to_float` gives.

use super::gemm_pack::Kernels;

/// The AVX2 kernel set, if the CPU has AVX2, FMA and F16C.
pub(crate) fn kernels() -> Option<&'static Kernels> {
    imp::kernels()
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::Kernels;

    pub(crate) fn kernels() -> Option<&'static Kernels> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use tessera::DType;
    use tessera::quant::get_scale_min_k4;

    use super::Kernels;
    use crate::isa::Isa;
    use crate::kernels::gemm_pack::{DequantFn, HalfTransposeFn, Tile, store_tile};

    /// Rows per panel: two 8-lane vectors.
    const MR: usize = 16;

    static KERNELS: Kernels = Kernels {
        mr: MR,
        nr: [6, 4],
        kernel: [kernel::<6>, kernel::<4>],
        transpose,
        dequant,
        half_transpose,
    };

    pub(crate) fn kernels() -> Option<&'static Kernels> {
        Isa::Avx2.available().then_some(&KERNELS)
    }

    /// `C (+)= A B` for one 16 x NR tile.
    ///
    /// # Safety
    /// See [`super::super::gemm_pack::KernelFn`]; AVX2 and FMA present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn kernel<const NR: usize>(t: &Tile) {
        let mut c0 = [_mm256_setzero_ps(); NR];
        let mut c1 = [_mm256_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        // One step of `k`: two A vectors times NR broadcasts.
        macro_rules! step {
            ($i:expr) => {
                // SAFETY: step `$i` past `a` / `b` lies in the panels (the
                // loops below stay within kc steps); A is 64-byte aligned.
                unsafe {
                    let a0 = _mm256_load_ps(a.add($i * MR));
                    let a1 = _mm256_load_ps(a.add($i * MR + 8));
                    for j in 0..NR {
                        let bj = _mm256_broadcast_ss(&*b.add($i * NR + j));
                        c0[j] = _mm256_fmadd_ps(a0, bj, c0[j]);
                        c1[j] = _mm256_fmadd_ps(a1, bj, c1[j]);
                    }
                }
            };
        }
        for _ in 0..t.kc / 4 {
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            // SAFETY: four steps consumed, still inside the panels.
            unsafe {
                a = a.add(4 * MR);
                b = b.add(4 * NR);
            }
        }
        for _ in 0..t.kc % 4 {
            step!(0);
            // SAFETY: one step consumed.
            unsafe {
                a = a.add(MR);
                b = b.add(NR);
            }
        }
        if t.mr == MR && t.c.len() == NR {
            for ((&col, v0), v1) in t.c.iter().zip(c0).zip(c1) {
                // SAFETY: rows row..row + 16 of each column are the tile's.
                unsafe {
                    let p = col.add(t.row);
                    let (mut v0, mut v1) = (v0, v1);
                    if t.accumulate {
                        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(p));
                        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(p.add(8)));
                    }
                    _mm256_storeu_ps(p, v0);
                    _mm256_storeu_ps(p.add(8), v1);
                }
            }
            return;
        }
        let mut buf = [[0f32; MR]; NR];
        for ((o, v0), v1) in buf.iter_mut().zip(c0).zip(c1) {
            // SAFETY: each column of `buf` holds 16 f32.
            unsafe {
                _mm256_storeu_ps(o.as_mut_ptr(), v0);
                _mm256_storeu_ps(o.as_mut_ptr().add(8), v1);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { store_tile(t, buf.as_flattened(), MR) };
    }

    /// Transpose the 8 x 8 block `v` (rows) into columns.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn transpose8(v: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(v[0], v[1]);
        let t1 = _mm256_unpackhi_ps(v[0], v[1]);
        let t2 = _mm256_unpacklo_ps(v[2], v[3]);
        let t3 = _mm256_unpackhi_ps(v[2], v[3]);
        let t4 = _mm256_unpacklo_ps(v[4], v[5]);
        let t5 = _mm256_unpackhi_ps(v[4], v[5]);
        let t6 = _mm256_unpacklo_ps(v[6], v[7]);
        let t7 = _mm256_unpackhi_ps(v[6], v[7]);
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ]
    }

    /// `out[l * MR + r] = rows[r][l]` for any MR that is a multiple of 8.
    ///
    /// # Safety
    /// See [`super::super::gemm_pack::TransposeFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn transpose(rows: &[*const f32], kc: usize, out: *mut f32) {
        // SAFETY: `*const f32` and `*const u8` have one layout; the rows
        // hold kc f32 each (forwarded contract).
        unsafe {
            let rows = std::slice::from_raw_parts(rows.as_ptr().cast::<*const u8>(), rows.len());
            interleave::<F32>(rows, kc, out);
        }
    }

    /// The fused converter-transposer of `t` (F16 and BF16): the
    /// dequantize-then-transpose path wrote and read every value once more
    /// (1B F16 model, 128-token prompt, one thread on Zen 4: `deq_f16` and
    /// `transpose` took 7.7 % of the time, this 5.6 %).
    pub(crate) fn half_transpose(t: DType) -> Option<HalfTransposeFn> {
        match t {
            DType::F16 => Some(interleave::<F16>),
            DType::BF16 => Some(interleave::<BF16>),
            _ => None,
        }
    }

    /// Element types of [`interleave`]'s rows.
    const F32: u8 = 0;
    const F16: u8 = 1;
    const BF16: u8 = 2;

    /// `out[l * MR + r] = f32(rows[r][l])` for rows of element type `E`
    /// (MR = `rows.len()`, a multiple of 8): eight values of eight rows
    /// loaded (and widened), transposed in registers and stored.
    ///
    /// # Safety
    /// Every row holds `kc` values of `E`, `out` is 64-byte aligned and
    /// holds `kc * MR` f32; AVX2 and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn interleave<const E: u8>(rows: &[*const u8], kc: usize, out: *mut f32) {
        let size = if E == F32 { 4 } else { 2 };
        // Both closures are called below with pointers into the rows: eight
        // values (`8 * size` bytes) readable at `p` for `load8`, one for
        // `one`.
        // SAFETY: as just said; AVX2/F16C present (this function's contract).
        let load8 = |p: *const u8| unsafe {
            match E {
                F32 => _mm256_loadu_ps(p.cast()),
                F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128(p.cast()),
                ))),
            }
        };
        // SAFETY: as above.
        let one = |p: *const u8| unsafe {
            match E {
                F32 => p.cast::<f32>().read_unaligned(),
                F16 => half::f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
                _ => f32::from_bits(u32::from(p.cast::<u16>().read_unaligned()) << 16),
            }
        };
        let mr = rows.len();
        let l8 = kc / 8 * 8;
        for (h, r) in rows.chunks_exact(8).enumerate() {
            let mut l = 0;
            while l < l8 {
                let v = std::array::from_fn(|i| load8(r[i].wrapping_add(l * size)));
                for (i, c) in transpose8(v).into_iter().enumerate() {
                    // SAFETY: the stores land on steps l..l + 8 of the
                    // panel, rows 8h..8h + 8 (32-byte aligned: the panel is
                    // 64-byte aligned and mr * 4 and 8h * 4 are multiples
                    // of 32); each row held kc > l + 7 values for the loads.
                    unsafe { _mm256_store_ps(out.add((l + i) * mr + 8 * h), c) };
                }
                l += 8;
            }
            for l in l8..kc {
                for (i, &p) in r.iter().enumerate() {
                    // SAFETY: value l < kc of the row; scalar tail.
                    unsafe { *out.add(l * mr + 8 * h + i) = one(p.wrapping_add(l * size)) };
                }
            }
        }
    }

    /// `out[l * nr + c] = cols[c][l]` for `l` in `l0..l1` and `c < nr`
    /// (zeros for `c >= cols.len()`): the B panel of contiguous f32 rows,
    /// eight rows times eight values transposed in registers. The scalar
    /// loop read and wrote one value at a time (a tenth of a prompt's
    /// attention with 64-value heads, whose weights are packed per block).
    ///
    /// # Safety
    /// Each of the `cols.len() <= nr` columns holds `l1` readable f32,
    /// `out` holds `l1 * nr` writable f32, and AVX2 is present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn pack_b_rows(
        cols: &[*const f32],
        nr: usize,
        l0: usize,
        l1: usize,
        out: *mut f32,
    ) {
        let zero = _mm256_setzero_ps();
        let l8 = l0 + (l1.saturating_sub(l0)) / 8 * 8;
        for h in 0..nr.div_ceil(8) {
            let w = (nr - 8 * h).min(8);
            let r = cols.get(8 * h..).unwrap_or(&[]);
            let mut l = l0;
            while l < l8 {
                let v = std::array::from_fn(|i| match r.get(i) {
                    // SAFETY: values l..l + 8 < l1 of column 8h + i.
                    Some(&p) if i < w => unsafe { _mm256_loadu_ps(p.add(l)) },
                    _ => zero,
                });
                for (i, c) in transpose8(v).into_iter().enumerate() {
                    // SAFETY: step l + i < l1 of the panel, its values
                    // 8h .. 8h + w < nr.
                    unsafe {
                        let o = out.add((l + i) * nr + 8 * h);
                        match w {
                            8 => _mm256_storeu_ps(o, c),
                            4 => _mm_storeu_ps(o, _mm256_castps256_ps128(c)),
                            _ => {
                                let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                                let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(w as i32), lane);
                                _mm256_maskstore_ps(o, keep, c);
                            }
                        }
                    }
                }
                l += 8;
            }
            for l in l8..l1 {
                for i in 0..w {
                    // SAFETY: value l < l1 of column 8h + i (if any); step
                    // l of the panel.
                    unsafe {
                        *out.add(l * nr + 8 * h + i) = match r.get(i) {
                            Some(&p) => *p.add(l),
                            None => 0.0,
                        }
                    };
                }
            }
        }
    }

    /// The AVX2 row converter of `t` (`None` for F32, read in place).
    pub(crate) fn dequant(t: DType) -> Option<DequantFn> {
        Some(match t {
            DType::F16 => deq_f16,
            DType::BF16 => deq_bf16,
            DType::Q8_0 => deq_q8_0,
            DType::Q4_0 => deq_q4_0,
            DType::Q4K => deq_q4k,
            DType::Q6K => deq_q6k,
            DType::IQ4NL => deq_iq4nl,
            DType::IQ4XS => deq_iq4xs,
            // No AVX2 body: the reference converter (never `None`, which
            // would mean "f32, read in place").
            DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q2K | DType::Q3K | DType::Q5K => {
                return crate::kernels::gemm_portable::dequant(t);
            }
            DType::F32 | DType::Q8_1 | DType::Q8K | DType::I32 | DType::I64 => return None,
        })
    }

    /// The f16 at `p` (unaligned), converted with F16C.
    ///
    /// # Safety
    /// Two readable bytes at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
        // SAFETY: forwarded.
        let bits = u16::from_le_bytes(unsafe { p.cast::<[u8; 2]>().read() });
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }

    /// # Safety
    /// See [`DequantFn`]; F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_f16(src: *const u8, blk0: usize, n: usize, out: *mut f32) {
        // SAFETY: values blk0..blk0 + n of the row, 2 bytes each; `out`
        // holds n values.
        unsafe {
            let s = src.add(blk0 * 2);
            let n8 = n / 8 * 8;
            for i in (0..n8).step_by(8) {
                let h = _mm_loadu_si128(s.add(2 * i).cast());
                _mm256_storeu_ps(out.add(i), _mm256_cvtph_ps(h));
            }
            for i in n8..n {
                *out.add(i) = f16_at(s.add(2 * i));
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_bf16(src: *const u8, blk0: usize, n: usize, out: *mut f32) {
        // SAFETY: as for deq_f16.
        unsafe {
            let s = src.add(blk0 * 2);
            let n8 = n / 8 * 8;
            for i in (0..n8).step_by(8) {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(s.add(2 * i).cast()));
                let f = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h));
                _mm256_storeu_ps(out.add(i), f);
            }
            for i in n8..n {
                let b = u16::from_le_bytes(s.add(2 * i).cast::<[u8; 2]>().read());
                *out.add(i) = f32::from_bits(u32::from(b) << 16);
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_q8_0(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        for b in 0..nblk {
            // SAFETY: block blk0 + b (34 bytes) is in the row; 32 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 34);
                let d = _mm256_set1_ps(f16_at(x));
                let o = out.add(32 * b);
                for g in 0..4 {
                    let q = _mm_loadl_epi64(x.add(2 + 8 * g).cast());
                    let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                    _mm256_storeu_ps(o.add(8 * g), _mm256_mul_ps(v, d));
                }
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_q4_0(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        let mask = _mm_set1_epi8(0x0F);
        let eight = _mm256_set1_epi32(8);
        for b in 0..nblk {
            // SAFETY: block blk0 + b (18 bytes) is in the row; 32 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 18);
                let d = _mm256_set1_ps(f16_at(x));
                let q = _mm_loadu_si128(x.add(2).cast());
                let lo = _mm_and_si128(q, mask);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), mask);
                let o = out.add(32 * b);
                for (i, v) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
                    .into_iter()
                    .enumerate()
                {
                    let w = _mm256_sub_epi32(_mm256_cvtepu8_epi32(v), eight);
                    _mm256_storeu_ps(o.add(8 * i), _mm256_mul_ps(_mm256_cvtepi32_ps(w), d));
                }
            }
        }
    }

    /// `d * kvalues_iq4nl[q]` for the 32 indices of the 16 bytes at `q`
    /// (low nibbles first), into `o[0..32]`: the host's product, so the
    /// same bits.
    ///
    /// # Safety
    /// 16 readable bytes at `q`, 32 writable f32 at `o`; AVX2 present.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_iq4_32(q: *const u8, d: __m256, o: *mut f32) {
        // SAFETY: the table is 16 bytes; the caller guarantees `q` and `o`.
        unsafe {
            let lut = _mm_loadu_si128(tessera::quant::KVALUES_IQ4NL.as_ptr().cast());
            let mask = _mm_set1_epi8(0x0F);
            let q = _mm_loadu_si128(q.cast());
            let lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, mask));
            let hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16::<4>(q), mask));
            for (i, v) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
                .into_iter()
                .enumerate()
            {
                let w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                _mm256_storeu_ps(o.add(8 * i), _mm256_mul_ps(d, w));
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_iq4nl(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        for b in 0..nblk {
            // SAFETY: block blk0 + b (18 bytes) is in the row; 32 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 18);
                deq_iq4_32(x.add(2), _mm256_set1_ps(f16_at(x)), out.add(32 * b));
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_iq4xs(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        for b in 0..nblk {
            // SAFETY: block blk0 + b (136 bytes) is in the row; 256 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 136);
                let d = f16_at(x);
                let h = u32::from(u16::from_le_bytes(x.add(2).cast::<[u8; 2]>().read()));
                let sl = u32::from_le_bytes(x.add(4).cast::<[u8; 4]>().read());
                for ib in 0..8 {
                    let ls = ((sl >> (4 * ib)) & 0xF) | (((h >> (2 * ib)) & 3) << 4);
                    let dl = d * (ls as i32 - 32) as f32;
                    deq_iq4_32(
                        x.add(8 + 16 * ib),
                        _mm256_set1_ps(dl),
                        out.add(256 * b + 32 * ib),
                    );
                }
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_q4k(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        let mask = _mm_set1_epi8(0x0F);
        for b in 0..nblk {
            // SAFETY: block blk0 + b (144 bytes) is in the row; 256 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 144);
                let d = f16_at(x);
                let dmin = f16_at(x.add(2));
                let scales = x.add(4).cast::<[u8; 12]>().read();
                let o = out.add(256 * b);
                for i in 0..4 {
                    let (sc1, m1) = get_scale_min_k4(2 * i, &scales);
                    let (sc2, m2) = get_scale_min_k4(2 * i + 1, &scales);
                    let d1 = _mm256_set1_ps(d * f32::from(sc1));
                    let m1 = _mm256_set1_ps(dmin * f32::from(m1));
                    let d2 = _mm256_set1_ps(d * f32::from(sc2));
                    let m2 = _mm256_set1_ps(dmin * f32::from(m2));
                    for h in 0..2 {
                        let q = _mm_loadu_si128(x.add(16 + 32 * i + 16 * h).cast());
                        let lo = _mm_and_si128(q, mask);
                        let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), mask);
                        for (s, v) in [lo, _mm_srli_si128::<8>(lo)].into_iter().enumerate() {
                            let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                            let y = _mm256_sub_ps(_mm256_mul_ps(d1, f), m1);
                            _mm256_storeu_ps(o.add(64 * i + 16 * h + 8 * s), y);
                        }
                        for (s, v) in [hi, _mm_srli_si128::<8>(hi)].into_iter().enumerate() {
                            let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                            let y = _mm256_sub_ps(_mm256_mul_ps(d2, f), m2);
                            _mm256_storeu_ps(o.add(64 * i + 32 + 16 * h + 8 * s), y);
                        }
                    }
                }
            }
        }
    }

    /// # Safety
    /// See [`DequantFn`]; AVX2 present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_q6k(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let m32 = _mm256_set1_epi8(32);
        for b in 0..nblk {
            // SAFETY: block blk0 + b (210 bytes: ql 128, qh 64, scales 16,
            // d) is in the row; 256 outputs.
            unsafe {
                let x = src.add((blk0 + b) * 210);
                let d = f16_at(x.add(208));
                let sc = x.add(192).cast::<[i8; 16]>().read();
                let o = out.add(256 * b);
                for half in 0..2 {
                    let ql = x.add(64 * half);
                    let qh = _mm256_loadu_si256(x.add(128 + 32 * half).cast());
                    let la = _mm256_loadu_si256(ql.cast());
                    let lb = _mm256_loadu_si256(ql.add(32).cast());
                    let hbits = |s: i32| {
                        let v = match s {
                            0 => qh,
                            2 => _mm256_srli_epi16::<2>(qh),
                            4 => _mm256_srli_epi16::<4>(qh),
                            _ => _mm256_srli_epi16::<6>(qh),
                        };
                        _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2))
                    };
                    let qs = [
                        _mm256_or_si256(_mm256_and_si256(la, m4), hbits(0)),
                        _mm256_or_si256(_mm256_and_si256(lb, m4), hbits(2)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(la), m4), hbits(4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(lb), m4), hbits(6)),
                    ];
                    for (j, q) in qs.into_iter().enumerate() {
                        // Values 32j..32j + 32 of this half: sub-blocks
                        // 2j and 2j + 1 (16 values each).
                        let q = _mm256_sub_epi8(q, m32);
                        let parts = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                        for (s, p) in parts.into_iter().enumerate() {
                            let scale = d * f32::from(sc[8 * half + 2 * j + s]);
                            let dv = _mm256_set1_ps(scale);
                            for (e, v) in [p, _mm_srli_si128::<8>(p)].into_iter().enumerate() {
                                let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                                let at = 128 * half + 32 * j + 16 * s + 8 * e;
                                _mm256_storeu_ps(o.add(at), _mm256_mul_ps(dv, f));
                            }
                        }
                    }
                }
            }
        }
    }
}
