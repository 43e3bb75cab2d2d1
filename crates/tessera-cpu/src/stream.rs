//! CPU streams (ggml's CPU `ggml_backend`).
//!
//! A CPU stream is synchronous: every call, `compute_async` included, has
//! completed when it returns, which trivially satisfies the async contract
//! of [`tessera::stream`]. It owns an executor (thread pool, scratch and
//! plan buffers, see the private `exec` module); one compute runs at a time per stream
//! (a second caller waits). Streams are cheap to create, but each owns its
//! threads, so share one where you can.
//!
//! Options of [`tessera::Device::new_stream`] ([`tessera::StreamOptions`]):
//! `threads` (default: `std::thread::available_parallelism`, at most
//! [`tessera::stream_options::MAX_THREADS`]) and the setting
//! `isa=scalar|avx2|avx512` (default: [`Isa::from_env`]); any other setting
//! is an error.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use tessera::{
    AbortCallback, Device, Error, Event, Graph, Placement, Result, Stream, StreamOptions,
};

use crate::device::CpuDevice;
use crate::event::CpuEvent;
use crate::exec::{Executor, OpTime};
use crate::isa::Isa;
use crate::pool::MAX_THREADS;

/// A synchronous execution queue on the CPU.
pub struct CpuStream {
    device: Arc<CpuDevice>,
    exec: Mutex<Executor>,
    abort: Mutex<Option<AbortCallback>>,
    isa: Isa,
}

impl CpuStream {
    /// A stream on `device` with `n_threads` threads (at most
    /// `MAX_THREADS`) and kernels for `isa`.
    pub fn new(device: Arc<CpuDevice>, n_threads: usize, isa: Isa) -> Result<Self> {
        if !isa.available() {
            return Err(Error::unsupported(
                "CPU",
                format!("the {} instruction set on this machine", isa.name()),
            ));
        }
        Ok(CpuStream {
            device,
            exec: Mutex::new(Executor::new(n_threads)?),
            abort: Mutex::new(None),
            isa,
        })
    }

    /// A stream configured by `options` (see the module docs): `threads`,
    /// and the setting `isa=scalar|avx2|avx512` (a family this CPU lacks
    /// falls back to the best it has below it, as `TESSERA_CPU_ISA` does).
    pub fn with_options(device: Arc<CpuDevice>, options: &StreamOptions) -> Result<Self> {
        options.only("CPU", &["isa"])?;
        let threads = options.thread_count()?.unwrap_or_else(default_threads);
        let isa = match options.get("isa") {
            None => Isa::from_env(),
            Some(name) => Isa::from_name(name)
                .ok_or_else(|| {
                    Error::unsupported(
                        "CPU",
                        format!("stream setting 'isa={name}' (expected scalar, avx2 or avx512)"),
                    )
                })?
                .at_most_available(),
        };
        CpuStream::new(device, threads, isa)
    }

    /// Threads each compute uses.
    pub fn n_threads(&self) -> usize {
        self.executor().n_threads()
    }

    /// The instruction set its kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Start timing every node of every compute (totals zeroed), or stop.
    /// For finding where a step's time goes (`tessera bench model
    /// --profile`); costs two clock reads per node while on.
    pub fn set_profiling(&self, on: bool) {
        self.executor().set_profiling(on);
    }

    /// Time per kind of node since profiling started or was last taken,
    /// largest first (empty when profiling is off).
    pub fn take_profile(&self) -> Vec<OpTime> {
        self.executor().take_profile()
    }

    fn executor(&self) -> MutexGuard<'_, Executor> {
        self.exec.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let has_abort = self.abort.lock().map(|a| a.is_some()).unwrap_or(false);
        f.debug_struct("CpuStream")
            .field("exec", &self.exec)
            .field("abort_callback", &has_abort)
            .field("isa", &self.isa)
            .finish()
    }
}

/// `std::thread::available_parallelism` (1 when unknown), at most
/// `MAX_THREADS`.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

impl Stream for CpuStream {
    fn name(&self) -> &str {
        "CPU"
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        let abort = self.abort.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.executor()
            .compute(graph, placement, range, abort.as_ref(), self.isa)
    }

    fn record_event(&self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<CpuEvent>() {
            // Everything queued before has completed: the stream is synchronous.
            Some(e) => {
                e.record();
                Ok(())
            }
            None => Err(Error::unsupported(
                "CPU",
                format!("recording an event of device '{}'", event.device_name()),
            )),
        }
    }

    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<CpuEvent>() {
            // A CPU event is signalled as soon as it is recorded.
            Some(_) => Ok(()),
            // Another device's event: block the host until it has signalled.
            None => event.synchronize(),
        }
    }

    fn set_n_threads(&self, n: usize) -> Result<()> {
        self.executor().set_n_threads(n)
    }

    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        *self.abort.lock().unwrap_or_else(|p| p.into_inner()) = callback;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
