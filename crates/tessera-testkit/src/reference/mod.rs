//! The reference: evaluates a [`Graph`] on the host in f64.
//!
//! This is the independent implementation every device is compared with. It
//! shares no code with any device's kernels: each op is written from its
//! definition (ggml's semantics, see the op modules), naively, accumulating in
//! f64. Memory is modelled faithfully ([`memory`]): each root tensor is a
//! typed region, views read and write their root through their own layout,
//! and values stored into F16/BF16/quantized memory are rounded or quantized
//! exactly as a device stores them (with the reference quantizers of
//! `tessera::quant`), while F32 memory keeps exact f64 values.
//!
//! Nodes are evaluated in graph order; leaves and pure views cost nothing.
//! Data-dependent indices out of range are [`Error::OutOfBounds`].

pub mod attention;
pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod memory;
pub mod rope;
pub mod rows;
pub mod scalar;
pub mod tile;

use std::ops::Range;

use tessera::{Error, Graph, Node, Op, Result, TensorId};

pub use memory::{Dense, RefMemory, Region};

use attention::AttnParams;
use elementwise::Binary;

/// Evaluate every op node of `graph` into `mem` (whose leaves hold the inputs).
pub fn evaluate(graph: &Graph, mem: &mut RefMemory) -> Result<()> {
    evaluate_range(graph, mem, 0..graph.len())
}

/// Evaluate the op nodes whose index lies in `range`, in order.
pub fn evaluate_range(graph: &Graph, mem: &mut RefMemory, range: Range<usize>) -> Result<()> {
    let end = range.end.min(graph.len());
    for id in graph
        .ids()
        .skip(range.start)
        .take(end.saturating_sub(range.start))
    {
        evaluate_node(graph, mem, id)?;
    }
    Ok(())
}

/// Operand `i` of `node`, or an error naming the op.
fn src(node: &Node, i: usize) -> Result<TensorId> {
    node.src(i)
        .ok_or_else(|| Error::op(node.op.name(), format!("operand {i} is missing")))
}

/// Evaluate one node (a no-op for leaves and views).
pub fn evaluate_node(graph: &Graph, mem: &mut RefMemory, id: TensorId) -> Result<()> {
    let node = graph.node(id)?;
    let load = |mem: &RefMemory, i: usize| mem.load(graph, src(node, i)?);
    let load_opt = |mem: &RefMemory, i: usize| -> Result<Option<Dense>> {
        node.src(i).map(|s| mem.load(graph, s)).transpose()
    };
    let out = match node.op {
        Op::None | Op::Transfer | Op::Reshape | Op::View | Op::Permute(_) | Op::Transpose => {
            return Ok(());
        }
        Op::Dup | Op::Cont => {
            // CONT may also reshape (`cont_4d`): same values, row-major.
            let mut d = load(mem, 0)?;
            d.ne = node.layout.ne;
            d
        }
        // Same-type quantized copies move the blocks (ggml copies bytes;
        // re-quantizing dequantized values is not the identity for every type).
        Op::Cpy
            if node.layout.dtype.is_quantized()
                && graph.node(src(node, 0)?)?.layout.dtype == node.layout.dtype =>
        {
            return mem.copy_blocks(graph, src(node, 0)?, id);
        }
        Op::Cpy => load(mem, 0)?.reshaped(node.layout.ne)?,
        Op::SetRows => return set_rows(graph, mem, id, node),
        Op::GetRows => index::get_rows(&load(mem, 0)?, &load(mem, 1)?)?,
        Op::Add => elementwise::binary(Binary::Add, &load(mem, 0)?, &load(mem, 1)?)?,
        Op::Mul => elementwise::binary(Binary::Mul, &load(mem, 0)?, &load(mem, 1)?)?,
        Op::Div => elementwise::binary(Binary::Div, &load(mem, 0)?, &load(mem, 1)?)?,
        Op::Sub => elementwise::binary(Binary::Sub, &load(mem, 0)?, &load(mem, 1)?)?,
        Op::Sqr => elementwise::sqr(&load(mem, 0)?),
        Op::Sqrt => elementwise::sqrt(&load(mem, 0)?),
        Op::Clamp { min, max } => {
            elementwise::clamp(&load(mem, 0)?, f64::from(min), f64::from(max))
        }
        Op::L2Norm { eps } => rows::l2_norm(&load(mem, 0)?, f64::from(eps))?,
        Op::Repeat => tile::repeat(&load(mem, 0)?, node.layout.ne)?,
        Op::Pad { lp, rp } => tile::pad(
            &load(mem, 0)?,
            lp.map(|p| p as usize),
            rp.map(|p| p as usize),
        )?,
        Op::Argsort { order } => tile::argsort(&load(mem, 0)?, order)?,
        Op::TopK => tile::top_k(&load(mem, 0)?, node.layout.ne[0])?,
        Op::Scale { scale, bias } => {
            elementwise::scale(&load(mem, 0)?, f64::from(scale), f64::from(bias))
        }
        Op::RmsNorm { eps } => rows::rms_norm(&load(mem, 0)?, f64::from(eps))?,
        Op::Norm { eps } => rows::norm(&load(mem, 0)?, f64::from(eps))?,
        Op::MulMat => matmul::mul_mat(&load(mem, 0)?, &load(mem, 1)?)?,
        Op::MulMatId => matmul::mul_mat_id(&load(mem, 0)?, &load(mem, 1)?, &load(mem, 2)?)?,
        Op::AddId => matmul::add_id(&load(mem, 0)?, &load(mem, 1)?, &load(mem, 2)?)?,
        Op::SoftMax { scale, max_bias } => rows::soft_max_sinks(
            &load(mem, 0)?,
            load_opt(mem, 1)?.as_ref(),
            load_opt(mem, 2)?.as_ref(),
            f64::from(scale),
            f64::from(max_bias),
        )?,
        Op::Rope(p) => rope::rope(
            &load(mem, 0)?,
            &load(mem, 1)?,
            load_opt(mem, 2)?.as_ref(),
            &p,
        )?,
        Op::Unary(f) => elementwise::unary(f, &load(mem, 0)?),
        Op::Glu { op, swapped } => match node.src(1) {
            Some(g) => elementwise::glu_split(op, &load(mem, 0)?, &mem.load(graph, g)?)?,
            None => elementwise::glu_fused(op, &load(mem, 0)?, swapped)?,
        },
        Op::SwiGluOai { alpha, limit } => elementwise::swiglu_oai(
            &load(mem, 0)?,
            &load(mem, 1)?,
            f64::from(alpha),
            f64::from(limit),
        )?,
        Op::Concat { dim } => index::concat(&load(mem, 0)?, &load(mem, 1)?, usize::from(dim))?,
        Op::Argmax => rows::argmax(&load(mem, 0)?)?,
        Op::SumRows => rows::sum_rows(&load(mem, 0)?)?,
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => attention::flash_attn_ext_sinks(
            &load(mem, 0)?,
            &load(mem, 1)?,
            &load(mem, 2)?,
            load_opt(mem, 3)?.as_ref(),
            load_opt(mem, 4)?.as_ref(),
            AttnParams {
                scale: f64::from(scale),
                max_bias: f64::from(max_bias),
                logit_softcap: f64::from(logit_softcap),
            },
        )?,
    };
    if out.ne != node.layout.ne {
        return Err(Error::op(
            node.op.name(),
            format!(
                "the reference computed extents {:?} for a node of {}",
                out.ne, node.layout
            ),
        ));
    }
    mem.store(graph, id, &out)
}

/// SET_ROWS: write converted rows of `src1` into the destination at `src2`'s indices.
fn set_rows(graph: &Graph, mem: &mut RefMemory, id: TensorId, node: &Node) -> Result<()> {
    let rows = mem.load(graph, src(node, 1)?)?;
    let ids = mem.load(graph, src(node, 2)?)?;
    if rows.ne[0] != node.layout.ne[0]
        || rows.ne[2] != node.layout.ne[2]
        || rows.ne[3] != node.layout.ne[3]
    {
        return Err(Error::op(
            "SET_ROWS",
            format!(
                "rows {:?} do not fit the destination {}",
                rows.ne, node.layout
            ),
        ));
    }
    for (dst, s) in index::set_rows_targets(&rows, &ids, node.layout.ne[1])? {
        mem.store_row(graph, id, dst, rows.row(s[0], s[1], s[2]))?;
    }
    Ok(())
}
