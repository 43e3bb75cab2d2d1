//! Activation conversion: f32 rows into the dot-product type of a weight
//! type (ggml's `from_float` of the `vec_dot_type`).
//!
//! MUL_MAT and FLASH_ATTN_EXT multiply stored weights (or K rows) by f32
//! activations. Like ggml, they first convert the activations to the type the
//! per-type dot product wants: F16, BF16, Q8_0, Q8_1 or Q8K. The conversions here
//! are bit-identical to ggml's reference quantizers (`quantize_row_q8_0_ref`,
//! `quantize_row_q8_1_ref`, `quantize_row_q8_K_ref`, `GGML_FP32_TO_FP16`, `ggml_compute_fp32_to_bf16`),
//! and therefore to `tessera::quant::from_f32`; the kernels own a copy so the
//! hot path needs no dispatch per block, and [`convert_row_isa`] adds the
//! AVX2 conversions of [`super::act_quant_avx2`] (bit-identical too; Q8_1
//! has none yet and uses the portable one).
//!
//! Block layouts (little-endian, as ggml stores them):
//! - Q8_0 (34 bytes / 32 values): `d: f16`, `qs: [i8; 32]`;
//! - Q8_1 (36 bytes / 32 values): `d: f16`, `s: f16` (`d * sum(qs)`), `qs: [i8; 32]`;
//! - Q8K (292 bytes / 256 values): `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]`
//!   (sums of 16 consecutive `qs`, used by the K-quant dot products).

use tessera::{DType, Error, Result};

use crate::isa::Isa;

/// Values converted per step of [`convert_strided`]: a multiple of every
/// block size, small enough for the stack.
pub const GROUP: usize = 256;

/// Convert `src` (whole blocks of `dst_type`) into `dst`, which must be
/// exactly `dst_type.row_size(src.len())` bytes. `dst_type` is one of F32,
/// F16, BF16, Q8_0, Q8_1, Q8K.
pub fn convert_row(dst_type: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let want = dst_type.row_size(src.len())?;
    if dst.len() != want {
        return Err(Error::InvalidLayout(format!(
            "converting {} f32 values to {dst_type} needs {want} bytes, {} given",
            src.len(),
            dst.len()
        )));
    }
    match dst_type {
        DType::F32 => {
            for (o, &x) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        DType::F16 => {
            for (o, &x) in dst.chunks_exact_mut(2).zip(src) {
                o.copy_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes());
            }
        }
        DType::BF16 => {
            for (o, &x) in dst.chunks_exact_mut(2).zip(src) {
                o.copy_from_slice(&f32_to_bf16_bits(x).to_le_bytes());
            }
        }
        DType::Q8_0 => {
            for (o, x) in dst.chunks_exact_mut(34).zip(src.chunks_exact(32)) {
                quantize_block_q8_0(x, o);
            }
        }
        DType::Q8_1 => {
            for (o, x) in dst.chunks_exact_mut(36).zip(src.chunks_exact(32)) {
                quantize_block_q8_1(x, o);
            }
        }
        DType::Q8K => {
            for (o, x) in dst.chunks_exact_mut(292).zip(src.chunks_exact(256)) {
                quantize_block_q8_k(x, o);
            }
        }
        other => {
            return Err(Error::unsupported(
                "CPU",
                format!("converting activations to {other}"),
            ));
        }
    }
    Ok(())
}

/// [`convert_row`] with the conversion of `isa` (the AVX2 one where the CPU
/// has it: bit-identical, see [`super::act_quant_avx2`]).
pub fn convert_row_isa(isa: Isa, dst_type: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if isa.has_avx2()
        && let Some(f) = super::act_quant_avx2::convert_fn(dst_type)
    {
        let want = dst_type.row_size(src.len())?;
        if dst.len() != want {
            return Err(Error::InvalidLayout(format!(
                "converting {} f32 values to {dst_type} needs {want} bytes, {} given",
                src.len(),
                dst.len()
            )));
        }
        f(src, dst);
        return Ok(());
    }
    convert_row(dst_type, src, dst)
}

/// Round f32 values to the nearest f16 value (ties to even, as ggml's
/// conversion of activations to F16), kept as f32: flash attention's
/// queries against F16 keys scored by an f16 x f32 kernel.
pub fn round_to_f16(isa: Isa, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        let mut tmp = [half::f16::ZERO; GROUP];
        for c in xs.chunks_mut(GROUP) {
            // SAFETY: AVX2/FMA/F16C present (`has_avx2` checks the CPU);
            // `c.len() <= GROUP` elements at each pointer, distinct buffers.
            unsafe {
                super::cvt_avx2::f32_to_f16(tmp.as_mut_ptr(), c.as_ptr(), c.len());
                super::cvt_avx2::f16_to_f32(c.as_mut_ptr(), tmp.as_ptr(), c.len());
            }
        }
        return;
    }
    let _ = isa;
    for x in xs {
        *x = half::f16::from_f32(*x).to_f32();
    }
}

/// Convert `n` f32 values, read from `src` with a byte stride of `stride`
/// (unaligned reads are fine), into `dst` (`dst_type.row_size(n)` bytes),
/// with the conversion of `isa`. Contiguous, aligned rows are converted in
/// place; others are gathered [`GROUP`] values at a time into a stack
/// buffer, so permuted or transposed activations need no extra scratch.
///
/// # Safety
/// For every `i < n`, the 4 bytes at `src + i * stride` must be readable.
pub unsafe fn convert_strided(
    isa: Isa,
    dst_type: DType,
    src: *const u8,
    stride: usize,
    n: usize,
    dst: &mut [u8],
) -> Result<()> {
    let want = dst_type.row_size(n)?;
    if dst.len() != want {
        return Err(Error::InvalidLayout(format!(
            "converting {n} f32 values to {dst_type} needs {want} bytes, {} given",
            dst.len()
        )));
    }
    if stride == 4 && (src as usize).is_multiple_of(align_of::<f32>()) {
        // SAFETY: the caller guarantees n contiguous f32 at `src`, which is
        // aligned (checked).
        let row = unsafe { std::slice::from_raw_parts(src.cast::<f32>(), n) };
        return convert_row_isa(isa, dst_type, row, dst);
    }
    let bs = dst_type.block_size();
    let ts = dst_type.type_size();
    let mut buf = [0f32; GROUP];
    let mut done = 0;
    while done < n {
        let len = (n - done).min(GROUP);
        for (i, slot) in buf[..len].iter_mut().enumerate() {
            // SAFETY: `done + i < n`, so the caller guarantees these 4 bytes;
            // `read_unaligned` needs no alignment.
            *slot = unsafe { src.add((done + i) * stride).cast::<f32>().read_unaligned() };
        }
        let (o0, o1) = (done / bs * ts, (done + len) / bs * ts);
        let out = dst.get_mut(o0..o1).ok_or_else(|| {
            Error::OutOfBounds(format!("activation conversion to {dst_type} past its row"))
        })?;
        convert_row_isa(isa, dst_type, &buf[..len], out)?;
        done += len;
    }
    Ok(())
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaNs made quiet.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// ggml's `quantize_row_q8_0_ref` for one block: `d = max|x| / 127`,
/// `q = round(x / d)` (half away from zero), `d` stored as f16.
fn quantize_block_q8_0(x: &[f32], out: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
    for (q, &v) in out[2..].iter_mut().zip(x) {
        *q = ((v * id).round() as i8) as u8;
    }
}

/// ggml's `quantize_row_q8_1_ref` for one block: [`quantize_block_q8_0`]'s
/// `d` and quants, then `s = d * sum(q)`, both stored as f16.
fn quantize_block_q8_1(x: &[f32], out: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in out[4..].iter_mut().zip(x) {
        let qv = (v * id).round() as i8;
        sum += i32::from(qv);
        *q = qv as u8;
    }
    out[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
    out[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_bits().to_le_bytes());
}

/// ggml's `quantize_row_q8_K_ref` for one block: the value of largest
/// magnitude maps to -127, `q = nearest_int(-127 / max * x)` (ties to even),
/// `d = 1 / iscale` as f32, plus the sums of each 16 quants.
fn quantize_block_q8_k(x: &[f32], out: &mut [u8]) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        out.fill(0);
        return;
    }
    let iscale = -127.0 / max;
    let (head, rest) = out.split_at_mut(4);
    let (qs, bsums) = rest.split_at_mut(256);
    for (q, &v) in qs.iter_mut().zip(x) {
        let n = ((iscale * v).round_ties_even() as i32).min(127);
        *q = (n as i8) as u8;
    }
    for (s, group) in bsums.chunks_exact_mut(2).zip(qs.chunks_exact(16)) {
        let sum: i32 = group.iter().map(|&q| i32::from(q as i8)).sum();
        s.copy_from_slice(&(sum as i16).to_le_bytes());
    }
    head.copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_matches_the_definition() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 13.3) * 0.37).collect();
        let mut out = [0u8; 34];
        convert_row(DType::Q8_0, &x, &mut out).unwrap();
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = half::f16::from_bits(u16::from_le_bytes([out[0], out[1]])).to_f32();
        assert!((d - amax / 127.0).abs() <= amax / 127.0 * 1e-3);
        for (i, &v) in x.iter().enumerate() {
            let q = out[2 + i] as i8;
            // Quantized with the exact d, so within half a step of x / d (f16 d).
            assert!(
                (f32::from(q) * d - v).abs() <= 0.51 * d + amax * 1e-3,
                "{i}"
            );
        }
        // The largest magnitude maps to +-127.
        assert!(out[2..].iter().any(|&q| (q as i8).unsigned_abs() == 127));
    }

    #[test]
    fn q8_k_bsums_and_scale() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut out = vec![0u8; 292];
        convert_row(DType::Q8K, &x, &mut out).unwrap();
        let d = f32::from_le_bytes([out[0], out[1], out[2], out[3]]);
        for g in 0..16 {
            let sum: i32 = (0..16).map(|i| i32::from(out[4 + g * 16 + i] as i8)).sum();
            let b = i16::from_le_bytes([out[260 + 2 * g], out[261 + 2 * g]]);
            assert_eq!(i32::from(b), sum);
        }
        for (i, &v) in x.iter().enumerate() {
            let q = f32::from(out[4 + i] as i8);
            assert!(
                (q * d - v).abs() <= 0.5 * d.abs() * 1.001,
                "{i}: {q} * {d} vs {v}"
            );
        }
        // All zeros: d = 0, all quants and sums zero.
        let mut z = vec![1u8; 292];
        convert_row(DType::Q8K, &[0.0; 256], &mut z).unwrap();
        assert!(z.iter().all(|&b| b == 0));
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16 values: ties to even (down).
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert!(f32::from_bits(u32::from(f32_to_bf16_bits(f32::NAN)) << 16).is_nan());
    }

    #[test]
    fn strided_equals_contiguous_and_sizes_are_checked() {
        let x: Vec<f32> = (0..512).map(|i| (i as f32).sin()).collect();
        // Every other value of a 1024-long buffer.
        let wide: Vec<f32> = x.iter().flat_map(|&v| [v, 99.0]).collect();
        for t in [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::Q8_0,
            DType::Q8_1,
            DType::Q8K,
        ] {
            let n = t.row_size(512).unwrap();
            let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
            convert_row(t, &x, &mut a).unwrap();
            // SAFETY: 512 values with an 8-byte stride lie inside `wide`.
            unsafe {
                convert_strided(Isa::Scalar, t, wide.as_ptr().cast(), 8, 512, &mut b).unwrap()
            };
            assert_eq!(a, b, "{t}");
            assert!(convert_row(t, &x, &mut a[1..]).is_err());
        }
        assert!(convert_row(DType::Q4_0, &x, &mut [0u8; 288]).is_err());
        assert!(convert_row(DType::Q8_0, &x[..31], &mut [0u8; 34]).is_err());
    }

    #[test]
    fn round_to_f16_matches_half_on_every_isa() {
        // Ties (an f16 mantissa step is 2^-10 at 1.0), subnormals, values
        // beyond f16's range, signed zeros, infinities, NaN, and a stride
        // of values past one group (a vector tail at the end).
        let mut x = vec![
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            -(1.0 + 2f32.powi(-11)),
            3e-6,
            -6e-8,
            65520.0,
            1e9,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        x.extend((0..GROUP + 37).map(|i| ((i as f32) * 0.7377).sin() * 1000.0 / (i as f32 + 1.0)));
        for isa in Isa::all_available() {
            let mut got = x.clone();
            round_to_f16(isa, &mut got);
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                let want = half::f16::from_f32(v).to_f32();
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{isa:?} value {i}: {v} -> {g}, want {want}"
                );
            }
        }
    }
}
