//! Runs of graph nodes the encoder records as one dispatch.
//!
//! Why: a decoding step is hundreds of small dispatches, and on a real GPU
//! each costs host time (wgpu's recording, the driver) and a barrier. Every
//! transformer block normalizes three to six times, each an RMS_NORM and a
//! MUL by the norm's weights (109 pairs a token in Gemma 3 270M). Here the
//! MUL is applied as the norm writes its result: one dispatch, and the
//! norm's own result is never written.
//!
//! The fused result is bit for bit the two nodes' (the norm's f32 value
//! times the weight, as the MUL would compute it). Fused only where nothing
//! can tell: the norm's result has the MUL as its only reader (no other
//! node, view or copy, not a graph output), the MUL is the next node that
//! computes anything (so its memory is not still another live tensor's
//! when written early), its weights are ready when the norm runs, and the
//! MUL's destination does not overlap the norm's input other than exactly
//! in place.
//!
//! Where the norm reads a residual sum (an ADD of two same-shape tensors)
//! computed just before it, the ADD joins: the dispatch stores the sum
//! (the residual stream's later readers need it), then normalizes it and
//! multiplies, under the same conditions for the norm and the MUL, with
//! the weights ready when the ADD runs and neither result overlapping an
//! input other than exactly in place.
//!
//! And where what the ADD adds is itself an RMS_NORM and its MUL, read by
//! nothing but the ADD (Gemma 3's norms after attention and after the
//! feed-forward block, before the residual sum), those join too
//! ([`crate::fuse_sandwich`]): five nodes, one dispatch. Two norm and MUL
//! runs in a row, each of its own tensor (the query and key head norms),
//! are one dispatch as well ([`crate::fuse_pair`]).

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, Operand, operand};
use crate::device::Core;
use crate::encode::rows;
use crate::matvec_q8::Quantized;
use crate::wgsl::Binding;

/// A run of nodes recorded as one dispatch: a residual ADD (if any), the
/// RMS_NORM of its result (or of any input) and the MUL of that by `w`;
/// before the ADD, maybe the norm and MUL of what it adds (`pre`); or,
/// without an ADD, another norm and MUL right after (`pair`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) pre: Option<NormMul>,
    pub(crate) add: Option<TensorId>,
    pub(crate) norm: TensorId,
    pub(crate) mul: TensorId,
    pub(crate) w: TensorId,
    pub(crate) pair: Option<NormMul>,
}

/// An RMS_NORM and its MUL by `w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormMul {
    pub(crate) norm: TensorId,
    pub(crate) mul: TensorId,
    pub(crate) w: TensorId,
}

impl Run {
    /// The nodes after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> crate::compute::Taken {
        match (self.pre, self.add, self.pair) {
            (Some(pre), add, _) => [Some(pre.mul), add, Some(self.norm), Some(self.mul)],
            (None, Some(_), _) => [Some(self.norm), Some(self.mul), None, None],
            (None, None, Some(p)) => [Some(self.mul), Some(p.norm), Some(p.mul), None],
            (None, None, None) => [Some(self.mul), None, None, None],
        }
    }

    /// The run's result (the MUL's).
    pub(crate) fn result(&self) -> TensorId {
        self.mul
    }

    /// What the profile adds to the first node's label.
    pub(crate) fn label(&self) -> &'static str {
        match (self.pre, self.add, self.pair) {
            (Some(_), _, _) => "+MUL+ADD+RMS_NORM+MUL",
            (None, Some(_), _) => "+RMS_NORM+MUL",
            (None, None, Some(_)) => "+MUL (x2)",
            (None, None, None) => "+MUL",
        }
    }

    /// Whether the dispatch can also quantize the run's result (not a
    /// pair's: two results).
    pub(crate) fn quantizes(&self) -> bool {
        self.pair.is_none()
    }
}

/// Longest row a fused norm also quantizes for the integer products:
/// what `rows.wgsl` keeps in registers (256 invocations x `RV` = 16).
pub(crate) const QUANTIZED_ROW: usize = 4096;

env_switch!("TESSERA_WGPU_FUSE");

/// Whether the encoder fuses at all (default; `TESSERA_WGPU_FUSE=0` records
/// every node as its own dispatch, for measuring what fusion gives).
pub(crate) fn enabled() -> bool {
    switch_on(|| true)
}

/// The run that starts at node `id`, if any: see the module docs for the
/// conditions. `counts` are the graph's [`Graph::use_counts`]; `end` the
/// end of the range being encoded.
pub(crate) fn plan(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    if !enabled() {
        return None;
    }
    crate::fuse_sandwich::plan(graph, counts, id, end)
        .or_else(|| add_norm_mul(graph, counts, id, end))
        .or_else(|| crate::fuse_pair::plan(graph, counts, id, end))
        .or_else(|| norm_mul(graph, counts, id, end))
}

/// The MUL that RMS_NORM node `id` can be fused with, and the MUL's other
/// operand (the weights).
pub(crate) fn norm_mul(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    let nodes = graph.nodes();
    let norm = nodes.get(id.index())?;
    if !matches!(norm.op, Op::RmsNorm { .. })
        || norm.flags.contains(Flags::OUTPUT)
        || counts.get(id.index()) != Some(&1)
        || norm.layout.dtype != DType::F32
    {
        return None;
    }
    // The next node that computes something (leaves and views do not).
    let j = next_computing(graph, id, end)?;
    let mul = &nodes[j];
    if mul.op != Op::Mul
        || mul.src(0) != Some(id)
        || mul.layout.ne != norm.layout.ne
        || mul.layout.dtype != DType::F32
    {
        return None;
    }
    let w = mul.src(1)?;
    // The weights' memory is written before the norm runs: a leaf's before
    // the compute, an op's by an earlier node.
    let (root, _) = graph.memory_root(w).ok()?;
    let ready = root.index() < id.index() || nodes.get(root.index())?.is_leaf();
    ready.then(|| Run {
        pre: None,
        pair: None,
        add: None,
        norm: id,
        mul: TensorId::from_index(j as u32),
        w,
    })
}

/// Record `run` as one dispatch; `false` (nothing recorded) where a result
/// overlaps an input other than exactly in place, or an operand has no
/// memory (the nodes are then recorded one by one, which reports it).
/// With `quant`, the dispatch also quantizes the run's result there for
/// the integer products that read it ([`crate::matvec_q8`]).
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
    quant: Option<&Quantized>,
) -> Result<bool> {
    let Op::RmsNorm { eps } = graph.node(run.norm)?.op else {
        return Ok(false);
    };
    let call = match (run.pre, run.add, run.pair) {
        (Some(pre), Some(add), _) => {
            crate::fuse_sandwich::call(core, graph, placement, run, &pre, add)?
        }
        (None, Some(add), _) => add_norm_mul_call(core, graph, placement, run, add)?,
        (None, None, Some(pair)) => crate::fuse_pair::call(core, graph, placement, run, &pair)?,
        (None, None, None) => norm_mul_call(core, graph, placement, run)?,
        (Some(_), None, _) => None,
    };
    let Some((mut call, rows_of)) = call else {
        return Ok(false);
    };
    call.params.fp[0] = eps;
    if let Some(q) = quant {
        q.bind(&mut call, 4, 0)?;
    }
    rows(batch, core, call, &rows_of)?;
    Ok(true)
}

/// The call of RMS_NORM and MUL ([`encode`]) and the layout whose rows
/// it goes over; `None` where they cannot be one dispatch.
fn norm_mul_call(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
) -> Result<Option<(Call, Layout)>> {
    let Some(x) = graph.node(run.norm)?.src(0) else {
        return Ok(None);
    };
    let (mul, w) = (run.mul, run.w);
    let (Some(dst), Some(x), Some(w)) = (
        operand(core, graph, placement, mul)?,
        operand(core, graph, placement, x)?,
        operand(core, graph, placement, w)?,
    ) else {
        return Ok(None);
    };
    if !disjoint_or_in_place(&dst, &x)? {
        return Ok(None);
    }
    let mut call = Call::new(&dst, &[Some(&x), Some(&w), None])?;
    call.params.iu[0] = 6;
    Ok(Some((call, x.layout)))
}

/// For ADD node `id` (same-shape F32 operands): the RMS_NORM that reads its
/// result next and that norm's MUL, where the three can be one dispatch:
/// the norm and its MUL as [`norm_mul`] asks, nothing computed between the
/// ADD and the norm, and the weights ready when the ADD runs. The ADD's
/// result is written as usual (the residual stream has other readers).
pub(crate) fn add_norm_mul(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    let nodes = graph.nodes();
    let add = nodes.get(id.index())?;
    let same = |s: Option<TensorId>| {
        s.and_then(|s| graph.layout(s).ok())
            .is_some_and(|l| l.dtype == DType::F32 && l.ne == add.layout.ne)
    };
    if add.op != Op::Add || add.layout.dtype != DType::F32 || !same(add.src(0)) || !same(add.src(1))
    {
        return None;
    }
    let j = next_computing(graph, id, end)?;
    let norm = TensorId::from_index(j as u32);
    if nodes[j].src(0) != Some(id) {
        return None;
    }
    let run = norm_mul(graph, counts, norm, end)?;
    let (root, _) = graph.memory_root(run.w).ok()?;
    let ready = root.index() < id.index() || nodes.get(root.index())?.is_leaf();
    ready.then_some(Run {
        add: Some(id),
        ..run
    })
}

/// The first node after `id` and before `end` that computes something
/// (leaves and views do not), where a fused run's next node must be.
pub(crate) fn next_computing(graph: &Graph, id: TensorId, end: usize) -> Option<usize> {
    let nodes = graph.nodes();
    (id.index() + 1..end.min(nodes.len())).find(|&j| !nodes[j].is_leaf() && !nodes[j].op.is_view())
}

/// Whether two operands share bytes of one buffer.
pub(crate) fn overlap(a: &Operand, b: &Operand) -> Result<bool> {
    if a.buffer != b.buffer {
        return Ok(false);
    }
    let span = |o: &Operand| {
        o.layout
            .checked_nbytes()
            .map(|n| o.offset..o.offset.saturating_add(n))
    };
    let (x, y) = (span(a)?, span(b)?);
    Ok(x.start < y.end && y.start < x.end)
}

/// Whether `out` may be written while `inp` is read, row by row: other
/// buffers, no overlap, or exactly in place.
pub(crate) fn disjoint_or_in_place(out: &Operand, inp: &Operand) -> Result<bool> {
    Ok(!overlap(out, inp)? || (out.offset == inp.offset && out.layout.nb == inp.layout.nb))
}

/// The call of ADD, RMS_NORM and MUL ([`encode`]; the sum is stored in
/// the ADD's result too), as [`norm_mul_call`].
fn add_norm_mul_call(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
    add: TensorId,
) -> Result<Option<(Call, Layout)>> {
    let (mul, w) = (run.mul, run.w);
    let node = graph.node(add)?;
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return Ok(None);
    };
    let ops = [mul, add, a, b, w].map(|t| operand(core, graph, placement, t));
    let [
        Ok(Some(dst)),
        Ok(Some(h)),
        Ok(Some(a)),
        Ok(Some(b)),
        Ok(Some(w)),
    ] = ops
    else {
        return Ok(None);
    };
    for (out, inp) in [
        (&h, &a),
        (&h, &b),
        (&dst, &a),
        (&dst, &b),
        (&dst, &w),
        (&h, &w),
    ] {
        if !disjoint_or_in_place(out, inp)? {
            return Ok(None);
        }
    }
    if overlap(&dst, &h)? {
        return Ok(None);
    }
    let mut call = Call::new(&dst, &[Some(&a), Some(&b), Some(&w), Some(&h)])?;
    // The ADD's result is written (s3): read-write, and so is every source
    // in its buffer (wgpu allows one kind of use of a buffer per dispatch).
    for (k, binding) in call.bindings.iter_mut().enumerate().skip(1) {
        if k == 4 || call.buffers[k] == h.buffer {
            *binding = Binding::plain(binding.name, binding.dtype);
        }
    }
    call.params.iu[0] = 7;
    Ok(Some((call, a.layout)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tessera::{DType, Graph, Stream, TensorId};

    use crate::WgpuDevice;

    const EPS: f32 = 1e-6;

    /// `x` [ne0, 3, 2] normalized and multiplied by `w` (shape `w_ne`);
    /// with `extra`, the norm's result is also added to `x` (a second
    /// reader) or made an output. Returns (y, the extra result, dispatches).
    fn run(
        dev: &WgpuDevice,
        ne0: usize,
        w_ne: &[usize],
        extra: Option<&str>,
        x: &[f32],
        w: &[f32],
    ) -> (Vec<f32>, Vec<f32>, u64) {
        let mut g = Graph::new();
        let xi = g.input("x", DType::F32, &[ne0, 3, 2]).unwrap();
        let wi = g.input("w", DType::F32, w_ne).unwrap();
        let t = g.rms_norm(xi, EPS).unwrap();
        let y = g.mul(t, wi).unwrap();
        g.set_output(y).unwrap();
        let z: Option<TensorId> = match extra {
            Some("reader") => Some(g.add(t, xi).unwrap()),
            Some("output") => Some(t),
            _ => None,
        };
        if let Some(z) = z {
            g.set_output(z).unwrap();
        }
        let stream = dev.new_wgpu_stream().unwrap();
        let (pl, _galloc) = crate::test_placement(dev, &g);
        pl.tensor(&g, xi).unwrap().write_f32(x).unwrap();
        pl.tensor(&g, wi).unwrap().write_f32(w).unwrap();
        let before = crate::batch::counts::now().0;
        stream.compute(&g, &pl).unwrap();
        let n = crate::batch::counts::now().0 - before;
        let read = |id| pl.tensor(&g, id).unwrap().read_f32().unwrap();
        (read(y), z.map(read).unwrap_or_default(), n)
    }

    /// The f64 reference: `rms_norm(x) * w` with `w` broadcast over rows
    /// (`w` per row `r` of the [ne0, 3, 2] tensor: `w_of(r, i)`).
    fn reference(x: &[f32], ne0: usize, w_of: impl Fn(usize, usize) -> f32) -> Vec<f64> {
        let mut out = Vec::new();
        for (r, row) in x.chunks(ne0).enumerate() {
            let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / ne0 as f64;
            let s = 1.0 / (ms + f64::from(EPS)).sqrt();
            out.extend((0..ne0).map(|i| f64::from(row[i]) * s * f64::from(w_of(r, i))));
        }
        out
    }

    /// Row lengths the fused norm kernel takes with the row in registers
    /// (64, 2,100) and by loops over memory (4,200: more than 4,096).
    const ROWS: [usize; 3] = [64, 2100, 4200];

    fn close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{what}: element {i}: {g} vs {w}"
            );
        }
    }

    /// `h = a + b` (also read by a second ADD, as a residual stream is),
    /// `y = rms_norm(h) * w`: the first three nodes are one dispatch, which
    /// still writes `h`; with the norm made an output (no fusion) the
    /// results are the same bits.
    #[test]
    fn add_rms_norm_and_mul_are_one_dispatch_that_still_writes_the_sum() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        for ne0 in ROWS {
            let av: Vec<f32> = (0..6 * ne0)
                .map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5)
                .collect();
            let bv: Vec<f32> = (0..6 * ne0)
                .map(|i| ((i * 11) % 53) as f32 * 0.03 - 0.7)
                .collect();
            let wv: Vec<f32> = (0..2 * ne0)
                .map(|i| 0.5 + (i % 128) as f32 * 0.01)
                .collect();
            let run = |norm_out: bool| {
                let mut g = Graph::new();
                let a = g.input("a", DType::F32, &[ne0, 3, 2]).unwrap();
                let b = g.input("b", DType::F32, &[ne0, 3, 2]).unwrap();
                let w = g.input("w", DType::F32, &[ne0, 1, 2]).unwrap();
                let h = g.add(a, b).unwrap();
                let t = g.rms_norm(h, EPS).unwrap();
                let y = g.mul(t, w).unwrap();
                let z = g.add(h, a).unwrap();
                for o in [y, z] {
                    g.set_output(o).unwrap();
                }
                if norm_out {
                    g.set_output(t).unwrap();
                }
                let stream = dev.new_wgpu_stream().unwrap();
                let (pl, _galloc) = crate::test_placement(&dev, &g);
                pl.tensor(&g, a).unwrap().write_f32(&av).unwrap();
                pl.tensor(&g, b).unwrap().write_f32(&bv).unwrap();
                pl.tensor(&g, w).unwrap().write_f32(&wv).unwrap();
                let before = crate::batch::counts::now().0;
                stream.compute(&g, &pl).unwrap();
                let n = crate::batch::counts::now().0 - before;
                let read = |id| pl.tensor(&g, id).unwrap().read_f32().unwrap();
                (read(y), read(z), n)
            };
            let (y, z, n) = run(false);
            assert_eq!(n, 2, "ADD + RMS_NORM + MUL, then the second ADD");
            let h: Vec<f32> = av.iter().zip(&bv).map(|(a, b)| a + b).collect();
            let want = reference(&h, ne0, |r, i| wv[ne0 * (r / 3) + i]);
            close(&y, &want, &format!("fused, rows of {ne0}"));
            let zw: Vec<f32> = h.iter().zip(&av).map(|(h, a)| h + a).collect();
            assert_eq!(z, zw, "the sum, written, read by the second ADD");
            let (y2, z2, n2) = run(true);
            assert_eq!(n2, 4, "nothing fused: the norm is an output");
            assert_eq!(
                (y2, z2),
                (y, z),
                "fused and unfused agree bit for bit ({ne0})"
            );
        }
    }

    #[test]
    fn rms_norm_and_mul_are_one_dispatch_where_nothing_else_reads_the_norm() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        for ne0 in ROWS {
            rms_norm_and_mul(&dev, ne0);
        }
    }

    fn rms_norm_and_mul(dev: &WgpuDevice, ne0: usize) {
        let x: Vec<f32> = (0..6 * ne0)
            .map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5)
            .collect();
        let w64: Vec<f32> = (0..ne0).map(|i| 0.5 + (i % 64) as f32 * 0.03).collect();
        let w128: Vec<f32> = (0..2 * ne0)
            .map(|i| 1.5 - (i % 128) as f32 * 0.02)
            .collect();

        // Weights per element of a row: fused, one dispatch.
        let (y, _, n) = run(dev, ne0, &[ne0], None, &x, &w64);
        assert_eq!(n, 1, "RMS_NORM + MUL in one dispatch");
        close(&y, &reference(&x, ne0, |_, i| w64[i]), "fused");
        // Weights broadcast per row over dimension 2 (ne0 x 1 x 2).
        let (y2, _, n) = run(dev, ne0, &[ne0, 1, 2], None, &x, &w128);
        assert_eq!(n, 1);
        close(
            &y2,
            &reference(&x, ne0, |r, i| w128[ne0 * (r / 3) + i]),
            "broadcast",
        );

        // A second reader of the norm: two dispatches and the reader's
        // value right; the MUL bit for bit the fused one.
        let (y3, z, n) = run(dev, ne0, &[ne0], Some("reader"), &x, &w64);
        assert_eq!(n, 3, "not fused: the norm has another reader");
        assert_eq!(y3, y, "fused and unfused MUL agree bit for bit ({ne0})");
        let norm = reference(&x, ne0, |_, _| 1.0);
        let want: Vec<f64> = norm
            .iter()
            .zip(&x)
            .map(|(a, &b)| a + f64::from(b))
            .collect();
        close(&z, &want, "the other reader");

        // The norm is an output: written, not fused.
        let (y4, t, n) = run(dev, ne0, &[ne0], Some("output"), &x, &w64);
        assert_eq!(n, 2, "not fused: the norm is an output");
        assert_eq!(y4, y);
        close(&t, &norm, "the norm as an output");
    }
}
