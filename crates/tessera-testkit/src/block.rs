//! A small transformer graph with weights, for multi-device tests, the
//! scheduler's benchmark and `tessera plan`: `n_layers` blocks of
//! RMS-norm, single-head attention (K·Q, softmax, V), output projection,
//! residual, RMS-norm, SwiGLU feed-forward, residual.
//!
//! The weights are leaves the caller binds (usually in a
//! [`tessera::BufferUsage::Weights`] buffer of one device); `x` is the graph
//! input. Values are deterministic ([`Block::weight_values`]).

use tessera::alloc::{TensorSet, alloc_tensors};
use tessera::{BufferUsage, DType, Device, Graph, Placement, Result, TensorId};

use crate::rng::Rng;

/// Shape of a [`Block`].
#[derive(Clone, Copy, Debug)]
pub struct BlockShape {
    /// Embedding width.
    pub n_embd: usize,
    /// Feed-forward width.
    pub n_ff: usize,
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Blocks stacked.
    pub n_layers: usize,
    /// Type of the projection weights (norm weights are F32).
    pub wtype: DType,
}

/// The graph and the ids that matter.
#[derive(Debug)]
pub struct Block {
    /// The graph.
    pub graph: Graph,
    /// The input `[n_embd, n_tokens]`.
    pub x: TensorId,
    /// Every weight leaf, in creation order.
    pub weights: Vec<TensorId>,
    /// Per layer: the node after attention (before the feed-forward).
    pub attn_out: Vec<TensorId>,
    /// The output `[n_embd, n_tokens]`.
    pub out: TensorId,
}

impl Block {
    /// Build the graph.
    pub fn build(s: BlockShape) -> Result<Block> {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[s.n_embd, s.n_tokens])?;
        let mut weights = Vec::new();
        let mut attn_out = Vec::new();
        let mut w = |g: &mut Graph, name: String, t: DType, ne: &[usize]| -> Result<TensorId> {
            let id = g.new_tensor(t, ne)?;
            g.set_name(id, &name)?;
            weights.push(id);
            Ok(id)
        };
        let mut cur = x;
        for l in 0..s.n_layers {
            let (e, f) = (s.n_embd, s.n_ff);
            let an = w(&mut g, format!("blk.{l}.attn_norm"), DType::F32, &[e])?;
            let wq = w(&mut g, format!("blk.{l}.attn_q"), s.wtype, &[e, e])?;
            let wk = w(&mut g, format!("blk.{l}.attn_k"), s.wtype, &[e, e])?;
            let wv = w(&mut g, format!("blk.{l}.attn_v"), s.wtype, &[e, e])?;
            let wo = w(&mut g, format!("blk.{l}.attn_output"), s.wtype, &[e, e])?;
            let fnorm = w(&mut g, format!("blk.{l}.ffn_norm"), DType::F32, &[e])?;
            let wg = w(&mut g, format!("blk.{l}.ffn_gate"), s.wtype, &[e, f])?;
            let wu = w(&mut g, format!("blk.{l}.ffn_up"), s.wtype, &[e, f])?;
            let wd = w(&mut g, format!("blk.{l}.ffn_down"), s.wtype, &[f, e])?;

            let h = g.rms_norm(cur, 1e-5)?;
            let h = g.mul(h, an)?;
            let q = g.mul_mat(wq, h)?;
            let k = g.mul_mat(wk, h)?;
            let v = g.mul_mat(wv, h)?;
            let kq = g.mul_mat(k, q)?;
            let kq = g.scale(kq, 1.0 / (s.n_embd as f32).sqrt())?;
            let p = g.soft_max(kq)?;
            let vt = g.transpose(v)?;
            let vt = g.cont(vt)?;
            let a = g.mul_mat(vt, p)?;
            let o = g.mul_mat(wo, a)?;
            let x2 = g.add(cur, o)?;
            g.set_name(x2, &format!("blk.{l}.attn_out"))?;
            attn_out.push(x2);
            let h2 = g.rms_norm(x2, 1e-5)?;
            let h2 = g.mul(h2, fnorm)?;
            let gate = g.mul_mat(wg, h2)?;
            let up = g.mul_mat(wu, h2)?;
            let act = g.swiglu_split(gate, up)?;
            let down = g.mul_mat(wd, act)?;
            cur = g.add(x2, down)?;
            g.set_name(cur, &format!("blk.{l}.out"))?;
        }
        g.set_output(cur)?;
        Ok(Block {
            graph: g,
            x,
            weights,
            attn_out,
            out: cur,
        })
    }

    /// Deterministic values for weight `id` (norm weights near 1, the
    /// rest small), as f32 to be converted to the weight's type.
    pub fn weight_values(&self, id: TensorId) -> Result<Vec<f32>> {
        let n = self.graph.node(id)?.layout.checked_nelements()?;
        let mut rng = Rng::new(0x5eed ^ id.index() as u64);
        let norm = self.graph.node(id)?.layout.ne[1] == 1;
        Ok((0..n)
            .map(|_| {
                let u = rng.uniform_f32(-1.0, 1.0);
                if norm { 1.0 + 0.1 * u } else { 0.2 * u }
            })
            .collect())
    }

    /// Allocate every weight in one [`BufferUsage::Weights`] buffer of
    /// `device`, write its values ([`Block::weight_values`]) and bind it in
    /// `placement`. Keep the returned set alive as long as the placement.
    pub fn bind_weights(
        &self,
        device: &dyn Device,
        placement: &mut Placement,
    ) -> Result<TensorSet> {
        let layouts = self
            .weights
            .iter()
            .map(|&w| self.graph.node(w).map(|n| n.layout))
            .collect::<Result<Vec<_>>>()?;
        let set = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Weights)?;
        for (&w, t) in self.weights.iter().zip(&set.tensors) {
            placement.bind(&self.graph, w, t)?;
            t.write_f32(&self.weight_values(w)?)?;
        }
        Ok(set)
    }

    /// Deterministic input values, varying with `step`.
    pub fn input_values(&self, step: u64) -> Result<Vec<f32>> {
        let n = self.graph.node(self.x)?.layout.checked_nelements()?;
        let mut rng = Rng::new(0x1234 + step);
        Ok((0..n).map(|_| rng.uniform_f32(-1.0, 1.0)).collect())
    }
}
