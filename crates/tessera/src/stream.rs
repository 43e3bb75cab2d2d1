//! Streams: execution queues on a device (ggml's `ggml_backend`).
//!
//! # The async contract
//!
//! A stream executes the operations submitted to it **in submission order**,
//! as if one after the other. Operations whose names end in `_async` may
//! return before they complete; everything else blocks until done. Precisely:
//!
//! 1. [`Stream::set_async`] takes ownership of the host bytes, so the caller
//!    can never overwrite them too early. The write happens after every
//!    operation queued before it and before every operation queued after it.
//! 2. [`Stream::get_async`] returns a [`PendingRead`]; its bytes are the
//!    tensor's contents after every operation queued before the call, and
//!    [`PendingRead::wait`] blocks until they are available.
//! 3. [`copy_async`]`(src_stream, dst_stream, src, dst)` copies after every
//!    operation queued on `src_stream` before the call; operations queued on
//!    `dst_stream` after the call see the copied bytes. Neither stream's later
//!    operations may overwrite `src` before the copy has read it: the source
//!    stream is ordered by submission, the destination stream waits.
//! 4. [`Stream::compute_async`] runs the op nodes of a graph range in graph
//!    order after everything queued before it; the graph and placement may be
//!    dropped as soon as the call returns (a stream copies what it needs).
//! 5. [`Stream::record_event`] signals an event once everything queued before
//!    it has completed; [`Stream::wait_event`] delays everything queued after
//!    it until the event's most recent recording has signalled.
//! 6. [`Stream::synchronize`] returns once everything queued has completed;
//!    an error raised by an earlier async operation is returned here if it was
//!    not returned before.
//!
//! Streams that do not implement an optional method get the documented
//! fallback: blocking versions after a `synchronize`, which satisfy the same
//! contract. A stream whose device reports `caps().async_ops == false` may
//! complete everything before returning.

use std::any::Any;
use std::fmt::{self, Debug};
use std::ops::Range;
use std::sync::Arc;

use crate::buffer::Copied;
use crate::buffer::try_zeroed_vec;
use crate::device::Device;
use crate::event::Event;
use crate::placement::Placement;
use crate::tensor::Tensor;
use crate::{Error, Graph, Result};

/// Callback polled during compute; returning `true` cancels the compute,
/// which then fails with [`Error::Aborted`].
pub type AbortCallback = Arc<dyn Fn() -> bool + Send + Sync>;

/// Bytes of a [`Stream::get_async`], available after the stream reaches it.
pub struct PendingRead {
    resolve: Box<dyn FnOnce() -> Result<Vec<u8>> + Send>,
}

impl Debug for PendingRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingRead")
    }
}

impl PendingRead {
    /// Bytes that are already available.
    pub fn ready(bytes: Vec<u8>) -> Self {
        PendingRead {
            resolve: Box::new(move || Ok(bytes)),
        }
    }

    /// Bytes produced by `resolve`, which blocks until they are available.
    pub fn deferred(resolve: impl FnOnce() -> Result<Vec<u8>> + Send + 'static) -> Self {
        PendingRead {
            resolve: Box::new(resolve),
        }
    }

    /// Block until the bytes are available and return them.
    pub fn wait(self) -> Result<Vec<u8>> {
        (self.resolve)()
    }
}

/// An execution queue on a device.
pub trait Stream: Send + Sync + Debug {
    /// Name, e.g. `CPU`.
    fn name(&self) -> &str;

    /// The device it runs on.
    fn device(&self) -> Arc<dyn Device>;

    /// Queue a write of `data` into `dst` at byte `offset` (contract item 1).
    /// Default: synchronize, then a blocking write.
    fn set_async(&self, dst: &Tensor, offset: usize, data: Vec<u8>) -> Result<()> {
        self.synchronize()?;
        dst.write(offset, &data)
    }

    /// Queue a read of `len` bytes of `src` at byte `offset` (contract item 2).
    /// Default: synchronize, then a blocking read. The range is checked
    /// against `src` before any memory is allocated for it.
    fn get_async(&self, src: &Tensor, offset: usize, len: usize) -> Result<PendingRead> {
        src.check(offset, len)?;
        self.synchronize()?;
        let mut out = try_zeroed_vec(len, "an async tensor read")?;
        src.read(offset, &mut out)?;
        Ok(PendingRead::ready(out))
    }

    /// Hook: queue on this (destination) stream a copy of `src` into `dst`,
    /// ordered after everything queued on `src_stream` (contract item 3).
    /// [`Copied::Fallback`] if this stream cannot do it natively;
    /// [`copy_async`] then falls back. Default: [`Copied::Fallback`].
    fn copy_from_async(
        &self,
        src_stream: &dyn Stream,
        src: &Tensor,
        dst: &Tensor,
    ) -> Result<Copied> {
        let _ = (src_stream, src, dst);
        Ok(Copied::Fallback)
    }

    /// Wait until everything queued has completed (contract item 6).
    fn synchronize(&self) -> Result<()>;

    /// Queue the op nodes whose tensor index lies in `range` (leaves and views
    /// are skipped) after everything queued before (contract item 4). Every
    /// tensor the nodes use must be placed.
    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()>;

    /// Compute every op node of `graph` and wait for it (ggml's
    /// `ggml_backend_graph_compute`).
    fn compute(&self, graph: &Graph, placement: &Placement) -> Result<()> {
        self.compute_async(graph, placement, 0..graph.len())?;
        self.synchronize()
    }

    /// Signal `event` once everything queued so far has completed (contract
    /// item 5). Default: unsupported.
    fn record_event(&self, event: &dyn Event) -> Result<()> {
        let _ = event;
        Err(Error::unsupported(self.name(), "recording events"))
    }

    /// Delay everything queued after this until `event` has signalled.
    /// Default: block the host until it has (always correct, also for events
    /// of other devices).
    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        event.synchronize()
    }

    /// Set the number of worker threads, for devices that have them.
    fn set_n_threads(&self, n: usize) -> Result<()> {
        let _ = n;
        Err(Error::unsupported(self.name(), "a thread count"))
    }

    /// Install (or remove) a callback polled during compute; when it returns
    /// `true` the compute stops with [`Error::Aborted`]. The callback runs
    /// while the compute holds its buffers (a host buffer's lock, see
    /// [`crate::host_region`]): it must not read or write the tensors of the
    /// running compute, or it waits for itself. Default: unsupported.
    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        let _ = callback;
        Err(Error::unsupported(self.name(), "abort callbacks"))
    }

    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}

/// Copy `src` into `dst` ordered after everything queued on `src_stream`,
/// before everything queued on `dst_stream` afterwards (ggml's
/// `ggml_backend_tensor_copy_async`). Falls back to synchronizing both
/// streams and a blocking copy when the destination stream cannot do it.
pub fn copy_async(
    src_stream: &dyn Stream,
    dst_stream: &dyn Stream,
    src: &Tensor,
    dst: &Tensor,
) -> Result<()> {
    if src.layout() != dst.layout() {
        return Err(Error::InvalidLayout(format!(
            "async copy between different layouts {} and {}",
            src.layout(),
            dst.layout()
        )));
    }
    if dst_stream.copy_from_async(src_stream, src, dst)? == Copied::Done {
        return Ok(());
    }
    src_stream.synchronize()?;
    dst_stream.synchronize()?;
    src.copy_to(dst)
}
