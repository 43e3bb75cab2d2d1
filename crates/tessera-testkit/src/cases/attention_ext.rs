//! Cases for the attention features real models added to ggml's ops:
//! attention sinks on SOFT_MAX (`ggml_soft_max_add_sinks`) and
//! FLASH_ATTN_EXT (`ggml_flash_attn_ext_add_sinks`), including grouped-query
//! shapes and sinks larger than every logit, and the multi-section ROPE
//! modes of `ggml_rope_multi` (M-RoPE, vision, interleaved M-RoPE) with
//! F32/F16, partial rotation, frequency factors and YaRN.

use tessera::{DType, RopeMode, RopeParams};

use super::{Case, CaseGraph, Init, fmt_ne};

pub(super) fn cases(v: &mut Vec<Case>) {
    soft_max_sink_cases(v);
    flash_attn_sink_cases(v);
    rope_multi_cases(v);
}

const MASK: Init = Init::Mask { neg_inf: 0.25 };

/// Sinks around the logits' range, or above all of them (the sink is the
/// maximum: the rescaling path).
fn sink_init(large: bool) -> Init {
    if large {
        Init::Uniform { lo: 4.0, hi: 8.0 }
    } else {
        Init::Uniform { lo: -2.0, hi: 2.0 }
    }
}

fn soft_max_sink_cases(v: &mut Vec<Case>) {
    // (a extents, mask extents (F16 / F32), scale, max_bias, large sinks)
    type Sm = ([usize; 4], Option<(DType, [usize; 4])>, f32, f32, bool);
    let cases: [Sm; 6] = [
        ([7, 3, 4, 1], None, 1.0, 0.0, false),
        (
            [33, 4, 8, 2],
            Some((DType::F16, [33, 5, 1, 1])),
            0.25,
            0.0,
            false,
        ),
        (
            [33, 4, 8, 1],
            Some((DType::F32, [33, 4, 2, 1])),
            0.5,
            0.0,
            true,
        ),
        (
            [16, 3, 6, 1],
            Some((DType::F16, [16, 3, 1, 1])),
            1.0,
            8.0,
            false,
        ),
        ([257, 2, 4, 1], None, 0.125, 0.0, true),
        ([1, 5, 2, 1], None, 1.0, 0.0, false),
    ];
    for (ne, mask, scale, max_bias, large) in cases {
        let m = mask.map_or_else(
            || "none".to_string(),
            |(t, ne)| format!("{t}{}", fmt_ne(&ne)),
        );
        let name = format!(
            "SOFT_MAX(type=f32,ne={},mask={m},sinks={},scale={scale},max_bias={max_bias})",
            fmt_ne(&ne),
            if large { "large" } else { "1" }
        );
        v.push(Case::new("SOFT_MAX", name, move || {
            let mut g = CaseGraph::new();
            let a = g.leaf("a", DType::F32, &ne)?;
            let mk = match mask {
                Some((t, mne)) => Some(g.leaf_init("mask", t, &mne, MASK)?),
                None => None,
            };
            let sinks = g.leaf_init("sinks", DType::F32, &[ne[2]], sink_init(large))?;
            let out = g.soft_max_ext_sinks(a, mk, sinks, scale, max_bias)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

/// A FLASH_ATTN_EXT case with sinks: (head size, heads, query heads per KV
/// head, keys, queries, mask, max_bias, softcap, K/V type, large sinks).
type FaSink = (
    usize,
    usize,
    usize,
    usize,
    usize,
    bool,
    f32,
    f32,
    DType,
    bool,
);

fn flash_attn_sink_cases(v: &mut Vec<Case>) {
    let cases: [FaSink; 7] = [
        (64, 4, 1, 17, 3, false, 0.0, 0.0, DType::F16, false),
        (64, 8, 4, 33, 1, true, 0.0, 0.0, DType::F16, false),
        (64, 8, 2, 65, 5, true, 0.0, 0.0, DType::F16, true),
        (32, 6, 3, 29, 4, true, 8.0, 0.0, DType::F32, false),
        (32, 4, 2, 20, 3, true, 0.0, 2.0, DType::F32, true),
        (128, 8, 8, 257, 2, true, 0.0, 0.0, DType::F16, false),
        (64, 4, 2, 40, 3, true, 0.0, 0.0, DType::Q8_0, false),
    ];
    for (hs, n_head, gqa, kv, n_q, masked, max_bias, softcap, t, large) in cases {
        let name = format!(
            "FLASH_ATTN_EXT(hsk={hs},hsv={hs},nh={n_head},nr={gqa},kv={kv},nb={n_q},mask={},max_bias={max_bias},logit_softcap={softcap},type_KV={t},sinks={})",
            u8::from(masked),
            if large { "large" } else { "1" }
        );
        v.push(Case::new("FLASH_ATTN_EXT", name, move || {
            let mut g = CaseGraph::new();
            let q = g.leaf("q", DType::F32, &[hs, n_q, n_head, 1])?;
            let k = g.leaf("k", t, &[hs, kv, n_head / gqa, 1])?;
            let vv = g.leaf("v", t, &[hs, kv, n_head / gqa, 1])?;
            let mask = if masked {
                Some(g.leaf_init("mask", DType::F16, &[kv, n_q, 1, 1], MASK)?)
            } else {
                None
            };
            let sinks = g.leaf_init("sinks", DType::F32, &[n_head], sink_init(large))?;
            let scale = 1.0 / (hs as f32).sqrt();
            let out = g.flash_attn_ext_sinks(q, k, vv, mask, sinks, scale, max_bias, softcap)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

/// A multi-section ROPE case.
#[derive(Clone, Copy)]
struct Mr {
    mode: RopeMode,
    t: DType,
    ne: [usize; 4],
    n_dims: usize,
    sections: [u32; 4],
    yarn: bool,
    freq_factors: bool,
}

fn rope_multi_cases(v: &mut Vec<Case>) {
    let m = |mode, t, ne, n_dims, sections| Mr {
        mode,
        t,
        ne,
        n_dims,
        sections,
        yarn: false,
        freq_factors: false,
    };
    let (mrope, vision, imrope) = (RopeMode::Mrope, RopeMode::Vision, RopeMode::Imrope);
    let cases = [
        // Qwen2-VL-like: 128 dims, sections 16/24/24 (sum 64 = n_dims / 2).
        m(mrope, DType::F32, [128, 4, 5, 1], 128, [16, 24, 24, 0]),
        m(mrope, DType::F16, [64, 2, 3, 1], 64, [8, 12, 12, 0]),
        // Partial rotation, an e section and sections wrapping (sum < n_dims / 2).
        m(mrope, DType::F32, [48, 2, 4, 1], 32, [3, 2, 2, 1]),
        m(imrope, DType::F32, [128, 4, 5, 1], 128, [24, 20, 20, 0]),
        m(imrope, DType::F16, [64, 3, 3, 1], 48, [4, 4, 4, 2]),
        // Vision (n_dims = ne0 / 2): Qwen2-VL's vision encoder uses [s, s, 0, 0].
        m(vision, DType::F32, [64, 4, 5, 1], 32, [8, 8, 0, 0]),
        m(vision, DType::F16, [40, 2, 3, 1], 20, [5, 3, 2, 0]),
        m(vision, DType::F32, [32, 2, 3, 1], 16, [0, 4, 4, 0]),
        Mr {
            yarn: true,
            freq_factors: true,
            ..m(mrope, DType::F32, [64, 2, 3, 2], 64, [10, 11, 11, 0])
        },
        Mr {
            yarn: true,
            ..m(imrope, DType::F32, [64, 2, 3, 1], 64, [11, 10, 11, 0])
        },
        Mr {
            freq_factors: true,
            ..m(vision, DType::F32, [32, 2, 3, 1], 16, [4, 4, 0, 0])
        },
    ];
    for r in cases {
        push_rope_multi(v, r);
    }
}

fn push_rope_multi(v: &mut Vec<Case>, r: Mr) {
    let mut p = RopeParams::multi(r.n_dims, r.mode, r.sections, 10000.0);
    if r.yarn {
        p.n_ctx_orig = 512;
        p.freq_scale = 0.25;
        p.ext_factor = 1.0;
        p.attn_factor = 1.5;
    }
    let s = r.sections;
    let name = format!(
        "ROPE(type={},ne={},n_dims={},mode={},sections=[{},{},{},{}],freq_scale={},ext_factor={},attn_factor={},ff={})",
        r.t,
        fmt_ne(&r.ne),
        r.n_dims,
        r.mode.ggml_mode(),
        s[0],
        s[1],
        s[2],
        s[3],
        p.freq_scale,
        p.ext_factor,
        p.attn_factor,
        u8::from(r.freq_factors),
    );
    v.push(Case::new("ROPE", name, move || {
        let mut g = CaseGraph::new();
        let ne = r.ne;
        let a = g.leaf("a", r.t, &ne)?;
        // Four distinct streams (t, h, w, e), one of them with a large position.
        let n = ne[2];
        let pos: Vec<f64> = (0..4 * n)
            .map(|i| {
                let (s, j) = (i / n, (i % n) as f64);
                match s {
                    0 => j,
                    1 => 3.0 * j + 1.0,
                    2 => 40.0 - 2.0 * j,
                    _ => 7.0 * j + 2000.0,
                }
            })
            .collect();
        let pos = g.leaf_init("pos", DType::I32, &[4 * n], Init::Values(pos))?;
        let ff = if r.freq_factors {
            let f = g.leaf_init(
                "freq_factors",
                DType::F32,
                &[p.n_pairs()],
                Init::Uniform { lo: 0.5, hi: 2.0 },
            )?;
            Some(f)
        } else {
            None
        };
        let out = g.rope(a, pos, ff, p)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}
