//! The graph executor: validate, resolve, then run every node on the pool.
//!
//! `compute` works in two phases so that the hot loop does nothing but call
//! kernels:
//!
//! 1. **Validate and resolve** (once per compute, on the calling thread):
//!    every op node in the range must pass [`support::supports_op`]
//!    ([`Error::Unsupported`] naming the op, types and shapes), every tensor
//!    an op touches must be placed ([`Error::Unallocated`]), in a buffer with
//!    a host pointer ([`Error::Unsupported`] naming the buffer), inside the
//!    buffer, aligned for its element type, and a result may not overlap an
//!    operand except as `kernels` documents (in place, or the destination of
//!    CPY/SET_ROWS). A result buffer must report `is_writable`, so a
//!    read-only mapping is an error, not a segfault (the
//!    checks live in [`crate::resolve`]). Each node becomes a [`PlanNode`]
//!    (kernel pointer, op, resolved pointers) in a vector reused across
//!    computes; the scratch the nodes need is grown (64-byte aligned) and
//!    kept. Nothing here allocates per node once the vectors have grown.
//! 2. **Run**: every pool thread walks the plan; per node, thread 0 polls the
//!    abort callback, each thread runs its share of the kernel (panics are
//!    caught and become errors), then all meet at the barrier. A failure or
//!    an abort during node `k` makes every thread stop after barrier `k`
//!    (see [`RunShared`]), so every thread waits the same number of times.
//!    The failure of the earliest node wins.
//!
//! Leaves, views and nodes with no elements are skipped: they compute nothing.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tessera::{AbortCallback, Error, Graph, MAX_SRC, Op, Placement, Result, TensorId};

use crate::isa::Isa;
use crate::kernels::{self, KernelFn, NodeCtx, Scratch, TensorRef};
use crate::pool::{ThreadPool, WorkerCtx};
use crate::resolve::{Cache, SaneCache, check_overlap, check_writable, tensor_id};
use crate::support;

/// One node, ready to run. Its operands are kept apart, densely, in
/// `Executor::operands` (most slots of `NodeCtx::src` are empty, and copying
/// them is a measurable part of a tiny node's cost).
#[derive(Clone, Copy, Debug)]
struct PlanNode {
    kernel: KernelFn,
    op: Op,
    dst: TensorRef,
    /// The first of this node's operands in `Executor::operands`.
    first_operand: usize,
    /// Bit `i` set: operand slot `i` is present (they follow in slot order).
    operand_mask: u8,
    /// Index of the node in its graph (for messages).
    index: usize,
}

/// A cache line, the unit of the scratch allocation (gives 64-byte alignment).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Why a node failed.
enum Failure {
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
struct RunShared {
    stop_at: AtomicUsize,
    aborted: AtomicBool,
    failure: Mutex<Option<(usize, Failure)>>,
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

/// The executor state a stream owns: pool, scratch and reusable buffers.
#[derive(Debug)]
pub(crate) struct Executor {
    pool: ThreadPool,
    n_threads: usize,
    scratch: Vec<Line>,
    plan: Vec<PlanNode>,
    /// The operands of the plan's nodes, back to back.
    operands: Vec<TensorRef>,
    /// Each tensor's pointer and byte span, resolved once per compute
    /// (indexed by id), valid when stamped with the current `generation`
    /// (so the cache is never cleared, only grown).
    resolved: Vec<(u64, usize, usize)>,
    /// Per tensor id: the `generation` in which its layout passed
    /// `support::sane`.
    sane: Vec<u64>,
    generation: u64,
}

impl Executor {
    /// An executor running on `n_threads` threads (at least 1).
    pub(crate) fn new(n_threads: usize) -> Result<Self> {
        let n = n_threads.max(1);
        Ok(Executor {
            pool: ThreadPool::new(n)?,
            n_threads: n,
            scratch: Vec::new(),
            plan: Vec::new(),
            operands: Vec::new(),
            resolved: Vec::new(),
            sane: Vec::new(),
            generation: 0,
        })
    }

    /// Threads a compute uses.
    pub(crate) fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Use `n` threads from now on, growing the pool if it is too small.
    pub(crate) fn set_n_threads(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::unsupported(
                "CPU",
                "a thread count of 0 (at least 1 is needed)",
            ));
        }
        if n > self.pool.max_threads() {
            self.pool = ThreadPool::new(n)?;
        }
        self.n_threads = n;
        Ok(())
    }

    /// Run the op nodes of `graph` whose index lies in `range`.
    pub(crate) fn compute(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        range: std::ops::Range<usize>,
        abort: Option<&AbortCallback>,
        isa: Isa,
    ) -> Result<()> {
        let end = range.end.min(graph.len());
        let start = range.start.min(end);
        let computes = |i: usize| {
            graph
                .nodes()
                .get(i)
                .is_some_and(|n| kernels::kernel_for(&n.op).is_some())
        };
        self.generation += 1;
        if self.sane.len() < graph.len() {
            self.sane.resize(graph.len(), 0);
        }
        let mut memo = SaneCache {
            stamps: &mut self.sane,
            generation: self.generation,
        };
        for idx in (start..end).filter(|&i| computes(i)) {
            let id = tensor_id(idx)?;
            if !support::supports_op_memo(graph, id, &mut memo) {
                return Err(Error::unsupported("CPU", support::describe(graph, id)));
            }
        }
        placement.check_complete(graph, start..end)?;
        let nth = self.n_threads.clamp(1, self.pool.max_threads());
        let scratch_bytes = self.plan_nodes(graph, placement, start..end, nth)?;
        self.run(graph, nth, scratch_bytes, abort, isa)
    }

    /// Run the planned nodes on `nth` threads.
    fn run(
        &mut self,
        graph: &Graph,
        nth: usize,
        scratch_bytes: usize,
        abort: Option<&AbortCallback>,
        isa: Isa,
    ) -> Result<()> {
        if self.plan.is_empty() {
            return Ok(());
        }
        let scratch = self.scratch(scratch_bytes)?;
        let shared = RunShared {
            stop_at: AtomicUsize::new(usize::MAX),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
        };
        let (plan, operands) = (&self.plan, &self.operands);
        let job = |w: WorkerCtx<'_>| run_plan(plan, operands, &w, &shared, scratch, abort, isa);
        let clean = self.pool.run(nth, &job);
        let failure = shared
            .failure
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((k, f)) = failure {
            let index = self.plan.get(k).map_or(0, |p| p.index);
            let what = || support::describe(graph, TensorId::from_index(index as u32));
            return Err(match f {
                Failure::Kernel(e) => e,
                Failure::KernelPanic => {
                    Error::device("CPU", format!("a CPU kernel panicked on node {}", what()))
                }
                Failure::CallbackPanic => Error::device(
                    "CPU",
                    format!("the abort callback panicked before node {}", what()),
                ),
            });
        }
        if shared.aborted.load(Ordering::Acquire) {
            return Err(Error::Aborted);
        }
        if !clean {
            return Err(Error::device("CPU", "a CPU worker thread panicked"));
        }
        Ok(())
    }

    /// Resolve every computing node of `range` into `self.plan`; returns the
    /// scratch bytes the nodes need.
    fn plan_nodes(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        range: std::ops::Range<usize>,
        nth: usize,
    ) -> Result<usize> {
        self.plan.clear();
        self.operands.clear();
        if self.resolved.len() < graph.len() {
            self.resolved.resize(graph.len(), (0, 0, 0));
        }
        let mut cache = Cache {
            slots: &mut self.resolved,
            generation: self.generation,
        };
        let mut scratch = 0usize;
        for idx in range {
            let Some(node) = graph.nodes().get(idx) else {
                break;
            };
            let Some(kernel) = kernels::kernel_for(&node.op) else {
                continue;
            };
            let id = tensor_id(idx)?;
            let (dst, dst_bytes) = cache.resolve(graph, placement, id)?;
            if dst.layout.nelements() == 0 {
                continue;
            }
            let first_operand = self.operands.len();
            let mut operand_mask = 0u8;
            let mut layouts = [None; MAX_SRC];
            for (i, s) in node.srcs.iter().enumerate() {
                let Some(s) = s else { continue };
                let (r, r_bytes) = cache.resolve(graph, placement, *s)?;
                check_overlap(graph, id, i, (&dst, dst_bytes), (&r, r_bytes))?;
                self.operands.push(r);
                operand_mask |= 1 << i;
                layouts[i] = graph.nodes().get(s.index()).map(|n| &n.layout);
            }
            check_writable(graph, placement, id)?;
            scratch = scratch.max(kernels::scratch_size(&node.op, &dst.layout, &layouts, nth));
            self.plan.push(PlanNode {
                kernel,
                op: node.op,
                dst,
                first_operand,
                operand_mask,
                index: idx,
            });
        }
        Ok(scratch)
    }

    /// The scratch, grown to at least `bytes`.
    fn scratch(&mut self, bytes: usize) -> Result<Scratch> {
        let lines = bytes.div_ceil(64);
        if self.scratch.len() < lines {
            let more = lines - self.scratch.len();
            self.scratch
                .try_reserve_exact(more)
                .map_err(|e| Error::OutOfMemory {
                    device: "CPU".into(),
                    requested: bytes,
                    detail: format!("compute scratch: {e}"),
                })?;
            self.scratch.resize(lines, Line([0; 64]));
        }
        Ok(Scratch {
            ptr: self.scratch.as_mut_ptr() as *mut u8,
            len: self.scratch.len() * 64,
        })
    }
}

/// The hot loop, run by every thread of the pool.
fn run_plan(
    plan: &[PlanNode],
    operands: &[TensorRef],
    w: &WorkerCtx<'_>,
    shared: &RunShared,
    scratch: Scratch,
    abort: Option<&AbortCallback>,
    isa: Isa,
) {
    for (k, node) in plan.iter().enumerate() {
        if w.ith == 0
            && let Some(cb) = abort
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
        // Thread 0 runs its share even when it just decided to stop: a
        // kernel may wait on the barrier inside, and every thread must make
        // the same number of waits.
        let mut src = [None; MAX_SRC];
        let mut next = node.first_operand;
        for (i, slot) in src.iter_mut().enumerate() {
            if node.operand_mask & (1 << i) != 0 {
                *slot = operands.get(next).copied();
                next += 1;
            }
        }
        let ctx = NodeCtx {
            op: node.op,
            dst: node.dst,
            src,
            ith: w.ith,
            nth: w.nth,
            scratch,
            barrier: w.barrier,
            isa,
        };
        match catch_unwind(AssertUnwindSafe(|| (node.kernel)(&ctx))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => shared.fail(k, Failure::Kernel(e)),
            Err(_) => shared.fail(k, Failure::KernelPanic),
        }
        w.barrier.wait();
        if shared.stop_at.load(Ordering::Acquire) <= k || w.barrier.is_poisoned() {
            break;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use tessera::{DType, Device, Place};

    use super::*;

    fn boom(_: &NodeCtx) -> Result<()> {
        panic!("kernel bug")
    }

    fn fail_on_thread_1(ctx: &NodeCtx) -> Result<()> {
        if ctx.ith == 1 {
            return Err(Error::OutOfBounds("thread 1 failed".into()));
        }
        Ok(())
    }

    /// A chain of 4 ADDs, planned, with node 2's kernel replaced by `kernel`.
    fn run_with(kernel: KernelFn, nth: usize) -> (Result<()>, Executor) {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[16]).unwrap();
        let mut x = a;
        for _ in 0..4 {
            x = g.add(x, a).unwrap();
        }
        let buffer = crate::device()
            .buffer_type()
            .alloc_buffer(64 * g.len())
            .unwrap();
        let mut p = Placement::new(&g);
        for id in g.ids() {
            let place = Place {
                buffer: Arc::clone(&buffer),
                offset: 64 * id.index(),
            };
            p.set(&g, id, place).unwrap();
        }
        let mut ex = Executor::new(nth).unwrap();
        ex.generation += 1;
        let bytes = ex.plan_nodes(&g, &p, 0..g.len(), nth).unwrap();
        assert_eq!(ex.plan.len(), 4);
        ex.plan[2].kernel = kernel;
        let r = ex.run(&g, nth, bytes, None, Isa::Scalar);
        (r, ex)
    }

    #[test]
    fn a_panicking_kernel_is_an_error_naming_the_node_and_threads_stay_in_step() {
        for nth in [1, 2, 3] {
            let (r, mut ex) = run_with(boom, nth);
            match r {
                Err(Error::Device { message, .. }) => {
                    assert!(message.contains("panicked on node ADD #3"), "{message}");
                }
                other => panic!("expected a device error, got {other:?}"),
            }
            // The pool is still usable.
            ex.plan.clear();
            assert!(ex.run(&Graph::new(), nth, 0, None, Isa::Scalar).is_ok());
        }
    }

    #[test]
    fn an_error_on_one_thread_stops_all() {
        let (r, _) = run_with(fail_on_thread_1, 2);
        assert!(matches!(r, Err(Error::OutOfBounds(m)) if m == "thread 1 failed"));
        // On one thread nobody is thread 1.
        let (r, _) = run_with(fail_on_thread_1, 1);
        assert!(r.is_ok());
    }
}
