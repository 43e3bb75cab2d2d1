//! Products of one input by several weight matrices, as one dispatch of
//! the integer matrix-vector kernel ([`crate::matvec_q8`]).
//!
//! Why: a transformer layer multiplies one normalized input by three
//! matrices in a row (Q, K and V) and, in its feed-forward half, by two
//! (gate and up). Recorded one by one, each is a dispatch of its own, and
//! wgpu puts a barrier between dispatches that write storage, so the GPU
//! drains after every product: K and V (a few hundred rows) fill a fraction
//! of a large GPU, and a decoding step of a 1B model was ~210 dispatches.
//! ggml's Vulkan backend runs such independent nodes without barriers
//! between them; merging them into one dispatch gets the same overlap and
//! saves 3 of a layer's 13 dispatches.
//!
//! Merged only where nothing can tell: the products are consecutive (only
//! views between them), read the same activations tensor, are taken by the
//! integer kernel, have weights of one type in one buffer and destinations
//! in one buffer, none writes into another tensor's memory, and no
//! destination overlaps another's, any product's weights or the input.
//! Each row is computed exactly as in a dispatch of its own (the same
//! kernel code, the same quantized activations), so results are bit for
//! bit those of the separate products. `TESSERA_WGPU_MERGE=0` (or
//! `TESSERA_WGPU_FUSE=0`, every fusion) records them one by one, for
//! measuring.

use std::sync::Arc;

use tessera::{Graph, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Operand, operand};
use crate::device::Core;
use crate::fuse::{next_computing, overlap};
use crate::matvec_q8::{self, MAX_MERGED};

/// Products recorded as one dispatch: the first and the ones after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    first: TensorId,
    rest: [Option<TensorId>; MAX_MERGED - 1],
}

impl Run {
    /// The nodes after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> [Option<TensorId>; 2] {
        self.rest
    }

    /// How many products the run computes.
    pub(crate) fn len(&self) -> usize {
        1 + self.rest.iter().flatten().count()
    }
}

env_switch!("TESSERA_WGPU_MERGE");

/// Whether products are merged (default; `TESSERA_WGPU_MERGE=0`, or
/// `TESSERA_WGPU_FUSE=0` for every fusion, is off).
pub(crate) fn enabled() -> bool {
    switch_on(crate::fuse::enabled)
}

/// A product's operands: destination, weights, activations.
pub(crate) struct Product {
    pub(crate) dst: Operand,
    pub(crate) a: Operand,
    pub(crate) b: Operand,
}

/// The operands of MUL_MAT node `id` if the integer kernel takes it and it
/// writes only its own memory.
pub(crate) fn product(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    id: TensorId,
) -> Result<Option<Product>> {
    let node = graph.node(id)?;
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return Ok(None);
    };
    if node.op != Op::MulMat || node.view_src.is_some() {
        return Ok(None);
    }
    let get = |t| operand(core, graph, placement, t);
    let (Some(dst), Some(a), Some(b)) = (get(id)?, get(a)?, get(b)?) else {
        return Ok(None);
    };
    // The matrix-vector kernel's (the tiled one computes one product).
    let few = b.layout.ne[1] <= matvec_q8::MAX_COLS;
    Ok((few && matvec_q8::takes(&a.layout, &b.layout)).then_some(Product { dst, a, b }))
}

/// The run that starts at node `id` (see the module docs), if two or more
/// products merge; `end` is the end of the range being encoded.
pub(crate) fn plan(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    id: TensorId,
    end: usize,
) -> Result<Option<Run>> {
    if !enabled() {
        return Ok(None);
    }
    let Some(first) = product(core, graph, placement, id)? else {
        return Ok(None);
    };
    let input = graph.node(id)?.src(1);
    let mut members = vec![first];
    let mut rest = [None; MAX_MERGED - 1];
    let mut at = id;
    while members.len() < MAX_MERGED {
        let Some(j) = next_computing(graph, at, end) else {
            break;
        };
        let next = TensorId::from_index(j as u32);
        if graph.node(next)?.src(1) != input {
            break;
        }
        let Some(p) = product(core, graph, placement, next)? else {
            break;
        };
        let head = &members[0];
        let same = p.a.layout.dtype == head.a.layout.dtype
            && p.a.buffer == head.a.buffer
            && p.dst.buffer == head.dst.buffer;
        if !same || !apart(&p, &members)? {
            break;
        }
        rest[members.len() - 1] = Some(next);
        members.push(p);
        at = next;
    }
    Ok((members.len() > 1).then_some(Run { first: id, rest }))
}

/// Whether `p`'s destination is apart from every operand of `members` and
/// theirs from its (the input is the same tensor in all).
fn apart(p: &Product, members: &[Product]) -> Result<bool> {
    if overlap(&p.dst, &p.a)? || overlap(&p.dst, &p.b)? {
        return Ok(false);
    }
    for m in members {
        if overlap(&p.dst, &m.dst)? || overlap(&p.dst, &m.a)? || overlap(&m.dst, &p.a)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Record `run` as one dispatch (and the quantization of its input, unless
/// this compute made it already); `false` (nothing recorded) where an
/// operand has no memory (the nodes are then recorded one by one).
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    q8: &mut matvec_q8::Compute,
    run: &Run,
) -> Result<bool> {
    let mut members = Vec::with_capacity(run.len());
    for id in std::iter::once(run.first).chain(run.rest.iter().flatten().copied()) {
        match product(core, graph, placement, id)? {
            Some(p) => members.push(p),
            None => return Ok(false),
        }
    }
    let Some(b_id) = graph.node(run.first)?.src(1) else {
        return Ok(false);
    };
    let (root, _) = graph.memory_root(b_id)?;
    let pairs: Vec<(&Operand, &Operand)> = members.iter().map(|p| (&p.dst, &p.a)).collect();
    matvec_q8::encode_merged(batch, core, q8, (b_id, root, &members[0].b), &pairs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tessera::{DType, Graph, TensorId};

    /// `n` values in [-1, 1) from `seed`.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        crate::test_values(seed).take(n).collect()
    }

    /// Compute `g` on the test device with merging on or off, its weights
    /// (`weights`: tensor, type) and F32 inputs (`inputs`) filled from
    /// seeds: the bits of each of `outs`, and the dispatches recorded.
    fn run(
        g: &Graph,
        weights: &[(TensorId, DType)],
        inputs: &[TensorId],
        outs: &[TensorId],
        merge: bool,
    ) -> (Vec<Vec<u32>>, u64) {
        let dev = crate::test_device().unwrap();
        let stream = dev.new_wgpu_stream().unwrap();
        let (pl, _galloc) = crate::test_placement(&dev, g);
        for (i, &(w, t)) in weights.iter().enumerate() {
            let l = g.layout(w).unwrap();
            let f = values(11 + i as u64, l.nelements());
            let mut q = vec![0u8; t.row_size(l.ne[0]).unwrap() * l.ne[1]];
            tessera::quant::from_f32(t, &f, &mut q).unwrap();
            pl.tensor(g, w).unwrap().write(0, &q).unwrap();
        }
        for (i, &x) in inputs.iter().enumerate() {
            let n = g.layout(x).unwrap().nelements();
            // A large value now and then: coarse steps in some blocks.
            let xs: Vec<f32> = values(101 + i as u64, n)
                .into_iter()
                .enumerate()
                .map(|(j, v)| if j % 97 == 5 { 40.0 } else { v })
                .collect();
            pl.tensor(g, x).unwrap().write_f32(&xs).unwrap();
        }
        crate::matvec_q8::force(Some(true));
        super::force(Some(merge));
        let dispatches = crate::test_compute_counted(&stream, g, &pl);
        super::force(None);
        crate::matvec_q8::force(None);
        (crate::test_bits(g, &pl, outs), dispatches)
    }

    /// Three products of one input — Q, K and V of different heights (64,
    /// 21 and 37 rows: the second and third end halfway through a
    /// workgroup of two rows) — for every weight type the integer kernel
    /// takes and 1, 3 and 8 columns: one dispatch after the quantization,
    /// each result bit for bit that of the products recorded one by one;
    /// with each shape of the kernel the device has (the subgroup
    /// kernel's products start at other workgroups).
    #[test]
    fn merged_products_equal_the_separate_products_bit_for_bit() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        for shape in crate::test_reduction_shapes(&dev) {
            crate::with_reduction_shape(shape, || merged_products_of_every_type(shape));
        }
    }

    fn merged_products_of_every_type(shape: (bool, Option<u32>)) {
        for wt in crate::matvec_q8::TYPES {
            for (k, cols) in [(256, 1), (512, 3), (256, 8)] {
                let mut g = Graph::new();
                let x = g.input("x", DType::F32, &[k, cols]).unwrap();
                let mut weights = Vec::new();
                let mut outs = Vec::new();
                for (name, m) in [("wq", 64), ("wk", 21), ("wv", 37)] {
                    let w = g.input(name, wt, &[k, m]).unwrap();
                    // Kept: a weight's memory is not reused (as in a
                    // weights buffer of its own).
                    g.set_output(w).unwrap();
                    let y = g.mul_mat(w, x).unwrap();
                    g.set_output(y).unwrap();
                    weights.push((w, wt));
                    outs.push(y);
                }
                let (one_by_one, n1) = run(&g, &weights, &[x], &outs, false);
                let (merged, n2) = run(&g, &weights, &[x], &outs, true);
                let what = format!("{wt} k={k} cols={cols} {shape:?}");
                assert_eq!(n1, 4, "{what}: quantization + 3 products");
                assert_eq!(n2, 2, "{what}: quantization + 1 merged");
                for (p, (a, b)) in one_by_one.iter().zip(&merged).enumerate() {
                    assert!(a == b, "{what}: product {p} differs when merged");
                }
            }
        }
    }

    /// What must not merge: weights of another type (the run stops before
    /// them), a product of another input, a product after a node that
    /// computes something. Dispatches counted with merging on and off, and
    /// every result the same bits both ways.
    #[test]
    fn only_consecutive_products_of_one_input_and_type_merge() {
        if crate::test_device().is_none() {
            return;
        }
        let (k, m) = (256, 24);
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[k, 1]).unwrap();
        let z = g.input("z", DType::F32, &[k, 1]).unwrap();
        let types = [DType::Q4K, DType::Q4K, DType::Q6K, DType::Q4K, DType::Q4K];
        let w: Vec<TensorId> = types
            .iter()
            .enumerate()
            .map(|(i, &t)| g.input(&format!("w{i}"), t, &[k, m]).unwrap())
            .collect();
        for &t in &w {
            g.set_output(t).unwrap();
        }
        // w0 x, w1 x merge; w2 x (Q6_K) alone; w3 z (another input) alone;
        // an ADD; w4 x alone (a node computes between it and w2 x).
        let y0 = g.mul_mat(w[0], x).unwrap();
        let y1 = g.mul_mat(w[1], x).unwrap();
        let y2 = g.mul_mat(w[2], x).unwrap();
        let y3 = g.mul_mat(w[3], z).unwrap();
        let s = g.add(x, z).unwrap();
        let y4 = g.mul_mat(w[4], x).unwrap();
        let outs = [y0, y1, y2, y3, s, y4];
        for &t in &outs {
            g.set_output(t).unwrap();
        }
        let weights: Vec<(TensorId, DType)> = w.iter().copied().zip(types).collect();
        let (a, n_off) = run(&g, &weights, &[x, z], &outs, false);
        let (b, n_on) = run(&g, &weights, &[x, z], &outs, true);
        // Quantizations of x and z; 5 products one by one; the ADD.
        assert_eq!(n_off, 8);
        assert_eq!(n_on, 7, "only w0 x and w1 x merge");
        assert_eq!(a, b);
    }

    /// The allocator may give a later product's result the memory of
    /// weights an earlier one read last (a dead input, as ggml's allocator
    /// frees it); in one dispatch the later rows would overwrite weights
    /// the earlier rows still read. Such products are not merged, and the
    /// results are those of the products one by one. (A first version of
    /// merging, without this check, gave wrong rows now and then on
    /// lavapipe, depending on which workgroups ran first.)
    #[test]
    fn a_result_placed_over_an_earlier_products_weights_is_not_merged() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let (k, m) = (256, 37);
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[k, 8]).unwrap();
        let w0 = g.input("w0", DType::Q4_0, &[k, m]).unwrap();
        let w1 = g.input("w1", DType::Q4_0, &[k, m]).unwrap();
        let y0 = g.mul_mat(w0, x).unwrap();
        let y1 = g.mul_mat(w1, x).unwrap();
        g.set_output(y0).unwrap();
        g.set_output(y1).unwrap();
        // The hazard is there: y1 lies in w0's memory.
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let span = |t| {
            let p = pl.get(t).unwrap();
            p.offset..p.offset + g.layout(t).unwrap().nbytes()
        };
        let (a, b) = (span(w0), span(y1));
        assert!(a.start < b.end && b.start < a.end, "{a:?} and {b:?}");
        let weights = [(w0, DType::Q4_0), (w1, DType::Q4_0)];
        let (one_by_one, n1) = run(&g, &weights, &[x], &[y0, y1], false);
        let (planned, n2) = run(&g, &weights, &[x], &[y0, y1], true);
        assert_eq!(
            (n1, n2),
            (3, 3),
            "one quantization and two products, both ways"
        );
        assert_eq!(one_by_one, planned);
    }
}
