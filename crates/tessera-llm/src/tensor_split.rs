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

/// Bind tensors of `layouts` (named `names`) on `meta`, split by role.
pub fn alloc_weights(
    meta: &MetaDevice,
    names: &[&str],
    layouts: &[Layout],
    p: &Params,
) -> Result<Vec<tessera::Tensor>> {
    let specs: Vec<(Layout, SplitState)> = names
        .iter()
        .zip(layouts)
        .map(|(n, l)| (*l, weight_state(meta, n, l, p)))
        .collect();
    let (_, tensors) = meta.alloc_split(&specs, tessera::BufferUsage::Weights)?;
    Ok(tensors)
}
