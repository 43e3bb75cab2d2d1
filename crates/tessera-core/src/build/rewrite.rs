//! Building a graph from another one: what the scheduler needs to split a
//! graph into per-device runs without modifying it.
//!
//! [`Graph::copy_node`] appends a node of another graph with new sources;
//! it is sound without re-running the op's constructor because it requires
//! every new source to have exactly the layout the original source had, so
//! every check the constructor made holds unchanged. [`Graph::transfer`]
//! appends a TRANSFER node: a copy of a tensor with the same layout.

use crate::error::{Error, Result};
use crate::graph::{Graph, MAX_SRC, Node, TensorId};
use crate::op::Op;

impl Graph {
    /// Append a copy of node `id` of `other` (op, layout, flags, name) whose
    /// sources are `srcs` and view source `view_src`, ids of this graph.
    /// Each must be present exactly where the original's is, with the same
    /// layout; a view must still fit in its new root.
    pub fn copy_node(
        &mut self,
        other: &Graph,
        id: TensorId,
        srcs: [Option<TensorId>; MAX_SRC],
        view_src: Option<TensorId>,
    ) -> Result<TensorId> {
        let node = other.node(id)?;
        let what = || format!("copying {} of another graph", node.label(id));
        for (i, (new, old)) in srcs.iter().zip(node.srcs.iter()).enumerate() {
            match (new, old) {
                (None, None) => {}
                (Some(n), Some(o)) => {
                    let (nl, ol) = (self.node(*n)?.layout, other.node(*o)?.layout);
                    if nl != ol {
                        return Err(Error::op(
                            node.op.name(),
                            format!("{}: source {i} is {nl}, the original was {ol}", what()),
                        ));
                    }
                }
                _ => {
                    return Err(Error::op(
                        node.op.name(),
                        format!("{}: source {i} present in one graph only", what()),
                    ));
                }
            }
        }
        match (view_src, node.view_src) {
            (None, None) => {}
            (Some(n), Some(o)) => {
                let (nl, ol) = (self.node(n)?.layout, other.node(o)?.layout);
                if nl != ol {
                    return Err(Error::op(
                        node.op.name(),
                        format!("{}: view root is {nl}, the original was {ol}", what()),
                    ));
                }
            }
            _ => {
                return Err(Error::op(
                    node.op.name(),
                    format!("{}: a view source in one graph only", what()),
                ));
            }
        }
        self.push(Node {
            layout: node.layout,
            op: node.op,
            srcs,
            view_src,
            view_offs: node.view_offs,
            flags: node.flags,
            name: node.name.clone(),
        })
    }

    /// A TRANSFER of `src`: a tensor of the same layout whose bytes the
    /// scheduler copies from `src` (on another device). Devices never
    /// compute it; its contents are only what a copy put there.
    pub fn transfer(&mut self, src: TensorId) -> Result<TensorId> {
        let layout = self.node(src)?.layout;
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(src);
        self.push(Node {
            layout,
            op: Op::Transfer,
            srcs,
            view_src: None,
            view_offs: 0,
            flags: crate::graph::Flags::empty(),
            name: format!("{}#copy", self.node(src)?.name),
        })
    }
}
