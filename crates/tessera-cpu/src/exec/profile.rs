//! Per-node timing of CPU computes ([`crate::CpuStream::set_profiling`]):
//! where a step's time goes, op by op.
//!
//! Thread 0 reads the clock when its own share of a node is done and after
//! the barrier that ends the node: the node's wall time (from the end of
//! the node before), and how much of it thread 0 waited at the barrier for
//! the others (uneven shares, descheduled threads, the barrier itself).
//! Two clock reads per node, only while profiling is on; nodes thread 0
//! runs alone have no barrier and no wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::PlanNode;
use crate::kernels::TensorRef;

pub use tessera::profile::OpTime;
use tessera::profile::{OpTotals, op_label};

/// One node's clock, written by thread 0 only.
#[derive(Default, Debug)]
pub(crate) struct NodeClock {
    total: AtomicU64,
    wait: AtomicU64,
}

/// Thread 0's clock while a plan runs.
pub(crate) struct Stopwatch<'a> {
    clocks: &'a [NodeClock],
    last: Instant,
    work_done: Instant,
}

impl<'a> Stopwatch<'a> {
    pub(crate) fn start(clocks: &'a [NodeClock]) -> Self {
        let now = Instant::now();
        Stopwatch {
            clocks,
            last: now,
            work_done: now,
        }
    }

    /// Thread 0's share of the current node is done.
    #[inline]
    pub(crate) fn work_done(&mut self) {
        self.work_done = Instant::now();
    }

    /// Node `k` has ended (after its barrier, if it has one).
    #[inline]
    pub(crate) fn node_done(&mut self, k: usize) {
        let now = Instant::now();
        if let Some(c) = self.clocks.get(k) {
            let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            c.total.fetch_add(ns(now - self.last), Ordering::Relaxed);
            c.wait
                .fetch_add(ns(now - self.work_done), Ordering::Relaxed);
        }
        self.last = now;
    }
}

/// The clocks of the current plan and the totals so far.
#[derive(Default, Debug)]
pub(crate) struct Profiler {
    clocks: Vec<NodeClock>,
    totals: OpTotals,
}

impl Profiler {
    /// Zeroed clocks for a plan of `n` nodes.
    pub(crate) fn clocks(&mut self, n: usize) -> &[NodeClock] {
        self.clocks.resize_with(n, NodeClock::default);
        for c in &self.clocks {
            c.total.store(0, Ordering::Relaxed);
            c.wait.store(0, Ordering::Relaxed);
        }
        &self.clocks
    }

    /// Add the clocks of the run of `plan` just finished to the totals.
    pub(crate) fn fold(&mut self, plan: &[PlanNode], operands: &[TensorRef]) {
        for (node, c) in plan.iter().zip(&self.clocks) {
            self.totals.add(
                &label(node, operands),
                c.total.load(Ordering::Relaxed),
                c.wait.load(Ordering::Relaxed),
            );
        }
    }

    /// The totals, largest first; starts over.
    pub(crate) fn take(&mut self) -> Vec<OpTime> {
        self.totals.take()
    }
}

/// What a node is, for the totals ([`op_label`]).
fn label(node: &PlanNode, operands: &[TensorRef]) -> String {
    let src = |i: usize| -> Option<&TensorRef> {
        if node.operand_mask & (1 << i) == 0 {
            return None;
        }
        let before = (node.operand_mask & ((1 << i) - 1)).count_ones() as usize;
        operands.get(node.first_operand + before)
    };
    op_label(
        node.op,
        src(0).map(|s| &s.layout),
        src(1).map(|s| &s.layout),
        node.dst.layout.dtype,
    )
}
