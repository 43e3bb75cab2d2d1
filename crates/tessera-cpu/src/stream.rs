//! CPU streams (ggml's CPU `ggml_backend`).
//!
//! A CPU stream is synchronous: every call, `compute_async` included, has
//! completed when it returns, which trivially satisfies the async contract
//! of [`tessera::stream`]. It owns an executor (thread pool, scratch and
//! plan buffers, see the private `exec` module); one compute runs at a time per stream
//! (a second caller waits). Streams are cheap to create, but each owns its
//! threads, so share one where you can.
//!
//! Parameters of [`tessera::Device::new_stream`]: comma-separated
//! `threads=N` (1 to [`MAX_THREADS`] = 512, ggml's `GGML_MAX_N_THREADS`;
//! default: `std::thread::available_parallelism`, capped the same way) and
//! `isa=scalar|avx2` (default: [`Isa::from_env`]); anything else is an error.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use tessera::{AbortCallback, Device, Error, Event, Graph, Placement, Result, Stream};

use crate::device::CpuDevice;
use crate::event::CpuEvent;
use crate::exec::Executor;
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
    /// [`MAX_THREADS`]) and kernels for `isa`.
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

    /// A stream configured by a parameter string (see the module docs).
    pub fn with_params(device: Arc<CpuDevice>, params: &str) -> Result<Self> {
        let mut threads = default_threads();
        let mut isa = Isa::from_env();
        for item in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || {
                Error::unsupported(
                    "CPU",
                    format!("stream parameter '{item}' (expected threads=N or isa=scalar|avx2)"),
                )
            };
            let (key, value) = item.split_once('=').ok_or_else(bad)?;
            match key.trim() {
                "threads" => {
                    threads = value
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(bad)?;
                }
                "isa" => {
                    isa = match value.trim() {
                        "scalar" => Isa::Scalar,
                        "avx2" => Isa::Avx2,
                        "avx512" => Isa::Avx512,
                        _ => return Err(bad()),
                    };
                }
                _ => return Err(bad()),
            }
        }
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
/// [`MAX_THREADS`].
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
