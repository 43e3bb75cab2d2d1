//! ROPE on the CPU device against an f64 reference written from the
//! definitions (angles `pos * base^(-2i/n_dims) / ff_i` computed directly,
//! YaRN ramp and magnitude scaling, normal and NeoX pairing, pass-through
//! dimensions).
//!
//! Tolerance: ggml (and the kernel) accumulate the angles by repeated f32
//! multiplication, so pair `i` at position `p` carries an angle error of
//! about `p * i * 2^-23`; with positions below 64 and 8 pairs that is under
//! 1e-4, the absolute tolerance used for values of magnitude <= 1 (plus the
//! result type's rounding).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, assert_close, eps, lin, place};
use tessera::{DType, Graph, Place, RopeMode, RopeParams};

const POS: [i32; 5] = [0, 3, 17, 63, -5];

fn corr_dims(n_dims: usize, n_ctx: usize, base: f64, fast: f64, slow: f64) -> (f64, f64) {
    let dim = |rot: f64| {
        n_dims as f64 * (n_ctx as f64 / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    (
        dim(fast).floor().max(0.0),
        dim(slow).ceil().min(n_dims as f64 - 1.0),
    )
}

/// The rotated row `x` (length `ne0`) at position `pos`.
fn rope_row(x: &[f64], pos: f64, p: &RopeParams, ff: Option<&[f64]>) -> Vec<f64> {
    let nd = p.n_dims;
    let base = f64::from(p.freq_base);
    let (fs, ext, attn) = (
        f64::from(p.freq_scale),
        f64::from(p.ext_factor),
        f64::from(p.attn_factor),
    );
    let (low, high) = corr_dims(
        nd,
        p.n_ctx_orig,
        base,
        f64::from(p.beta_fast),
        f64::from(p.beta_slow),
    );
    let mut out = x.to_vec();
    for i in 0..nd / 2 {
        let extrap = pos * base.powf(-2.0 * i as f64 / nd as f64) / ff.map_or(1.0, |f| f[i]);
        let interp = fs * extrap;
        let (theta, mscale) = if ext != 0.0 {
            let y = (i as f64 - low) / (high - low).max(0.001);
            let mix = (1.0 - y.clamp(0.0, 1.0)) * ext;
            (
                interp * (1.0 - mix) + extrap * mix,
                attn * (1.0 + 0.1 * (1.0 / fs).ln()),
            )
        } else {
            (interp, attn)
        };
        let (c, s) = (theta.cos() * mscale, theta.sin() * mscale);
        let (a, b) = match p.mode {
            RopeMode::Normal => (2 * i, 2 * i + 1),
            // The multi-section modes are checked against ggml's fixtures
            // and the conformance reference; this test covers these two.
            _ => (i, i + nd / 2),
        };
        out[a] = x[a] * c - x[b] * s;
        out[b] = x[a] * s + x[b] * c;
    }
    out
}

fn check(t: DType, p: RopeParams, with_ff: bool, in_place: bool) {
    let ne = [20, 3, POS.len(), 2];
    let mut g = Graph::new();
    let a = g.new_tensor(t, &ne).unwrap();
    let pos = g.new_tensor(DType::I32, &[POS.len()]).unwrap();
    let ff = with_ff.then(|| g.new_tensor(DType::F32, &[p.n_dims / 2]).unwrap());
    let out = g.rope(a, pos, ff, p).unwrap();
    let mut r = place(g);
    if in_place {
        let off = r.offset(a);
        r.placement
            .set(
                &r.graph,
                out,
                Place {
                    buffer: r.buffer.clone(),
                    offset: off,
                },
            )
            .unwrap();
    }
    let mut rng = Rng::new(30);
    let input = rng.vec(ne.iter().product(), -1.0, 1.0);
    r.set(a, &input);
    r.set(pos, &POS.map(f64::from));
    let ffv = ff.map(|f| {
        let v = rng.vec(p.n_dims / 2, 1.0, 4.0);
        r.set(f, &v);
        r.get(f)
    });
    let av = r.get(a);
    let mut want = Vec::new();
    for i3 in 0..ne[3] {
        for (i2, &position) in POS.iter().enumerate() {
            for i1 in 0..ne[1] {
                let start = lin([0, i1, i2, i3], ne);
                want.extend(rope_row(
                    &av[start..start + ne[0]],
                    f64::from(position),
                    &p,
                    ffv.as_deref(),
                ));
            }
        }
    }
    // Thread counts split the rows mid-position and mid-sequence (the
    // kernel prepares the next position's angles while rotating).
    for threads in [1, 2, 3] {
        r.set(a, &input);
        r.compute(threads).unwrap();
        let what = format!(
            "{t} {:?} ff {with_ff} in place {in_place} ext {} threads {threads}",
            p.mode, p.ext_factor
        );
        let got = r.get(out);
        assert_close(&what, &got, &want, 1e-4, 2.0 * eps(t));
        // Dimensions past n_dims are copied bit for bit.
        for row in 0..got.len() / ne[0] {
            for i in p.n_dims..ne[0] {
                assert_eq!(
                    got[row * ne[0] + i],
                    av[row * ne[0] + i],
                    "{what}: pass-through"
                );
            }
        }
    }
}

#[test]
fn rope_normal_and_neox() {
    for t in [DType::F32, DType::F16] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let p = RopeParams::new(16, mode, 10_000.0);
            check(t, p, false, false);
            check(t, p, true, false);
            check(t, p, false, true);
        }
    }
}

#[test]
fn rope_yarn_scaling() {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let mut p = RopeParams::new(16, mode, 10_000.0);
        p.n_ctx_orig = 4096;
        p.freq_scale = 0.25;
        p.ext_factor = 0.7;
        p.attn_factor = 1.1;
        check(DType::F32, p, false, false);
        check(DType::F32, p, true, false);
        // Linear scaling without the YaRN ramp.
        p.ext_factor = 0.0;
        check(DType::F32, p, false, false);
    }
}

/// One ROPE node alone in its graph (no other node to share an angle
/// table with): the per-node computation the shared tables must equal.
fn rope_alone(
    t: DType,
    ne: [usize; 4],
    x: &[f64],
    pos: &[f64],
    ff: Option<&[f64]>,
    p: RopeParams,
    threads: usize,
) -> Vec<f64> {
    let mut g = Graph::new();
    let a = g.new_tensor(t, &ne).unwrap();
    let pt = g.new_tensor(DType::I32, &[pos.len()]).unwrap();
    let f = ff.map(|v| g.new_tensor(DType::F32, &[v.len()]).unwrap());
    let out = g.rope(a, pt, f, p).unwrap();
    let r = place(g);
    r.set(a, x);
    r.set(pt, pos);
    if let (Some(f), Some(v)) = (f, ff) {
        r.set(f, v);
    }
    r.compute(threads).unwrap();
    r.get(out)
}

/// Several ROPE nodes of one compute with the same positions and
/// parameters share one angle table (the executor's `tables`): each
/// node's result must be bit for bit what it computes alone. Covered: two
/// nodes of one group (F32 and F16 rows), a node with other parameters
/// between them, a group with frequency factors (which must not join the
/// group without), and positions rewritten by a CPY between ROPE nodes
/// (the nodes after it must see the new positions, not the table of the
/// old ones). Rows are large enough that 2 and 3 threads split the filling.
#[test]
fn shared_angle_tables_give_each_nodes_own_results() {
    const N: usize = 96;
    let ne = |heads: usize| [64, heads, N, 1];
    let p = RopeParams::new(48, RopeMode::Neox, 10_000.0);
    let mut q = RopeParams::new(64, RopeMode::Normal, 1_000_000.0);
    q.freq_scale = 0.5;
    let mut rng = Rng::new(77);
    let positions: Vec<f64> = (0..N).map(|_| rng.below(3000) as f64 - 20.0).collect();
    let later: Vec<f64> = (0..N).map(|_| rng.below(500) as f64).collect();
    let factors = rng.vec(32, 1.0, 3.0);

    let mut g = Graph::new();
    let pos = g.new_tensor(DType::I32, &[N]).unwrap();
    let newpos = g.new_tensor(DType::I32, &[N]).unwrap();
    let ff = g.new_tensor(DType::F32, &[32]).unwrap();
    // (input, dtype, heads, params, factors, positions it sees)
    let plan: [(DType, usize, RopeParams, bool, bool); 7] = [
        (DType::F32, 4, p, false, false),
        (DType::F16, 2, p, false, false),
        (DType::F32, 1, q, false, false),
        (DType::F32, 3, p, true, false),
        (DType::F32, 2, p, true, false),
        (DType::F32, 4, p, false, true),
        (DType::F16, 1, p, false, true),
    ];
    let mut nodes = Vec::new();
    let mut pos_now = pos;
    for (k, &(t, heads, params, with_ff, after)) in plan.iter().enumerate() {
        if after && pos_now == pos {
            // Overwrite the positions in place (CPY's result is a view of
            // its destination), then rotate with the view.
            pos_now = g.cpy(newpos, pos).unwrap();
        }
        let x = g.new_tensor(t, &ne(heads)).unwrap();
        let out = g.rope(x, pos_now, with_ff.then_some(ff), params).unwrap();
        nodes.push((k, x, out));
    }
    let r = place(g);
    let inputs: Vec<Vec<f64>> = plan
        .iter()
        .map(|&(_, heads, ..)| rng.vec(64 * heads * N, -1.0, 1.0))
        .collect();
    for threads in [1, 2, 3] {
        r.set(pos, &positions);
        r.set(newpos, &later);
        r.set(ff, &factors);
        for &(k, x, _) in &nodes {
            r.set(x, &inputs[k]);
        }
        r.compute(threads).unwrap();
        for &(k, x, out) in &nodes {
            let (t, heads, params, with_ff, after) = plan[k];
            let seen = if after { &later } else { &positions };
            let want = rope_alone(
                t,
                ne(heads),
                &r.get(x),
                seen,
                with_ff.then_some(factors.as_slice()),
                params,
                threads,
            );
            let got = r.get(out);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits(),
                    "node {k}, {threads} threads, value {i}: {g} shared, {w} alone"
                );
            }
        }
    }
}

/// The multi-section modes share tables too (four position streams a
/// token): two M-RoPE and two vision nodes over the same positions, each
/// bit for bit what it computes alone.
#[test]
fn shared_angle_tables_of_the_multi_section_modes() {
    const N: usize = 40;
    let mut rng = Rng::new(78);
    let positions: Vec<f64> = (0..4 * N).map(|_| rng.below(200) as f64).collect();
    let mut m = RopeParams::new(32, RopeMode::Mrope, 10_000.0);
    m.sections = [4, 6, 6, 0];
    let mut v = RopeParams::new(16, RopeMode::Vision, 10_000.0);
    v.sections = [4, 4, 0, 0];
    let shapes = [
        ([48, 3, N, 1], m),
        ([48, 1, N, 1], m),
        ([32, 2, N, 1], v),
        ([32, 2, N, 1], v),
    ];
    let mut g = Graph::new();
    let pos = g.new_tensor(DType::I32, &[4 * N]).unwrap();
    let nodes: Vec<_> = shapes
        .iter()
        .map(|&(ne, p)| {
            let x = g.new_tensor(DType::F32, &ne).unwrap();
            (x, g.rope(x, pos, None, p).unwrap())
        })
        .collect();
    let r = place(g);
    r.set(pos, &positions);
    for (&(ne, _), &(x, _)) in shapes.iter().zip(&nodes) {
        r.set(x, &rng.vec(ne.iter().product(), -1.0, 1.0));
    }
    for threads in [1, 3] {
        r.compute(threads).unwrap();
        for (k, (&(ne, p), &(x, out))) in shapes.iter().zip(&nodes).enumerate() {
            let want = rope_alone(DType::F32, ne, &r.get(x), &positions, None, p, threads);
            let got = r.get(out);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "node {k} ({:?}), {threads} threads: shared and alone differ",
                p.mode
            );
        }
    }
}
