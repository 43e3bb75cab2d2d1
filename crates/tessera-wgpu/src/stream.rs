//! Streams of a wgpu device (ggml's `ggml_backend` for the GPU).
//!
//! wgpu gives a device one queue, executed in submission order, and every
//! stream of the device submits to it; a stream is a handle on that queue
//! with its own abort callback. How the async contract of [`tessera::stream`]
//! is met:
//!
//! 1. `set_async` copies the host bytes into wgpu's staging memory at once
//!    (`Queue::write_buffer`) and merges unaligned edge words with a tiny
//!    kernel; wgpu executes queued writes before the next submission and
//!    after every earlier one;
//! 2. `get_async` submits a copy into a `MAP_READ` staging buffer now; the
//!    [`PendingRead`] waits for that submission and maps it;
//! 3. `copy_from_async` between buffers of this device is a copy command
//!    (or the masked-copy kernel for unaligned ranges) on the queue, after
//!    everything the source stream submitted (same queue). From another
//!    device's memory it synchronizes the source stream, reads the bytes and
//!    queues a write (the destination stream does not wait);
//! 4. `compute_async` encodes the range and submits it in parts, the GPU
//!    starting on the first while the rest is recorded (see `compute`);
//! 5. events are submission indices ([`WgpuEvent`]); waiting on an event of
//!    the same device costs nothing, the queue is already ordered;
//! 6. `synchronize` flushes queued writes and waits for the queue, returning
//!    any error wgpu raised outside a call (device loss included).

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use tessera::buffer::try_zeroed_vec;
use tessera::profile::{OpTime, OpTotals};
use tessera::{
    AbortCallback, Buffer, Copied, Device, Error, Event, Graph, PendingRead, Placement, Result,
    Stream, Tensor,
};

use crate::batch::Batch;
use crate::buffer::WgpuBuffer;
use crate::device::{Core, WgpuDevice};
use crate::event::WgpuEvent;
use crate::staging;

/// An execution queue on a wgpu device.
pub struct WgpuStream {
    device: Arc<WgpuDevice>,
    core: Arc<Core>,
    abort: Mutex<Option<AbortCallback>>,
    /// Per-kind GPU time of the computes so far, while profiling.
    profile: Mutex<Option<OpTotals>>,
    /// Quantized activations of the integer products (`matvec_q8`).
    scratch: Mutex<crate::matvec_q8::Scratch>,
}

impl std::fmt::Debug for WgpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuStream")
            .field("device", &self.core.name)
            .finish()
    }
}

/// The entry of [`WgpuStream::take_profile`] that holds the host's time
/// (checking, encoding and submitting each compute), not GPU time.
pub const HOST_PROFILE_LABEL: &str = crate::compute::HOST_LABEL;

impl WgpuStream {
    pub(crate) fn new(device: Arc<WgpuDevice>) -> Self {
        let core = device.core().clone();
        WgpuStream {
            device,
            core,
            abort: Mutex::new(None),
            profile: Mutex::new(None),
            scratch: Mutex::default(),
        }
    }

    /// Time every dispatch of the computes from now on on the GPU (`true`,
    /// starting from zero) or stop (`false`). Timed computes wait for the
    /// GPU before they return; a device without timestamps
    /// ([`WgpuStream::can_profile`]) records nothing.
    pub fn set_profiling(&self, on: bool) {
        *self.profile.lock().unwrap_or_else(|p| p.into_inner()) = on.then(OpTotals::default);
    }

    /// Whether this device can time its dispatches (GPU timestamps).
    pub fn can_profile(&self) -> bool {
        self.core.timestamp_period.is_some()
    }

    /// GPU time per kind of node since profiling started or since the last
    /// call, largest first (empty when profiling is off).
    pub fn take_profile(&self) -> Vec<OpTime> {
        self.profile
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map(OpTotals::take)
            .unwrap_or_default()
    }

    /// The tensor's buffer, if it is device memory of this stream's device.
    fn own<'t>(&self, t: &'t Tensor) -> Option<&'t WgpuBuffer> {
        t.buffer()
            .as_any()
            .downcast_ref::<WgpuBuffer>()
            .filter(|b| Arc::ptr_eq(b.core(), &self.core))
    }

    fn check(t: &Tensor, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= t.nbytes() => Ok(()),
            _ => Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of a {} tensor of {} bytes",
                t.layout(),
                t.nbytes()
            ))),
        }
    }
}

impl Stream for WgpuStream {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn set_async(&self, dst: &Tensor, offset: usize, data: Vec<u8>) -> Result<()> {
        Self::check(dst, offset, data.len())?;
        match self.own(dst) {
            Some(b) => b.write(dst.offset() + offset, &data),
            None => {
                self.synchronize()?;
                dst.write(offset, &data)
            }
        }
    }

    fn get_async(&self, src: &Tensor, offset: usize, len: usize) -> Result<PendingRead> {
        Self::check(src, offset, len)?;
        match self.own(src) {
            Some(b) => {
                let pending = b.read_async(src.offset() + offset, len)?;
                Ok(PendingRead::deferred(move || pending.wait()))
            }
            None => {
                self.synchronize()?;
                let mut out = try_zeroed_vec(len, "an async tensor read")?;
                src.read(offset, &mut out)?;
                Ok(PendingRead::ready(out))
            }
        }
    }

    fn copy_from_async(
        &self,
        src_stream: &dyn Stream,
        src: &Tensor,
        dst: &Tensor,
    ) -> Result<Copied> {
        let Some(db) = self.own(dst) else {
            return Ok(Copied::Fallback);
        };
        let len = src.nbytes();
        if dst.nbytes() != len {
            return Err(Error::InvalidLayout(format!(
                "async copy of {} bytes into {} bytes",
                len,
                dst.nbytes()
            )));
        }
        if let Some(sb) = self.own(src) {
            let (Some(sr), Some(dr)) = (sb.range(src.offset(), len)?, db.range(dst.offset(), len)?)
            else {
                return Ok(Copied::Done);
            };
            let same = std::ptr::eq(sb, db);
            let (so, dof) = (src.offset(), dst.offset());
            if same && so < dof + len && dof < so + len {
                return Ok(Copied::Fallback);
            }
            let mut batch = Batch::new(&self.core);
            staging::record_copy(&mut batch, &self.core, sr, so, dr, dof, len)?;
            batch.submit("copying a tensor")?;
            return Ok(Copied::Done);
        }
        // Another device's memory: read it once the source stream is done,
        // then queue the write here.
        src_stream.synchronize()?;
        let mut bytes = try_zeroed_vec(len, "staging an async copy")?;
        src.read(0, &mut bytes)?;
        db.write(dst.offset(), &bytes)?;
        Ok(Copied::Done)
    }

    fn synchronize(&self) -> Result<()> {
        let index = self.core.mark()?;
        self.core.wait(Some(index))
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        let abort = self.abort.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut profile = self.profile.lock().unwrap_or_else(|p| p.into_inner());
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        crate::compute::compute(
            &self.core,
            graph,
            placement,
            range,
            abort.as_ref(),
            profile.as_mut(),
            &mut scratch,
        )?;
        Ok(())
    }

    fn record_event(&self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<WgpuEvent>() {
            Some(e) if Arc::ptr_eq(e.core(), &self.core) => e.record(),
            _ => Err(Error::unsupported(
                &self.core.name,
                format!("recording an event of device '{}'", event.device_name()),
            )),
        }
    }

    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<WgpuEvent>() {
            // Same queue: everything submitted after this call runs after
            // the recorded submission.
            Some(e) if Arc::ptr_eq(e.core(), &self.core) => self.core.errors.check(),
            _ => event.synchronize(),
        }
    }

    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        *self.abort.lock().unwrap_or_else(|p| p.into_inner()) = callback;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
