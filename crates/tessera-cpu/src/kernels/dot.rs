//! Row dot products, one per weight type, chosen at run time by [`Isa`].
//!
//! A dot product multiplies one row of a weight type (`x`) by one row of that
//! type's *dot type* (`y`, see [`vec_dot_type`]): activations are converted
//! once (see [`super::act_quant`]) and then reused against every weight row,
//! as in ggml's `type_traits_cpu[type].vec_dot`. Both rows are byte slices
//! in ggml's block layout, so the functions make no alignment assumption and
//! need no `unsafe` in the portable path; the AVX2 paths live in
//! [`super::dot_avx2`] (and [`super::gemv_avx2_q5`] for Q4_1, Q5_0, Q5_1,
//! [`super::gemv_avx2_iq4`] for IQ4_NL, IQ4_XS)
//! and are only handed out after the CPU was checked.
//!
//! The SIMD paths also have *tiles* ([`TileFn`], [`tile_fn`]): several
//! weight rows against several activation rows per call, which MUL_MAT and
//! flash attention use instead of the one-row products (`gemv_avx2*`, and
//! `gemv_avx512*` on [`Isa::Avx512`]).
//!
//! Accumulation follows ggml: float rows accumulate in f32 (several lanes),
//! quantized blocks accumulate exact integer sums per block, scaled in f32.

use std::sync::OnceLock;

use tessera::DType;

use super::dot_quant;
use crate::isa::Isa;

/// `dot(x, y)`: `x` holds whole rows of the weight type, `y` the same number
/// of values in its dot type. Extra trailing bytes of either are ignored;
/// blocks are paired from the start.
pub type DotFn = fn(x: &[u8], y: &[u8]) -> f32;

/// Most weight rows one [`TileFn`] call takes.
pub const TILE_ROWS: usize = 4;
/// Most activation columns one [`TileFn`] call takes.
pub const TILE_COLS: usize = 8;

/// A multi-row dot product: `out[c][r] = dot(xs[r], ys[c])` for every
/// `r < xs.len()` and `c < ys.len()` (at most [`TILE_ROWS`] and
/// [`TILE_COLS`]; extra rows or columns are ignored, other entries of `out`
/// are left as they are). Rows pair blocks as [`DotFn`] does, over the
/// shortest of all the rows given.
pub type TileFn = fn(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]);

/// The shared body of the SIMD [`TileFn`]s: `xs` x `ys` (cut to
/// [`TILE_ROWS`] x [`TILE_COLS`]) in sub-tiles of at most `shape(columns)`
/// rows by columns, each handed to `call(rows, columns, out from its first
/// column, row offset, n)`, where `n` is the number of whole units in the
/// shortest row (`xu` bytes per unit of a weight row, `yu` of an activation
/// row).
pub(crate) fn for_each_subtile(
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [[f32; TILE_ROWS]; TILE_COLS],
    (xu, yu): (usize, usize),
    shape: impl Fn(usize) -> (usize, usize),
    call: impl FnMut(&[&[u8]], &[&[u8]], &mut [[f32; TILE_ROWS]], usize, usize),
) {
    let n = xs
        .iter()
        .take(TILE_ROWS)
        .map(|x| x.len() / xu)
        .chain(ys.iter().take(TILE_COLS).map(|y| y.len() / yu))
        .min()
        .unwrap_or(0);
    for_each_subtile_n(xs, ys, out, n, shape, call);
}

/// [`for_each_subtile`] with the number of units `n` given (every row and
/// column holds at least `n`).
pub(crate) fn for_each_subtile_n(
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [[f32; TILE_ROWS]; TILE_COLS],
    n: usize,
    shape: impl Fn(usize) -> (usize, usize),
    mut call: impl FnMut(&[&[u8]], &[&[u8]], &mut [[f32; TILE_ROWS]], usize, usize),
) {
    let xs = &xs[..xs.len().min(TILE_ROWS)];
    let ys = &ys[..ys.len().min(TILE_COLS)];
    let (rmax, cmax) = shape(ys.len());
    let (rmax, cmax) = (rmax.max(1), cmax.max(1));
    for (ci, yc) in ys.chunks(cmax).enumerate() {
        let o = &mut out[ci * cmax..];
        for (ri, xc) in xs.chunks(rmax).enumerate() {
            call(xc, yc, &mut *o, ri * rmax, n);
        }
    }
}

/// A matrix-vector product over many rows (token generation's MUL_MAT):
/// `out[i] = dot(a[i * stride..][..row], y)` for every `i < out.len()`,
/// where `row` is the bytes of the weights matching the whole units of `y`.
/// Rows that would run past the end of `a` are left as they are (callers
/// pass slices that hold them all). One call covers a whole chunk of rows,
/// so the per-call work of a [`TileFn`] (checking and cutting the rows,
/// dispatching on their count) is paid once per chunk, not per four rows.
pub type GemvFn = fn(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]);

/// The shared body of the SIMD [`GemvFn`]s: rows of `a` (`stride` bytes
/// apart) go `R` at a time to `group`, the rest one at a time to `one`, each
/// with pointers to rows holding `n` whole units (`xu` bytes each; `n` is
/// the number of whole `yu`-byte units of `y`), and their results are stored
/// in `out`. A group takes one row from each of `R` equal runs of the rows
/// (rows `i`, `q + i`, ...): rows side by side are one sequential stream,
/// which the hardware prefetchers keep too few reads in flight for; `R`
/// streams are fetched at once.
#[inline(always)]
pub(crate) fn gemv_rows<const R: usize>(
    a: &[u8],
    stride: usize,
    y: &[u8],
    out: &mut [f32],
    (xu, yu): (usize, usize),
    mut group: impl FnMut([*const u8; R], usize) -> [f32; R],
    mut one: impl FnMut(*const u8, usize) -> f32,
) {
    let n = y.len() / yu.max(1);
    let row = n * xu;
    // Rows that lie whole in `a`.
    let fit = match a.len().checked_sub(row) {
        Some(room) if stride > 0 => room / stride + 1,
        Some(_) => usize::MAX,
        None => 0,
    };
    let rows = out.len().min(fit);
    let base = a.as_ptr();
    let q = rows / R.max(1);
    for i in 0..q {
        let xp: [*const u8; R] = std::array::from_fn(|r| base.wrapping_add((r * q + i) * stride));
        let res = group(xp, n);
        for (r, v) in res.into_iter().enumerate() {
            out[r * q + i] = v;
        }
    }
    let mut i = q * R;
    while i < rows {
        out[i] = one(base.wrapping_add(i * stride), n);
        i += 1;
    }
}

/// The many-row product of `weights` with [`vec_dot_type`] activations
/// (`f32_act` false) or f32 ones ([`tile_f32_fn`]) for `isa`, where the ISA
/// has one (AVX2; AVX-512 for every type with AVX-512 tiles).
pub fn gemv_fn(weights: DType, isa: Isa, f32_act: bool) -> Option<GemvFn> {
    if !isa.has_avx2() {
        return None;
    }
    if super::gemv_avx512::tile_fn(weights, isa).is_some() {
        return super::gemv_avx512::gemv_fn(weights, isa, f32_act);
    }
    if f32_act {
        return super::gemv_avx2::gemv_f32_fn(weights);
    }
    super::gemv_avx2::gemv_fn(weights)
        .or_else(|| super::gemv_avx2_q5::gemv_fn(weights))
        .or_else(|| super::gemv_avx2_k::gemv_fn(weights))
        .or_else(|| super::gemv_avx2_iq4::gemv_fn(weights))
}

/// The type activations are converted to before being dotted with rows of
/// `weights` (ggml's `vec_dot_type`), or `None` if there is no dot product
/// for `weights`.
pub fn vec_dot_type(weights: DType) -> Option<DType> {
    match weights {
        DType::F32 => Some(DType::F32),
        DType::F16 => Some(DType::F16),
        DType::BF16 => Some(DType::BF16),
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => Some(DType::Q8_0),
        DType::Q4_1 | DType::Q5_1 => Some(DType::Q8_1),
        DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::IQ4XS => {
            Some(DType::Q8K)
        }
        DType::IQ4NL => Some(DType::Q8_0),
        DType::Q8_1 | DType::Q8K | DType::I32 | DType::I64 => None,
    }
}

/// The dot product of `weights` rows with [`vec_dot_type`] rows for `isa`
/// (the portable one if `isa` is not available on this CPU).
pub fn dot_fn(weights: DType, isa: Isa) -> Option<DotFn> {
    if isa.has_avx2()
        && let Some(f) = super::dot_avx2::dot_fn(weights)
            .or_else(|| super::gemv_avx2_q5::dot_fn(weights))
            .or_else(|| super::gemv_avx2_k::dot_fn(weights))
            .or_else(|| super::gemv_avx2_iq4::dot_fn(weights))
    {
        return Some(f);
    }
    scalar_dot_fn(weights)
}

/// The multi-row dot product of `weights` for `isa`, if that ISA has one
/// (callers fall back to [`dot_fn`] one row at a time).
pub fn tile_fn(weights: DType, isa: Isa) -> Option<TileFn> {
    if isa.has_avx2() {
        return super::gemv_avx512::tile_fn(weights, isa)
            .or_else(|| super::gemv_avx2::tile_fn(weights))
            .or_else(|| super::gemv_avx2_q5::tile_fn(weights))
            .or_else(|| super::gemv_avx2_k::tile_fn(weights))
            .or_else(|| super::gemv_avx2_iq4::tile_fn(weights));
    }
    None
}

/// The AVX2 multi-column tile of `weights` that reads its activations in a
/// [`Q8Tiled`](super::q8_tiled::Q8Tiled) layout, where `isa` runs the AVX2
/// tiles for `weights` (no AVX-512 tile for them): for MUL_MAT with more
/// than one column.
pub(crate) fn tiled_tile_fn(
    weights: DType,
    isa: Isa,
) -> Option<(super::q8_tiled::Q8Tiled, TileFn)> {
    if !isa.has_avx2() || super::gemv_avx512::tile_fn(weights, isa).is_some() {
        return None;
    }
    super::gemv_avx2_tiled::tile_fn(weights)
}

/// The multi-row dot product of `weights` with f32 activations for `isa`,
/// where there is one (F16 and BF16 weights on AVX2): MUL_MAT then skips
/// converting the activations (and is more accurate than ggml, which rounds
/// them to the weights' type).
pub fn tile_f32_fn(weights: DType, isa: Isa) -> Option<TileFn> {
    if isa.has_avx2() {
        return super::gemv_avx512::tile_f32_fn(weights, isa)
            .or_else(|| super::gemv_avx2::tile_f32_fn(weights));
    }
    None
}

/// Every multi-row dot product this CPU can run for `weights`, by name
/// ("avx2", "avx512"), with activations in the dot type (`f32_act` false) or
/// in f32 ([`tile_f32_fn`]): for tests that check each one.
#[cfg(test)]
pub fn tile_kernels(weights: DType, f32_act: bool) -> Vec<(&'static str, TileFn)> {
    let mut v = Vec::new();
    if !Isa::Avx2.available() {
        return v;
    }
    let (a2, a5) = if f32_act {
        (
            super::gemv_avx2::tile_f32_fn(weights),
            super::gemv_avx512::tile_f32_fn(weights, Isa::Avx512),
        )
    } else {
        (
            super::gemv_avx2::tile_fn(weights)
                .or_else(|| super::gemv_avx2_q5::tile_fn(weights))
                .or_else(|| super::gemv_avx2_k::tile_fn(weights))
                .or_else(|| super::gemv_avx2_iq4::tile_fn(weights)),
            super::gemv_avx512::tile_fn(weights, Isa::Avx512),
        )
    };
    v.extend(a2.map(|f| ("avx2", f)));
    v.extend(a5.map(|f| ("avx512", f)));
    v
}

/// The portable dot product for `weights`.
pub fn scalar_dot_fn(weights: DType) -> Option<DotFn> {
    Some(match weights {
        DType::F32 => dot_f32,
        DType::F16 => dot_f16,
        DType::BF16 => dot_bf16,
        DType::Q8_0 => dot_quant::dot_q8_0_q8_0,
        DType::Q4_0 => dot_quant::dot_q4_0_q8_0,
        DType::Q5_0 => super::dot_quant5::dot_q5_0_q8_0,
        DType::Q4_1 => super::dot_quant5::dot_q4_1_q8_1,
        DType::Q5_1 => super::dot_quant5::dot_q5_1_q8_1,
        DType::Q2K => super::dot_kquant::dot_q2_k_q8_k,
        DType::Q3K => super::dot_kquant::dot_q3_k_q8_k,
        DType::Q4K => dot_quant::dot_q4_k_q8_k,
        DType::Q5K => super::dot_kquant::dot_q5_k_q8_k,
        DType::Q6K => dot_quant::dot_q6_k_q8_k,
        DType::IQ4NL => super::dot_iq4::dot_iq4_nl_q8_0,
        DType::IQ4XS => super::dot_iq4::dot_iq4_xs_q8_k,
        DType::Q8_1 | DType::Q8K | DType::I32 | DType::I64 => return None,
    })
}

/// Lanes of the portable float dot products (lets the compiler vectorise
/// without reassociating a single sum).
const LANES: usize = 8;

/// Sum of `f(x_i) * f(y_i)` over element pairs of `W` bytes each, in
/// [`LANES`] f32 accumulators.
#[inline(always)]
fn dot_lanes<const W: usize>(x: &[u8], y: &[u8], f: impl Fn(&[u8]) -> f32) -> f32 {
    let n = (x.len() / W).min(y.len() / W);
    let (x, y) = (&x[..n * W], &y[..n * W]);
    let mut acc = [0f32; LANES];
    let xc = x.chunks_exact(W * LANES);
    let yc = y.chunks_exact(W * LANES);
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xb, yb) in xc.zip(yc) {
        for ((a, xe), ye) in acc
            .iter_mut()
            .zip(xb.chunks_exact(W))
            .zip(yb.chunks_exact(W))
        {
            *a += f(xe) * f(ye);
        }
    }
    let mut tail = 0f32;
    for (xe, ye) in xr.chunks_exact(W).zip(yr.chunks_exact(W)) {
        tail += f(xe) * f(ye);
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[inline(always)]
fn bf16_at(b: &[u8]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
}

/// F32 x F32.
pub fn dot_f32(x: &[u8], y: &[u8]) -> f32 {
    dot_lanes::<4>(x, y, f32_at)
}

/// Every f16 bit pattern widened to f32 (ggml's `ggml_table_f32_f16`): the
/// portable conversion is a bit-twiddling routine about 20x slower than a
/// table look-up inside dot loops. 256 KiB, built on first use.
pub(crate) fn f16_table() -> &'static [f32; 65536] {
    static TABLE: OnceLock<Box<[f32; 65536]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0f32; 65536]);
        for (bits, v) in (0..=u16::MAX).zip(t.iter_mut()) {
            *v = half::f16::from_bits(bits).to_f32();
        }
        t
    })
}

/// F16 x F16, accumulated in f32.
pub fn dot_f16(x: &[u8], y: &[u8]) -> f32 {
    let t = f16_table();
    dot_lanes::<2>(x, y, |b| t[usize::from(u16::from_le_bytes([b[0], b[1]]))])
}

/// BF16 x BF16, accumulated in f32.
pub fn dot_bf16(x: &[u8], y: &[u8]) -> f32 {
    dot_lanes::<2>(x, y, bf16_at)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn float_dots_match_f64_for_odd_lengths() {
        for n in [0usize, 1, 7, 8, 9, 33, 100] {
            let x: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.25).collect();
            let y: Vec<f32> = (0..n).map(|i| ((i * 5 % 13) as f32 - 6.0) * 0.5).collect();
            // Quarter and half steps are exact in f16 and bf16 too.
            let want: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let h = |v: &[f32]| -> Vec<u8> {
                v.iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
                    .collect()
            };
            let b = |v: &[f32]| -> Vec<u8> {
                v.iter()
                    .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
                    .collect()
            };
            for isa in Isa::all_available() {
                let f32d = dot_fn(DType::F32, isa).unwrap();
                let f16d = dot_fn(DType::F16, isa).unwrap();
                let bf16d = dot_fn(DType::BF16, isa).unwrap();
                assert_eq!(
                    f64::from(f32d(&bytes_f32(&x), &bytes_f32(&y))),
                    want,
                    "{n} {isa:?}"
                );
                assert_eq!(f64::from(f16d(&h(&x), &h(&y))), want, "{n} {isa:?}");
                assert_eq!(f64::from(bf16d(&b(&x), &b(&y))), want, "{n} {isa:?}");
            }
        }
    }

    #[test]
    fn dot_types_follow_ggml() {
        assert_eq!(vec_dot_type(DType::Q4_0), Some(DType::Q8_0));
        assert_eq!(vec_dot_type(DType::Q6K), Some(DType::Q8K));
        assert_eq!(vec_dot_type(DType::I32), None);
        assert!(dot_fn(DType::Q8K, Isa::Scalar).is_none());
        for t in tessera::MUL_MAT_WEIGHT_TYPES {
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                assert!(dot_fn(t, isa).is_some(), "{t}");
            }
        }
    }
}
