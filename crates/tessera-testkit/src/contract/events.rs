//! Item 5 of the contract, events, checked so that a stream whose
//! `record_event` or `wait_event` does nothing fails the check.
//!
//! Stream A of device `a` queues a chain of MUL_MATs (heavy on purpose:
//! `depth` products of `n` x `n` matrices, each a cyclic row shift so the
//! result is exact on every device) and records event E. Then:
//!
//! 1. the host waits on E and reads A's result with a blocking read: it must
//!    be the final one (E recorded after the compute signals after it);
//! 2. A queues a second compute and records E again; stream B of device `b`
//!    waits on E, queues a small write and synchronizes: E's most recent
//!    recording must now have signalled (B's write was held until it did);
//! 3. B reads A's result with `get_async`: it must be the second compute's.
//!
//! What that proves depends on the device:
//!
//! - **asynchronous** (`caps().async_ops`): a skipped recording leaves E
//!   "never recorded" (signalled at once), so step 1 or 3 reads a result A
//!   has not written yet; a skipped wait lets B's write run and synchronize
//!   while A still computes, so step 2 finds E unsignalled. On the
//!   [`crate::gated::GatedDevice`], which runs nothing until a host wait
//!   needs it, both failures happen every time (its tests prove it with
//!   [`crate::sabotage::skip_events`]). On a GPU the failure needs A's chain
//!   to still run when B gets ahead, hence a chain rather than one op; a
//!   device whose `record_event` itself waits for earlier work (wgpu on
//!   lavapipe, where a submission blocks until the previous one completes)
//!   hides a skipped wait by timing. When all streams of a device share one
//!   queue (wgpu), steps 2 and 3 with `a == b` hold by the queue's order
//!   alone; pass two logical devices to test the wait.
//! - **synchronous** (`async_ops == false`, e.g. the CPU): everything has
//!   completed when a call returns, so there is nothing for record or wait
//!   to order and a no-op record or wait on its own events cannot be told
//!   apart (its wait on an asynchronous device's event can: pass that
//!   device as `a` and the synchronous one as `b`). The check
//!   then verifies the semantics that remain: an event is signalled as soon
//!   as `record_event` returns and A's result is in memory then (no wait
//!   needed), a never-recorded event counts as signalled,
//!   `Event::synchronize` returns and leaves it signalled, and B's reads
//!   see the work queued before them (trivially ordered).

use std::sync::Arc;

use tessera::alloc::{GraphAllocator, TensorSet, alloc_tensors};
use tessera::{BufferUsage, DType, Device, Graph, Layout, Placement, Tensor};

use super::{Check, err, expect_eq, f32_bytes, to_f32};

/// How much work stream A queues before it records the event: a chain of
/// `depth` MUL_MATs of `n` x `n` F32 matrices (`2 n^3 depth` flops).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventWork {
    /// Matrix size.
    pub n: usize,
    /// Number of products in the chain (at least 1).
    pub depth: usize,
}

impl EventWork {
    /// Light work for synchronous devices (nothing to observe); for
    /// asynchronous ones four 128 x 128 products, which take lavapipe a
    /// good fraction of a second, far longer than a stream that does not
    /// wait needs to get ahead. A fast GPU finishes them in microseconds:
    /// pass bigger work to [`check_events_with`] there.
    pub fn for_device(device: &dyn Device) -> Self {
        if device.caps().async_ops {
            EventWork { n: 128, depth: 4 }
        } else {
            EventWork { n: 32, depth: 3 }
        }
    }
}

/// `y = W (W (... (W x)))` with `W` the matrix of a cyclic row shift.
struct Chain {
    graph: Graph,
    placement: Placement,
    w: Tensor,
    x: Tensor,
    y: Tensor,
    work: EventWork,
    _inputs: TensorSet,
    _galloc: GraphAllocator,
}

impl Chain {
    fn new(device: &Arc<dyn Device>, work: EventWork) -> std::result::Result<Self, String> {
        let EventWork { n, depth } = work;
        if n == 0 || depth == 0 {
            return Err(format!("event work {work:?} is empty"));
        }
        let mut graph = Graph::new();
        let wi = graph.input("w", DType::F32, &[n, n]).map_err(err)?;
        let xi = graph.input("x", DType::F32, &[n, n]).map_err(err)?;
        let mut yi = xi;
        for _ in 0..depth {
            yi = graph.mul_mat(wi, yi).map_err(err)?;
        }
        graph.set_output(yi).map_err(err)?;
        let mut placement = Placement::new(&graph);
        let layouts = [
            graph.node(wi).map_err(err)?.layout,
            graph.node(xi).map_err(err)?.layout,
        ];
        let inputs =
            alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Any).map_err(err)?;
        let (w, x) = (inputs.tensors[0].clone(), inputs.tensors[1].clone());
        placement.bind(&graph, wi, &w).map_err(err)?;
        placement.bind(&graph, xi, &x).map_err(err)?;
        let mut galloc = GraphAllocator::new(device.buffer_type());
        galloc.alloc_graph(&graph, &mut placement).map_err(err)?;
        let y = placement.tensor(&graph, yi).map_err(err)?;
        Ok(Chain {
            graph,
            placement,
            w,
            x,
            y,
            work,
            _inputs: inputs,
            _galloc: galloc,
        })
    }

    /// `W[k, i] = 1` where `k == (i + 1) % n`: `(W x)[i, j] = x[(i + 1) % n, j]`
    /// (MUL_MAT's `dst[i, j] = sum_k a[k, i] b[k, j]`).
    fn shift(&self) -> Vec<f32> {
        let n = self.work.n;
        let mut w = vec![0.0f32; n * n];
        for i in 0..n {
            w[(i + 1) % n + i * n] = 1.0;
        }
        w
    }

    /// The input of phase `p` (small integers, exact in F32, at least 1).
    fn input(&self, p: usize) -> Vec<f32> {
        let n = self.work.n;
        (0..n * n)
            .map(|e| ((e * 7 + p * 131) % 1999 + 1 + 2048 * p) as f32)
            .collect()
    }

    /// The result for phase `p`: the input's rows shifted `depth` times.
    fn want(&self, p: usize) -> Vec<f32> {
        let EventWork { n, depth } = self.work;
        let x = self.input(p);
        (0..n * n)
            .map(|e| x[(e % n + depth) % n + (e / n) * n])
            .collect()
    }

    fn queue(&self, stream: &dyn tessera::Stream, phase: usize) -> Check {
        stream
            .set_async(&self.x, 0, f32_bytes(&self.input(phase)))
            .map_err(err)?;
        stream
            .compute_async(&self.graph, &self.placement, 0..self.graph.len())
            .map_err(err)
    }
}

/// Item 5 on two streams of one device; see the module documentation for
/// what it proves on synchronous and asynchronous devices. Skipped (Ok) if
/// the device has no events.
pub fn check_events(device: &Arc<dyn Device>) -> Check {
    check_events_between(device, device)
}

/// Item 5 with stream A on `a` (recording an event of `a`) and stream B on
/// `b` (waiting on it), at the default work for `a`.
pub fn check_events_between(a: &Arc<dyn Device>, b: &Arc<dyn Device>) -> Check {
    check_events_with(a, b, EventWork::for_device(a.as_ref()))
}

/// [`check_events_between`] with stream A's work chosen by the caller.
pub fn check_events_with(a: &Arc<dyn Device>, b: &Arc<dyn Device>, work: EventWork) -> Check {
    if !a.caps().events {
        return Ok(());
    }
    let sync_device = !a.caps().async_ops;
    let sa = a.new_stream(&tessera::StreamOptions::new()).map_err(err)?;
    let sb = b.new_stream(&tessera::StreamOptions::new()).map_err(err)?;
    let chain = Chain::new(a, work)?;
    let marker_layout = Layout::contiguous(DType::F32, &[4]).map_err(err)?;
    let marker = alloc_tensors(&b.buffer_type(), &[marker_layout], BufferUsage::Any)
        .map_err(err)?
        .tensors[0]
        .clone();

    let ev = a.new_event().map_err(err)?;
    if !ev.is_signaled().map_err(err)? {
        return Err("a never-recorded event must count as signalled".into());
    }
    ev.synchronize().map_err(err)?;

    // 1. The host waits on the event, then reads with a blocking read.
    sa.set_async(&chain.w, 0, f32_bytes(&chain.shift()))
        .map_err(err)?;
    chain.queue(sa.as_ref(), 1)?;
    sa.record_event(ev.as_ref()).map_err(err)?;
    if sync_device {
        if !ev.is_signaled().map_err(err)? {
            return Err(format!(
                "{} is synchronous (caps().async_ops == false): everything queued had \
                 completed when record_event returned, yet the event is not signalled",
                a.name()
            ));
        }
        expect_eq(
            "host read on a synchronous device right after compute_async returned",
            &chain.y.read_vec::<f32>().map_err(err)?,
            &chain.want(1),
        )?;
    }
    ev.synchronize().map_err(err)?;
    if !ev.is_signaled().map_err(err)? {
        return Err("event not signalled after Event::synchronize".into());
    }
    expect_eq(
        "host read after Event::synchronize of an event recorded after stream A's compute",
        &chain.y.read_vec::<f32>().map_err(err)?,
        &chain.want(1),
    )?;

    // 2. Recorded again after more work: stream B waits on the new recording.
    chain.queue(sa.as_ref(), 2)?;
    sa.record_event(ev.as_ref()).map_err(err)?;
    sb.wait_event(ev.as_ref()).map_err(err)?;
    sb.set_async(&marker, 0, f32_bytes(&[1.0; 4]))
        .map_err(err)?;
    sb.synchronize().map_err(err)?;
    if !ev.is_signaled().map_err(err)? {
        return Err(format!(
            "stream B ({}) synchronized after a write queued behind wait_event(E), yet E's most \
             recent recording (after stream A's compute on {}) has not signalled: the wait did \
             not hold B back",
            b.name(),
            a.name()
        ));
    }

    // 3. Stream B reads stream A's result.
    let pending = sb
        .get_async(&chain.y, 0, 4 * work.n * work.n)
        .map_err(err)?;
    expect_eq(
        "stream B's read queued after wait_event(E) (must see stream A's second compute)",
        &to_f32(&pending.wait().map_err(err)?),
        &chain.want(2),
    )?;
    sa.synchronize().map_err(err)?;
    sb.synchronize().map_err(err)
}
