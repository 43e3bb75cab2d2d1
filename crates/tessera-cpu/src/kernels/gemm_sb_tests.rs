//! Unit tests of the super-block integer GEMM ([`super::gemm_sb`]), where
//! the CPU has its kernels (AVX-512 VNNI): the micro-kernels of both offset
//! kinds and sub-block sizes against exact integer sums scaled in f64
//! (partial tiles, both store modes, guards around the tile), and the B
//! panels against ggml's Q8_K quantization (`act_quant`), with strided and
//! missing columns. The driver runs them end to end in `gemm_tests`.

#![allow(clippy::unwrap_used, clippy::panic)]

use tessera::DType;

use super::gemm_q8::QTile;
use super::gemm_q8_tests::QCase;
use super::gemm_sb::{SB, Sb, b_group_bytes, pack_b_sb, rec_dwords, sb_kind};
use super::gemm_tests::{Buf, Rng};

#[test]
fn super_block_kernels_match_exact_sums() {
    let Some(qk) = super::gemm_vnni::kernels(crate::isa::Isa::Avx512) else {
        return;
    };
    let (kernel, nr) = qk.sb.unwrap();
    let mr_full = qk.mr;
    let mut rng = Rng(11);
    let kinds = [
        (Sb::Sym(0), 32),
        (Sb::Sym(0), 16),
        (Sb::Mins, 32),
        (Sb::Mins, 16),
        (Sb::Scaled, 16),
    ];
    for (kind, s) in kinds {
        let mins = kind != Sb::Sym(0);
        {
            let rec = rec_dwords(s);
            for kc in [0, SB, 2 * SB] {
                for (mr, ncols, accumulate) in
                    [(mr_full, nr, false), (5, nr - 3, true), (mr_full, 1, true)]
                {
                    let mut q = QCase::new(&mut rng, mr_full, nr, kc, s, 0xFF);
                    // Records: dy (f32), then per sub-block an i32 start
                    // (symmetric kinds) or an f32 sum (mins).
                    let mut recs = vec![0u32; kc / SB * nr * rec];
                    for (i, w) in recs.iter_mut().enumerate() {
                        *w = if i % rec == 0 {
                            rng.f32().to_bits()
                        } else if mins {
                            ((rng.next() % 8001) as f32 - 4000.0).to_bits()
                        } else {
                            ((rng.next() % 200_001) as i32 - 100_000) as u32
                        };
                    }
                    let (a, asc, b) = (q.a.ptr().cast(), q.asc.ptr(), q.bcodes.as_ptr());
                    let av = q.asc.as_mut().to_vec();
                    q.run(ncols, |cols| {
                        let t = QTile {
                            kc,
                            a,
                            a_scales: asc,
                            b,
                            b_scales: recs.as_ptr().cast(),
                            c: cols,
                            row: 2,
                            mr,
                            accumulate,
                        };
                        // SAFETY: full panels and records; the tile lies
                        // inside the columns.
                        unsafe { kernel(kind, s)(&t) };
                    });
                    let qr = &q;
                    let want = |i: usize, j: usize| {
                        let (mut v, mut mag) = (0f64, 0f64);
                        for blk in 0..kc / SB {
                            let rw = |h: usize| recs[(blk * nr + j) * rec + h];
                            let dy = f64::from(f32::from_bits(rw(0)));
                            for h in 0..SB / s {
                                let sb = blk * SB / s + h;
                                let isum = qr.isum(i, j, sb * s, (sb + 1) * s);
                                let (w, o) = (
                                    f64::from(av[sb * 2 * mr_full + i]),
                                    f64::from(av[sb * 2 * mr_full + mr_full + i]),
                                );
                                let bsum = f64::from(f32::from_bits(rw(1 + h)));
                                let term = match kind {
                                    Sb::Mins => isum as f64 * w + o * bsum,
                                    // One `w` (sub-block 0's) per super-block.
                                    Sb::Scaled => {
                                        let w0 = f64::from(av[blk * SB / s * 2 * mr_full + i]);
                                        isum as f64 * w0 + o * bsum
                                    }
                                    Sb::Sym(_) => (isum + i64::from(rw(1 + h) as i32)) as f64 * w,
                                } * dy;
                                v += term;
                                mag += term.abs();
                            }
                        }
                        (v, mag)
                    };
                    let what = format!("{kind:?} S={s} kc={kc} mr={mr}");
                    q.verify((mr, ncols, accumulate), want, &what);
                }
            }
        }
    }
}

#[test]
fn super_block_b_panels_are_q8_k() {
    // Two columns of 512 values, stride 8 bytes (interleaved), a third missing.
    let mut rng = Rng(13);
    let k = 2 * SB;
    let data: Vec<f32> = (0..2 * k).map(|_| rng.f32() * 5.0).collect();
    let base = data.as_ptr().cast::<u8>();
    // SAFETY: offsets inside `data`.
    let cols: Vec<*const u8> = (0..2).map(|c| unsafe { base.add(4 * c) }).collect();
    let nr = 3;
    for (t, s) in [
        (DType::Q6K, 16),
        (DType::IQ4XS, 32),
        (DType::Q4K, 32),
        (DType::Q2K, 16),
    ] {
        let kind = sb_kind(t).unwrap();
        let rec = rec_dwords(s);
        let bytes = b_group_bytes(k, nr, s).unwrap();
        let mut out = Buf::new(bytes / 4);
        // SAFETY: columns hold k values at stride 8; `out` is one group. Two
        // calls, one per super-block, as the driver's work items do.
        unsafe {
            pack_b_sb(&cols, 8, nr, s, kind, k, 0, SB, out.ptr().cast());
            pack_b_sb(&cols, 8, nr, s, kind, k, SB, k, out.ptr().cast());
        }
        // SAFETY: the group's bytes.
        let g = unsafe { std::slice::from_raw_parts(out.ptr().cast::<u8>(), bytes) };
        let recs = &out.as_mut()[k * nr / 4..];
        for c in 0..nr {
            let col: Vec<f32> = (0..k)
                .map(|l| if c < 2 { data[2 * l + c] } else { 0.0 })
                .collect();
            for blk in 0..k / SB {
                let mut want = [0u8; 292];
                super::act_quant::convert_row(DType::Q8K, &col[blk * SB..][..SB], &mut want)
                    .unwrap();
                let r = &recs[(blk * nr + c) * rec..][..rec];
                assert_eq!(r[0].to_le_bytes(), want[..4], "{t} col {c}: dy");
                for i in 0..SB {
                    let l = blk * SB + i;
                    let code = g[l / 4 * 4 * nr + c * 4 + l % 4];
                    assert_eq!(code, want[4 + i], "{t} col {c} l {l}");
                }
                for h in 0..SB / s {
                    let sum: i32 = (h * s..(h + 1) * s)
                        .map(|i| i32::from(want[4 + i] as i8))
                        .sum();
                    let word = r[1 + h].to_bits();
                    match kind {
                        Sb::Sym(cst) => assert_eq!(word as i32, cst * sum, "{t} start"),
                        Sb::Mins | Sb::Scaled => {
                            assert_eq!(f32::from_bits(word), sum as f32, "{t} sum")
                        }
                    }
                }
            }
        }
    }
}
