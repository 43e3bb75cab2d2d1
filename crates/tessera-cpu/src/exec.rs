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
//!    CPY/SET_ROWS). A result buffer is probed once per compute for
//!    writability, so a read-only mapping is an error, not a segfault. Each
//!    node becomes a [`PlanNode`] (kernel pointer, op, resolved pointers) in
//!    a vector reused across computes; the scratch the nodes need is grown
//!    (64-byte aligned) and kept.
//! 2. **Run**: every pool thread walks the plan; per node, thread 0 polls the
//!    abort callback, each thread runs its share of the kernel (panics are
//!    caught and become errors), then all meet at the barrier. A failure or
//!    an abort during node `k` makes every thread stop after barrier `k`
//!    (see [`RunShared`]), so every thread waits the same number of times.
//!    The failure of the earliest node wins.
//!
//! Leaves, views and nodes with no elements are skipped: they compute nothing.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tessera::buffer::check_range;
use tessera::{AbortCallback, Error, Graph, MAX_SRC, Op, Placement, Result, TensorId};

use crate::isa::Isa;
use crate::kernels::elem::elem_align;
use crate::kernels::{self, KernelFn, NodeCtx, Scratch, TensorRef};
use crate::pool::{ThreadPool, WorkerCtx};
use crate::support;

/// One node, ready to run.
#[derive(Clone, Copy, Debug)]
struct PlanNode {
    kernel: KernelFn,
    op: Op,
    dst: TensorRef,
    src: [Option<TensorRef>; MAX_SRC],
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
    /// Each tensor's pointer and byte span, resolved once per compute
    /// (indexed by id), valid when stamped with the current `generation`
    /// (so the cache is never cleared, only grown).
    resolved: Vec<(u64, usize, usize)>,
    generation: u64,
    /// Buffers (by address) found writable during the current compute.
    probed: Vec<usize>,
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
            resolved: Vec::new(),
            generation: 0,
            probed: Vec::new(),
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
        for idx in (start..end).filter(|&i| computes(i)) {
            let id = tensor_id(idx)?;
            if !support::supports_op(graph, id) {
                return Err(Error::unsupported("CPU", support::describe(graph, id)));
            }
        }
        placement.check_complete(graph, start..end)?;
        let nth = self.n_threads.clamp(1, self.pool.max_threads());
        let scratch_bytes = self.plan_nodes(graph, placement, start..end, nth)?;
        if self.plan.is_empty() {
            return Ok(());
        }
        let scratch = self.scratch(scratch_bytes)?;
        let shared = RunShared {
            stop_at: AtomicUsize::new(usize::MAX),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
        };
        let plan = &self.plan;
        let job = |w: WorkerCtx<'_>| run_plan(plan, &w, &shared, scratch, abort, isa);
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
        self.probed.clear();
        self.generation += 1;
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
            let mut src = [None; MAX_SRC];
            for (i, s) in node.srcs.iter().enumerate() {
                let Some(s) = s else { continue };
                let (r, r_bytes) = cache.resolve(graph, placement, *s)?;
                check_overlap(graph, id, i, (&dst, dst_bytes), (&r, r_bytes))?;
                src[i] = Some(r);
            }
            probe_writable(&mut self.probed, graph, placement, id)?;
            let layouts = src.each_ref().map(|s| s.as_ref().map(|t| &t.layout));
            scratch = scratch.max(kernels::scratch_size(&node.op, &dst.layout, &layouts, nth));
            self.plan.push(PlanNode {
                kernel,
                op: node.op,
                dst,
                src,
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

/// Check once per buffer per compute (`probed` holds the buffers already
/// checked) that the result's buffer accepts writes (a read-only file
/// mapping does not): rewrite the result's first byte with its own value
/// through the buffer, which checks. The byte is the node's to overwrite
/// anyway.
fn probe_writable(probed: &mut Vec<usize>, graph: &Graph, placement: &Placement, id: TensorId) -> Result<()> {
    let Some(place) = placement.get(id) else {
        return Ok(());
    };
    let key = std::sync::Arc::as_ptr(&place.buffer) as *const () as usize;
    if probed.contains(&key) {
        return Ok(());
    }
    let mut byte = [0u8; 1];
    let probe = place
        .buffer
        .read(place.offset, &mut byte)
        .and_then(|()| place.buffer.fill(place.offset, 1, byte[0]));
    probe.map_err(|e| {
        Error::unsupported(
            "CPU",
            format!(
                "{}: writing the result into buffer '{}' ({e})",
                support::describe(graph, id),
                place.buffer.name()
            ),
        )
    })?;
    probed.push(key);
    Ok(())
}

/// The hot loop, run by every thread of the pool.
fn run_plan(
    plan: &[PlanNode],
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
        let ctx = NodeCtx {
            op: node.op,
            dst: node.dst,
            src: node.src,
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

fn tensor_id(idx: usize) -> Result<TensorId> {
    u32::try_from(idx)
        .map(TensorId::from_index)
        .map_err(|_| Error::Overflow(format!("tensor index {idx}")))
}

/// [`resolve`], remembered for the current compute (a tensor is the result
/// of one node and the operand of others).
struct Cache<'a> {
    /// (generation, pointer, byte span) per tensor id.
    slots: &'a mut [(u64, usize, usize)],
    generation: u64,
}

impl Cache<'_> {
    fn resolve(&mut self, graph: &Graph, placement: &Placement, id: TensorId) -> Result<(TensorRef, usize)> {
        if let (Some(&(g, ptr, n)), Some(node)) = (self.slots.get(id.index()), graph.nodes().get(id.index()))
            && g == self.generation
        {
            let r = TensorRef {
                ptr: std::ptr::with_exposed_provenance_mut(ptr),
                layout: node.layout,
            };
            return Ok((r, n));
        }
        let (r, n) = resolve(graph, placement, id)?;
        if let Some(slot) = self.slots.get_mut(id.index()) {
            *slot = (self.generation, r.ptr.expose_provenance(), n);
        }
        Ok((r, n))
    }
}

/// The memory of tensor `id` and its byte span, checked: placed, in host
/// memory, inside its buffer, aligned for its type.
fn resolve(graph: &Graph, placement: &Placement, id: TensorId) -> Result<(TensorRef, usize)> {
    let node = graph.node(id)?;
    let place = placement.get(id).ok_or_else(|| Error::Unallocated {
        tensor: node.name.clone(),
        id: id.index(),
    })?;
    let layout = node.layout;
    let nbytes = layout.checked_nbytes()?;
    let buffer = &place.buffer;
    let size = buffer.size();
    // `Buffer::name` allocates: only ask for it when reporting an error.
    if place.offset.checked_add(nbytes).is_none_or(|end| end > size) {
        check_range(&buffer.name(), size, place.offset, nbytes)?;
    }
    let ptr = if nbytes == 0 {
        // Nothing is read or written through an empty tensor's pointer.
        NonNull::<Line>::dangling().as_ptr() as *mut u8
    } else {
        let base = buffer.host_ptr().ok_or_else(|| {
            Error::unsupported(
                "CPU",
                format!(
                    "tensor {} in buffer '{}': the buffer is not host memory the CPU can address",
                    node.label(id),
                    buffer.name()
                ),
            )
        })?;
        // SAFETY: `offset + nbytes <= size` was checked above, so the
        // pointer stays inside the buffer's allocation.
        unsafe { base.as_ptr().add(place.offset) }
    };
    let align = elem_align(layout.dtype);
    if !(ptr as usize).is_multiple_of(align) {
        return Err(Error::InvalidLayout(format!(
            "tensor {} at offset {} of buffer '{}' is not aligned to the {align} bytes of {}",
            node.label(id),
            place.offset,
            buffer.name(),
            layout.dtype
        )));
    }
    Ok((TensorRef { ptr, layout }, nbytes))
}

/// `Err` if the result of node `id` overlaps operand `i` in a way the
/// kernels do not allow (see the `kernels` module docs).
fn check_overlap(
    graph: &Graph,
    id: TensorId,
    i: usize,
    (dst, dst_bytes): (&TensorRef, usize),
    (src, src_bytes): (&TensorRef, usize),
) -> Result<()> {
    let (d0, s0) = (dst.ptr as usize, src.ptr as usize);
    let overlap = dst_bytes > 0 && src_bytes > 0 && d0 < s0 + src_bytes && s0 < d0 + dst_bytes;
    if !overlap {
        return Ok(());
    }
    let op = graph.node(id)?.op;
    let allowed = match (op, i) {
        (Op::Cpy, 1) | (Op::SetRows, 0) => true,
        _ => op.can_inplace() && d0 == s0 && dst.layout == src.layout,
    };
    if allowed {
        return Ok(());
    }
    Err(Error::InvalidLayout(format!(
        "{}: the result's memory overlaps operand {i}; only in-place ops may share memory, and only with an identical layout",
        support::describe(graph, id)
    )))
}
