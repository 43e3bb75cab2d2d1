//! Op constructors: each validates its operands and appends a node.
//!
//! The rules are ggml's (the asserts of `ggml_add`, `ggml_mul_mat`, ...), but
//! every violated rule becomes an [`Error::InvalidOp`] naming the op, the
//! operands' shapes and what is wrong, instead of an abort. One file per op
//! family.

mod attention;
mod elementwise;
mod index;
pub(crate) mod matmul;
mod norm;
mod rewrite;
mod rope;
pub(crate) mod shape;
mod sort;
mod tile;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Flags, Graph, MAX_SRC, Node, TensorId};
use crate::layout::Layout;
use crate::op::Op;

impl Graph {
    /// Append an op node that owns fresh memory.
    fn push_op(&mut self, op: Op, layout: Layout, srcs: &[Option<TensorId>]) -> Result<TensorId> {
        let mut s = [None; MAX_SRC];
        s[..srcs.len()].copy_from_slice(srcs);
        self.push(Node {
            layout,
            op,
            srcs: s,
            view_src: None,
            view_offs: 0,
            flags: Flags::empty(),
            name: String::new(),
        })
    }

    /// Append an op node that uses the memory of `base` at `offset` bytes past
    /// `base`'s own start. Checks that the view stays inside the root memory.
    fn push_view(
        &mut self,
        op: Op,
        layout: Layout,
        base: TensorId,
        offset: usize,
        srcs: &[Option<TensorId>],
    ) -> Result<TensorId> {
        let (root, root_offs) = self.memory_root(base)?;
        let root_bytes = self.node(root)?.layout.checked_nbytes()?;
        let offs = root_offs
            .checked_add(offset)
            .ok_or_else(|| Error::Overflow(format!("{} view offset", op.name())))?;
        let span = layout.checked_nbytes()?;
        let end = offs
            .checked_add(span)
            .ok_or_else(|| Error::Overflow(format!("{} view end", op.name())))?;
        if span > 0 && end > root_bytes {
            return Err(Error::op(
                op.name(),
                format!(
                    "view {layout} at byte {offs} spans to byte {end}, past the {root_bytes} bytes of its source"
                ),
            ));
        }
        let mut s = [None; MAX_SRC];
        s[..srcs.len()].copy_from_slice(srcs);
        self.push(Node {
            layout,
            op,
            srcs: s,
            view_src: Some(root),
            view_offs: offs,
            flags: Flags::empty(),
            name: String::new(),
        })
    }
}

/// Shape of `id` for messages.
fn shape(g: &Graph, id: TensorId) -> String {
    g.nodes()
        .get(id.index())
        .map(|n| n.layout.describe())
        .unwrap_or_else(|| id.to_string())
}

/// `Err(InvalidOp)` unless `cond`.
fn ensure(cond: bool, op: &'static str, reason: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::op(op, reason()))
    }
}

/// `Err(InvalidOp)` unless `dtype` is one of `allowed`.
fn ensure_type(op: &'static str, what: &str, dtype: DType, allowed: &[DType]) -> Result<()> {
    ensure(allowed.contains(&dtype), op, || {
        let names: Vec<&str> = allowed.iter().map(|t| t.name()).collect();
        format!(
            "{what} has type {dtype}; expected one of {}",
            names.join(", ")
        )
    })
}

/// `Err(InvalidOp)` unless `x` is finite.
fn ensure_finite(op: &'static str, what: &str, x: f32) -> Result<()> {
    ensure(x.is_finite(), op, || format!("{what} = {x} is not finite"))
}

/// Float types an element-wise op accepts.
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[cfg(test)]
mod tests;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests_attention;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests_more;

pub use matmul::MUL_MAT_WEIGHT_TYPES;
pub use shape::cpy_supported;
