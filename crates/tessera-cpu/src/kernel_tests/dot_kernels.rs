//! Multi-row dot products ("tiles", `dot::tile_fn`) against the portable
//! one-row dot products (`dot::scalar_dot_fn`) on the same bytes: every
//! weight type, every row count 1..=TILE_ROWS and column count
//! 1..=TILE_COLS, odd lengths (tails of 1..7 blocks or elements), and
//! random quant bytes with every bit exercised (scales kept sane).
//!
//! Tolerance: `|tile - scalar| <= 1e-5 * sum |x_i y_i|` (both compute the
//! same exact integer block sums for quantized types; only the order and
//! rounding of the f32 scaling and summation differ).
//!
//! (Speed is measured in benchmarks, not here: `tessera bench ops --op
//! "MUL_MAT"` at n = 1..8 runs these tiles through the executor.)

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::isa::Isa;
use crate::kernels::act_quant::convert_row;
use crate::kernels::dot::{
    TILE_COLS, TILE_ROWS, TileFn, gemv_fn, scalar_dot_fn, tile_fn, tile_kernels, tiled_tile_fn,
    vec_dot_type,
};
use crate::kernels::q8_tiled::Q8Tiled;
use tessera::DType;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// One weight row of `n` values of `t`: random bytes with sane scales for
/// quantized types, random values for float types.
fn weight_row(t: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
    match t {
        DType::F32 => (0..n).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        DType::F16 => (0..n)
            .flat_map(|_| half::f16::from_f32(rng.f32()).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.f32()).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let ts = t.type_size();
            let mut x: Vec<u8> = (0..t.row_size(n).unwrap())
                .map(|_| rng.next() as u8)
                .collect();
            for b in x.chunks_exact_mut(ts) {
                match t {
                    DType::Q4_0 | DType::Q8_0 | DType::Q5_0 | DType::IQ4NL => {
                        put_f16(b, 0, 0.01 + 0.05 * rng.f32().abs())
                    }
                    DType::Q4_1 | DType::Q5_1 => {
                        put_f16(b, 0, 0.01 + 0.05 * rng.f32().abs());
                        put_f16(b, 2, 0.5 * rng.f32());
                    }
                    DType::Q4K => {
                        put_f16(b, 0, 0.001 + 0.01 * rng.f32().abs());
                        put_f16(b, 2, 0.001 + 0.01 * rng.f32().abs());
                    }
                    DType::Q6K => put_f16(b, 208, 0.001 + 0.01 * rng.f32().abs()),
                    DType::Q5K => {
                        put_f16(b, 0, 0.001 + 0.01 * rng.f32().abs());
                        put_f16(b, 2, 0.001 + 0.01 * rng.f32().abs());
                    }
                    DType::Q2K => {
                        put_f16(b, 80, 0.001 + 0.01 * rng.f32().abs());
                        put_f16(b, 82, 0.001 + 0.01 * rng.f32().abs());
                    }
                    DType::Q3K => put_f16(b, 108, 0.001 + 0.01 * rng.f32().abs()),
                    DType::IQ4XS => put_f16(b, 0, 0.0005 + 0.002 * rng.f32().abs()),
                    _ => {}
                }
            }
            x
        }
    }
}

/// The weight types with a tile kernel somewhere.
const TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q5_0,
    DType::Q4_1,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
];

/// The activations of `acts` in type `yt` (the dot type, or f32).
fn act_rows(yt: DType, acts: &[Vec<f32>]) -> Vec<Vec<u8>> {
    acts.iter()
        .map(|a| {
            let mut y = vec![0u8; yt.row_size(a.len()).unwrap()];
            convert_row(yt, a, &mut y).unwrap();
            y
        })
        .collect()
}

/// The f64 dot product of weight row `x` (type `t`) and activations `y`
/// (type `yt`, decoded exactly), and its magnitude `sum |x_i y_i|`.
fn reference(t: DType, x: &[u8], yt: DType, y: &[u8], n: usize) -> (f64, f64) {
    let decode = |t: DType, b: &[u8]| -> Vec<f64> {
        let mut v = vec![0f32; n];
        match t {
            DType::F32 => v.iter_mut().zip(b.chunks_exact(4)).for_each(|(v, b)| {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }),
            DType::F16 => v.iter_mut().zip(b.chunks_exact(2)).for_each(|(v, b)| {
                *v = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            }),
            DType::BF16 => v.iter_mut().zip(b.chunks_exact(2)).for_each(|(v, b)| {
                *v = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }),
            _ => tessera::quant::to_f32(t, b, &mut v).unwrap(),
        }
        v.into_iter().map(f64::from).collect()
    };
    let (xv, yv) = (decode(t, x), decode(yt, y));
    let mut dot: f64 = xv.iter().zip(&yv).map(|(a, b)| a * b).sum();
    if yt == DType::Q8_1 {
        // The mins of Q4_1/Q5_1 multiply the Q8_1 block's stored f16
        // `s = d * sum(q)`, not the exact sum of its values (ggml's
        // semantics): add the difference, block by block.
        let f16 = |b: &[u8], i: usize| f64::from(half::f16::from_le_bytes([b[i], b[i + 1]]));
        let blocks = x.chunks_exact(t.type_size()).zip(y.chunks_exact(36));
        for ((xb, yb), yvals) in blocks.zip(yv.chunks_exact(32)) {
            dot += f16(xb, 2) * (f16(yb, 2) - yvals.iter().sum::<f64>());
        }
    }
    let mag = xv.iter().zip(&yv).map(|(a, b)| (a * b).abs()).sum();
    (dot, mag)
}

/// The activations of `acts` in the tiled layout `layout`.
fn tiled_rows(layout: Q8Tiled, acts: &[Vec<f32>]) -> Vec<Vec<u8>> {
    acts.iter()
        .map(|a| {
            let mut y = vec![0u8; Q8Tiled::row_size(a.len()).unwrap()];
            // SAFETY: `a` holds a.len() contiguous f32.
            unsafe {
                layout
                    .convert(Isa::Avx2, a.as_ptr().cast(), 4, a.len(), &mut y)
                    .unwrap()
            };
            y
        })
        .collect()
}

/// Checks `tile` (weights `t`, activations `yt`) on every shape and the
/// lengths `lens`, against the f64 reference and, where `yt` is the dot
/// type, against the portable one-row dot product. With `tiled`, the tile
/// reads the activations in that layout (`yt` is then Q8_0, the values the
/// layout holds, for the references).
fn check_tile(
    name: &str,
    tile: TileFn,
    t: DType,
    yt: DType,
    tiled: Option<Q8Tiled>,
    lens: &[usize],
    rng: &mut Rng,
) {
    let scalar = (vec_dot_type(t) == Some(yt)).then(|| scalar_dot_fn(t).unwrap());
    for &n in lens {
        let xs: Vec<Vec<u8>> = (0..TILE_ROWS).map(|_| weight_row(t, n, rng)).collect();
        let acts: Vec<Vec<f32>> = (0..TILE_COLS)
            .map(|_| (0..n).map(|_| rng.f32()).collect())
            .collect();
        let ys = act_rows(yt, &acts);
        let tile_ys = match tiled {
            Some(layout) => tiled_rows(layout, &acts),
            None => ys.clone(),
        };
        for nr in 1..=TILE_ROWS {
            for nc in 1..=TILE_COLS {
                let xr: Vec<&[u8]> = xs[..nr].iter().map(|v| v.as_slice()).collect();
                let yr: Vec<&[u8]> = tile_ys[..nc].iter().map(|v| v.as_slice()).collect();
                let mut out = [[f32::NAN; TILE_ROWS]; TILE_COLS];
                tile(&xr, &yr, &mut out);
                for c in 0..TILE_COLS {
                    for r in 0..TILE_ROWS {
                        let got = out[c][r];
                        let what = format!("{name} {t} x {yt} n={n} {nr}x{nc} [{c}][{r}]");
                        if r >= nr || c >= nc {
                            assert!(got.is_nan(), "{what}: written");
                            continue;
                        }
                        let (want, mag) = reference(t, &xs[r], yt, &ys[c], n);
                        let tol = 1e-5 * mag + 1e-30;
                        assert!(
                            (f64::from(got) - want).abs() <= tol,
                            "{what}: {got} vs {want}"
                        );
                        if let Some(dot) = scalar {
                            let s = f64::from(dot(&xs[r], &ys[c]));
                            assert!(
                                (f64::from(got) - s).abs() <= tol,
                                "{what}: {got} vs scalar {s}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn tiles_match_the_reference_on_every_shape_and_tail() {
    let mut rng = Rng(11);
    for t in TYPES {
        let yt = vec_dot_type(t).unwrap();
        let bs = t.block_size().max(yt.block_size());
        let lens: Vec<usize> = if bs == 1 {
            vec![1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 257, 1000]
        } else {
            [1usize, 2, 3, 5, 7, 8, 9, 15, 17, 32]
                .iter()
                .map(|b| b * bs)
                .collect()
        };
        for (name, tile) in tile_kernels(t, false) {
            check_tile(name, tile, t, yt, None, &lens, &mut rng);
        }
        for (name, tile) in tile_kernels(t, true) {
            check_tile(name, tile, t, DType::F32, None, &lens, &mut rng);
        }
    }
}

/// The AVX2 tiles reading the tiled Q8_0 layout (MUL_MAT with several
/// columns on AVX2 CPUs), every shape, tails of partial groups and lengths
/// of several groups.
#[test]
fn tiled_tiles_match_the_reference_on_every_shape_and_tail() {
    if !Isa::Avx2.available() {
        return;
    }
    let mut rng = Rng(13);
    let lens: Vec<usize> = [1usize, 2, 3, 5, 7, 8, 9, 15, 16, 17, 33]
        .iter()
        .map(|b| b * 32)
        .collect();
    for t in [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::IQ4NL] {
        let (layout, tile) =
            tiled_tile_fn(t, Isa::Avx2).unwrap_or_else(|| panic!("{t}: no tiled tile"));
        assert_eq!(Some(layout), Q8Tiled::for_weights(t), "{t}");
        check_tile(
            "avx2 tiled",
            tile,
            t,
            DType::Q8_0,
            Some(layout),
            &lens,
            &mut rng,
        );
    }
    // Only where the AVX-512 tiles do not take these types.
    if Isa::Avx512.available() {
        for t in [DType::Q4_0, DType::Q8_0] {
            assert!(tiled_tile_fn(t, Isa::Avx512).is_none(), "{t}");
        }
    }
}

#[test]
fn every_simd_kernel_is_listed() {
    if !Isa::Avx2.available() {
        return;
    }
    for t in TYPES {
        assert!(!tile_kernels(t, false).is_empty(), "{t}");
        assert!(tile_fn(t, Isa::Avx2).is_some(), "{t}");
    }
    for t in [DType::F16, DType::BF16] {
        assert!(!tile_kernels(t, true).is_empty(), "{t}");
    }
}

#[test]
fn tiles_ignore_extra_bytes_and_pair_blocks_from_the_start() {
    let mut rng = Rng(12);
    for t in TYPES {
        let yt = vec_dot_type(t).unwrap();
        let dot = scalar_dot_fn(t).unwrap();
        for (name, tile) in tile_kernels(t, false) {
            let n = 512;
            let x = weight_row(t, n, &mut rng);
            let long = weight_row(t, 2 * n, &mut rng);
            let act: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
            let y = act_rows(yt, &[act])[0].clone();
            // A longer second row: only its first n values count.
            let mut out = [[0f32; TILE_ROWS]; TILE_COLS];
            tile(&[&x, &long], &[&y], &mut out);
            let head = &long[..t.row_size(n).unwrap()];
            let want = f64::from(dot(head, &y));
            let (_, mag) = reference(t, head, yt, &y, n);
            assert!(
                (f64::from(out[0][1]) - want).abs() <= 1e-5 * mag,
                "{name} {t}"
            );
            // An empty row makes every result of the call an empty sum.
            tile(&[&x, &[]], &[&y], &mut out);
            assert_eq!(out[0][0], 0.0, "{name} {t}");
        }
    }
}

/// The many-row products (`dot::gemv_fn`, AVX2 and, where the CPU has it,
/// AVX-512): every weight type with one, row
/// counts around the group size, rows padded apart (a stride larger than a
/// row), against the f64 reference; rows that do not fit in the slice given
/// are left untouched.
#[test]
fn gemv_matches_the_reference_and_stays_in_its_slice() {
    let mut rng = Rng(23);
    let isas = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.available());
    for (isa, f32_act) in isas.flat_map(|i| [(i, false), (i, true)]) {
        for t in TYPES {
            let Some(gemv) = gemv_fn(t, isa, f32_act) else {
                continue;
            };
            let yt = if f32_act {
                DType::F32
            } else {
                vec_dot_type(t).unwrap()
            };
            let bs = t.block_size().max(yt.block_size());
            // (50 blocks: rows long enough for the one-row-per-call path of
            // the kernels that take short rows four at a time.)
            for (blocks, rows) in [(1usize, 1usize), (3, 4), (9, 7), (17, 13), (5, 64), (50, 3)] {
                let n = blocks * bs.max(8);
                let row_bytes = t.row_size(n).unwrap();
                let stride = row_bytes + 24;
                let xs: Vec<Vec<u8>> = (0..rows).map(|_| weight_row(t, n, &mut rng)).collect();
                let mut a = vec![0xA5u8; stride * rows];
                for (i, x) in xs.iter().enumerate() {
                    a[i * stride..i * stride + row_bytes].copy_from_slice(x);
                }
                let acts: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let y = act_rows(yt, &[acts]).remove(0);
                let mut out = vec![f32::NAN; rows + 1];
                // The last row is cut short: it must not be computed.
                let len = (rows - 1) * stride + row_bytes;
                gemv(&a[..len], stride, &y, &mut out[..rows]);
                for (r, x) in xs.iter().enumerate() {
                    let (want, mag) = reference(t, x, yt, &y, n);
                    let got = f64::from(out[r]);
                    assert!(
                        (got - want).abs() <= 1e-5 * mag + 1e-30,
                        "{isa:?} {t} x {yt} n={n} row {r}/{rows}: {got} vs {want}"
                    );
                }
                assert!(out[rows].is_nan(), "{t}: wrote past the rows asked for");
                let mut short = vec![f32::NAN; rows];
                gemv(&a[..len - 1], stride, &y, &mut short);
                assert!(
                    short[rows - 1].is_nan(),
                    "{t}: computed a row that is not whole in the slice"
                );
                // (Grouping may differ at the new tail: f32 tiles of one
                // and of four rows order their lanes differently.)
                for (r, (s, o)) in short.iter().zip(&out).take(rows - 1).enumerate() {
                    let (_, mag) = reference(t, &xs[r], yt, &y, n);
                    assert!(
                        f64::from((s - o).abs()) <= 2e-5 * mag + 1e-30,
                        "{t}: row {r} {s} vs {o}"
                    );
                }
            }
        }
    }
}
