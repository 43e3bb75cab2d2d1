//! AVX-512F micro-kernels of the packed GEMM ([`super::gemm`]): 32 x NR
//! tiles (NR = 12 or 8: 24 or 16 of the 32 zmm registers as accumulators,
//! two 16-lane A loads and NR broadcasts per step of `k`), twice the work per
//! instruction of the AVX2 kernels on cores with two 512-bit FMA units.
//!
//! Packing reuses the AVX2 transposer and dequantizers (every AVX-512F CPU
//! has AVX2, FMA and F16C; [`kernels`] checks all of them). Used on
//! [`Isa::Avx512`] (`isa=avx2` keeps the GEMM on the AVX2 kernels, so that
//! path can be tested and measured on an AVX-512 machine too).

use super::gemm_pack::Kernels;
use crate::isa::Isa;

/// The AVX-512 kernel set, on [`Isa::Avx512`] (where the CPU has it).
pub(crate) fn kernels(isa: Isa) -> Option<&'static Kernels> {
    imp::kernels(isa)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::Kernels;

    pub(crate) fn kernels(_isa: crate::isa::Isa) -> Option<&'static Kernels> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::Kernels;
    use crate::isa::Isa;
    use crate::kernels::gemm_avx2::imp::{dequant, half_transpose, transpose};
    use crate::kernels::gemm_pack::{Tile, store_tile};

    /// Rows per panel: two 16-lane vectors.
    const MR: usize = 32;

    static KERNELS: Kernels = Kernels {
        mr: MR,
        nr: [12, 8],
        kernel: [kernel::<12>, kernel::<8>],
        transpose,
        dequant,
        half_transpose,
    };

    pub(crate) fn kernels(isa: Isa) -> Option<&'static Kernels> {
        isa.has_avx512().then_some(&KERNELS)
    }

    /// `C (+)= A B` for one 32 x NR tile.
    ///
    /// # Safety
    /// See [`super::super::gemm_pack::KernelFn`]; AVX-512F present.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn kernel<const NR: usize>(t: &Tile) {
        let mut c0 = [_mm512_setzero_ps(); NR];
        let mut c1 = [_mm512_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        // One step of `k`: two A vectors times NR broadcasts.
        macro_rules! step {
            ($i:expr) => {
                // SAFETY: step `$i` past `a` / `b` lies in the panels (the
                // loops below stay within kc steps); A is 64-byte aligned.
                unsafe {
                    let a0 = _mm512_load_ps(a.add($i * MR));
                    let a1 = _mm512_load_ps(a.add($i * MR + 16));
                    for j in 0..NR {
                        let bj = _mm512_set1_ps(*b.add($i * NR + j));
                        c0[j] = _mm512_fmadd_ps(a0, bj, c0[j]);
                        c1[j] = _mm512_fmadd_ps(a1, bj, c1[j]);
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
                // SAFETY: rows row..row + 32 of each column are the tile's.
                unsafe {
                    let p = col.add(t.row);
                    let (mut v0, mut v1) = (v0, v1);
                    if t.accumulate {
                        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(p));
                        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(p.add(16)));
                    }
                    _mm512_storeu_ps(p, v0);
                    _mm512_storeu_ps(p.add(16), v1);
                }
            }
            return;
        }
        let mut buf = [[0f32; MR]; NR];
        for ((o, v0), v1) in buf.iter_mut().zip(c0).zip(c1) {
            // SAFETY: each column of `buf` holds 32 f32.
            unsafe {
                _mm512_storeu_ps(o.as_mut_ptr(), v0);
                _mm512_storeu_ps(o.as_mut_ptr().add(16), v1);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { store_tile(t, buf.as_flattened(), MR) };
    }
}
