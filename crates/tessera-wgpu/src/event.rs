//! Events of a wgpu device: a queue submission index.
//!
//! Every stream of a device submits to the device's one queue, which runs
//! submissions in order. Recording an event therefore makes an empty
//! submission (it also flushes queued buffer writes) and remembers its
//! index: the event signals once that submission — and so everything queued
//! before it, on any stream of the device — has completed. The host waits
//! with `Device::poll(Wait { submission_index })`; `is_signaled` is set by
//! `Queue::on_submitted_work_done`, registered right after the submission.
//! A stream of the same device waits for free (its later submissions come
//! after the recorded one on the same queue); other devices wait on the host.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tessera::{Event, Result};

use crate::device::Core;

/// One recording: its submission and its completion flag.
#[derive(Debug)]
struct Recording {
    index: wgpu::SubmissionIndex,
    done: Arc<AtomicBool>,
}

/// A wgpu event.
#[derive(Debug)]
pub struct WgpuEvent {
    core: Arc<Core>,
    last: Mutex<Option<Recording>>,
    records: AtomicU64,
}

impl WgpuEvent {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        WgpuEvent {
            core,
            last: Mutex::new(None),
            records: AtomicU64::new(0),
        }
    }

    /// How many times a stream recorded it natively.
    pub fn record_count(&self) -> u64 {
        self.records.load(Ordering::Acquire)
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Record: signal once everything submitted to the queue so far has completed.
    pub(crate) fn record(&self) -> Result<()> {
        let index = self.core.mark()?;
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        self.core
            .queue
            .on_submitted_work_done(move || flag.store(true, Ordering::Release));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Recording { index, done });
        self.records.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

impl Event for WgpuEvent {
    fn device_name(&self) -> &str {
        &self.core.name
    }

    fn synchronize(&self) -> Result<()> {
        let index = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| r.index.clone());
        match index {
            Some(i) => self.core.wait(Some(i)),
            None => Ok(()),
        }
    }

    fn is_signaled(&self) -> Result<bool> {
        let done = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| r.done.clone());
        let Some(done) = done else {
            return Ok(true);
        };
        if done.load(Ordering::Acquire) {
            return Ok(true);
        }
        // Let wgpu run the completion callbacks of finished submissions.
        let _ = self.core.device.poll(wgpu::PollType::Poll);
        self.core.errors.check()?;
        Ok(done.load(Ordering::Acquire))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
