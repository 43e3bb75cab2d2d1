//! The graph executor: validate, resolve, then run every node on the pool.
//!
//! `compute` works in two phases so that the hot loop does nothing but call
//! kernels:
//!
//! 1. **Validate and resolve** (on the calling thread, when the graph, the
//!    placement, the range or the thread count changed since the last plan):
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
//!    kept. ROPE nodes that rotate with the same positions and parameters
//!    are grouped to share one angle table, and GEMMs of the same
//!    activations one packed B (see [`tables`]), which the scratch holds
//!    before the nodes' own part. Nothing here allocates per
//!    node once the vectors have grown.
//!    The plan is remembered with what it was built from
//!    ([`crate::resolve::PlanCache`]): computing the same graph range on the
//!    same placement again (the common case: one graph per model step,
//!    recomputed) skips phase 1 after one comparison pass, with every check
//!    above still guaranteed.
//! 2. **Run**: every pool thread walks the plan; per node, thread 0 polls the
//!    abort callback, each thread runs its share of the kernel (panics are
//!    caught and become errors), then all meet at the barrier. A failure or
//!    an abort during node `k` makes every thread stop at the first barrier
//!    after `k` (see [`run::RunShared`]), so every thread waits the same number of
//!    times. The failure of the earliest node wins. Nodes too small to be
//!    worth splitting (see [`SOLO_MAX_BYTES`]) are "solo": thread 0 computes
//!    them alone, back to back, with no barrier between two of them.
//!
//! Leaves, views and nodes with no elements are skipped: they compute nothing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tessera::{AbortCallback, Error, Graph, MAX_SRC, Op, Placement, Result, TensorId};

mod profile;
mod run;
mod tables;
pub use profile::OpTime;
use profile::{Profiler, Stopwatch};
use run::{Failure, RunShared, run_plan};
use tables::{TablePlanner, TableUse};

use crate::isa::Isa;
use crate::kernels::{self, KernelFn, Scratch, TensorRef};
use crate::pool::{MAX_THREADS, ThreadPool, WorkerCtx};
use crate::repack::Packing;
use crate::resolve::{Cache, PlanCache, SaneCache, check_overlap, check_writable, tensor_id};
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
    /// Small enough that thread 0 computes it alone (see [`SOLO_MAX_BYTES`]).
    solo: bool,
    /// The threads meet at the barrier after this node: always, except
    /// between two solo nodes (thread 0 runs those back to back) and after
    /// the last node (the pool's join synchronises).
    barrier_after: bool,
    /// The table this node shares with others ([`tables`]), if any.
    table: Option<TableUse>,
    /// Where the node's own scratch starts in the compute's scratch (after
    /// the shared tables).
    scratch_off: usize,
}

/// Nodes that touch at most this many bytes are computed by thread 0 alone,
/// without barriers between consecutive ones: below this size a barrier
/// costs more than splitting the work saves. (ggml's own figures: a
/// 4096-float ADD takes 0.51 µs on 1 thread, 0.94 µs on 2.)
const SOLO_MAX_BYTES: usize = 64 << 10;

/// Bytes node `op` reads and writes, roughly, for the solo decision; `None`
/// for ops that always use every thread (their cost is not proportional to
/// their bytes, and their kernels plan per-thread scratch).
fn work_bytes(op: &Op, dst_bytes: usize, src_bytes: &[usize; MAX_SRC]) -> Option<usize> {
    match op {
        Op::MulMat | Op::FlashAttnExt { .. } => None,
        // The result is a gather of the table; the table's span says nothing.
        Op::GetRows => Some(dst_bytes.saturating_mul(2)),
        // The result is (a view of) the whole destination; the rows count.
        Op::SetRows => Some(src_bytes[1].saturating_mul(2)),
        Op::Cpy => Some(src_bytes[0].saturating_add(dst_bytes)),
        _ => Some(
            src_bytes
                .iter()
                .fold(dst_bytes, |acc, &b| acc.saturating_add(b)),
        ),
    }
}

/// A cache line, the unit of the scratch allocation (gives 64-byte alignment).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A pool of `n` threads: more than [`MAX_THREADS`] is refused before any
/// thread starts; an OS refusal half-way leaves no thread behind.
fn start_pool(n: usize) -> Result<ThreadPool> {
    if n > MAX_THREADS {
        return Err(Error::unsupported(
            "CPU",
            format!("{n} threads (at most {MAX_THREADS}, ggml's GGML_MAX_N_THREADS)"),
        ));
    }
    ThreadPool::new(n).map_err(|e| Error::device("CPU", format!("starting {n} threads: {e}")))
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
    resolved: Vec<(u64, usize, usize, Packing)>,
    /// Per tensor id: the `generation` in which its layout passed
    /// `support::sane`.
    sane: Vec<u64>,
    generation: u64,
    /// What `plan` was built from (reused while nothing changed).
    cache: PlanCache,
    /// Plans of other ranges and graphs, kept for reuse with what they
    /// were built from: a meta device or a scheduler runs one graph as
    /// several ranges, one after the other, every token.
    saved: Vec<(PlanCache, Vec<PlanNode>, Vec<TensorRef>)>,
    /// Per-node timing, while profiling is on.
    profiler: Option<Profiler>,
}

/// Plans an executor keeps besides the current one.
const SAVED_PLANS: usize = 64;

impl Executor {
    /// An executor running on `n_threads` threads (at least 1).
    pub(crate) fn new(n_threads: usize) -> Result<Self> {
        let n = n_threads.max(1);
        Ok(Executor {
            pool: start_pool(n)?,
            n_threads: n,
            scratch: Vec::new(),
            plan: Vec::new(),
            operands: Vec::new(),
            resolved: Vec::new(),
            sane: Vec::new(),
            generation: 0,
            cache: PlanCache::default(),
            saved: Vec::new(),
            profiler: None,
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
            // On failure the current pool (and thread count) stays.
            self.pool = start_pool(n)?;
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
        let nth = self.n_threads.clamp(1, self.pool.max_threads());
        if !self.cache.hit(graph, placement, (start, end), nth) {
            // Take the matching saved plan out *before* stashing the
            // current one (stashing may evict the oldest and shift indices).
            let saved = self
                .saved
                .iter()
                .position(|(c, _, _)| c.hit(graph, placement, (start, end), nth))
                .map(|i| self.saved.remove(i));
            self.stash();
            match saved {
                // The same checks as for the current plan: still valid.
                Some((c, p, o)) => {
                    (self.cache, self.plan, self.operands) = (c, p, o);
                }
                None => {
                    self.cache.invalidate();
                    let scratch_bytes =
                        self.validate_and_plan(graph, placement, start..end, nth, isa)?;
                    self.cache
                        .record(graph, placement, (start, end), nth, scratch_bytes);
                }
            }
        }
        let scratch_bytes = self.cache.scratch_bytes;
        // Hold every touched buffer's lock for the whole run (exclusive where
        // results are written): the kernels' raw accesses are then ordered
        // with every other access to those bytes (`HostRegion::new`'s
        // contract), so another thread's read waits instead of racing.
        let regions = self.cache.regions(placement);
        let _guards = tessera::host_region::lock_all(&regions)?;
        self.run(graph, nth, scratch_bytes, abort, isa)
    }

    /// Keep the current plan (if valid) among the saved ones.
    fn stash(&mut self) {
        if !self.cache.is_valid() {
            return;
        }
        let entry = (
            std::mem::take(&mut self.cache),
            std::mem::take(&mut self.plan),
            std::mem::take(&mut self.operands),
        );
        if self.saved.len() >= SAVED_PLANS {
            self.saved.remove(0);
        }
        self.saved.push(entry);
    }

    /// Check every computing node of `range` and resolve it into `self.plan`;
    /// returns the scratch bytes the nodes need.
    fn validate_and_plan(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        range: std::ops::Range<usize>,
        nth: usize,
        isa: Isa,
    ) -> Result<usize> {
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
        for idx in range.clone().filter(|&i| computes(i)) {
            let id = tensor_id(idx)?;
            if !support::supports_op_memo(graph, id, &mut memo) {
                return Err(Error::unsupported("CPU", graph.describe_node(id)));
            }
        }
        placement.check_complete(graph, range.clone())?;
        self.plan_nodes(graph, placement, range, nth, isa)
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
        let n_plan = self.plan.len();
        let clocks = self.profiler.as_mut().map(|p| p.clocks(n_plan));
        let shared = RunShared {
            stop_at: AtomicUsize::new(usize::MAX),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
        };
        let (plan, operands) = (&self.plan, &self.operands);
        let job = |w: WorkerCtx<'_>| {
            let watch = if w.ith == 0 {
                clocks.map(Stopwatch::start)
            } else {
                None
            };
            run_plan(plan, operands, &w, &shared, scratch, abort, isa, watch)
        };
        let clean = self.pool.run(nth, &job);
        let failure = shared
            .failure
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((k, f)) = failure {
            let index = self.plan.get(k).map_or(0, |p| p.index);
            let what = || graph.describe_node(TensorId::from_index(index as u32));
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
        if let Some(p) = self.profiler.as_mut() {
            p.fold(&self.plan, &self.operands);
        }
        Ok(())
    }

    /// Start (with zeroed totals) or stop timing every node.
    pub(crate) fn set_profiling(&mut self, on: bool) {
        self.profiler = on.then(Profiler::default);
    }

    /// The time per kind of node since profiling started or was last taken
    /// (largest first); empty when profiling is off.
    pub(crate) fn take_profile(&mut self) -> Vec<OpTime> {
        self.profiler.as_mut().map_or_else(Vec::new, Profiler::take)
    }

    /// Resolve every computing node of `range` into `self.plan`; returns the
    /// scratch bytes the nodes need.
    fn plan_nodes(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        range: std::ops::Range<usize>,
        nth: usize,
        isa: Isa,
    ) -> Result<usize> {
        self.plan.clear();
        self.operands.clear();
        if self.resolved.len() < graph.len() {
            self.resolved
                .resize(graph.len(), (0, 0, 0, Packing::Standard));
        }
        let mut cache = Cache {
            slots: &mut self.resolved,
            generation: self.generation,
        };
        let mut scratch = 0usize;
        let mut tables = TablePlanner::default();
        // The table group of each planned node (plan-time only).
        let mut groups: Vec<Option<usize>> = Vec::new();
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
            if dst.packing != Packing::Standard {
                return Err(repacked_operand(graph, id, "its result"));
            }
            let first_operand = self.operands.len();
            let mut operand_mask = 0u8;
            let mut layouts = [None; MAX_SRC];
            let mut src_bytes = [0usize; MAX_SRC];
            let mut weights_packing = Packing::Standard;
            let mut resolved = [None; MAX_SRC];
            for (i, s) in node.srcs.iter().enumerate() {
                let Some(s) = s else { continue };
                let (r, r_bytes) = cache.resolve(graph, placement, *s)?;
                resolved[i] = Some((r, r_bytes));
                if r.packing != Packing::Standard {
                    if !matches!(node.op, Op::MulMat) || i != 0 {
                        return Err(repacked_operand(graph, id, &format!("operand {i}")));
                    }
                    weights_packing = r.packing;
                }
                check_overlap(graph, id, i, (&dst, dst_bytes), (&r, r_bytes))?;
                self.operands.push(r);
                operand_mask |= 1 << i;
                layouts[i] = graph.nodes().get(s.index()).map(|n| &n.layout);
                src_bytes[i] = r_bytes;
            }
            let solo = nth > 1
                && work_bytes(&node.op, dst_bytes, &src_bytes).is_some_and(|b| b <= SOLO_MAX_BYTES);
            check_writable(graph, placement, id)?;
            let group = match (&node.op, resolved[0], resolved[1]) {
                (Op::Rope(_), _, Some((pos, pos_bytes))) => tables.rope(
                    &node.op,
                    &dst,
                    (&pos, pos_bytes),
                    resolved[2].as_ref().map(|(f, b)| (f, *b)),
                ),
                (Op::MulMat, Some((a, _)), Some((b, b_bytes))) => {
                    tables.packed_b(&a, (&b, b_bytes), nth, isa)
                }
                _ => None,
            };
            tables.written(&dst, dst_bytes);
            groups.push(group);
            scratch = scratch.max(kernels::scratch_size(
                &node.op,
                &dst.layout,
                &layouts,
                weights_packing,
                nth,
                isa,
            ));
            self.plan.push(PlanNode {
                kernel,
                op: node.op,
                dst,
                first_operand,
                operand_mask,
                index: idx,
                solo,
                barrier_after: true,
                table: None,
                scratch_off: 0,
            });
        }
        // Tables first, then the nodes' own scratch; the first node of a
        // group fills its table.
        let (offsets, table_bytes) = tables.layout();
        let mut filled = vec![false; offsets.len()];
        for (p, g) in self.plan.iter_mut().zip(groups) {
            p.scratch_off = table_bytes;
            if let Some(g) = g {
                let first = filled.get(g).is_some_and(|f| !f);
                p.table = tables.table_use(&offsets, g, first);
                if let Some(f) = filled.get_mut(g) {
                    *f = true;
                }
            }
        }
        // Barriers: between two solo nodes none is needed (thread 0 runs
        // both, in order); after the last node the pool's join synchronises.
        let n = self.plan.len();
        for k in 0..n {
            let next_solo = self.plan.get(k + 1).map(|p| p.solo);
            if let Some(p) = self.plan.get_mut(k) {
                p.barrier_after = match next_solo {
                    None => false,
                    Some(next) => !(p.solo && next),
                };
            }
        }
        Ok(table_bytes.saturating_add(scratch))
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

#[cfg(test)]
mod tests;

/// The error for a repacked tensor ([`crate::repack`]) where only MUL_MAT's
/// weights may be one.
fn repacked_operand(graph: &Graph, id: tessera::TensorId, what: &str) -> Error {
    Error::unsupported(
        "CPU",
        format!(
            "{}: {what} is stored repacked (buffer type CPU_REPACK), which only MUL_MAT's weights (operand 0) may be",
            graph.describe_node(id)
        ),
    )
}
