//! RMS_NORM, NORM and SOFT_MAX on the CPU device against f64 references.
//!
//! Tolerances: the kernels accumulate in f64 and compute per element in f32,
//! so results are within a few f32 ulps: `1e-6` absolute plus `2e-6`
//! relative.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, assert_close, lin, place};
use tessera::{DType, Graph, Place, Placement};

const ABS: f64 = 1e-6;
const REL: f64 = 2e-6;

fn rms_ref(row: &[f64], eps: f64) -> Vec<f64> {
    let ms = row.iter().map(|x| x * x).sum::<f64>() / row.len() as f64;
    row.iter().map(|x| x / (ms + eps).sqrt()).collect()
}

fn norm_ref(row: &[f64], eps: f64) -> Vec<f64> {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    row.iter()
        .map(|x| (x - mean) / (var + eps).sqrt())
        .collect()
}

#[test]
fn norms_of_strided_rows() {
    let mut g = Graph::new();
    let a0 = g.new_tensor(DType::F32, &[6, 37, 3]).unwrap();
    let a = g.permute(a0, [1, 0, 2, 3]).unwrap(); // rows of 37 with stride 24 bytes
    let rms = g.rms_norm(a, 1e-5).unwrap();
    let nrm = g.norm(a, 1e-3).unwrap();
    let r = place(g);
    // An offset mean makes NORM's centring matter.
    r.set(a0, &Rng::new(20).vec(666, 3.0, 9.0));
    r.compute(3).unwrap();
    let av = r.get(a);
    let rows: Vec<&[f64]> = av.chunks(37).collect();
    let want_rms: Vec<f64> = rows.iter().flat_map(|row| rms_ref(row, 1e-5)).collect();
    let want_norm: Vec<f64> = rows.iter().flat_map(|row| norm_ref(row, 1e-3)).collect();
    assert_close("rms_norm", &r.get(rms), &want_rms, ABS, REL);
    assert_close("norm", &r.get(nrm), &want_norm, 1e-5, 1e-5);
}

#[test]
fn rms_norm_in_place() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[33, 4]).unwrap();
    let out = g.rms_norm(a, 1e-6).unwrap();
    let r = place(g);
    let mut p = Placement::new(&r.graph);
    p.set(
        &r.graph,
        a,
        Place {
            buffer: r.buffer.clone(),
            offset: 0,
        },
    )
    .unwrap();
    p.set(
        &r.graph,
        out,
        Place {
            buffer: r.buffer.clone(),
            offset: 0,
        },
    )
    .unwrap();
    let r = cpu_util::Placed { placement: p, ..r };
    let vals = Rng::new(21).vec(132, -5.0, 5.0);
    r.set(a, &vals);
    r.compute(2).unwrap();
    let want: Vec<f64> = vals
        .chunks(33)
        .flat_map(|row| rms_ref(&round_f32(row), 1e-6))
        .collect();
    assert_close("rms_norm in place", &r.get(out), &want, ABS, REL);
}

fn round_f32(row: &[f64]) -> Vec<f64> {
    row.iter()
        .map(|&v| cpu_util::round_to(DType::F32, v))
        .collect()
}

/// ALiBi slope of head `h` among `n` heads, from the definition.
fn slope_ref(max_bias: f64, h: usize, n: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let nl = 2f64.powi((n as f64).log2().floor() as i32);
    let m0 = 2f64.powf(-max_bias / nl);
    let m1 = 2f64.powf(-(max_bias / 2.0) / nl);
    if (h as f64) < nl {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h as i32 - nl as i32) + 1)
    }
}

fn softmax_ref(w: &[f64]) -> Vec<f64> {
    let max = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = w.iter().map(|x| (x - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

#[test]
fn soft_max_with_broadcast_masks_and_alibi() {
    let mut rng = Rng::new(22);
    let ne = [7, 5, 6, 2];
    for mask_t in [None, Some(DType::F16), Some(DType::F32)] {
        for max_bias in [0.0f32, 8.0] {
            if mask_t.is_none() && max_bias > 0.0 {
                continue;
            }
            let mut g = Graph::new();
            let a = g.new_tensor(DType::F32, &ne).unwrap();
            // Mask: more rows than a (ne1 6 >= 5), broadcast over heads (6 % 3) and dim 3.
            let mne = [7, 6, 3, 1];
            let m = mask_t.map(|t| g.new_tensor(t, &mne).unwrap());
            let out = g.soft_max_ext(a, m, 0.37, max_bias).unwrap();
            let r = place(g);
            r.set(a, &rng.vec(ne.iter().product(), -4.0, 4.0));
            if let Some(m) = m {
                let mut mv = rng.vec(mne.iter().product(), -2.0, 2.0);
                for (k, v) in mv.iter_mut().enumerate() {
                    if k % 5 == 1 {
                        *v = f64::NEG_INFINITY;
                    }
                }
                r.set(m, &mv);
            }
            r.compute(3).unwrap();
            let av = r.get(a);
            let mv = m.map(|m| r.get(m));
            let mut want = Vec::new();
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for i1 in 0..ne[1] {
                        let slope = slope_ref(f64::from(max_bias), i2, ne[2]);
                        let w: Vec<f64> = (0..ne[0])
                            .map(|i0| {
                                let x = av[lin([i0, i1, i2, i3], ne)] * f64::from(0.37f32);
                                match &mv {
                                    Some(mv) => {
                                        x + slope * mv[lin([i0, i1, i2 % mne[2], i3 % mne[3]], mne)]
                                    }
                                    None => x,
                                }
                            })
                            .collect();
                        want.extend(softmax_ref(&w));
                    }
                }
            }
            let got = r.get(out);
            assert_close(
                &format!("soft_max mask {mask_t:?} max_bias {max_bias}"),
                &got,
                &want,
                ABS,
                1e-5,
            );
            if mask_t.is_some() {
                // Masked entries are exact zeros.
                assert!(want.iter().zip(&got).all(|(w, g)| *w != 0.0 || *g == 0.0));
                assert!(want.contains(&0.0));
            }
        }
    }
}

#[test]
fn soft_max_in_place_and_a_fully_masked_row() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, 3]).unwrap();
    let m = g.new_tensor(DType::F32, &[4, 3]).unwrap();
    let out = g.soft_max_ext(a, Some(m), 1.0, 0.0).unwrap();
    let r = place(g);
    let mut p = r.placement.clone();
    let a_off = r.offset(a);
    p.set(
        &r.graph,
        out,
        Place {
            buffer: r.buffer.clone(),
            offset: a_off,
        },
    )
    .unwrap();
    let r = cpu_util::Placed { placement: p, ..r };
    r.set(
        a,
        &[1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, 0.5, -1.0, 0.0, 1.0, 2.0],
    );
    let inf = f64::NEG_INFINITY;
    r.set(
        m,
        &[0.0, 0.0, 0.0, 0.0, inf, inf, inf, inf, 0.0, inf, 0.0, inf],
    );
    r.compute(2).unwrap();
    let got = r.get(out);
    assert_close(
        "row 0",
        &got[0..4],
        &softmax_ref(&[1.0, 2.0, 3.0, 4.0]),
        ABS,
        REL,
    );
    // A fully masked row is NaN, as in ggml (exp(-inf - -inf)).
    assert!(got[4..8].iter().all(|v| v.is_nan()), "{:?}", &got[4..8]);
    let e = softmax_ref(&[-1.0, 1.0]);
    assert_close("row 2", &got[8..12], &[e[0], 0.0, e[1], 0.0], ABS, REL);
}
