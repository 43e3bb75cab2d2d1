//! Super-block activations for the VNNI K-quant GEMM: the B panels of
//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS quantized per 256 values, as
//! ggml's Q8_K (`quantize_row_q8_K_ref`: one f32 scale per 256 values,
//! bit-identical codes), instead of per 32 as for the other types.
//!
//! Why: with a scale per 32 activation values, every sub-block of every
//! column costs the micro-kernel a conversion, a multiply and two FMAs
//! (`acc += f32(isum) * (w dy) + o (dy sum q)`) beside its 4 or 8
//! `vpdpbusd`; AMD Zen 4 runs both on the same two pipes, so with 16-value
//! sub-blocks (Q2_K, Q3_K, Q6_K) the scaling took 3 of every 7 slots. With
//! one `dy` per 256 values the kernel sums `f32(isum) * w` per sub-block in
//! one FMA and scales by `dy` once per super-block; the offsets `o = c w`
//! of the symmetric types (Q3_K, Q6_K, IQ4_XS) are folded into the integer
//! sum's starting value `c * sum q`, and the mins of Q4_K and Q5_K take one
//! FMA with `sum q`. Q2_K's codes times their 4-bit scales fit a byte, so
//! its panels hold those products and its kernel makes one integer sum per
//! 256 values ([`Sb::Scaled`]) before its mins.
//!
//! B panel of a group of `NR` columns over `k` values: codes `[k / 4][NR][4]`
//! i8 (as [`super::gemm_q8`]), then per super-block `j` and column `c` a
//! record of [`rec_dwords`] 32-bit words at `(j * NR + c) * rec`: `dy` (f32),
//! then per sub-block of `s` values `c * sum q` (i32, [`Sb::Sym`]) or
//! `sum q` (f32, [`Sb::Mins`] and [`Sb::Scaled`]).

use tessera::DType;

use super::act_quant_avx2::ConvertFn;

/// Values per activation scale.
pub(crate) const SB: usize = 256;
/// Bytes of one Q8_K block: `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]`.
const Q8K_BLOCK: usize = 292;

/// How a super-block kernel takes a sub-block's offset `o_s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sb {
    /// `o_s = c * w_s` (codes stored `c` above the signed values): the
    /// integer sum starts at `c * sum q`.
    Sym(i32),
    /// Independent offsets (the mins): one FMA of `o_s` with `sum q`.
    Mins,
    /// Q2_K: its 2-bit codes times their sub-block's 4-bit scale fit a
    /// byte (at most 45), so the A panels hold `q * sc` ([`scale_q2k`]) and
    /// every `w` is the block's `d`: one integer sum per 256 values, one
    /// conversion and multiply, then the mins as for [`Sb::Mins`].
    Scaled,
}

/// The super-block form of weight type `t`, if it has one (the VNNI kernel
/// set's sub-blocks, [`super::gemm_q8`]'s table of `o_s`).
pub(crate) fn sb_kind(t: DType) -> Option<Sb> {
    match t {
        DType::Q6K | DType::Q3K | DType::IQ4XS => super::gemm_q8::sym_offset(t).map(Sb::Sym),
        DType::Q2K => Some(Sb::Scaled),
        DType::Q4K | DType::Q5K => Some(Sb::Mins),
        _ => None,
    }
}

/// 32-bit words per super-block and column: `dy`, then one per sub-block.
pub(crate) const fn rec_dwords(s: usize) -> usize {
    1 + SB / if s == 0 { SB } else { s }
}

/// Bytes of one B panel group of `nr` columns over `k` values (a multiple
/// of [`SB`]) with sub-blocks of `s`.
pub(crate) fn b_group_bytes(k: usize, nr: usize, s: usize) -> Option<usize> {
    let codes = k.checked_mul(nr)?;
    let recs = (k / SB).checked_mul(nr)?.checked_mul(rec_dwords(s) * 4)?;
    let n = codes.checked_add(recs)?;
    Some(n.checked_add(63)? / 64 * 64)
}

/// The portable Q8_K conversion of one block (lengths are right by
/// construction).
fn q8k_portable(src: &[f32], dst: &mut [u8]) {
    let _ = super::act_quant::convert_row(DType::Q8K, src, dst);
}

/// Quantize and pack `nr` columns (`cols`: element 0 of each, `nb0` bytes
/// between elements; missing columns are zeros) over `l` in `l0..l1`
/// (multiples of [`SB`]) into the B group at `out` for `k` values, with
/// sub-blocks of `s` (16 or 32) and offsets taken as `kind` says.
///
/// # Safety
/// Each column holds `l1` f32 at stride `nb0`; `out` is the group
/// ([`b_group_bytes`]), 4-byte aligned, written by this thread only in the
/// rows `l0..l1`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pack_b_sb(
    cols: &[*const u8],
    nb0: usize,
    nr: usize,
    s: usize,
    kind: Sb,
    k: usize,
    l0: usize,
    l1: usize,
    out: *mut u8,
) {
    let rec = rec_dwords(s);
    // SAFETY: the records follow the k * nr code bytes (4-byte aligned: k
    // is a multiple of 256).
    let recs = unsafe { out.add(k * nr) }.cast::<u32>();
    let quant: ConvertFn = super::act_quant_avx2::convert_fn(DType::Q8K).unwrap_or(q8k_portable);
    let mut x = [0f32; SB];
    let mut blk = [0u8; Q8K_BLOCK];
    for c in 0..nr {
        let mut l = l0;
        while l + SB <= l1 {
            let src: &[f32] = match cols.get(c) {
                // A contiguous, aligned column is quantized where it lies.
                Some(&p) if nb0 == 4 && (p as usize).is_multiple_of(4) => {
                    // SAFETY: the column holds l1 f32 at stride 4 from `p`,
                    // which is 4-byte aligned; elements l..l + SB <= l1 are
                    // only read while this call runs.
                    unsafe { std::slice::from_raw_parts(p.add(l * 4).cast::<f32>(), SB) }
                }
                Some(&p) => {
                    for (i, v) in x.iter_mut().enumerate() {
                        // SAFETY: element l + i < l1 of column c.
                        *v = unsafe { p.add((l + i) * nb0).cast::<f32>().read_unaligned() };
                    }
                    &x
                }
                None => {
                    x.fill(0.0);
                    &x
                }
            };
            quant(src, &mut blk);
            let (d, rest) = blk.split_at(4);
            let (qs, bsums) = rest.split_at(SB);
            for (g, four) in qs.chunks_exact(4).enumerate() {
                let word = u32::from_le_bytes([four[0], four[1], four[2], four[3]]);
                // SAFETY: codes (l / 4 + g, c, 0..4) of the group, l + 4g + 3 < l1 <= k.
                unsafe {
                    out.add((l / 4 + g) * nr * 4 + c * 4)
                        .cast::<u32>()
                        .write_unaligned(word)
                };
            }
            // SAFETY: record (l / SB, c) of the group: `rec` words, l < k.
            let r = unsafe { recs.add((l / SB * nr + c) * rec) };
            let sixteens = bsums
                .chunks_exact(2)
                .map(|b| i32::from(i16::from_le_bytes([b[0], b[1]])));
            let mut sums = [0i32; SB / 16];
            for (o, v) in sums.iter_mut().zip(sixteens) {
                *o = v;
            }
            // SAFETY: word 0 of the record.
            unsafe { r.write_unaligned(u32::from_le_bytes([d[0], d[1], d[2], d[3]])) };
            let per = (s / 16).max(1);
            for (h, part) in sums.chunks_exact(per).enumerate().take(rec - 1) {
                let sum: i32 = part.iter().sum();
                let word = match kind {
                    Sb::Sym(cst) => cst.wrapping_mul(sum) as u32,
                    Sb::Mins | Sb::Scaled => (sum as f32).to_bits(),
                };
                // SAFETY: word 1 + h < rec of the record.
                unsafe { r.add(1 + h).write_unaligned(word) };
            }
            l += SB;
        }
    }
}

/// Bytes of a Q2_K block: `scales: [u8; 16]` (4-bit scale, 4-bit min),
/// `qs: [u8; 64]`, `d: f16`, `dmin: f16`.
const Q2K_BLOCK: usize = 84;

/// [`Sb::Scaled`]'s A panel rows: multiply the unpacked codes of `nblk`
/// Q2_K blocks (`codes`, one byte a value in order) by their sub-blocks'
/// 4-bit scales, and set each sub-block's `w` (at `w`, `stride` apart,
/// sixteen per block) to the block's `d`; the `o` (mins) stay as the
/// unpacker wrote them.
///
/// # Safety
/// `src` holds `nblk` Q2_K blocks, `codes` their `nblk * 256` codes (each
/// at most 3), `w` `nblk * 16` entries at `stride`.
pub(crate) unsafe fn scale_q2k(
    src: *const u8,
    nblk: usize,
    codes: *mut u8,
    w: *mut f32,
    stride: usize,
) {
    for b in 0..nblk {
        // SAFETY: block b of `src`, its codes, and its sixteen `w` (caller).
        let (blk, out) = unsafe {
            (
                std::slice::from_raw_parts(src.add(b * Q2K_BLOCK), Q2K_BLOCK),
                std::slice::from_raw_parts_mut(codes.add(b * SB), SB),
            )
        };
        let d = half::f16::from_le_bytes([blk[80], blk[81]]).to_f32();
        for (s, (part, &scm)) in out.chunks_exact_mut(16).zip(&blk[..16]).enumerate() {
            let sc = scm & 0x0F;
            for c in part.iter_mut() {
                *c = c.wrapping_mul(sc);
            }
            // SAFETY: entry b * 16 + s of `w` (caller).
            unsafe { *w.add((b * 16 + s) * stride) = d };
        }
    }
}
