//! The decoder graph of one batch, for every architecture of
//! [`Arch`]: llama.cpp's graphs (`llm_build_llama`, `_qwen2`, `_qwen3`,
//! `_gemma3_iswa`, `_qwen3moe`) op for op, with the KV cache written by SET_ROWS and read
//! by FLASH_ATTN_EXT through views.
//!
//! A graph depends only on the batch size, the number of cache slots
//! attended and whether every token's logits are wanted: the positions,
//! cache slots and masks are input tensors, so one graph serves every
//! decoding step (the scheduler then reuses its plan).

use tessera::{
    DType, GluOp, Graph, Layout, Placement, Result, RopeMode, RopeParams, SortOrder, Tensor,
    TensorId,
};
use tessera_gguf::GgufFile;

use crate::kv_cache::KvCache;
use crate::params::{Arch, Moe, Params};
use crate::weights::Weights;

/// What a graph is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Cache slots attended (a multiple of the cache's padding).
    pub n_kv: usize,
    /// Logits for every token (else only for the last).
    pub all_logits: bool,
}

/// A built graph and its input ids.
#[derive(Debug)]
pub struct DecoderGraph {
    /// The graph.
    pub graph: Graph,
    /// What it was built for.
    pub shape: Shape,
    /// I32 token ids `[n_tokens]`.
    pub tokens: TensorId,
    /// I32 positions `[n_tokens]`.
    pub positions: TensorId,
    /// I64 cache slots written `[n_tokens]`.
    pub slots: TensorId,
    /// F16 causal mask `[n_kv, n_tokens]`.
    pub mask: TensorId,
    /// F16 sliding-window mask `[n_kv_swa, n_tokens]`, for architectures
    /// with one (`n_kv_swa`: `n_kv`, at most the ring's slots).
    pub mask_swa: Option<TensorId>,
    /// I64 slots of the sliding-window rings written `[n_tokens]`, when
    /// the rings are shorter than the context.
    pub slots_swa: Option<TensorId>,
    /// I32 rows whose logits are kept (`[1]`, the last token), when not all.
    pub out_ids: Option<TensorId>,
    /// F32 logits `[n_vocab, n_out]`.
    pub logits: TensorId,
    /// Leaves bound to existing memory: weights and cache.
    binds: Vec<(TensorId, Tensor)>,
}

impl DecoderGraph {
    /// A placement with the weights and the cache bound (the rest is left to
    /// the scheduler's `alloc_graph`).
    pub fn placement(&self) -> Result<Placement> {
        let mut p = Placement::new(&self.graph);
        for (id, t) in &self.binds {
            p.bind(&self.graph, *id, t)?;
        }
        Ok(p)
    }
}

/// Builds graphs: holds what every layer needs.
struct Builder<'a> {
    g: Graph,
    file: &'a GgufFile,
    weights: &'a Weights,
    binds: Vec<(TensorId, Tensor)>,
}

impl Builder<'_> {
    /// The leaf for weight `name`, bound to its tensor.
    fn w(&mut self, name: &str) -> Result<TensorId> {
        let t = self.weights.get(self.file, name)?.clone();
        self.leaf(name, t)
    }

    /// The leaf for weight `name` if the file has it.
    fn w_opt(&mut self, name: &str) -> Result<Option<TensorId>> {
        match self.weights.find(name) {
            Some(t) => self.leaf(name, t.clone()).map(Some),
            None => Ok(None),
        }
    }

    fn leaf(&mut self, name: &str, t: Tensor) -> Result<TensorId> {
        let id = self.g.new_tensor(t.dtype(), &t.layout().ne)?;
        self.g.set_name(id, name)?;
        self.binds.push((id, t));
        Ok(id)
    }

    /// `rms_norm(x) * w`.
    fn norm(&mut self, x: TensorId, w: &str, eps: f32) -> Result<TensorId> {
        let w = self.w(w)?;
        let n = self.g.rms_norm(x, eps)?;
        self.g.mul(n, w)
    }

    /// `W x (+ b)`.
    fn linear(&mut self, w: &str, x: TensorId) -> Result<TensorId> {
        let wt = self.w(w)?;
        let y = self.g.mul_mat(wt, x)?;
        let bias = w.strip_suffix(".weight").map(|s| format!("{s}.bias"));
        match bias {
            Some(b) => match self.w_opt(&b)? {
                Some(b) => self.g.add(y, b),
                None => Ok(y),
            },
            None => Ok(y),
        }
    }
}

impl Builder<'_> {
    /// llama.cpp's `build_moe_ffn` with softmax gating, SiLU and a gate
    /// (`LLM_FFN_SILU`), no biases: router logits `ffn_gate_inp x`, softmax,
    /// the top `n_used` experts (the first `n_used` of a descending ARGSORT,
    /// a view as `ggml_argsort_top_k`), their probabilities gathered
    /// (GET_ROWS), renormalised (SUM_ROWS, CLAMP, DIV) and scaled where the
    /// model says so, the experts' gate and up products (MUL_MAT_ID), SwiGLU,
    /// the down product, the weighting (MUL) and the sum over the experts
    /// used (views and ADDs, in llama.cpp's order).
    fn moe_ffn(&mut self, il: usize, cur: TensorId, m: Moe, t: usize) -> Result<TensorId> {
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let (n_exp, n_used) = (m.n_expert, m.n_expert_used);
        let e = self.g.layout(cur)?.ne[0];
        let router = self.w(&n("ffn_gate_inp"))?;
        let logits = self.g.mul_mat(router, cur)?;
        let probs = self.g.soft_max(logits)?;
        let order = self.g.argsort(probs, SortOrder::Desc)?;
        let selected = self.g.view_2d(order, n_used, t, n_exp * 4, 0)?;
        let probs3 = self.g.reshape(probs, &[1, n_exp, t])?;
        let mut weights = self.g.get_rows(probs3, selected)?;
        if m.norm_weights {
            let w2 = self.g.reshape(weights, &[n_used, t])?;
            let sum = self.g.sum_rows(w2)?;
            let sum = self.g.clamp(sum, 6.103_515_6e-5, f32::INFINITY)?;
            let w2 = self.g.div(w2, sum)?;
            weights = self.g.reshape(w2, &[1, n_used, t])?;
        }
        if m.weights_scale != 0.0 && m.weights_scale != 1.0 {
            weights = self.g.scale(weights, m.weights_scale)?;
        }
        let x = self.g.reshape(cur, &[e, 1, t])?;
        let up_w = self.w(&n("ffn_up_exps"))?;
        let up = self.g.mul_mat_id(up_w, x, selected)?;
        let gate_w = self.w(&n("ffn_gate_exps"))?;
        let gate = self.g.mul_mat_id(gate_w, x, selected)?;
        let act = self.g.glu_split(gate, up, GluOp::SwiGlu)?;
        let down_w = self.w(&n("ffn_down_exps"))?;
        let experts = self.g.mul_mat_id(down_w, act, selected)?;
        let experts = self.g.mul(experts, weights)?;
        let l = self.g.layout(experts)?;
        let mut views = Vec::with_capacity(n_used);
        for i in 0..n_used {
            views.push(self.g.view_2d(experts, e, t, l.nb[2], i * l.nb[1])?);
        }
        let mut out = views[0];
        for &v in &views[1..] {
            out = self.g.add(out, v)?;
        }
        if n_used == 1 {
            out = self.g.cont(out)?;
        }
        Ok(out)
    }
}

/// The checked layout of weight `name`: its dims must be `ne`.
fn check_shape(w: &Weights, file: &GgufFile, name: &str, ne: &[usize]) -> Result<()> {
    let t = w.get(file, name)?;
    let l: &Layout = t.layout();
    let mut want = [1usize; 4];
    want[..ne.len()].copy_from_slice(ne);
    if l.ne != want {
        return Err(tessera::Error::Malformed(format!(
            "tensor '{name}' has shape {:?}, the model's metadata needs {:?}",
            &l.ne, want
        )));
    }
    Ok(())
}

/// Check every weight a model needs is present with the right shape.
pub fn check_weights(p: &Params, file: &GgufFile, w: &Weights) -> Result<()> {
    let (e, hk, hv) = (p.n_embd, p.head_dim_k, p.head_dim_v);
    let n_vocab = w.get(file, "token_embd.weight")?.layout().ne[1];
    check_shape(w, file, "token_embd.weight", &[e, n_vocab])?;
    check_shape(w, file, "output_norm.weight", &[e])?;
    if w.find("output.weight").is_some() {
        check_shape(w, file, "output.weight", &[e, n_vocab])?;
    }
    for il in 0..p.n_layer {
        let b = |s: &str| format!("blk.{il}.{s}.weight");
        check_shape(w, file, &b("attn_norm"), &[e])?;
        check_shape(w, file, &b("attn_q"), &[e, hk * p.n_head])?;
        check_shape(w, file, &b("attn_k"), &[e, hk * p.n_head_kv])?;
        check_shape(w, file, &b("attn_v"), &[e, hv * p.n_head_kv])?;
        check_shape(w, file, &b("attn_output"), &[hv * p.n_head, e])?;
        check_shape(w, file, &b("ffn_norm"), &[e])?;
        if let Some(m) = p.moe {
            let (x, f) = (m.n_expert, m.n_ff_exp);
            check_shape(w, file, &b("ffn_gate_inp"), &[e, x])?;
            check_shape(w, file, &b("ffn_gate_exps"), &[e, f, x])?;
            check_shape(w, file, &b("ffn_up_exps"), &[e, f, x])?;
            check_shape(w, file, &b("ffn_down_exps"), &[f, e, x])?;
        } else {
            check_shape(w, file, &b("ffn_gate"), &[e, p.n_ff])?;
            check_shape(w, file, &b("ffn_up"), &[e, p.n_ff])?;
            check_shape(w, file, &b("ffn_down"), &[p.n_ff, e])?;
        }
        if p.arch.has_qk_norm() {
            check_shape(w, file, &b("attn_q_norm"), &[hk])?;
            check_shape(w, file, &b("attn_k_norm"), &[hk])?;
        }
        if p.arch == Arch::Gemma3 {
            check_shape(w, file, &b("post_attention_norm"), &[e])?;
            check_shape(w, file, &b("post_ffw_norm"), &[e])?;
        }
    }
    Ok(())
}

/// Build the graph of one batch.
pub fn build(
    p: &Params,
    file: &GgufFile,
    weights: &Weights,
    cache: &KvCache,
    shape: Shape,
) -> Result<DecoderGraph> {
    let mut b = Builder {
        g: Graph::new(),
        file,
        weights,
        binds: Vec::new(),
    };
    let t = shape.n_tokens;
    let tokens = b.g.input("tokens", DType::I32, &[t])?;
    let positions = b.g.input("positions", DType::I32, &[t])?;
    let slots = b.g.input("kv_slots", DType::I64, &[t])?;
    let mask = b.g.input("kq_mask", DType::F16, &[shape.n_kv, t])?;
    // Sliding-window layers attend to the first `n_kv_swa` slots of their
    // rings (all of them once the sequence is longer), written at
    // `kv_slots_swa` (positions modulo the ring).
    let n_kv_swa = shape.n_kv.min(cache.n_slots_swa());
    let mask_swa = if p.sliding_window > 0 {
        Some(b.g.input("kq_mask_swa", DType::F16, &[n_kv_swa, t])?)
    } else {
        None
    };
    let slots_swa = if p.sliding_window > 0 && cache.swa_ring() {
        Some(b.g.input("kv_slots_swa", DType::I64, &[t])?)
    } else {
        None
    };
    let out_ids = if shape.all_logits {
        None
    } else {
        Some(b.g.input("out_ids", DType::I32, &[1])?)
    };
    let rope_mode = match p.arch {
        Arch::Llama => RopeMode::Normal,
        _ => RopeMode::Neox,
    };
    let rope_freqs = b.w_opt("rope_freqs.weight")?;

    let embd = b.w("token_embd.weight")?;
    let mut x = b.g.get_rows(embd, tokens)?;
    if p.arch == Arch::Gemma3 {
        x = b.g.scale(x, (p.n_embd as f32).sqrt())?;
    }
    let (hk, hv) = (p.head_dim_k, p.head_dim_v);
    for il in 0..p.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let swa = p.is_swa(il);
        let cur = b.norm(x, &n("attn_norm"), p.eps)?;
        let q = b.linear(&n("attn_q"), cur)?;
        let k = b.linear(&n("attn_k"), cur)?;
        let v = b.linear(&n("attn_v"), cur)?;
        let mut q = b.g.reshape(q, &[hk, p.n_head, t])?;
        let mut k = b.g.reshape(k, &[hk, p.n_head_kv, t])?;
        if p.arch.has_qk_norm() {
            q = b.norm(q, &n("attn_q_norm"), p.eps)?;
            k = b.norm(k, &n("attn_k_norm"), p.eps)?;
        }
        let mut rp = RopeParams::new(
            p.n_rot,
            rope_mode,
            if swa { p.rope_base_swa } else { p.rope_base },
        );
        rp.freq_scale = if swa { 1.0 } else { p.rope_scale };
        rp.n_ctx_orig = p.n_ctx_train;
        let ff = if swa { None } else { rope_freqs };
        q = b.g.rope(q, positions, ff, rp)?;
        k = b.g.rope(k, positions, ff, rp)?;

        // Write this batch's keys and values into the cache.
        let (ck, cv) = cache.layer(il)?;
        let ck_id = b.leaf(&format!("cache_k.{il}"), ck.clone())?;
        let cv_id = b.leaf(&format!("cache_v.{il}"), cv.clone())?;
        let k2 = b.g.reshape(k, &[hk * p.n_head_kv, t])?;
        let v2 = b.g.reshape(v, &[hv * p.n_head_kv, t])?;
        let (at, n_kv) = match slots_swa {
            Some(ring) if swa => (ring, n_kv_swa),
            _ => (slots, shape.n_kv),
        };
        let ck_w = b.g.set_rows(ck_id, k2, at)?;
        let cv_w = b.g.set_rows(cv_id, v2, at)?;
        // The two ROPEs and the cache writes next to each other: a GPU
        // records them as one dispatch (tessera-wgpu's fuse_rope).
        let kq_scale = if p.arch == Arch::Gemma3 {
            // llama.cpp scales Q before attention for Gemma 3.
            q = b.g.scale(q, 1.0 / (hk as f32).sqrt())?;
            1.0
        } else {
            1.0 / (hk as f32).sqrt()
        };
        let (rk, rv) = (cache.dtype().row_size(hk)?, cache.dtype().row_size(hv)?);
        let kview = b.g.view(
            ck_w,
            [hk, n_kv, p.n_head_kv, 1],
            [ck.layout().nb[1], rk, ck.layout().nb[1] * n_kv],
            0,
        )?;
        let vview = b.g.view(
            cv_w,
            [hv, n_kv, p.n_head_kv, 1],
            [cv.layout().nb[1], rv, cv.layout().nb[1] * n_kv],
            0,
        )?;
        let qp = b.g.permute(q, [0, 2, 1, 3])?;
        let m = if swa { mask_swa.unwrap_or(mask) } else { mask };
        let att =
            b.g.flash_attn_ext(qp, kview, vview, Some(m), kq_scale, 0.0, 0.0)?;
        let att = b.g.reshape(att, &[hv * p.n_head, t])?;
        let mut o = b.linear(&n("attn_output"), att)?;
        if p.arch == Arch::Gemma3 {
            o = b.norm(o, &n("post_attention_norm"), p.eps)?;
        }
        let h = b.g.add(o, x)?;

        let cur = b.norm(h, &n("ffn_norm"), p.eps)?;
        if let Some(m) = p.moe {
            let out = b.moe_ffn(il, cur, m, t)?;
            x = b.g.add(out, h)?;
            continue;
        }
        let gate = b.linear(&n("ffn_gate"), cur)?;
        let up = b.linear(&n("ffn_up"), cur)?;
        let act = match p.arch {
            Arch::Gemma3 => b.g.glu_split(gate, up, GluOp::GeGlu)?,
            _ => b.g.glu_split(gate, up, GluOp::SwiGlu)?,
        };
        let mut down = b.linear(&n("ffn_down"), act)?;
        if p.arch == Arch::Gemma3 {
            down = b.norm(down, &n("post_ffw_norm"), p.eps)?;
        }
        x = b.g.add(down, h)?;
    }
    if let Some(ids) = out_ids {
        x = b.g.get_rows(x, ids)?;
    }
    let x = b.norm(x, "output_norm.weight", p.eps)?;
    let out_w = if b.weights.find("output.weight").is_some() {
        b.w("output.weight")?
    } else {
        embd
    };
    let logits = b.g.mul_mat(out_w, x)?;
    b.g.set_name(logits, "logits")?;
    b.g.set_output(logits)?;
    Ok(DecoderGraph {
        graph: b.g,
        shape,
        tokens,
        positions,
        slots,
        mask,
        mask_swa,
        slots_swa,
        out_ids,
        logits,
        binds: b.binds,
    })
}
