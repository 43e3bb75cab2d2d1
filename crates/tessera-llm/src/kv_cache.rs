//! The KV cache: per layer, keys `[head_dim_k * n_head_kv, n_slots]` and
//! values `[head_dim_v * n_head_kv, n_slots]` in device memory (F16 by
//! default; F32, or Q8_0 (half the memory of F16; head sizes a multiple of
//! 32) on request), written by SET_ROWS in the decoder graph (which
//! quantizes for a Q8_0 cache) and read by FLASH_ATTN_EXT.
//! Slot `i` holds position `i` (one sequence); the number of slots is the
//! context size rounded up to [`KV_PAD`].

use std::sync::Arc;

use tessera::alloc::{PlanningType, alloc_tensors};
use tessera::{Buffer, BufferType, BufferUsage, DType, Error, Layout, Result, Tensor};

use crate::params::Params;

/// Slots attended are rounded up to a multiple of this (as llama.cpp pads
/// its cache views), so a decoding graph changes once every `KV_PAD` tokens.
pub const KV_PAD: usize = 256;

/// Types a cache may have.
pub const KV_TYPES: [DType; 3] = [DType::F16, DType::F32, DType::Q8_0];

/// The cache of one sequence.
#[derive(Debug)]
pub struct KvCache {
    dtype: DType,
    n_slots: usize,
    layers: Vec<(Tensor, Tensor)>,
    buffers: Vec<Arc<dyn Buffer>>,
}

impl KvCache {
    /// Bytes a cache of `n_ctx` positions takes per layer (for planning).
    pub fn layer_bytes(p: &Params, dtype: DType, n_ctx: usize) -> Result<usize> {
        let n = padded(n_ctx)?;
        let k = Layout::contiguous(dtype, &[p.n_embd_k(), n])?;
        let v = Layout::contiguous(dtype, &[p.n_embd_v(), n])?;
        k.nbytes()
            .checked_add(v.nbytes())
            .ok_or_else(|| Error::Overflow("KV cache size".into()))
    }

    /// A cache for `n_ctx` positions of type `dtype`; layer `il`'s tensors in
    /// `buft(il)`, zero-filled.
    pub fn new(
        p: &Params,
        dtype: DType,
        n_ctx: usize,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        KvCache::with(p, dtype, n_ctx, buft, false)
    }

    /// The cache [`KvCache::new`] would make, in planning buffers
    /// ([`PlanningType`]: nothing allocated; [`KvCache::bytes_in`] is what
    /// it would take).
    pub fn plan(
        p: &Params,
        dtype: DType,
        n_ctx: usize,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        KvCache::with(p, dtype, n_ctx, buft, true)
    }

    fn with(
        p: &Params,
        dtype: DType,
        n_ctx: usize,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
        planning: bool,
    ) -> Result<KvCache> {
        if !KV_TYPES.contains(&dtype) {
            return Err(Error::unsupported(
                "tessera-llm",
                format!("KV cache type {dtype} (F16, F32 or Q8_0)"),
            ));
        }
        let bs = dtype.block_size();
        if !(p.head_dim_k.is_multiple_of(bs) && p.head_dim_v.is_multiple_of(bs)) {
            return Err(Error::unsupported(
                "tessera-llm",
                format!(
                    "a {dtype} KV cache needs head sizes that are multiples of {bs}                      (this model's: {} and {})",
                    p.head_dim_k, p.head_dim_v
                ),
            ));
        }
        let n_slots = padded(n_ctx)?;
        let mut layers = Vec::with_capacity(p.n_layer);
        let mut buffers = Vec::new();
        for il in 0..p.n_layer {
            let k = Layout::contiguous(dtype, &[p.n_embd_k(), n_slots])?;
            let v = Layout::contiguous(dtype, &[p.n_embd_v(), n_slots])?;
            let set = if planning {
                alloc_tensors(&PlanningType::wrap(buft(il)), &[k, v], BufferUsage::Any)?
            } else {
                let set = alloc_tensors(&buft(il), &[k, v], BufferUsage::Any)?;
                set.buffer.clear(0)?;
                set
            };
            let mut t = set.tensors.into_iter();
            let (Some(k), Some(v)) = (t.next(), t.next()) else {
                return Err(Error::InvalidLayout("KV cache allocation".into()));
            };
            layers.push((k, v));
            buffers.push(set.buffer);
        }
        Ok(KvCache {
            dtype,
            n_slots,
            layers,
            buffers,
        })
    }

    /// Keys and values of layer `il`.
    pub fn layer(&self, il: usize) -> Result<(&Tensor, &Tensor)> {
        self.layers
            .get(il)
            .map(|(k, v)| (k, v))
            .ok_or_else(|| Error::NotFound(format!("KV cache layer {il}")))
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Slots (positions) it holds.
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// Bytes it occupies.
    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.size()).sum()
    }

    /// Bytes it occupies in buffer types named `name`.
    pub fn bytes_in(&self, name: &str) -> usize {
        self.buffers
            .iter()
            .filter(|b| b.buffer_type().name() == name)
            .map(|b| b.size())
            .sum()
    }
}

/// `n` rounded up to [`KV_PAD`].
pub fn padded(n: usize) -> Result<usize> {
    n.max(1)
        .checked_next_multiple_of(KV_PAD)
        .ok_or_else(|| Error::Overflow(format!("context of {n} positions")))
}
