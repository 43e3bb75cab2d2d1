//! A model and a running sequence: [`Model`] holds the file, its
//! hyperparameters and the weights on their devices; [`Session`] holds a KV
//! cache and a scheduler over the caller's streams, and turns tokens into
//! logits — a prompt in batches, then one token at a time, reusing the
//! built graph (and the scheduler's plan) from step to step.

use std::sync::Arc;

use tessera::{BufferType, DType, Error, Result, Scheduler, SchedulerOptions, Stream};
use tessera_gguf::GgufFile;

use crate::decoder::{self, DecoderGraph, Shape};
use crate::kv_cache::{KV_PAD, KvCache};
use crate::params::Params;
use crate::weights::{Progress, WeightPlacement, Weights};

/// A loaded model.
#[derive(Debug)]
pub struct Model {
    params: Params,
    file: GgufFile,
    weights: Weights,
    n_vocab: usize,
}

impl Model {
    /// Read the hyperparameters of `file`, bind its weights where `place`
    /// says (zero copy on host buffer types) and check every tensor the
    /// architecture needs is there with the right shape.
    pub fn load(file: GgufFile, place: &dyn WeightPlacement, progress: Progress) -> Result<Model> {
        let params = Params::from_gguf(&file)?;
        let weights = Weights::load(&file, place, progress)?;
        decoder::check_weights(&params, &file, &weights)?;
        let n_vocab = weights.get(&file, "token_embd.weight")?.layout().ne[1];
        Ok(Model {
            params,
            file,
            weights,
            n_vocab,
        })
    }

    /// Hyperparameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Rows of the embedding (tokens the model knows).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The buffer type holding layer `il`'s weights (its cache goes there).
    pub fn layer_buffer_type(&self, il: usize) -> Result<Arc<dyn BufferType>> {
        self.weights
            .home_buffer_type(&self.file, &format!("blk.{il}.attn_k.weight"))
    }
}

/// Settings of a [`Session`].
#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    /// Positions the cache holds (prompt and generation together).
    pub n_ctx: usize,
    /// Cache element type (F16 or F32).
    pub kv_type: DType,
    /// Most tokens per graph when processing a prompt.
    pub n_batch: usize,
    /// Give sliding-window layers full-size caches instead of rings of
    /// `window + n_batch` slots (llama.cpp's `--swa-full`: more memory,
    /// but [`Session::truncate`] can always go back).
    pub swa_full: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 4096,
            kv_type: DType::F16,
            n_batch: 512,
            swa_full: false,
        }
    }
}

/// Graphs kept for reuse (prompt batch, decoding step, ...).
const GRAPH_CACHE: usize = 4;

/// One sequence being evaluated.
#[derive(Debug)]
pub struct Session {
    model: Arc<Model>,
    sched: Scheduler,
    cache: KvCache,
    options: SessionOptions,
    n_past: usize,
    graphs: Vec<DecoderGraph>,
}

impl Session {
    /// A session running on `streams` (priority order, the last one the
    /// fallback that runs every op, normally the CPU).
    pub fn new(
        model: Arc<Model>,
        streams: Vec<Arc<dyn Stream>>,
        options: SessionOptions,
    ) -> Result<Session> {
        let p = model.params();
        if options.n_ctx == 0 || options.n_ctx > p.n_ctx_train.max(KV_PAD) {
            return Err(Error::InvalidLayout(format!(
                "context of {} positions: the model was trained for {} (give 1..={})",
                options.n_ctx,
                p.n_ctx_train,
                p.n_ctx_train.max(KV_PAD)
            )));
        }
        if options.n_batch == 0 {
            return Err(Error::InvalidLayout("n_batch must be at least 1".into()));
        }
        let mut bufts = Vec::with_capacity(p.n_layer);
        for il in 0..p.n_layer {
            bufts.push(model.layer_buffer_type(il)?);
        }
        let cache = KvCache::new(p, &options, &|il| bufts[il].clone())?;
        let sched = Scheduler::new(streams, SchedulerOptions::default())?;
        Ok(Session {
            model,
            sched,
            cache,
            options,
            n_past: 0,
            graphs: Vec::new(),
        })
    }

    /// Positions evaluated so far.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// The scheduler, mutable (to observe nodes with
    /// [`Scheduler::set_eval_callback`]).
    pub fn scheduler_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// The scheduler (to see the plan or its buffer sizes).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The settings.
    pub fn options(&self) -> SessionOptions {
        self.options
    }

    /// Forget the sequence (the cache is overwritten from position 0).
    pub fn clear(&mut self) {
        self.n_past = 0;
    }

    /// Keep the first `n` positions of the sequence and forget the rest
    /// (llama.cpp's `seq_rm` from `n`): the next tokens go to position `n`.
    /// Returns the positions kept: `n` (or as many as were held), or 0 when
    /// a sliding-window ring no longer holds the `window` positions before
    /// `n` (it has been overwritten by the ones after, more than
    /// `ring - window` of them: the whole sequence must then be evaluated
    /// again, as llama.cpp does; `SessionOptions::swa_full` avoids it).
    pub fn truncate(&mut self, n: usize) -> usize {
        let n = self.n_past.min(n);
        let p = self.model.params();
        if self.cache.swa_ring() && self.n_past - n + p.sliding_window > self.cache.n_slots_swa() {
            self.n_past = 0;
        } else {
            self.n_past = n;
        }
        self.n_past
    }

    /// Evaluate `tokens` after the ones before; the logits of the last one
    /// (`n_vocab` values).
    pub fn decode(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let mut last = Vec::new();
        for chunk in tokens.chunks(self.options.n_batch) {
            last = self.run(chunk, false)?;
        }
        if tokens.is_empty() {
            return Err(Error::InvalidLayout("decode: no tokens".into()));
        }
        Ok(last)
    }

    /// Evaluate `tokens` after the ones before; the logits of every token
    /// (`tokens.len() * n_vocab` values, token by token).
    pub fn decode_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        for chunk in tokens.chunks(self.options.n_batch) {
            out.extend(self.run(chunk, true)?);
        }
        Ok(out)
    }

    fn run(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        let t = tokens.len();
        let end = self.n_past + t;
        if end > self.cache.n_slots().min(self.options.n_ctx) {
            return Err(Error::OutOfBounds(format!(
                "{} tokens after {} do not fit the context of {} positions",
                t, self.n_past, self.options.n_ctx
            )));
        }
        let n_vocab = self.model.n_vocab();
        if let Some(bad) = tokens.iter().find(|&&id| id as usize >= n_vocab) {
            return Err(Error::OutOfBounds(format!(
                "token id {bad} is not in the vocabulary of {n_vocab}"
            )));
        }
        let n_kv = end.next_multiple_of(KV_PAD).min(self.cache.n_slots());
        let shape = Shape {
            n_tokens: t,
            n_kv,
            all_logits,
        };
        let gi = self.graph_for(shape)?;
        let dg = &self.graphs[gi];
        let g = &dg.graph;
        let mut placement = dg.placement()?;
        self.sched.alloc_graph(g, &mut placement)?;

        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        let pos: Vec<i32> = (self.n_past..end).map(|x| x as i32).collect();
        let slots: Vec<i64> = (self.n_past..end).map(|x| x as i64).collect();
        placement.tensor(g, dg.tokens)?.write_slice(&ids)?;
        placement.tensor(g, dg.positions)?.write_slice(&pos)?;
        placement.tensor(g, dg.slots)?.write_slice(&slots)?;
        let p = self.model.params();
        placement
            .tensor(g, dg.mask)?
            .write_f32(&mask(self.n_past, t, n_kv, 0))?;
        if let Some(m) = dg.mask_swa {
            let ring = Ring {
                slots: self.cache.n_slots_swa(),
                n_kv: n_kv.min(self.cache.n_slots_swa()),
                window: p.sliding_window,
            };
            placement
                .tensor(g, m)?
                .write_f32(&ring.mask(self.n_past, t))?;
            if let Some(rs) = dg.slots_swa {
                let slots: Vec<i64> = (self.n_past..end)
                    .map(|x| (x % ring.slots) as i64)
                    .collect();
                placement.tensor(g, rs)?.write_slice(&slots)?;
            }
        }
        if let Some(o) = dg.out_ids {
            placement.tensor(g, o)?.write_slice(&[t as i32 - 1])?;
        }
        self.sched.compute(g, &placement)?;
        let logits = placement.tensor(g, dg.logits)?.read_f32()?;
        self.n_past = end;
        Ok(logits)
    }
}

impl Session {
    /// The index of the graph for `shape` in the graph cache, built if needed.
    fn graph_for(&mut self, shape: Shape) -> Result<usize> {
        if let Some(i) = self.graphs.iter().position(|g| g.shape == shape) {
            return Ok(i);
        }
        let m = &self.model;
        let g = decoder::build(m.params(), m.file(), m.weights(), &self.cache, shape)?;
        if self.graphs.len() == GRAPH_CACHE {
            self.graphs.remove(0);
        }
        self.graphs.push(g);
        Ok(self.graphs.len() - 1)
    }

    /// Allocate, up front, the compute buffers of the largest graph this
    /// session runs ([`crate::fit::worst_shape`]: a full batch attending to
    /// every slot), as llama.cpp reserves its worst case; returns the bytes
    /// per device ([`crate::fit::measure`] predicts exactly these).
    pub fn reserve(&mut self) -> Result<Vec<usize>> {
        let shape = crate::fit::worst_shape(&self.options, self.cache.n_slots());
        let gi = self.graph_for(shape)?;
        let dg = &self.graphs[gi];
        let mut placement = dg.placement()?;
        self.sched.reserve(&dg.graph, &placement)?;
        // A meta device also plans its devices' own memory for the graph
        // (what its first compute would do), so that is taken up front too.
        if self
            .sched
            .streams()
            .iter()
            .any(|s| s.as_any().is::<tessera_meta::MetaStream>())
        {
            self.sched.alloc_graph(&dg.graph, &mut placement)?;
            crate::fit_split::prepare_meta(&self.sched)?;
        }
        (0..self.sched.devices().len())
            .map(|i| self.sched.buffer_size(i))
            .collect()
    }

    /// Plan, without computing, the graph of a batch of `n_tokens` from
    /// position 0 (only the last token's logits), and return it with the
    /// scheduler, to describe the plan ([`Scheduler::describe`],
    /// [`Scheduler::to_dot`], [`Scheduler::buffer_size`]).
    pub fn plan(&mut self, n_tokens: usize) -> Result<(&Scheduler, &DecoderGraph)> {
        if n_tokens == 0 || n_tokens > self.cache.n_slots() {
            return Err(Error::OutOfBounds(format!(
                "a batch of {n_tokens} tokens in a context of {} positions",
                self.cache.n_slots()
            )));
        }
        let shape = Shape {
            n_tokens,
            n_kv: n_tokens.next_multiple_of(KV_PAD).min(self.cache.n_slots()),
            all_logits: false,
        };
        let gi = self.graph_for(shape)?;
        let dg = &self.graphs[gi];
        let mut placement = dg.placement()?;
        self.sched.alloc_graph(&dg.graph, &mut placement)?;
        Ok((&self.sched, dg))
    }
}

/// A sliding-window layer's cache: a ring of `slots` slots (position `q` in
/// slot `q % slots`), of which the first `n_kv` are attended.
#[derive(Clone, Copy, Debug)]
struct Ring {
    slots: usize,
    n_kv: usize,
    window: usize,
}

impl Ring {
    /// The mask of a batch of `n_tokens` after `n_past`, once written: slot
    /// `j` holds the last position `q < n_past + n_tokens` with `q % slots
    /// == j` (if any), which row `i` (position `p = n_past + i`) sees when
    /// `q <= p` and `p - q < window`. (When the batch overwrote a position
    /// a row would see, `q > p` hides the slot, and `slots >= window +
    /// n_tokens` makes sure the lost position was outside every window.
    /// After [`Session::truncate`], slots holding positions of the dropped
    /// tail read as one lap earlier, outside every window, by the check
    /// there.) Without wrap-around it is [`mask`] with the window.
    fn mask(&self, n_past: usize, n_tokens: usize) -> Vec<f32> {
        let end = n_past + n_tokens;
        let mut m = vec![f32::NEG_INFINITY; self.n_kv * n_tokens];
        for j in 0..self.n_kv.min(end) {
            let q = j + (end - 1 - j) / self.slots * self.slots;
            for i in 0..n_tokens {
                let p = n_past + i;
                if q <= p && p - q < self.window {
                    m[i * self.n_kv + j] = 0.0;
                }
            }
        }
        m
    }
}

/// The attention mask of a batch: row `i` (the token at `n_past + i`) sees
/// slots `j <= n_past + i`, and with a sliding `window > 0` only those with
/// `n_past + i - j < window` (llama.cpp's standard sliding window).
fn mask(n_past: usize, n_tokens: usize, n_kv: usize, window: usize) -> Vec<f32> {
    let mut m = vec![f32::NEG_INFINITY; n_kv * n_tokens];
    for i in 0..n_tokens {
        let p = n_past + i;
        let lo = if window > 0 {
            (p + 1).saturating_sub(window)
        } else {
            0
        };
        for j in lo..=p.min(n_kv.saturating_sub(1)) {
            m[i * n_kv + j] = 0.0;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[test]
    fn ring_masks_equal_plain_ones_until_they_wrap_then_follow_positions() {
        use super::Ring;
        let r = Ring {
            slots: 8,
            n_kv: 8,
            window: 3,
        };
        for (n_past, t) in [(0, 5), (2, 3), (3, 5)] {
            assert_eq!(r.mask(n_past, t), mask(n_past, t, 8, 3), "{n_past} {t}");
        }
        // After 10 positions, slot 1 holds position 9, slot 2 position 10
        // (being written), slot 0 position 8, slot 7 position 7.
        let m = r.mask(9, 2);
        let (z, n) = (0.0, f32::NEG_INFINITY);
        assert_eq!(&m[..8], &[z, z, n, n, n, n, n, z]);
        assert_eq!(&m[8..], &[z, z, z, n, n, n, n, n]);
    }

    #[test]
    fn masks_are_causal_and_slide() {
        let m = mask(2, 2, 4, 0);
        let z = 0.0;
        let n = f32::NEG_INFINITY;
        assert_eq!(m, vec![z, z, z, n, z, z, z, z]);
        // window 2: position 2 sees 1..=2, position 3 sees 2..=3.
        let m = mask(2, 2, 4, 2);
        assert_eq!(m, vec![n, z, z, n, n, n, z, z]);
    }

    #[test]
    fn layer_names() {
        assert_eq!(crate::weights::layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(crate::weights::layer_of("output.weight"), None);
    }
}
