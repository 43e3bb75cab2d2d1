//! Unit tests of the GEMM's integer path, for each integer kernel set this
//! CPU can run (AVX-512 VNNI, AVX2): micro-kernels against exact integer sums
//! scaled in f64 (partial tiles, both store modes, guards), the SIMD
//! unpackers against the portable one, packed A panels against
//! `tessera::quant::to_f32` (`w * u + o` reproduces every weight), and B
//! panels against the reference activation quantization.

#![allow(clippy::unwrap_used, clippy::panic)]

use tessera::DType;

use super::gemm_pack::{MR_MAX, PackBufs};
use super::gemm_q8::Q8Kernels;
use super::gemm_q8::{QTile, pack_a_q8, pack_b_q8, sub_size, unpack_blocks};
use super::gemm_tests::{Buf, Rng, encoded, quantized};

/// The integer kernel sets usable here.
fn int_sets() -> Vec<(&'static str, &'static Q8Kernels)> {
    let mut v = Vec::new();
    v.extend(super::gemm_vnni::kernels(crate::isa::Isa::Avx512).map(|k| ("vnni", k)));
    v.extend(super::gemm_q8_avx2::kernels().map(|k| ("avx2", k)));
    v
}

/// Random panels of one integer micro-kernel call and its output columns:
/// A codes (`& mask`), A scales, B codes (-127..=127, as quantization makes
/// them), and `nr` output columns of `mr_full + 4` values with the tile at
/// row 2 (the rest are guards).
pub(super) struct QCase {
    pub a: Buf,
    pub codes: Vec<u8>,
    pub asc: Buf,
    pub bcodes: Vec<u8>,
    c0: Vec<f32>,
    c: Vec<f32>,
    mr_full: usize,
    nr: usize,
}

impl QCase {
    pub(super) fn new(
        rng: &mut Rng,
        mr_full: usize,
        nr: usize,
        kc: usize,
        s: usize,
        mask: u64,
    ) -> Self {
        let mut a = Buf::new(kc * mr_full / 4 + 16);
        let codes: Vec<u8> = (0..kc * mr_full)
            .map(|_| (rng.next() & mask) as u8)
            .collect();
        // SAFETY: `a` holds kc * mr bytes.
        unsafe { std::ptr::copy_nonoverlapping(codes.as_ptr(), a.ptr().cast(), codes.len()) };
        let mut asc = Buf::new(kc / s * 2 * mr_full);
        for v in asc.as_mut().iter_mut() {
            *v = rng.f32();
        }
        let bcodes = (0..kc * nr)
            .map(|_| ((rng.next() % 255) as i32 - 127) as i8 as u8)
            .collect();
        let c0: Vec<f32> = (0..(mr_full + 4) * nr).map(|_| rng.f32()).collect();
        let c = c0.clone();
        QCase {
            a,
            codes,
            asc,
            bcodes,
            c0,
            c,
            mr_full,
            nr,
        }
    }

    /// The exact integer sum of weight row `i` and column `j` over `l0..l1`.
    pub(super) fn isum(&self, i: usize, j: usize, l0: usize, l1: usize) -> i64 {
        let (mr, nr) = (self.mr_full, self.nr);
        (l0..l1)
            .map(|l| {
                let u = i64::from(self.codes[l / 4 * 4 * mr + i * 4 + l % 4]);
                u * i64::from(self.bcodes[l / 4 * 4 * nr + j * 4 + l % 4] as i8)
            })
            .sum()
    }

    /// Run `call` on the first `ncols` output columns (the tile: rows 2..).
    pub(super) fn run(&mut self, ncols: usize, call: impl FnOnce(&[*mut f32])) {
        let ld = self.mr_full + 4;
        let base = self.c.as_mut_ptr();
        // SAFETY: column j < nr of `ld` values.
        let cols: Vec<*mut f32> = (0..ncols).map(|j| unsafe { base.add(j * ld) }).collect();
        call(&cols);
    }

    /// Check the guards around an `mr x ncols` tile and every tile value
    /// against `want(i, j)` = (sum of terms, sum of their magnitudes), added
    /// to the old value with `accumulate`, within 1e-5 of the magnitudes.
    pub(super) fn verify(
        &self,
        (mr, ncols, accumulate): (usize, usize, bool),
        want: impl Fn(usize, usize) -> (f64, f64),
        what: &str,
    ) {
        let ld = self.mr_full + 4;
        for j in 0..self.nr {
            for r in 0..ld {
                let (got, old) = (self.c[j * ld + r], self.c0[j * ld + r]);
                if j >= ncols || !(2..2 + mr).contains(&r) {
                    assert_eq!(got, old, "{what}: guard");
                    continue;
                }
                let (mut v, mut mag) = want(r - 2, j);
                if accumulate {
                    v += f64::from(old);
                    mag += f64::from(old).abs();
                }
                assert!(
                    (f64::from(got) - v).abs() <= 1e-5 * (mag + 1.0),
                    "{what}: ({}, {j}) {got} vs {v}",
                    r - 2
                );
            }
        }
    }
}

#[test]
fn integer_micro_kernels_match_exact_sums() {
    let mut rng = Rng(5);
    for (name, qk) in int_sets() {
        let mr_full = qk.mr;
        // Both kernel forms: B records (dy, dy * sum q) as f32, and (dy,
        // c * sum q) with the sum as i32 (here any value: the kernel must
        // start the integer sum there and skip the `o` scales).
        for sym in [false, true] {
            let table = if sym { qk.kernel_sym } else { qk.kernel };
            for (si, s) in [32usize, 16].into_iter().enumerate() {
                // The AVX2 kernels take codes of the weight types they serve
                // only (16-bit sums); VNNI any byte.
                let mask = match (name, s) {
                    ("avx2", 32) => 0x0F,
                    ("avx2", _) => 0x3F,
                    _ => 0xFF,
                };
                for (idx, &nr) in qk.nr.iter().enumerate() {
                    for kc in [0, s, 256] {
                        for (mr, ncols, accumulate) in
                            [(mr_full, nr, false), (5, nr - 3, true), (mr_full, 1, true)]
                        {
                            let mut q = QCase::new(&mut rng, mr_full, nr, kc, s, mask);
                            let mut bsc: Vec<f32> =
                                (0..kc / s * nr * 2).map(|_| rng.f32()).collect();
                            if sym {
                                for v in bsc.iter_mut().skip(1).step_by(2) {
                                    let off = (rng.next() % 200_001) as i32 - 100_000;
                                    *v = f32::from_bits(off as u32);
                                }
                            }
                            let (a, asc, b) = (q.a.ptr().cast(), q.asc.ptr(), q.bcodes.as_ptr());
                            let av = q.asc.as_mut().to_vec();
                            let call = |cols: &[*mut f32]| {
                                let t = QTile {
                                    kc,
                                    a,
                                    a_scales: asc,
                                    b,
                                    b_scales: bsc.as_ptr(),
                                    c: cols,
                                    row: 2,
                                    mr,
                                    accumulate,
                                };
                                // SAFETY: full panels; the tile lies inside `c`.
                                unsafe { (table[si][idx])(&t) };
                            };
                            q.run(ncols, call);
                            let qr = &q;
                            let want = |i: usize, j: usize| {
                                let (mut v, mut mag) = (0f64, 0f64);
                                for sb in 0..kc / s {
                                    let isum = qr.isum(i, j, sb * s, (sb + 1) * s);
                                    let (w, o) = (
                                        f64::from(av[sb * 2 * mr_full + i]),
                                        f64::from(av[sb * 2 * mr_full + mr_full + i]),
                                    );
                                    let (dy, second) =
                                        (bsc[(sb * nr + j) * 2], bsc[(sb * nr + j) * 2 + 1]);
                                    let dy = f64::from(dy);
                                    let term = if sym {
                                        let off = i64::from(second.to_bits() as i32);
                                        (isum + off) as f64 * w * dy
                                    } else {
                                        isum as f64 * w * dy + o * f64::from(second)
                                    };
                                    v += term;
                                    mag += term.abs();
                                }
                                (v, mag)
                            };
                            let what = format!("{name} sym={sym} S={s} nr={nr} kc={kc} mr={mr}");
                            q.verify((mr, ncols, accumulate), want, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn integer_packing_reproduces_the_weights() {
    let mut rng = Rng(6);
    for (_, qk) in int_sets() {
        for &t in qk.types {
            let (bs, s) = (t.block_size(), (qk.sub)(t).unwrap());
            // The portable unpacker's sub-blocks per kernel sub-block.
            let step = s / sub_size(t).unwrap();
            let k = 512;
            let rows = qk.mr - 3;
            let row_bytes = t.row_size(k).unwrap();
            let bytes: Vec<u8> = (0..rows).flat_map(|_| encoded(t, k, &mut rng)).collect();
            // The SIMD unpacker, where the set has one (else `pack_a_q8`
            // uses the portable one), equals the portable one.
            // Row 1 whole (two or more blocks), its scales at stride 3.
            if let Some(f) = (qk.unpack)(t) {
                let (nblk, st) = (k / bs, 3);
                let mut codes = vec![0u8; k];
                let mut w = vec![0f32; k / s * st];
                let mut o = vec![0f32; k / s * st];
                // SAFETY: row 1: nblk blocks, k codes, k / s sub-blocks at stride st.
                unsafe {
                    f(
                        bytes.as_ptr().add(row_bytes),
                        nblk,
                        codes.as_mut_ptr(),
                        w.as_mut_ptr(),
                        o.as_mut_ptr(),
                        st,
                    )
                };
                let mut pcodes = vec![0u8; k];
                let mut psc = vec![(0f32, 0f32); k / s * step];
                unpack_blocks(t, &bytes[row_bytes..2 * row_bytes], &mut pcodes, &mut psc);
                assert_eq!(codes, pcodes, "{t} codes");
                for (j, &(pw, po)) in psc.iter().step_by(step).enumerate() {
                    let got = (w[j * st].to_bits(), o[j * st].to_bits());
                    assert_eq!(got, (pw.to_bits(), po.to_bits()), "{t} sub-block {j}");
                }
                // Nothing written between the strides (other rows' scales).
                for (i, (&wi, &oi)) in w.iter().zip(&o).enumerate() {
                    assert!(i % st == 0 || (wi, oi) == (0.0, 0.0), "{t} scale {i}");
                }
            }
            // A packed panel (rows past 11 zero) gives back the weights.
            let mr = qk.mr;
            let mut tmp = Buf::new(MR_MAX * super::gemm::KC);
            let zeros = Buf::new(super::gemm::KC);
            let bufs = PackBufs {
                tmp: tmp.ptr(),
                kc_max: super::gemm::KC,
                zeros: zeros.0.as_ptr().cast(),
            };
            // Q2_K's panels for the super-block kernel too (`scaled`:
            // codes times their scales, `w = d`): the same weights.
            for scaled in [false, true] {
                let kc = 256;
                let mut pc = Buf::new(kc * mr / 4);
                let mut sc = Buf::new(kc / s * 2 * mr);
                // SAFETY: 11 rows of 512 values; the panel buffers hold one slice.
                unsafe {
                    pack_a_q8(
                        qk,
                        t,
                        bytes.as_ptr(),
                        row_bytes,
                        rows,
                        256,
                        kc,
                        pc.ptr().cast(),
                        sc.ptr(),
                        &bufs,
                        scaled,
                    )
                };
                // SAFETY: `pc` holds kc * mr bytes.
                let pcb = unsafe { std::slice::from_raw_parts(pc.ptr().cast::<u8>(), kc * mr) };
                let scv = sc.as_mut();
                for r in 0..mr {
                    let mut want = vec![0f32; k];
                    if r < rows {
                        tessera::quant::to_f32(
                            t,
                            &bytes[r * row_bytes..(r + 1) * row_bytes],
                            &mut want,
                        )
                        .unwrap();
                    }
                    for l in 0..kc {
                        let u = f64::from(pcb[l / 4 * 4 * mr + r * 4 + l % 4]);
                        let (w, o) = (
                            f64::from(scv[l / s * 2 * mr + r]),
                            f64::from(scv[l / s * 2 * mr + mr + r]),
                        );
                        let got = w * u + o;
                        let expect = f64::from(want[256 + l]);
                        assert!(
                            (got - expect).abs() <= 1e-6 * (expect.abs() + w.abs() * 64.0),
                            "{t} row {r} l {l}: {got} vs {expect}"
                        );
                    }
                }
                if scaled && t == DType::Q2K {
                    let top = pcb.iter().copied().max().unwrap_or(0);
                    assert!(top > 3 && top <= 45, "{t}: scaled codes up to {top}");
                }
            }
        }
    }
}

#[test]
fn integer_b_panels_quantize_per_32_values() {
    // Two columns of 64 values, stride 8 bytes (interleaved), a third missing.
    let mut rng = Rng(7);
    let data: Vec<f32> = (0..128).map(|_| rng.f32() * 5.0).collect();
    let base = data.as_ptr().cast::<u8>();
    // SAFETY: offsets inside `data`.
    let cols: Vec<*const u8> = (0..2).map(|c| unsafe { base.add(4 * c) }).collect();
    let (k, nr) = (64, 3);
    for (s, sym) in [(32usize, None), (16, None), (32, Some(-8)), (16, Some(-32))] {
        let bytes = super::gemm_q8::b_group_bytes(k, nr, s).unwrap();
        let mut out = Buf::new(bytes / 4);
        // SAFETY: columns hold 64 values at stride 8; `out` is one group.
        unsafe { pack_b_q8(&cols, 8, nr, s, sym, k, 0, k, out.ptr().cast()) };
        // SAFETY: the group's bytes.
        let g = unsafe { std::slice::from_raw_parts(out.ptr().cast::<u8>(), bytes) };
        let scales = &out.as_mut()[k * nr / 4..];
        for c in 0..nr {
            let col: Vec<f32> = (0..k)
                .map(|l| if c < 2 { data[2 * l + c] } else { 0.0 })
                .collect();
            let q = quantized(&col, k);
            for l in 0..k {
                let code = g[l / 4 * 4 * nr + c * 4 + l % 4] as i8;
                let dy = scales[(l / s * nr + c) * 2];
                assert_eq!(dy * f32::from(code), q[l], "s={s} col {c} l {l}");
            }
            for sb in 0..k / s {
                let sum: i32 = (sb * s..(sb + 1) * s)
                    .map(|l| i32::from(g[l / 4 * 4 * nr + c * 4 + l % 4] as i8))
                    .sum();
                let (dy, second) = (scales[(sb * nr + c) * 2], scales[(sb * nr + c) * 2 + 1]);
                match sym {
                    Some(cst) => assert_eq!(second.to_bits() as i32, cst * sum, "s={s} c sum"),
                    None => assert_eq!(second, dy * sum as f32, "s={s} bsum"),
                }
            }
        }
    }
}
