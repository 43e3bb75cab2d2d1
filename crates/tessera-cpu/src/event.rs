//! CPU events.
//!
//! A CPU stream completes everything before its calls return, so recording
//! an event signals it at once and waiting on a CPU event never blocks. The
//! event still counts its recordings, which lets tests check that a stream
//! recorded it natively rather than falling back.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use tessera::{Event, Result};

/// An event of the CPU device: always signalled.
#[derive(Debug, Default)]
pub struct CpuEvent {
    records: AtomicU64,
}

impl CpuEvent {
    /// A new, never recorded (hence signalled) event.
    pub fn new() -> Self {
        CpuEvent::default()
    }

    /// How many times a CPU stream recorded it.
    pub fn record_count(&self) -> u64 {
        self.records.load(Ordering::Acquire)
    }

    /// Mark a recording (the stream had already completed its queue).
    pub(crate) fn record(&self) {
        self.records.fetch_add(1, Ordering::AcqRel);
    }
}

impl Event for CpuEvent {
    fn device_name(&self) -> &str {
        "CPU"
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn is_signaled(&self) -> Result<bool> {
        Ok(true)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
