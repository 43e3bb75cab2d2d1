//! The portable GEMM kernels (any CPU): the reference the SIMD paths are
//! tested against, and the path of `TESSERA_CPU_ISA=scalar`.
//!
//! Plain Rust over fixed-size arrays, written so the compiler can vectorise
//! the row loop with whatever the target has; no `mul_add` (a libm call on
//! CPUs without FMA). Dequantization is `tessera::quant`'s reference.

use tessera::DType;

use super::gemm_pack::{DequantFn, Kernels, Tile, store_tile};

/// Rows per panel.
const MR: usize = 16;

/// The portable kernel set.
pub(crate) static KERNELS: Kernels = Kernels {
    mr: MR,
    nr: [6, 4],
    kernel: [kernel::<6>, kernel::<4>],
    transpose,
    dequant,
    half_transpose: |_| None,
};

/// `C (+)= A B` for one tile of `MR x NR`.
///
/// # Safety
/// See [`super::gemm_pack::KernelFn`].
unsafe fn kernel<const NR: usize>(t: &Tile) {
    let mut acc = [[0f32; MR]; NR];
    for l in 0..t.kc {
        // SAFETY: the panels hold kc steps of MR (resp. NR) f32; A is
        // 64-byte aligned and B 4-byte aligned, enough for these arrays.
        let (a, b) = unsafe {
            (
                &*t.a.add(l * MR).cast::<[f32; MR]>(),
                &*t.b.add(l * NR).cast::<[f32; NR]>(),
            )
        };
        for (col, &bj) in acc.iter_mut().zip(b) {
            for (o, &ai) in col.iter_mut().zip(a) {
                *o += ai * bj;
            }
        }
    }
    // SAFETY: forwarded contract; acc holds NR columns of MR.
    unsafe { store_tile(t, acc.as_flattened(), MR) };
}

/// `out[l * MR + r] = rows[r][l]`.
///
/// # Safety
/// See [`super::gemm_pack::TransposeFn`].
unsafe fn transpose(rows: &[*const f32], kc: usize, out: *mut f32) {
    let mr = rows.len();
    for (r, &src) in rows.iter().enumerate() {
        for l in 0..kc {
            // SAFETY: row r holds kc values; out holds kc * mr.
            unsafe { *out.add(l * mr + r) = *src.add(l) };
        }
    }
}

/// The reference converter of `t` (`None` for F32, read in place).
pub(super) fn dequant(t: DType) -> Option<DequantFn> {
    Some(match t {
        DType::F16 => to_f32_f16,
        DType::BF16 => to_f32_bf16,
        DType::Q8_0 => to_f32_q8_0,
        DType::Q4_0 => to_f32_q4_0,
        DType::Q4_1 => to_f32_q4_1,
        DType::Q5_0 => to_f32_q5_0,
        DType::Q5_1 => to_f32_q5_1,
        DType::Q2K => to_f32_q2k,
        DType::Q3K => to_f32_q3k,
        DType::Q4K => to_f32_q4k,
        DType::Q5K => to_f32_q5k,
        DType::Q6K => to_f32_q6k,
        DType::IQ4NL => to_f32_iq4nl,
        DType::IQ4XS => to_f32_iq4xs,
        DType::F32 | DType::Q8_1 | DType::Q8K | DType::I32 | DType::I64 => return None,
    })
}

/// `tessera::quant::to_f32` over whole blocks of one type.
macro_rules! to_f32 {
    ($name:ident, $t:expr) => {
        /// # Safety
        /// See [`DequantFn`].
        unsafe fn $name(src: *const u8, blk0: usize, nblk: usize, out: *mut f32) {
            let (ts, bs) = ($t.type_size(), $t.block_size());
            // SAFETY: the caller guarantees the blocks and the output values.
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts(src.add(blk0 * ts), nblk * ts),
                    std::slice::from_raw_parts_mut(out, nblk * bs),
                )
            };
            // Lengths match by construction, so this cannot fail; a failure
            // would leave zeros, never touch memory out of bounds.
            if tessera::quant::to_f32($t, x, y).is_err() {
                y.fill(0.0);
            }
        }
    };
}
to_f32!(to_f32_f16, DType::F16);
to_f32!(to_f32_bf16, DType::BF16);
to_f32!(to_f32_q8_0, DType::Q8_0);
to_f32!(to_f32_q4_0, DType::Q4_0);
to_f32!(to_f32_q4_1, DType::Q4_1);
to_f32!(to_f32_q5_0, DType::Q5_0);
to_f32!(to_f32_q5_1, DType::Q5_1);
to_f32!(to_f32_q2k, DType::Q2K);
to_f32!(to_f32_q3k, DType::Q3K);
to_f32!(to_f32_q4k, DType::Q4K);
to_f32!(to_f32_q5k, DType::Q5K);
to_f32!(to_f32_q6k, DType::Q6K);
to_f32!(to_f32_iq4nl, DType::IQ4NL);
to_f32!(to_f32_iq4xs, DType::IQ4XS);
