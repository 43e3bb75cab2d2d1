//! Seeing a plan: the text `TESSERA_SCHED_DEBUG` prints and a Graphviz
//! picture.
//!
//! Level 1 lists the splits: device, node range, and each input copy with
//! its source, from which device, and its size. Level 2 adds every node of
//! the user's graph with its device and the [`super::Reason`] it went there.

use std::fmt::Write;
use std::sync::Arc;

use crate::device::Device;
use crate::{Graph, TensorId};

use super::assign::Assignment;
use super::split::Rewrite;

fn dev_name(devices: &[Arc<dyn Device>], d: usize) -> &str {
    devices.get(d).map_or("?", |d| d.name())
}

/// The plan as text (see the module docs).
pub(super) fn describe(
    rw: &Rewrite,
    a: &Assignment,
    graph: &Graph,
    devices: &[Arc<dyn Device>],
    nodes: bool,
) -> String {
    let mut s = String::new();
    let copies: usize = rw.splits.iter().map(|x| x.inputs.len()).sum();
    let bytes: usize = rw
        .splits
        .iter()
        .flat_map(|x| &x.inputs)
        .map(|i| i.bytes)
        .sum();
    let _ = writeln!(
        s,
        "scheduler: {} nodes, {} splits, {} copies ({} bytes) per compute",
        graph.len(),
        rw.splits.len(),
        copies,
        bytes
    );
    for (k, split) in rw.splits.iter().enumerate() {
        let _ = writeln!(
            s,
            "## split {k}: {} nodes {}..{} of the split graph, {} inputs",
            dev_name(devices, split.device),
            split.nodes.start,
            split.nodes.end,
            split.inputs.len()
        );
        for i in &split.inputs {
            let n = &graph.nodes()[i.source.index()];
            let _ = writeln!(
                s,
                "   input {} ({}) from {}: {} bytes",
                n.label(i.source),
                n.layout.describe(),
                dev_name(devices, i.from_device),
                i.bytes
            );
        }
    }
    if nodes {
        for id in graph.ids() {
            let i = id.index();
            let n = &graph.nodes()[i];
            let (Some(d), Some(w)) = (a.dev.get(i), a.why.get(i)) else {
                continue;
            };
            let _ = writeln!(
                s,
                "   node {:<5} {:<14} {:<24} {:<10} {}",
                i,
                n.op.display_name(),
                n.label(id),
                dev_name(devices, *d),
                w.name()
            );
        }
    }
    s
}

const COLOURS: [&str; 6] = [
    "lightblue",
    "palegreen",
    "lightsalmon",
    "khaki",
    "plum",
    "lightgrey",
];

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The plan as a Graphviz DOT graph: one cluster per split, nodes coloured
/// by device, copies as dashed edges labelled with their size.
pub(super) fn to_dot(
    rw: &Rewrite,
    a: &Assignment,
    graph: &Graph,
    devices: &[Arc<dyn Device>],
) -> String {
    let mut s = String::from("digraph sched {\n  rankdir=TB;\n  node [style=filled, shape=box];\n");
    // The split each user node is computed in.
    let mut split_of = vec![None; graph.len()];
    for (k, split) in rw.splits.iter().enumerate() {
        for n in split.nodes.clone() {
            if let Some(Some(i)) = rw.origin.get(n) {
                split_of[i.index()] = Some(k);
            }
        }
    }
    let node_line = |i: usize| {
        let id = TensorId::from_index(i as u32);
        let n = &graph.nodes()[i];
        let d = a.dev.get(i).copied().unwrap_or(0);
        format!(
            "    n{i} [label=\"{}\\n{}\\n{}\", fillcolor={}];\n",
            quote(n.op.display_name()),
            quote(&n.label(id)),
            quote(&n.layout.describe()),
            COLOURS[d % COLOURS.len()]
        )
    };
    for (k, split) in rw.splits.iter().enumerate() {
        let _ = writeln!(
            s,
            "  subgraph cluster_{k} {{\n    label=\"split {k}: {}\";",
            quote(dev_name(devices, split.device))
        );
        for i in (0..graph.len()).filter(|&i| split_of[i] == Some(k)) {
            s.push_str(&node_line(i));
        }
        s.push_str("  }\n");
    }
    for i in (0..graph.len()).filter(|&i| split_of[i].is_none()) {
        s.push_str(&node_line(i).replacen("    ", "  ", 1));
    }
    for (i, n) in graph.nodes().iter().enumerate() {
        for src in n.src_ids() {
            let _ = writeln!(s, "  n{} -> n{i};", src.index());
        }
    }
    for split in &rw.splits {
        for input in &split.inputs {
            // The copy feeds the split's first node that reads the source.
            let reader = (0..graph.len()).find(|&i| {
                split_of[i].is_some_and(|k| rw.splits[k].device == split.device)
                    && graph.nodes()[i].src_ids().any(|s| s == input.source)
            });
            if let Some(r) = reader {
                let _ = writeln!(
                    s,
                    "  n{} -> n{r} [style=dashed, color=red, label=\"copy {} B\"];",
                    input.source.index(),
                    input.bytes
                );
            }
        }
    }
    s.push_str("}\n");
    s
}
