//! FLASH_ATTN_EXT on the GPU: which kernel, and the split of a long cache
//! over workgroups.
//!
//! Prompts over F16 caches take blocks of query rows a workgroup
//! ([`crate::attention_tiles`]), unless few rows over a long cache are
//! split (below). Otherwise two kernels compute attention
//! (see their headers): `attention_rows.wgsl` for F16 caches of the usual
//! head sizes, `attention.wgsl` (four teams) for everything else. Both
//! give each query row one workgroup, which
//! scans the whole cache; while decoding there are only as many rows as
//! heads (32 for a 1B Llama), so a long cache leaves most of a GPU idle
//! (on an NVIDIA H200, 4,096 keys took 278 µs against ggml's 17.6). Where
//! the rows kernel runs over at least [`MIN_ROUNDS`] rounds of 256 keys and
//! there are few rows, the rounds are split over several workgroups per
//! row, each writing its maximum, sum and partial outputs to the stream's
//! scratch, and `attention_merge.wgsl` merges them as the online softmax
//! merges rounds (one more dispatch). `TESSERA_WGPU_FA_SPLIT=0` keeps one
//! workgroup per row, for measuring.
//!
//! Either way the products that read the result (the output projection,
//! through a reshape) can find it quantized by the dispatch that wrote it
//! ([`crate::matvec_q8`]).

use std::sync::Arc;

use tessera::{DType, Graph, Op, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;
use crate::matvec_q8;
use crate::params::u32_of;
use crate::wgsl::Binding;

const ATTENTION: &str = concat!(
    include_str!("shaders/attention_common.wgsl"),
    include_str!("shaders/attention.wgsl")
);
/// `attention_rows.wgsl` by [`crate::subgroups::on`]: reductions by trees
/// or subgroups.
const ATTENTION_ROWS: [&str; 2] = [
    concat!(
        include_str!("shaders/attention_common.wgsl"),
        include_str!("shaders/reduce_tree.wgsl"),
        include_str!("shaders/attention_rows.wgsl")
    ),
    concat!(
        include_str!("shaders/attention_common.wgsl"),
        include_str!("shaders/reduce_subgroup.wgsl"),
        include_str!("shaders/attention_rows.wgsl")
    ),
];
const ATTENTION_MERGE: &str = concat!(
    include_str!("shaders/attention_common.wgsl"),
    include_str!("shaders/attention_merge.wgsl")
);

/// Fewest rounds of 256 keys split over workgroups.
const MIN_ROUNDS: usize = 4;
/// Workgroups a split aims at in all (query rows times parts).
const TARGET_GROUPS: usize = 256;

/// One FLASH_ATTN_EXT node's operands and parameters.
pub(crate) struct Attention<'a> {
    pub(crate) qkv: [&'a Operand; 3],
    pub(crate) mask: Option<&'a Operand>,
    pub(crate) sinks: Option<&'a Operand>,
    /// scale, max_bias, logit_softcap.
    pub(crate) fp: [f32; 3],
}

/// Record attention node `id` into `dst`.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    id: TensorId,
    dst: &Operand,
    at: &Attention<'_>,
    mut q8: Option<&mut matvec_q8::Compute>,
) -> Result<()> {
    let [q, k, v] = at.qkv;
    let rows = q.layout.nrows();
    let rows_fit = rows_takes(&k.layout, &v.layout, k.offset, v.offset);
    let split_parts = if rows_fit {
        parts(rows, k.layout.ne[1])
    } else {
        1
    };
    // Prompts: blocks of query rows ([`crate::attention_tiles`]), unless a
    // few rows over a long cache are split over more workgroups by the
    // row kernel (a block of 8 queries over 4,096 keys would be one
    // workgroup a head).
    let tiles = if split_parts > 1 || teams() {
        None
    } else {
        crate::attention_tiles::body_for(
            &core.limits,
            &q.layout,
            (&k.layout, k.offset),
            (&v.layout, v.offset),
        )
    };
    let rows_kernel = tiles.is_none() && rows_fit;
    let parts = if rows_kernel { split_parts } else { 1 };
    let dv = v.layout.ne[0];
    // The parts' region (for this node only) and the quantization's are
    // both taken from the scratch, so they are apart: the merge never
    // writes what it reads.
    let split = match q8.as_mut() {
        Some(q8) if parts > 1 => q8
            .reserve(partial_bytes(rows, parts, dv), id.index())
            .map(|base| (base, q8.operand())),
        _ => None,
    };
    // The products that read the result find it quantized (rows of whole
    // blocks: each workgroup quantizes the row it wrote).
    let quant = q8
        .as_mut()
        .filter(|_| dv % 32 == 0)
        .and_then(|q| q.plan_for(graph, id));
    let mut call = call(dst, at)?;
    let body = match tiles {
        Some((body, _)) => body,
        None if rows_kernel => ATTENTION_ROWS[usize::from(crate::subgroups::on(core))],
        None => ATTENTION,
    };
    match split {
        Some((base, scratch)) => {
            let scratch = scratch?;
            call.pad_sources(5);
            call.bindings.push(Binding::plain("s5", DType::F32));
            call.buffers.push(scratch.buffer.clone());
            call.params.iu2[1] = u32_of(base, "a scratch offset")?;
            call.params.iu2[2] = u32_of(parts, "attention parts")?;
            call.params.iu2[3] = 2;
            let params = call.params;
            call.record(batch, core, "flash_attn_ext", body, params, rows * parts)?;
            merge(
                batch,
                core,
                dst,
                at,
                (&scratch, base, parts),
                quant.as_ref(),
            )?;
        }
        None => {
            match &quant {
                Some(qz) => qz.bind(&mut call, 5, 1)?,
                None => call.pad_sources(6),
            }
            let params = call.params;
            let groups = tiles.map_or(rows, |(_, groups)| groups);
            #[cfg(test)]
            if tiles.is_some() {
                crate::attention_tiles::RECORDED.with(|r| r.set(r.get() + 1));
            }
            call.record(batch, core, "flash_attn_ext", body, params, groups)?;
        }
    }
    if let (Some(qz), Some(q8)) = (&quant, q8) {
        q8.commit(graph.memory_root(id)?.0, qz);
    }
    Ok(())
}

/// The attention kernels' call: q, k, v, mask and sinks bound as sources 0
/// to 4, the flags and parameters set (see `attention.wgsl`'s header).
fn call(dst: &Operand, at: &Attention<'_>) -> Result<Call> {
    let [q, k, v] = at.qkv;
    let mut call = Call::new(dst, &[Some(q), Some(k), Some(v), at.mask, at.sinks])?;
    call.params.iu[0] = u32::from(at.mask.is_some());
    call.params.iu[1] = u32::from(k.layout.dtype == DType::Q8_0);
    call.params.iu[2] = u32::from(v.layout.dtype == DType::Q8_0);
    // Sinks (src4): the parameter block holds four sources' layouts, and
    // the sinks need only their offset (contiguous f32).
    call.params.iu[3] = u32::from(at.sinks.is_some());
    if let Some(s) = at.sinks {
        call.params.iu2[0] = u32_of(s.offset, "a tensor offset")?;
    }
    let [scale, max_bias, softcap] = at.fp;
    call.params.fp = [scale, max_bias, softcap, 0.0];
    Ok(call)
}

/// Record the merge of a split attention's `parts` per row, written at
/// byte `base` of `scratch`, into `dst` (and its quantization, `quant`).
fn merge(
    batch: &mut Batch<'_>,
    core: &Core,
    dst: &Operand,
    at: &Attention<'_>,
    (scratch, base, parts): (&Operand, usize, usize),
    quant: Option<&matvec_q8::Quantized>,
) -> Result<()> {
    let [q, _, v] = at.qkv;
    // s0: the scratch, read (the parts) and written (the quantization).
    let mut call = Call::new(dst, &[Some(scratch), at.sinks])?;
    call.bindings[1] = Binding::plain("s0", DType::F32);
    call.params.src[0][0] = crate::params::u32x4(q.layout.ne, "a query extent")?;
    call.params.iu = [
        u32_of(parts, "attention parts")?,
        u32_of(base, "a scratch offset")?,
        u32_of(v.layout.ne[0], "a head size")?,
        u32::from(at.sinks.is_some()),
    ];
    if let Some(s) = at.sinks {
        call.params.iu2[0] = u32_of(s.offset, "a tensor offset")?;
    }
    if let Some(qz) = quant {
        call.params.iu2[1] = u32_of(qz.base, "a scratch offset")?;
        call.params.iu2[2] = u32_of(qz.pairs, "a scratch offset")?;
        call.params.iu2[3] = 1;
    }
    let params = call.params;
    let rows = q.layout.nrows();
    call.record(
        batch,
        core,
        "flash_attn_merge",
        ATTENTION_MERGE,
        params,
        rows,
    )
}

/// Whether `attention_rows.wgsl` takes caches of layouts `k`, `v` at byte
/// offsets `k_off`, `v_off` (see its header: F16 rows of contiguous values
/// at multiples of 4 bytes, the head sizes of common models).
/// `TESSERA_WGPU_FA=teams` keeps every attention on `attention.wgsl`, for
/// measuring.
fn rows_takes(k: &tessera::Layout, v: &tessera::Layout, k_off: usize, v_off: usize) -> bool {
    if teams() {
        return false;
    }
    let words = |l: &tessera::Layout, off: usize| {
        l.dtype == DType::F16
            && l.nb[0] == 2
            && off.is_multiple_of(4)
            && l.nb[1..].iter().all(|b| b.is_multiple_of(4))
    };
    let (dk, dv) = (k.ne[0], v.ne[0]);
    words(k, k_off)
        && words(v, v_off)
        && dk.is_multiple_of(32)
        && dk <= 256
        && matches!(dv, 32 | 64 | 128 | 256)
}

/// `TESSERA_WGPU_FA=teams`: every attention on `attention.wgsl`.
fn teams() -> bool {
    static TEAMS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TEAMS.get_or_init(|| std::env::var("TESSERA_WGPU_FA").is_ok_and(|v| v.trim() == "teams"))
}

/// Workgroups per query row for `rows` rows over `n_kv` keys (1: no split).
fn parts(rows: usize, n_kv: usize) -> usize {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("TESSERA_WGPU_FA_SPLIT").is_ok_and(|v| v.trim() == "0")) {
        return 1;
    }
    let rounds = n_kv.div_ceil(256);
    if rounds < MIN_ROUNDS || rows == 0 || rows >= TARGET_GROUPS / 2 {
        return 1;
    }
    // Parts of at least two rounds each, about TARGET_GROUPS in all.
    TARGET_GROUPS.div_ceil(rows).min(rounds.div_ceil(2)).max(1)
}

/// Scratch bytes of a split: per row and part, the maximum, the sum and
/// `dv` partial outputs.
fn partial_bytes(rows: usize, parts: usize, dv: usize) -> usize {
    rows.saturating_mul(parts)
        .saturating_mul(dv + 2)
        .saturating_mul(4)
}

/// Scratch bytes the attention nodes of `range` may split into (planned
/// with the compute's other scratch, [`matvec_q8::Compute`]).
pub(crate) fn scratch_bytes(graph: &Graph, range: std::ops::Range<usize>) -> usize {
    let mut total = 0usize;
    for node in graph.nodes().get(range).unwrap_or_default() {
        if !matches!(node.op, Op::FlashAttnExt { .. }) {
            continue;
        }
        let layouts = [0, 1, 2].map(|i| node.src(i).and_then(|s| graph.layout(s).ok()));
        let [Some(q), Some(k), Some(v)] = layouts else {
            continue;
        };
        // Offsets are known only once placed: plan as if they fit.
        if !rows_takes(&k, &v, 0, 0) {
            continue;
        }
        let p = parts(q.nrows(), k.ne[1]);
        if p > 1 {
            // Each reservation starts and ends at a multiple of 16.
            total = total.saturating_add(partial_bytes(q.nrows(), p, v.ne[0]) + 32);
        }
    }
    total
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
pub(crate) mod tests {
    use tessera::{DType, Graph, Stream};

    const D: usize = 64;
    const HEADS: usize = 4;
    const KV_HEADS: usize = 2;
    const N_KV: usize = 1100;

    /// `n` values of a saw wave of step `s` over [-scale, scale).
    pub(crate) fn wave(n: usize, s: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * s) % 113) as f32 / 56.0 - 1.0) * scale)
            .collect()
    }

    /// `values` rounded to F16 (the bytes and the values they hold).
    pub(crate) fn f16(values: &[f32]) -> (Vec<u8>, Vec<f32>) {
        let mut b = vec![0u8; values.len() * 2];
        tessera::quant::from_f32(DType::F16, values, &mut b).unwrap();
        let mut back = vec![0f32; values.len()];
        tessera::quant::to_f32(DType::F16, &b, &mut back).unwrap();
        (b, back)
    }

    /// The mask of query 0: keys below 600 and every seventh key masked
    /// (so the first part of a split sees no key at all).
    fn masked(j: usize) -> bool {
        j < 600 || j % 7 == 3
    }

    /// Attention of one query over 1,100 F16 keys (4 heads over 2 KV
    /// heads), with a mask and, if `sinks`, attention sinks; its result
    /// reshaped to [256, 1] and read by a Q8_0 product, directly or
    /// (`copied`) through a SCALE by 1. Returns (attention, product,
    /// dispatches) and the f64 reference of the attention.
    fn run(sinks: bool, copied: bool) -> (Vec<f32>, Vec<f32>, u64, Vec<f64>) {
        let dev = crate::test_device().unwrap();
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, &[D, 1, HEADS]).unwrap();
        let k = g.input("k", DType::F16, &[D, N_KV, KV_HEADS]).unwrap();
        let v = g.input("v", DType::F16, &[D, N_KV, KV_HEADS]).unwrap();
        let m = g.input("mask", DType::F16, &[N_KV, 1]).unwrap();
        let sk = g.input("sinks", DType::F32, &[HEADS]).unwrap();
        let w = g.input("w", DType::Q8_0, &[D * HEADS, 8]).unwrap();
        let scale = 0.125;
        let att = if sinks {
            g.flash_attn_ext_sinks(q, k, v, Some(m), sk, scale, 0.0, 0.0)
                .unwrap()
        } else {
            g.flash_attn_ext(q, k, v, Some(m), scale, 0.0, 0.0).unwrap()
        };
        let flat = g.reshape(att, &[D * HEADS, 1]).unwrap();
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
        let qs = wave(D * HEADS, 7, 1.0);
        let (kb, ks) = f16(&wave(D * N_KV * KV_HEADS, 31, 1.5));
        let (vb, vs) = f16(&wave(D * N_KV * KV_HEADS, 17, 1.0));
        let mask: Vec<f32> = (0..N_KV)
            .map(|j| if masked(j) { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        let (mb, _) = f16(&mask);
        let sinks_v = [0.5f32, -1.0, 9.0, 0.0];
        pl.tensor(&g, q).unwrap().write_f32(&qs).unwrap();
        pl.tensor(&g, k).unwrap().write(0, &kb).unwrap();
        pl.tensor(&g, v).unwrap().write(0, &vb).unwrap();
        pl.tensor(&g, m).unwrap().write(0, &mb).unwrap();
        pl.tensor(&g, sk).unwrap().write_f32(&sinks_v).unwrap();
        let mut wq = vec![0u8; DType::Q8_0.row_size(D * HEADS).unwrap() * 8];
        tessera::quant::from_f32(DType::Q8_0, &wave(D * HEADS * 8, 13, 1.0), &mut wq).unwrap();
        pl.tensor(&g, w).unwrap().write(0, &wq).unwrap();
        crate::matvec_q8::force(Some(true));
        let n0 = crate::batch::counts::now().0;
        stream.compute(&g, &pl).unwrap();
        let n = crate::batch::counts::now().0 - n0;
        crate::matvec_q8::force(None);
        let mut want = Vec::new();
        for h in 0..HEADS {
            let kh = h / (HEADS / KV_HEADS);
            let row = |x: &[f32], j: usize| x[(kh * N_KV + j) * D..][..D].to_vec();
            let qh = &qs[h * D..][..D];
            let scores: Vec<(usize, f64)> = (0..N_KV)
                .filter(|&j| !masked(j))
                .map(|j| {
                    let kr = row(&ks, j);
                    let dot: f64 = (0..D).map(|d| f64::from(qh[d]) * f64::from(kr[d])).sum();
                    (j, dot * f64::from(scale))
                })
                .collect();
            let mut mx = scores.iter().map(|s| s.1).fold(f64::MIN, f64::max);
            if sinks {
                mx = mx.max(f64::from(sinks_v[h]));
            }
            let mut sum: f64 = scores.iter().map(|s| (s.1 - mx).exp()).sum();
            if sinks {
                sum += (f64::from(sinks_v[h]) - mx).exp();
            }
            for d in 0..D {
                let o: f64 = scores
                    .iter()
                    .map(|&(j, s)| (s - mx).exp() * f64::from(row(&vs, j)[d]))
                    .sum();
                want.push(o / sum);
            }
        }
        let read = |id| pl.tensor(&g, id).unwrap().read_f32().unwrap();
        (read(att), read(p), n, want)
    }

    /// A long cache with one query row is split over workgroups (a part
    /// with no unmasked key at all included) and merged: within 1e-5 of
    /// the f64 reference, with and without sinks; the merge quantizes the
    /// result for the product reading it (bit for bit the separate
    /// quantization's product), one dispatch each for the parts, the merge
    /// and the product.
    #[test]
    fn a_long_cache_is_split_over_workgroups_and_merged() {
        if crate::test_device().is_none() {
            return;
        }
        assert!(super::parts(HEADS, N_KV) > 1, "the case splits");
        for sinks in [false, true] {
            let (got, fused, n, want) = run(sinks, false);
            let (_, separate, n_sep, _) = run(sinks, true);
            let big = want.iter().fold(0f64, |a, b| a.max(b.abs()));
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= 1e-5 * big,
                    "sinks {sinks}: value {i}: {g} vs {w}"
                );
            }
            assert_eq!(n, 3, "sinks {sinks}: parts, merge, product");
            assert_eq!(n_sep, 5, "sinks {sinks}: + SCALE and quantization");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&separate), "sinks {sinks}: product");
        }
    }
}
