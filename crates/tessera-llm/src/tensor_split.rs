//! Tensor parallelism for the decoders (`--split tensor`): what each GGUF
//! weight *is* to the split ([`Role`]), and the weights and caches of layers
//! placed on a [`MetaDevice`] allocated split accordingly.
//!
//! Roles follow Megatron-style tensor parallelism, as llama.cpp's
//! `--split-mode tensor`: attention Q/K/V and FFN gate/up are
//! column-parallel (each device computes some heads / some of the FFN),
//! the attention output and FFN down projections row-parallel (partial
//! sums, all-reduced), the KV cache is cut by heads, the output matrix by
//! vocabulary rows, norms are mirrored. Cuts keep GQA groups and the
//! quantization blocks of the row-parallel weights whole. A model with one
//! KV head (Gemma 3 270M) keeps K/V and the cache mirrored and cuts Q by
//! single heads, so both devices share the attention.
//!
//! Any role is *correct* — the meta device gathers what an op needs whole —
//! roles only decide how much work is shared and how much is moved. So a
//! weight whose shape does not divide as its role wants is simply mirrored.

use std::sync::Arc;

use tessera::{BufferType, Layout, Result};
use tessera_meta::{MetaBufferType, MetaDevice, Role, SplitState};

use crate::params::Params;

/// The meta device behind `buft`, if `buft` is a meta buffer type.
pub fn meta_device(buft: &Arc<dyn BufferType>) -> Option<Arc<MetaDevice>> {
    buft.as_any()
        .downcast_ref::<MetaBufferType>()?
        .meta_device()
}

/// Indivisible units of the query heads: GQA groups, or single heads when
/// there is one KV head (then K/V are mirrored).
fn q_units(p: &Params) -> usize {
    if p.n_head_kv <= 1 {
        p.n_head
    } else {
        p.n_head_kv
    }
}

/// Units of an FFN of `n_ff`: groups of 256 (whole K-quant blocks of the
/// down projection), else of 32; 0 when neither divides.
fn ffn_units(n_ff: usize) -> usize {
    [256, 32]
        .into_iter()
        .find(|g| n_ff.is_multiple_of(*g))
        .map_or(0, |g| n_ff / g)
}

/// The role of GGUF tensor `name` of `layout` in a model of `p`.
pub fn role_of(name: &str, layout: &Layout, p: &Params) -> Role {
    let kind = match name.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, k)| k),
        None => name,
    };
    let kv_split = p.n_head_kv > 1;
    match kind {
        "attn_q.weight" => Role::column(q_units(p)),
        "attn_q.bias" => Role::vector(q_units(p)),
        "attn_k.weight" | "attn_v.weight" if kv_split => Role::column(p.n_head_kv),
        "attn_k.bias" | "attn_v.bias" if kv_split => Role::vector(p.n_head_kv),
        "attn_output.weight" => {
            let units = q_units(p);
            let cols = layout.ne[0] / units.max(1);
            if cols.is_multiple_of(layout.dtype.block_size()) {
                Role::row(units)
            } else {
                Role::Mirrored
            }
        }
        "ffn_gate.weight" | "ffn_up.weight" | "ffn_gate_exps.weight" | "ffn_up_exps.weight" => {
            match ffn_units(layout.ne[1]) {
                0 => Role::Mirrored,
                u => Role::column(u),
            }
        }
        "ffn_down.weight" | "ffn_down_exps.weight" => match ffn_units(layout.ne[0]) {
            0 => Role::Mirrored,
            u if !(layout.ne[0] / u).is_multiple_of(layout.dtype.block_size()) => Role::Mirrored,
            u => Role::row(u),
        },
        "output.weight" => Role::column(layout.ne[1]),
        _ => Role::Mirrored,
    }
}

/// How layer `il`'s KV cache (`[head_dim * n_head_kv, slots]`) is held.
pub fn kv_state(meta: &MetaDevice, p: &Params, layout: &Layout, il: usize) -> SplitState {
    if p.n_head_kv <= 1 {
        return SplitState::Mirrored;
    }
    meta.policy()
        .state(layout, Role::vector(p.n_head_kv), il)
        .unwrap_or(SplitState::Mirrored)
}

/// How weight `name` is held: its role's split, mirrored when the shape
/// does not divide as the role wants.
pub fn weight_state(meta: &MetaDevice, name: &str, layout: &Layout, p: &Params) -> SplitState {
    let rotate = crate::weights::layer_of(name).unwrap_or(0);
    meta.policy()
        .state(layout, role_of(name, layout, p), rotate)
        .unwrap_or(SplitState::Mirrored)
}

/// Bound weights, each with whether its bytes must be written; the bytes
/// allocated for copies on all devices; the bytes of each device's pieces.
pub type BoundWeights = (Vec<(tessera::Tensor, bool)>, usize, Vec<usize>);

/// A weight bound as views: its index, layout and state, and its pieces.
type ViewSpec = (usize, (Layout, SplitState), Vec<Option<tessera::Tensor>>);

/// Can device pieces of a tensor held as `state` be views of its bytes?
/// Mirrored ones, and cuts along the outermost axis (the pieces are then
/// consecutive byte ranges).
fn contiguous_pieces(layout: &Layout, state: &SplitState) -> bool {
    match state {
        SplitState::Mirrored => true,
        SplitState::Split(s) => layout.ne[s.axis + 1..].iter().all(|&n| n == 1),
        SplitState::Partial => false,
    }
}

/// Bind the weights `bound` (data from the GGUF tensors `names[i].1`) on
/// `meta`, split by role. When every device reads host memory, the
/// mirrored tensors and those cut along their outermost axis are views of
/// the file's bytes (zero copy: with a mapped file, the map); the others
/// (row-parallel weights, whose pieces are strided) are allocated, to be
/// written by the caller. Returns each tensor with whether it needs its
/// bytes written, the bytes allocated for the copies on all devices, and
/// the bytes of each device's pieces (views and copies).
pub fn bind_weights(
    meta: &MetaDevice,
    file: &tessera_gguf::GgufFile,
    names: &[(String, String)],
    bound: &[&str],
    layouts: &[Layout],
    p: &Params,
) -> Result<BoundWeights> {
    let host = meta.devices().iter().all(|d| d.buffer_type().is_host());
    let data = host.then(|| file.data_buffer(meta.devices()[0].buffer_type()));
    let mut views: Vec<ViewSpec> = Vec::new();
    let mut copies: Vec<(usize, (Layout, SplitState))> = Vec::new();
    for (i, (name, layout)) in bound.iter().zip(layouts).enumerate() {
        let state = weight_state(meta, name, layout, p);
        match &data {
            Some(data) if contiguous_pieces(layout, &state) => {
                let whole = file.tensor_in(data, &names[i].1)?;
                let n = meta.devices().len();
                let pieces = match &state {
                    SplitState::Split(s) => {
                        let starts = s.starts();
                        let bs = if s.axis == 0 {
                            layout.dtype.block_size()
                        } else {
                            1
                        };
                        (0..n)
                            .map(|j| {
                                s.piece_layout(layout, j)?
                                    .map(|l| {
                                        let off = starts[j] / bs * layout.nb[s.axis];
                                        tessera::Tensor::new(
                                            l,
                                            whole.buffer().clone(),
                                            whole.offset() + off,
                                        )
                                    })
                                    .transpose()
                            })
                            .collect::<Result<Vec<_>>>()?
                    }
                    _ => vec![Some(whole); n],
                };
                views.push((i, (*layout, state), pieces));
            }
            _ => copies.push((i, (*layout, state))),
        }
    }
    let mut out: Vec<Option<(tessera::Tensor, bool)>> = vec![None; bound.len()];
    let mut bytes = 0;
    let mut per_part = vec![0; meta.devices().len()];
    let mut add = |b: Vec<usize>| {
        for (p, b) in per_part.iter_mut().zip(b) {
            *p += b;
        }
    };
    if !views.is_empty() {
        let specs: Vec<_> = views.iter().map(|v| v.1.clone()).collect();
        let idx: Vec<usize> = views.iter().map(|v| v.0).collect();
        let pieces = views.into_iter().map(|v| v.2).collect();
        let (buf, ts) = meta.bind_split(&specs, pieces, tessera::BufferUsage::Weights)?;
        add(buf.bytes_per_device());
        for (i, t) in idx.into_iter().zip(ts) {
            out[i] = Some((t, false));
        }
    }
    if !copies.is_empty() {
        let specs: Vec<_> = copies.iter().map(|c| c.1.clone()).collect();
        let (buf, ts) = meta.alloc_split(&specs, tessera::BufferUsage::Weights)?;
        bytes += buf.bytes_per_device().iter().sum::<usize>();
        add(buf.bytes_per_device());
        for ((i, _), t) in copies.into_iter().zip(ts) {
            out[i] = Some((t, true));
        }
    }
    let out = out
        .into_iter()
        .map(|t| t.ok_or_else(|| tessera::Error::InvalidLayout("a weight left unbound".into())))
        .collect::<Result<Vec<_>>>()?;
    Ok((out, bytes, per_part))
}
