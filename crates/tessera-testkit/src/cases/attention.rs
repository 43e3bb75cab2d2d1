//! Attention cases: SOFT_MAX (scale, F16/F32 masks broadcast over dims 2-3,
//! ALiBi with power-of-two and other head counts), ROPE (normal and NeoX,
//! partial rotation, F16, YaRN, frequency factors, a strided input) and
//! FLASH_ATTN_EXT (with/without mask, ALiBi, soft-capping, GQA, F16/F32 K/V,
//! different K and V head sizes, broadcast masks, strided K/V).

use tessera::{DType, RopeMode, RopeParams};

use super::{Case, CaseGraph, Init, fmt_ne, fmt_perm, permuted_leaf};

pub(super) fn cases(v: &mut Vec<Case>) {
    soft_max_cases(v);
    rope_cases(v);
    flash_attn_cases(v);
}

const MASK: Init = Init::Mask { neg_inf: 0.25 };

fn soft_max_cases(v: &mut Vec<Case>) {
    // (a extents, mask type and extents, scale, max_bias, permute a)
    type Sm = (
        [usize; 4],
        Option<(DType, [usize; 4])>,
        f32,
        f32,
        Option<[usize; 4]>,
    );
    let cases: [Sm; 9] = [
        ([7, 3, 1, 1], None, 1.0, 0.0, None),
        ([129, 2, 3, 1], None, 0.5, 0.0, None),
        ([1, 4, 1, 1], None, 1.0, 0.0, None),
        (
            [33, 4, 3, 2],
            Some((DType::F16, [33, 5, 3, 1])),
            0.25,
            0.0,
            None,
        ),
        (
            [33, 4, 3, 2],
            Some((DType::F32, [33, 4, 1, 2])),
            2.0,
            0.0,
            None,
        ),
        (
            [16, 3, 4, 1],
            Some((DType::F16, [16, 3, 1, 1])),
            1.0,
            8.0,
            None,
        ),
        (
            [16, 3, 6, 2],
            Some((DType::F32, [16, 3, 1, 1])),
            1.0,
            8.0,
            None,
        ),
        (
            [16, 3, 4, 1],
            Some((DType::F16, [16, 3, 1, 1])),
            0.5,
            0.0,
            Some([0, 2, 1, 3]),
        ),
        (
            [1024, 8, 2, 1],
            Some((DType::F16, [1024, 8, 1, 1])),
            0.125,
            0.0,
            None,
        ),
    ];
    for (ne, mask, scale, max_bias, axes) in cases {
        let m = mask.map_or_else(
            || "none".to_string(),
            |(t, ne)| format!("{t}{}", fmt_ne(&ne)),
        );
        let name = format!(
            "SOFT_MAX(type=f32,ne={},mask={m},scale={scale},max_bias={max_bias}{})",
            fmt_ne(&ne),
            fmt_perm("permute", axes)
        );
        v.push(Case::new("SOFT_MAX", name, move || {
            let mut g = CaseGraph::new();
            let a = permuted_leaf(&mut g, "a", DType::F32, ne, axes, None)?;
            let mk = match mask {
                Some((t, mne)) => Some(g.leaf_init("mask", t, &mne, MASK)?),
                None => None,
            };
            let out = g.soft_max_ext(a, mk, scale, max_bias)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

/// A ROPE case's variations.
#[derive(Clone, Copy)]
struct RopeCase {
    t: DType,
    ne: [usize; 4],
    n_dims: usize,
    yarn: bool,
    freq_factors: bool,
    /// The input is stored `[d, n_tokens, n_head]` and permuted.
    permuted: bool,
}

const fn rc(t: DType, ne: [usize; 4], n_dims: usize) -> RopeCase {
    RopeCase {
        t,
        ne,
        n_dims,
        yarn: false,
        freq_factors: false,
        permuted: false,
    }
}

fn rope_cases(v: &mut Vec<Case>) {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let variants = [
            rc(DType::F32, [64, 3, 5, 1], 64),
            rc(DType::F32, [128, 8, 16, 1], 128),
            rc(DType::F32, [32, 2, 4, 1], 16),
            rc(DType::F16, [64, 2, 3, 1], 64),
            RopeCase {
                yarn: true,
                ..rc(DType::F32, [16, 2, 3, 2], 16)
            },
            RopeCase {
                freq_factors: true,
                ..rc(DType::F32, [32, 3, 4, 1], 32)
            },
            RopeCase {
                permuted: true,
                ..rc(DType::F32, [64, 3, 5, 1], 64)
            },
            RopeCase {
                yarn: true,
                freq_factors: true,
                ..rc(DType::F16, [32, 2, 3, 1], 24)
            },
        ];
        for r in variants {
            push_rope(v, mode, r);
        }
    }
}

fn push_rope(v: &mut Vec<Case>, mode: RopeMode, r: RopeCase) {
    let mut p = RopeParams::new(r.n_dims, mode, 10000.0);
    if r.yarn {
        p.n_ctx_orig = 512;
        p.freq_scale = 0.25;
        p.ext_factor = 1.0;
        p.attn_factor = 1.5;
    }
    let name = format!(
        "ROPE(type={},ne={},n_dims={},mode={},freq_scale={},ext_factor={},attn_factor={},ff={}{})",
        r.t,
        fmt_ne(&r.ne),
        r.n_dims,
        mode.ggml_mode(),
        p.freq_scale,
        p.ext_factor,
        p.attn_factor,
        u8::from(r.freq_factors),
        if r.permuted { ",permute=[0,2,1,3]" } else { "" }
    );
    v.push(Case::new("ROPE", name, move || {
        let mut g = CaseGraph::new();
        let ne = r.ne;
        let a = permuted_leaf(
            &mut g,
            "a",
            r.t,
            ne,
            r.permuted.then_some([0, 2, 1, 3]),
            None,
        )?;
        // Positions 0.. and one large one (long-context angles).
        let pos = g.leaf_init("pos", DType::I32, &[ne[2]], Init::Positions { large: 4091 })?;
        let ff = if r.freq_factors {
            let f = g.leaf_init(
                "freq_factors",
                DType::F32,
                &[r.n_dims / 2],
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

/// A FLASH_ATTN_EXT case in test-backend-ops terms.
#[derive(Clone, Copy)]
struct Fa {
    hsk: usize,
    hsv: usize,
    n_head: usize,
    /// Query heads per KV head.
    gqa: usize,
    kv: usize,
    n_q: usize,
    ne3: usize,
    /// Mask extents `[n_kv, >= n_q, m2, m3]` given as `(extra rows, m2, m3)`.
    mask: Option<(usize, usize, usize)>,
    max_bias: f32,
    softcap: f32,
    kv_type: DType,
    /// K and V are stored `[d, n_kv_head, n_kv]` and permuted.
    kv_strided: bool,
}

const FA: Fa = Fa {
    hsk: 64,
    hsv: 64,
    n_head: 4,
    gqa: 1,
    kv: 17,
    n_q: 3,
    ne3: 1,
    mask: None,
    max_bias: 0.0,
    softcap: 0.0,
    kv_type: DType::F16,
    kv_strided: false,
};

fn flash_attn_cases(v: &mut Vec<Case>) {
    let m = Some((0, 1, 1));
    let cases = [
        FA,
        Fa { mask: m, ..FA },
        Fa {
            mask: m,
            max_bias: 8.0,
            n_head: 6,
            ..FA
        },
        Fa {
            mask: m,
            softcap: 1.0,
            ..FA
        },
        Fa {
            mask: m,
            n_head: 8,
            gqa: 4,
            kv: 33,
            n_q: 1,
            ..FA
        },
        Fa {
            mask: m,
            hsk: 32,
            hsv: 32,
            n_head: 2,
            gqa: 2,
            kv_type: DType::F32,
            ..FA
        },
        Fa { hsv: 32, ..FA },
        Fa {
            mask: Some((2, 1, 1)),
            n_head: 2,
            ne3: 2,
            ..FA
        },
        Fa {
            mask: Some((0, 4, 1)),
            max_bias: 4.0,
            ..FA
        },
        Fa {
            mask: m,
            kv_strided: true,
            n_head: 4,
            gqa: 2,
            ..FA
        },
        Fa {
            mask: m,
            kv_type: DType::F32,
            softcap: 2.0,
            max_bias: 2.0,
            hsk: 16,
            hsv: 16,
            ..FA
        },
        Fa {
            mask: m,
            hsk: 128,
            hsv: 128,
            n_head: 8,
            gqa: 2,
            kv: 257,
            n_q: 8,
            ..FA
        },
        Fa {
            mask: m,
            hsk: 80,
            hsv: 80,
            n_head: 2,
            kv: 65,
            n_q: 5,
            kv_type: DType::F32,
            ..FA
        },
        // Prompts over F16 caches (blocks of queries on a GPU): the last
        // block partial, several 64-key rounds, dk below dv.
        Fa {
            mask: m,
            n_head: 8,
            gqa: 4,
            kv: 300,
            n_q: 70,
            ..FA
        },
        Fa {
            mask: m,
            hsk: 256,
            hsv: 256,
            n_head: 2,
            kv: 100,
            n_q: 20,
            softcap: 30.0,
            ..FA
        },
        Fa {
            mask: m,
            hsk: 32,
            hsv: 128,
            n_head: 2,
            gqa: 2,
            kv: 90,
            n_q: 33,
            ..FA
        },
        // A Q8_0 cache (`--kv-type q8_0`): prompt and decoding shapes.
        Fa {
            mask: m,
            kv_type: DType::Q8_0,
            ..FA
        },
        Fa {
            mask: m,
            n_head: 8,
            gqa: 4,
            kv: 257,
            n_q: 1,
            hsk: 128,
            hsv: 128,
            kv_type: DType::Q8_0,
            ..FA
        },
    ];
    for c in cases {
        push_fa(v, c);
    }
}

fn push_fa(v: &mut Vec<Case>, c: Fa) {
    let mask = c.mask.map_or_else(
        || "none".to_string(),
        |(extra, m2, m3)| fmt_ne(&[c.kv, c.n_q + extra, m2, m3]),
    );
    let name = format!(
        "FLASH_ATTN_EXT(hsk={},hsv={},nh={},nr={},kv={},nb={},ne3={},mask={mask},max_bias={},logit_softcap={},type_KV={}{})",
        c.hsk,
        c.hsv,
        c.n_head,
        c.gqa,
        c.kv,
        c.n_q,
        c.ne3,
        c.max_bias,
        c.softcap,
        c.kv_type,
        if c.kv_strided { ",kv=permuted" } else { "" }
    );
    v.push(Case::new("FLASH_ATTN_EXT", name, move || {
        let mut g = CaseGraph::new();
        let n_kv_head = c.n_head / c.gqa;
        let q = g.leaf("q", DType::F32, &[c.hsk, c.n_q, c.n_head, c.ne3])?;
        let axes = c.kv_strided.then_some([0, 2, 1, 3]);
        let k = permuted_leaf(
            &mut g,
            "k",
            c.kv_type,
            [c.hsk, c.kv, n_kv_head, c.ne3],
            axes,
            None,
        )?;
        let vv = permuted_leaf(
            &mut g,
            "v",
            c.kv_type,
            [c.hsv, c.kv, n_kv_head, c.ne3],
            axes,
            None,
        )?;
        let mask = match c.mask {
            Some((extra, m2, m3)) => {
                Some(g.leaf_init("mask", DType::F16, &[c.kv, c.n_q + extra, m2, m3], MASK)?)
            }
            None => None,
        };
        let scale = 1.0 / (c.hsk as f32).sqrt();
        let out = g.flash_attn_ext(q, k, vv, mask, scale, c.max_bias, c.softcap)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}
