//! All-reduce by reduce-scatter and all-gather (the other collective is the
//! exchange of `Lower::reduce`).
//!
//! The partial sum is cut into one chunk per device along its first axis.
//! Each device receives the others' share of *its* chunk and adds the
//! contributions in device order; then every device receives every other
//! chunk from the device that summed it, and joins them (CONCAT). Each
//! device takes in `2 (n-1)/n` of the tensor, against `n-1` times it for
//! the exchange, in two copy steps and one compute step (a ring would take
//! `2 (n-1)` steps for the same bytes; with copies that the host drives,
//! the steps cost more than the links). Every chunk is summed once, in
//! device order, so every device ends with the same bits.

// Loops over device indices walk several per-device tables at once.
#![allow(clippy::needless_range_loop)]

use tessera::{Error, Layout, Result, TensorId};

use crate::AllReduce;
use crate::lower::{Held, Lower};
use crate::state::{SplitState, share};

/// Tensors below this size are exchanged (latency beats bytes).
const SMALL: usize = 64 << 10;

/// Whether to all-reduce a partial sum of `layout` by reduce-scatter.
pub(crate) fn use_reduce_scatter(
    choice: AllReduce,
    contributors: &[usize],
    n: usize,
    layout: &Layout,
) -> bool {
    let possible = contributors.len() == n
        && n > 1
        && layout.dtype == tessera::DType::F32
        && layout.is_contiguous()
        && layout.ne[0] >= n;
    match choice {
        AllReduce::Exchange => false,
        AllReduce::ReduceScatter => possible,
        AllReduce::Auto => possible && n > 2 && layout.nbytes() >= SMALL,
    }
}

impl Lower<'_> {
    /// All-reduce `h` (a partial sum every device holds) by reduce-scatter
    /// and all-gather.
    pub(crate) fn reduce_scatter(&mut self, h: &Held) -> Result<Held> {
        let n = self.n;
        let l = h.layout;
        let sizes = share(l.ne[0], &vec![1.0; n], 0)?;
        let mut starts = Vec::with_capacity(n);
        let mut acc = 0;
        for s in &sizes {
            starts.push(acc);
            acc += s;
        }
        let ids: Vec<TensorId> = h
            .ids
            .iter()
            .map(|i| i.ok_or_else(|| Error::unsupported("Meta", "a partial sum a device lacks")))
            .collect::<Result<_>>()?;
        // chunk[j][k]: device j's share of chunk k (contiguous).
        let mut chunk = vec![vec![None; n]; n];
        for j in 0..n {
            for k in 0..n {
                if sizes[k] == 0 {
                    continue;
                }
                let mut ne = l.ne;
                ne[0] = sizes[k];
                let v = self.gs[j].view(
                    ids[j],
                    ne,
                    [l.nb[1], l.nb[2], l.nb[3]],
                    starts[k] * l.nb[0],
                )?;
                let c = self.gs[j].cont(v)?;
                if k != j {
                    // Sent, never read here again.
                    self.keep_for_copy(j, c)?;
                }
                chunk[j][k] = Some(c);
            }
        }
        self.flush();
        // Reduce-scatter: device k receives everyone's share of chunk k.
        let mut copies = Vec::new();
        let mut summed = vec![None; n];
        for k in 0..n {
            let Some(own) = chunk[k][k] else { continue };
            let cl = self.gs[k].layout(own)?;
            let mut terms = Vec::with_capacity(n);
            for j in 0..n {
                if j == k {
                    terms.push(own);
                } else if let Some(src) = chunk[j][k] {
                    let r = self.receive_leaf(k, cl)?;
                    copies.push((j, src, k, r));
                    terms.push(r);
                }
            }
            let mut sum = terms[0];
            for &t in &terms[1..] {
                sum = self.gs[k].add(sum, t)?;
            }
            // Read by the all-gather's copies and then by the concat here.
            summed[k] = Some(sum);
        }
        self.push_copy(copies, true);
        self.flush();
        // All-gather: every device receives every chunk from its summer,
        // then joins them in order.
        let mut copies = Vec::new();
        let mut parts = vec![Vec::with_capacity(n); n];
        for (j, p) in parts.iter_mut().enumerate() {
            for k in 0..n {
                let Some(s) = summed[k] else { continue };
                if j == k {
                    p.push(s);
                } else {
                    let cl = self.gs[k].layout(s)?;
                    let r = self.receive_leaf(j, cl)?;
                    copies.push((k, s, j, r));
                    p.push(r);
                }
            }
        }
        self.push_copy(copies, false);
        let mut out = Vec::with_capacity(n);
        for (j, p) in parts.iter().enumerate() {
            let mut whole = p[0];
            for &x in &p[1..] {
                whole = self.gs[j].concat(whole, x, 0)?;
            }
            if p.len() == 1 {
                // One chunk only (cannot happen with ne0 >= n): copy it.
                whole = self.gs[j].cont(whole)?;
            }
            out.push(Some(whole));
        }
        Ok(Held {
            state: SplitState::Mirrored,
            layout: l,
            ids: out,
        })
    }
}
