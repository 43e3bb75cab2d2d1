//! Tests of [`crate::attention_tiles`]: prompts' attention by blocks of
//! query rows against the f64 reference, and the row kernels beside it.

use tessera::{DType, Graph, Stream};
use tessera_testkit::reference::Dense;
use tessera_testkit::reference::attention::{AttnParams, flash_attn_ext_sinks};

use crate::attention::tests::{f16, wave};

/// One attention to compute.
#[derive(Clone, Copy, Debug)]
struct Case {
    dk: usize,
    dv: usize,
    n_head: usize,
    gqa: usize,
    n_q: usize,
    n_kv: usize,
    ne3: usize,
    sinks: bool,
    max_bias: f32,
    softcap: f32,
    /// Q stored [dk, n_head, n_q, ne3] and permuted (as a model's graph
    /// has it).
    q_permuted: bool,
}

const BASE: Case = Case {
    dk: 64,
    dv: 64,
    n_head: 4,
    gqa: 2,
    n_q: 40,
    n_kv: 150,
    ne3: 1,
    sinks: false,
    max_bias: 0.0,
    softcap: 0.0,
    q_permuted: false,
};

/// The mask of query `iq` (of `n_q`, the last at key `n_kv - 1`) at key
/// `j`, in batch `i3`: causal, every eleventh key (shifted by query and
/// batch) masked too, query 1 masked everywhere; the kept keys get small
/// biases (which ALiBi scales).
fn mask_at(c: &Case, iq: usize, j: usize, i3: usize) -> f32 {
    let past = c.n_kv - c.n_q;
    if j > past + iq || (j * 7 + iq + i3).is_multiple_of(11) || iq == 1 {
        f32::NEG_INFINITY
    } else {
        -0.25 * ((j + iq) % 3) as f32
    }
}

fn dense(ne: [usize; 4], v: &[f32]) -> Dense {
    Dense {
        ne,
        data: v.iter().map(|&x| f64::from(x)).collect(),
    }
}

/// What [`run`] computed.
struct Out {
    attention: Vec<f32>,
    product: Vec<f32>,
    /// Dispatches of the tiles kernel.
    tiles: u64,
    /// Dispatches in all.
    dispatches: u64,
    /// The f64 reference of the attention.
    want: Vec<f64>,
}

/// Attention of case `c` with the tiles switched `tiles`, reshaped to
/// [dv heads, n_q] and read by a Q8_0 product (through a SCALE by 1 when
/// `copied`).
fn run(c: &Case, tiles: bool, copied: bool) -> Out {
    let dev = crate::test_device().unwrap();
    let mut g = Graph::new();
    let kv_heads = c.n_head / c.gqa;
    let (q, q_leaf) = if c.q_permuted {
        let stored = g
            .input("q", DType::F32, &[c.dk, c.n_head, c.n_q, c.ne3])
            .unwrap();
        (g.permute(stored, [0, 2, 1, 3]).unwrap(), stored)
    } else {
        let q = g
            .input("q", DType::F32, &[c.dk, c.n_q, c.n_head, c.ne3])
            .unwrap();
        (q, q)
    };
    let k = g
        .input("k", DType::F16, &[c.dk, c.n_kv, kv_heads, c.ne3])
        .unwrap();
    let v = g
        .input("v", DType::F16, &[c.dv, c.n_kv, kv_heads, c.ne3])
        .unwrap();
    // Two rows of padding, as llama.cpp's masks have.
    let m = g
        .input("mask", DType::F16, &[c.n_kv, c.n_q + 2, 1, c.ne3])
        .unwrap();
    let sk = g.input("sinks", DType::F32, &[c.n_head]).unwrap();
    let w = g.input("w", DType::Q8_0, &[c.dv * c.n_head, 8]).unwrap();
    let scale = 1.0 / (c.dk as f32).sqrt();
    let att = if c.sinks {
        g.flash_attn_ext_sinks(q, k, v, Some(m), sk, scale, c.max_bias, c.softcap)
            .unwrap()
    } else {
        g.flash_attn_ext(q, k, v, Some(m), scale, c.max_bias, c.softcap)
            .unwrap()
    };
    let flat = g.reshape(att, &[c.dv * c.n_head, c.n_q * c.ne3]).unwrap();
    let b = if copied {
        g.scale(flat, 1.0).unwrap()
    } else {
        flat
    };
    let p = g.mul_mat(w, b).unwrap();
    g.set_output(att).unwrap();
    g.set_output(p).unwrap();
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(&dev, &g);

    let nq = c.dk * c.n_q * c.n_head * c.ne3;
    let nk = c.dk * c.n_kv * kv_heads * c.ne3;
    let nv = c.dv * c.n_kv * kv_heads * c.ne3;
    // Stored order: [dk, n_q, n_head, ne3], or [dk, n_head, n_q, ne3].
    let q_stored = wave(nq, 7, 4.0);
    let (kb, ks) = f16(&wave(nk, 31, 1.5));
    let (vb, vs) = f16(&wave(nv, 17, 1.0));
    let mut mask = Vec::new();
    for i3 in 0..c.ne3 {
        for iq in 0..c.n_q + 2 {
            mask.extend((0..c.n_kv).map(|j| mask_at(c, iq.min(c.n_q - 1), j, i3)));
        }
    }
    let (mb, ms) = f16(&mask);
    let sinks_v: Vec<f32> = (0..c.n_head).map(|h| 0.75 * h as f32 - 1.0).collect();
    pl.tensor(&g, q_leaf).unwrap().write_f32(&q_stored).unwrap();
    pl.tensor(&g, k).unwrap().write(0, &kb).unwrap();
    pl.tensor(&g, v).unwrap().write(0, &vb).unwrap();
    pl.tensor(&g, m).unwrap().write(0, &mb).unwrap();
    pl.tensor(&g, sk).unwrap().write_f32(&sinks_v).unwrap();
    let wn = c.dv * c.n_head * 8;
    let mut wq = vec![0u8; DType::Q8_0.row_size(c.dv * c.n_head).unwrap() * 8];
    tessera::quant::from_f32(DType::Q8_0, &wave(wn, 13, 1.0), &mut wq).unwrap();
    pl.tensor(&g, w).unwrap().write(0, &wq).unwrap();

    crate::attention_tiles::force(Some(tiles));
    crate::matvec_q8::force(Some(true));
    let n0 = super::RECORDED.with(std::cell::Cell::get);
    let d0 = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    let n = super::RECORDED.with(std::cell::Cell::get) - n0;
    let dispatches = crate::batch::counts::now().0 - d0;
    crate::matvec_q8::force(None);
    crate::attention_tiles::force(None);

    // The reference's Q in [dk, n_q, n_head, ne3].
    let q_ref: Vec<f32> = if c.q_permuted {
        let mut out = vec![0f32; nq];
        for i3 in 0..c.ne3 {
            for iq in 0..c.n_q {
                for h in 0..c.n_head {
                    let from = ((i3 * c.n_q + iq) * c.n_head + h) * c.dk;
                    let to = ((i3 * c.n_head + h) * c.n_q + iq) * c.dk;
                    out[to..to + c.dk].copy_from_slice(&q_stored[from..from + c.dk]);
                }
            }
        }
        out
    } else {
        q_stored
    };
    let want = flash_attn_ext_sinks(
        &dense([c.dk, c.n_q, c.n_head, c.ne3], &q_ref),
        &dense([c.dk, c.n_kv, kv_heads, c.ne3], &ks),
        &dense([c.dv, c.n_kv, kv_heads, c.ne3], &vs),
        Some(&dense([c.n_kv, c.n_q + 2, 1, c.ne3], &ms)),
        c.sinks
            .then(|| dense([c.n_head, 1, 1, 1], &sinks_v))
            .as_ref(),
        AttnParams {
            scale: f64::from(scale),
            max_bias: f64::from(c.max_bias),
            logit_softcap: f64::from(c.softcap),
        },
    )
    .unwrap()
    .data;
    let read = |id| pl.tensor(&g, id).unwrap().read_f32().unwrap();
    Out {
        attention: read(att),
        product: read(p),
        tiles: n,
        dispatches,
        want,
    }
}

/// Every block shape (dv 64, 128, 256: 32, 16 and 8 queries a
/// workgroup), last blocks partial, grouped-query heads, a key count not a
/// multiple of the 64-key rounds, a query with every key masked (a zero
/// row), ALiBi, soft-capping, sinks, a permuted Q, dk < dv, two batches:
/// the tiles within 2e-5 of the f64 reference (relative to the largest
/// output), as is the row kernel; the tiles taken exactly when switched
/// on.
#[test]
fn prompts_by_blocks_of_queries_match_the_reference() {
    if crate::test_device().is_none() {
        return;
    }
    let cases = [
        BASE,
        Case {
            dk: 128,
            dv: 128,
            n_head: 2,
            gqa: 1,
            n_q: 37,
            n_kv: 70,
            sinks: true,
            softcap: 20.0,
            ..BASE
        },
        Case {
            dk: 256,
            dv: 256,
            n_q: 13,
            n_kv: 300,
            gqa: 4,
            max_bias: 8.0,
            q_permuted: true,
            ..BASE
        },
        Case {
            dk: 32,
            n_head: 2,
            n_q: 9,
            n_kv: 64,
            ne3: 2,
            sinks: true,
            ..BASE
        },
    ];
    for c in cases {
        for tiles in [true, false] {
            let Out {
                attention: got,
                tiles: n,
                want,
                ..
            } = run(&c, tiles, false);
            assert_eq!(n, u64::from(tiles), "{c:?}: tiles {tiles}: dispatches");
            let big = want.iter().fold(0f64, |a, b| a.max(b.abs()));
            assert!(big > 0.1, "{c:?}: a meaningful output, {big}");
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= 2e-5 * big,
                    "{c:?}: tiles {tiles}: value {i}: {g} vs {w}"
                );
            }
            // Query 1 sees no key: a zero row (every head, every batch).
            for i3 in 0..c.ne3 {
                for h in 0..c.n_head {
                    let at = ((i3 * c.n_q + 1) * c.n_head + h) * c.dv;
                    assert!(got[at..at + c.dv].iter().all(|&x| x == 0.0), "{c:?}");
                }
            }
        }
    }
}

/// The kernel quantizes the rows it wrote for the product reading them:
/// the product's bits equal those of the separate quantization (through
/// a SCALE by 1): two dispatches (attention, product) against four
/// (+ SCALE, quantization).
#[test]
fn the_rows_written_are_quantized_for_the_product() {
    if crate::test_device().is_none() {
        return;
    }
    for c in [
        BASE,
        Case {
            dk: 256,
            dv: 256,
            n_q: 13,
            ..BASE
        },
    ] {
        let fused = run(&c, true, false);
        let separate = run(&c, true, true);
        assert_eq!((fused.tiles, separate.tiles), (1, 1), "{c:?}: tiles");
        assert_eq!((fused.dispatches, separate.dispatches), (2, 4), "{c:?}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused.product), bits(&separate.product), "{c:?}");
    }
}

/// A few queries over a long cache stay with the row kernel, which splits
/// the cache over workgroups (8 queries of 4 heads over 1,100 keys), and
/// are right; over 700 keys (no split) they take the blocks.
#[test]
fn few_queries_over_a_long_cache_are_split_instead() {
    if crate::test_device().is_none() {
        return;
    }
    for (n_kv, blocks) in [(1100, 0), (700, 1)] {
        let c = Case {
            n_q: 8,
            n_kv,
            ..BASE
        };
        let out = run(&c, true, false);
        assert_eq!(out.tiles, blocks, "{c:?}");
        let big = out.want.iter().fold(0f64, |a, b| a.max(b.abs()));
        for (i, (&g, &w)) in out.attention.iter().zip(&out.want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= 2e-5 * big,
                "{c:?}: value {i}: {g} vs {w}"
            );
        }
    }
}
