//! The KV cache: per layer, keys `[head_dim_k * n_head_kv, n_slots]` and
//! values `[head_dim_v * n_head_kv, n_slots]` in device memory (F16 by
//! default; F32, or Q8_0 (half the memory of F16; head sizes a multiple of
//! 32) on request), written by SET_ROWS in the decoder graph (which
//! quantizes for a Q8_0 cache) and read by FLASH_ATTN_EXT.
//! Slot `i` holds position `i` (one sequence); the number of slots is the
//! context size rounded up to [`KV_PAD`].
//!
//! Sliding-window layers (Gemma 3's five of six) attend to the last
//! `window` positions only, so their cache is a ring, as llama.cpp's iSWA
//! cache: `window + n_batch` slots rounded up to [`KV_PAD`] (at most the
//! full size), position `p` in slot `p % slots`. A batch of at most
//! `n_batch` tokens overwrites only positions that no query of the batch
//! can see (`slots >= window + n_batch`). Gemma 3 270M at a context of 4096
//! keeps 3 of its 18 layers at 4096 slots and 15 at 1024: 27 MiB of F16
//! cache instead of 72. `SessionOptions::swa_full` keeps full-size rings
//! (llama.cpp's `--swa-full`).

use std::sync::Arc;

use tessera::alloc::{PlanningType, alloc_tensors};
use tessera::{Buffer, BufferType, BufferUsage, DType, Error, Layout, Result, Tensor};

use crate::params::Params;
use crate::session::SessionOptions;

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
    /// Slots of the sliding-window layers' rings (`n_slots` when the model
    /// has none or they are full-size).
    n_slots_swa: usize,
    layers: Vec<(Tensor, Tensor)>,
    buffers: Vec<Arc<dyn Buffer>>,
}

impl KvCache {
    /// The cache of a session with `options` (`n_ctx` positions, elements
    /// of `kv_type`, sliding-window rings sized for batches of `n_batch`);
    /// layer `il`'s tensors in `buft(il)`, zero-filled.
    pub fn new(
        p: &Params,
        options: &SessionOptions,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        KvCache::with(p, options, buft, false)
    }

    /// The cache [`KvCache::new`] would make, in planning buffers
    /// ([`PlanningType`]: nothing allocated; [`KvCache::bytes_in`] is what
    /// it would take).
    pub fn plan(
        p: &Params,
        options: &SessionOptions,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        KvCache::with(p, options, buft, true)
    }

    fn with(
        p: &Params,
        options: &SessionOptions,
        buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
        planning: bool,
    ) -> Result<KvCache> {
        let dtype = options.kv_type;
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
        let n_slots = padded(options.n_ctx)?;
        let n_slots_swa = if p.sliding_window == 0 || options.swa_full {
            n_slots
        } else {
            let batch = options.n_batch.min(options.n_ctx);
            padded(p.sliding_window.saturating_add(batch))?.min(n_slots)
        };
        let mut layers = Vec::with_capacity(p.n_layer);
        let mut buffers = Vec::new();
        for il in 0..p.n_layer {
            let n = if p.is_swa(il) { n_slots_swa } else { n_slots };
            let k = Layout::contiguous(dtype, &[p.n_embd_k(), n])?;
            let v = Layout::contiguous(dtype, &[p.n_embd_v(), n])?;
            if let Some(meta) = crate::tensor_split::meta_device(&buft(il)) {
                if planning != meta.is_planning() {
                    return Err(Error::unsupported(
                        "tessera-llm",
                        format!(
                            "a KV cache on {}: plan on a planning meta device, allocate on a real one",
                            tessera::Device::name(meta.as_ref())
                        ),
                    ));
                }
                let specs = [
                    (k, crate::tensor_split::kv_state(&meta, p, &k, il)),
                    (v, crate::tensor_split::kv_state(&meta, p, &v, il)),
                ];
                let (buffer, t) = meta.alloc_split(&specs, BufferUsage::Any)?;
                if !planning {
                    buffer.clear(0)?;
                }
                let mut t = t.into_iter();
                let (Some(k), Some(v)) = (t.next(), t.next()) else {
                    return Err(Error::InvalidLayout("KV cache allocation".into()));
                };
                layers.push((k, v));
                buffers.push(buffer as Arc<dyn Buffer>);
                continue;
            }
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
            n_slots_swa,
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

    /// Slots (positions) it holds: the context, rounded up to [`KV_PAD`].
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// Slots of each sliding-window layer's ring (the last positions it
    /// holds; [`KvCache::n_slots`] when they are full-size).
    pub fn n_slots_swa(&self) -> usize {
        self.n_slots_swa
    }

    /// Whether the sliding-window rings are shorter than the context, so
    /// that they wrap around.
    pub fn swa_ring(&self) -> bool {
        self.n_slots_swa < self.n_slots
    }

    /// Bytes it occupies.
    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.size()).sum()
    }

    /// For a meta buffer type named `name`: the bytes each of its devices
    /// holds of the cache.
    pub fn bytes_per_part(&self, name: &str) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for b in self
            .buffers
            .iter()
            .filter(|b| b.buffer_type().name() == name)
        {
            let Some(m) = b.as_any().downcast_ref::<tessera_meta::MetaBuffer>() else {
                continue;
            };
            let per = m.bytes_per_device();
            out.resize(out.len().max(per.len()), 0);
            for (o, p) in out.iter_mut().zip(per) {
                *o += p;
            }
        }
        out
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
