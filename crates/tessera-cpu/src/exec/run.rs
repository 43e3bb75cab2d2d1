//! The hot loop of a compute (phase 2 of [`super`]): every pool thread
//! walks the plan, runs its share of each node and meets the others at the
//! barriers; failures, panics and aborts stop every thread at the same
//! barrier.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tessera::{AbortCallback, Error, MAX_SRC};

use super::PlanNode;
use super::profile::Stopwatch;
use crate::isa::Isa;
use crate::kernels::{NodeCtx, Scratch, SharedTable, TensorRef};
use crate::pool::{Barrier, WorkerCtx};

/// The barrier of solo nodes: one thread, never waits.
static SOLO_BARRIER: Barrier = Barrier::new();

/// Why a node failed.
pub(super) enum Failure {
    Kernel(Error),
    KernelPanic,
    CallbackPanic,
}

/// What the threads of one run share.
///
/// `stop_at` is the index of the first node after whose barrier every
/// thread stops (`usize::MAX`: none). A plain "stop" flag would race: thread
/// 0 may poll the abort callback for node `k + 1` while a slower thread has
/// just left barrier `k` and would see the flag one node early, leaving
/// thread 0 alone at barrier `k + 1`. With an index, that slower thread
/// still runs node `k + 1` and stops after its barrier, like everyone.
pub(super) struct RunShared {
    pub(super) stop_at: AtomicUsize,
    pub(super) aborted: AtomicBool,
    pub(super) failure: Mutex<Option<(usize, Failure)>>,
}

impl RunShared {
    fn stop_after(&self, k: usize) {
        self.stop_at.fetch_min(k, Ordering::AcqRel);
    }

    fn fail(&self, k: usize, f: Failure) {
        let mut slot = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_none_or(|(first, _)| k < *first) {
            *slot = Some((k, f));
        }
        drop(slot);
        self.stop_after(k);
    }
}

/// The hot loop, run by every thread of the pool.
///
/// Every thread walks the whole plan and waits at the same barriers (those
/// of `barrier_after`, a static property of the plan), so the waits always
/// match. Parallel nodes are computed by every thread (each its share);
/// solo nodes by thread 0 alone, which skips them once a failure or an
/// abort is recorded (nobody else depends on them then). After a barrier
/// every thread stops if the failure or abort happened at or before it.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_plan(
    plan: &[PlanNode],
    operands: &[TensorRef],
    w: &WorkerCtx<'_>,
    shared: &RunShared,
    scratch: Scratch,
    abort: Option<&AbortCallback>,
    isa: Isa,
    mut watch: Option<Stopwatch<'_>>,
) {
    for (k, node) in plan.iter().enumerate() {
        let runs_here = !node.solo || w.ith == 0;
        if runs_here {
            // Polled before each node until something stops the run (solo
            // nodes after an abort are walked to the next barrier, not polled).
            if w.ith == 0
                && let Some(cb) = abort
                && shared.stop_at.load(Ordering::Acquire) == usize::MAX
            {
                match catch_unwind(AssertUnwindSafe(|| cb())) {
                    Ok(false) => {}
                    Ok(true) => {
                        shared.aborted.store(true, Ordering::Release);
                        shared.stop_after(k);
                    }
                    Err(_) => shared.fail(k, Failure::CallbackPanic),
                }
            }
            // A parallel node runs even when thread 0 just decided to stop:
            // its kernel may wait on the barrier inside, and every thread
            // must make the same number of waits. A solo node's barrier is
            // private, so it is skipped once stopping.
            if !node.solo || shared.stop_at.load(Ordering::Acquire) > k {
                run_node(node, operands, w, shared, scratch, isa, k);
            }
        }
        if let Some(sw) = watch.as_mut() {
            sw.work_done();
        }
        if node.barrier_after {
            w.barrier.wait();
        }
        if let Some(sw) = watch.as_mut() {
            sw.node_done(k);
        }
        if node.barrier_after
            && (shared.stop_at.load(Ordering::Acquire) <= k || w.barrier.is_poisoned())
        {
            break;
        }
    }
}

/// This thread's share of one node (all of it for a solo node).
#[inline]
fn run_node(
    node: &PlanNode,
    operands: &[TensorRef],
    w: &WorkerCtx<'_>,
    shared: &RunShared,
    scratch: Scratch,
    isa: Isa,
    k: usize,
) {
    let mut src = [None; MAX_SRC];
    let mut next = node.first_operand;
    for (i, slot) in src.iter_mut().enumerate() {
        if node.operand_mask & (1 << i) != 0 {
            *slot = operands.get(next).copied();
            next += 1;
        }
    }
    let (ith, nth, barrier) = if node.solo {
        (0, 1, &SOLO_BARRIER)
    } else {
        (w.ith, w.nth, w.barrier)
    };
    // The planned scratch is the tables' bytes and then the largest
    // node's, so the node's part and its table lie inside the allocation.
    let own = Scratch {
        ptr: scratch.ptr.wrapping_add(node.scratch_off),
        len: scratch.len.saturating_sub(node.scratch_off),
    };
    let table = node.table.map(|t| SharedTable {
        ptr: scratch.ptr.wrapping_add(t.offset),
        len: t.len,
        fill: t.fill,
    });
    let ctx = NodeCtx {
        op: node.op,
        dst: node.dst,
        src,
        ith,
        nth,
        scratch: own,
        table,
        barrier,
        isa,
    };
    match catch_unwind(AssertUnwindSafe(|| (node.kernel)(&ctx))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => shared.fail(k, Failure::Kernel(e)),
        Err(_) => shared.fail(k, Failure::KernelPanic),
    }
}
