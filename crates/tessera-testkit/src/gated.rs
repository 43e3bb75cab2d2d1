//! A gated device: streams that really are asynchronous, deterministically.
//!
//! [`GatedDevice`] wraps a device (by default the [`ReferenceDevice`]) and
//! gives it streams that queue every operation and hold it at a gate until
//! the host needs a result. A [`PendingRead::wait`], a [`Stream::synchronize`]
//! or an [`Event::synchronize`] opens the gate for exactly the operations it
//! depends on: the stream concerned up to the point waited for and, when a
//! queued `wait_event` stands in the way, the recording stream up to that
//! recording. Nothing else runs. That is the latest any device may run an
//! operation under the contract of [`tessera::stream`], so
//!
//! - a check that passes here does not rely on work finishing early;
//! - a stream that skips an ordering step (a `record_event` or `wait_event`
//!   that does nothing) reads stale memory *every* time, not only when a
//!   GPU happens to be slow. This is what lets the tests prove that
//!   [`crate::contract::check_events`] can fail.
//!
//! Operations run on the host thread that waits, one at a time (one lock per
//! device), through a stream of the wrapped device; events are
//! [`GatedEvent`]s, (stream, position) marks in those queues; `copy_async`
//! takes the documented fallback (both streams synchronized, then a blocking
//! copy). A wait names a recording already queued, so waits cannot form a
//! cycle (the driver still refuses to re-enter a stream it is running).
//! Dropping a stream runs what it still holds. [`GatedDevice::pending`] counts what is queued
//! and not yet run.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tessera::{
    AbortCallback, BufferType, Device, DeviceCaps, DeviceType, Error, Event, Graph, MemoryInfo,
    PendingRead, Placement, Result, Stream, Tensor, TensorId,
};

use crate::ReferenceDevice;

const NAME: &str = "GATED";

/// A queued operation.
enum Op {
    Write {
        dst: Tensor,
        offset: usize,
        data: Vec<u8>,
    },
    Read {
        src: Tensor,
        offset: usize,
        len: usize,
        slot: u64,
    },
    Compute {
        graph: Graph,
        placement: Placement,
        range: Range<usize>,
    },
    /// An event recording: signalled once it has run.
    Record,
    /// Run only after `stream` has run its operation `until`.
    Wait { stream: usize, until: u64 },
}

/// One stream's queue. Operations are numbered from 1 in submission order.
struct Queue {
    /// The wrapped device's stream that computes; `None` once dropped.
    exec: Option<Arc<dyn Stream>>,
    ops: VecDeque<(u64, Op)>,
    last: u64,
    done: u64,
    driving: bool,
    error: Option<Error>,
}

#[derive(Default)]
struct State {
    queues: Vec<Queue>,
    reads: HashMap<u64, Result<Vec<u8>>>,
    next_read: u64,
}

/// What the device and its streams and events share.
struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn queue(&mut self, id: usize) -> Result<&mut Queue> {
        self.queues
            .get_mut(id)
            .ok_or_else(|| Error::device(NAME, format!("no stream {id}")))
    }

    fn push(&mut self, id: usize, op: Op) -> Result<u64> {
        let q = self.queue(id)?;
        q.last += 1;
        q.ops.push_back((q.last, op));
        Ok(q.last)
    }

    /// Run stream `id`'s operations up to number `upto`, and what they wait on.
    fn drive(&mut self, id: usize, upto: u64) -> Result<()> {
        let q = self.queue(id)?;
        if q.done >= upto {
            return Ok(());
        }
        if q.driving {
            return Err(Error::device(
                NAME,
                "a stream waits on itself through events (a deadlock)",
            ));
        }
        q.driving = true;
        let r = self.drive_inner(id, upto);
        if let Ok(q) = self.queue(id) {
            q.driving = false;
        }
        r
    }

    fn drive_inner(&mut self, id: usize, upto: u64) -> Result<()> {
        loop {
            let q = self.queue(id)?;
            let (seq, wait) = match q.ops.front() {
                Some((seq, _)) if *seq > upto => return Ok(()),
                None => return Ok(()),
                Some((seq, Op::Wait { stream, until })) => (*seq, Some((*stream, *until))),
                Some((seq, _)) => (*seq, None),
            };
            if let Some((stream, until)) = wait {
                self.drive(stream, until)?;
            }
            let q = self.queue(id)?;
            let Some((_, op)) = q.ops.pop_front() else {
                return Ok(());
            };
            self.run(id, op)?;
            self.queue(id)?.done = seq;
        }
    }

    fn run(&mut self, id: usize, op: Op) -> Result<()> {
        let result = match op {
            Op::Write { dst, offset, data } => dst.write(offset, &data),
            Op::Read {
                src,
                offset,
                len,
                slot,
            } => {
                let mut out = vec![0u8; len];
                let read = src.read(offset, &mut out).map(|()| out);
                self.reads.insert(slot, read);
                Ok(())
            }
            Op::Compute {
                graph,
                placement,
                range,
            } => match self.queue(id)?.exec.clone() {
                Some(exec) => exec
                    .compute_async(&graph, &placement, range)
                    .and_then(|()| exec.synchronize()),
                None => Err(Error::device(NAME, "the stream was dropped")),
            },
            Op::Record | Op::Wait { .. } => Ok(()),
        };
        if let Err(e) = result {
            let q = self.queue(id)?;
            if q.error.is_none() {
                q.error = Some(e);
            }
        }
        Ok(())
    }
}

/// A device whose streams hold every operation until a host wait needs it.
pub struct GatedDevice {
    inner: Arc<dyn Device>,
    shared: Arc<Shared>,
    me: Weak<GatedDevice>,
}

impl std::fmt::Debug for GatedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedDevice")
            .field("inner", &self.inner.name())
            .finish_non_exhaustive()
    }
}

impl GatedDevice {
    /// A gated device computing with the [`ReferenceDevice`].
    pub fn new() -> Arc<Self> {
        Self::wrap(ReferenceDevice::new())
    }

    /// A gated device over `inner`: its memory, its ops, computed by streams
    /// of `inner` once the gate lets them through.
    pub fn wrap(inner: Arc<dyn Device>) -> Arc<Self> {
        Arc::new_cyclic(|me| GatedDevice {
            inner,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
            }),
            me: me.clone(),
        })
    }

    /// Operations queued on the device's streams and not yet run.
    pub fn pending(&self) -> usize {
        self.shared.lock().queues.iter().map(|q| q.ops.len()).sum()
    }
}

impl Device for GatedDevice {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Tessera gated device: streams run nothing until the host waits (testkit)"
    }

    fn memory(&self) -> MemoryInfo {
        self.inner.memory()
    }

    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: true,
            events: true,
            ..DeviceCaps::default()
        }
    }

    fn family_name(&self) -> &str {
        NAME
    }

    fn new_stream(&self, params: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        let device = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(NAME, "the device was dropped"))?;
        let exec = self.inner.new_stream(params)?;
        let mut st = self.shared.lock();
        st.queues.push(Queue {
            exec: Some(exec),
            ops: VecDeque::new(),
            last: 0,
            done: 0,
            driving: false,
            error: None,
        });
        let id = st.queues.len() - 1;
        Ok(Arc::new(GatedStream {
            device,
            shared: self.shared.clone(),
            id,
        }))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.inner.buffer_type()
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        self.inner.supports_op(graph, id)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        self.inner.supports_buffer_type(buft)
    }

    fn new_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(GatedEvent {
            shared: self.shared.clone(),
            last: Mutex::new(None),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An event of a [`GatedDevice`]: the position of its most recent recording.
pub struct GatedEvent {
    shared: Arc<Shared>,
    /// (stream, operation number) of the most recent recording.
    last: Mutex<Option<(usize, u64)>>,
}

impl std::fmt::Debug for GatedEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedEvent")
            .field("last", &self.mark())
            .finish()
    }
}

impl GatedEvent {
    fn mark(&self) -> Option<(usize, u64)> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Event for GatedEvent {
    fn device_name(&self) -> &str {
        NAME
    }

    fn synchronize(&self) -> Result<()> {
        match self.mark() {
            Some((stream, seq)) => self.shared.lock().drive(stream, seq),
            None => Ok(()),
        }
    }

    fn is_signaled(&self) -> Result<bool> {
        match self.mark() {
            Some((stream, seq)) => Ok(self.shared.lock().queue(stream)?.done >= seq),
            None => Ok(true),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream of a [`GatedDevice`].
pub struct GatedStream {
    device: Arc<GatedDevice>,
    shared: Arc<Shared>,
    id: usize,
}

impl std::fmt::Debug for GatedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedStream").field("id", &self.id).finish()
    }
}

impl GatedStream {
    fn exec(&self) -> Result<Arc<dyn Stream>> {
        self.shared
            .lock()
            .queue(self.id)?
            .exec
            .clone()
            .ok_or_else(|| Error::device(NAME, "the stream was dropped"))
    }

    fn own<'e>(&self, event: &'e dyn Event) -> Option<&'e GatedEvent> {
        event
            .as_any()
            .downcast_ref::<GatedEvent>()
            .filter(|e| Arc::ptr_eq(&e.shared, &self.shared))
    }

    fn check(t: &Tensor, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= t.nbytes() => Ok(()),
            _ => Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of a tensor of {} bytes",
                t.nbytes()
            ))),
        }
    }
}

impl Drop for GatedStream {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Ok(upto) = st.queue(self.id).map(|q| q.last) {
            // Nothing to return an error to; the operations still run.
            let _ = st.drive(self.id, upto);
        }
        // The queue stays (events may name it); the wrapped stream goes.
        if let Ok(q) = st.queue(self.id) {
            q.exec = None;
        }
    }
}

impl Stream for GatedStream {
    fn name(&self) -> &str {
        NAME
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn set_async(&self, dst: &Tensor, offset: usize, data: Vec<u8>) -> Result<()> {
        Self::check(dst, offset, data.len())?;
        let op = Op::Write {
            dst: dst.clone(),
            offset,
            data,
        };
        self.shared.lock().push(self.id, op).map(|_| ())
    }

    fn get_async(&self, src: &Tensor, offset: usize, len: usize) -> Result<PendingRead> {
        Self::check(src, offset, len)?;
        let (seq, slot) = {
            let mut st = self.shared.lock();
            st.next_read += 1;
            let slot = st.next_read;
            let op = Op::Read {
                src: src.clone(),
                offset,
                len,
                slot,
            };
            (st.push(self.id, op)?, slot)
        };
        let (shared, id) = (self.shared.clone(), self.id);
        Ok(PendingRead::deferred(move || {
            let mut st = shared.lock();
            st.drive(id, seq)?;
            st.reads
                .remove(&slot)
                .unwrap_or_else(|| Err(Error::device(NAME, "the read did not run")))
        }))
    }

    fn synchronize(&self) -> Result<()> {
        let mut st = self.shared.lock();
        let upto = st.queue(self.id)?.last;
        st.drive(self.id, upto)?;
        match st.queue(self.id)?.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        placement.check_complete(graph, range.clone())?;
        let op = Op::Compute {
            graph: graph.clone(),
            placement: placement.clone(),
            range,
        };
        self.shared.lock().push(self.id, op).map(|_| ())
    }

    fn record_event(&self, event: &dyn Event) -> Result<()> {
        let Some(e) = self.own(event) else {
            return Err(Error::unsupported(
                NAME,
                format!("recording an event of device '{}'", event.device_name()),
            ));
        };
        let seq = self.shared.lock().push(self.id, Op::Record)?;
        *e.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((self.id, seq));
        Ok(())
    }

    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        match self.own(event) {
            Some(e) => match e.mark() {
                Some((stream, until)) => self
                    .shared
                    .lock()
                    .push(self.id, Op::Wait { stream, until })
                    .map(|_| ()),
                None => Ok(()),
            },
            // Another device's event: block the host until it has signalled.
            None => event.synchronize(),
        }
    }

    fn set_n_threads(&self, n: usize) -> Result<()> {
        self.exec()?.set_n_threads(n)
    }

    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        self.exec()?.set_abort_callback(callback)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
