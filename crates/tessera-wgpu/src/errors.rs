//! Turning wgpu's errors into [`tessera::Error`]s.
//!
//! wgpu reports validation, out-of-memory and internal errors through error
//! scopes, and sends whatever no scope caught to an "uncaptured error"
//! handler whose default **panics**. Tessera never lets that happen:
//!
//! - every device installs a handler ([`ErrorSink::install`]) that records
//!   uncaptured errors and device loss instead of panicking; the next
//!   operation on the device (or `synchronize` of a stream) returns them;
//! - every operation that can fail (allocations, shader compilation, command
//!   encoding and submission) runs inside [`ErrorSink::scoped`], which pushes
//!   one scope per error filter, runs the closure and pops the scopes, so the
//!   failing call itself returns the error, naming what it was doing.
//!
//! Error scopes are per thread in wgpu, which is what makes `scoped` correct
//! when several threads share a device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tessera::{Error, Result};

/// Errors wgpu raised outside any scope, and device loss.
#[derive(Debug, Default)]
pub(crate) struct ErrorSink {
    name: String,
    pending: Mutex<Vec<String>>,
    lost: AtomicBool,
    lost_reason: Mutex<Option<String>>,
}

impl ErrorSink {
    /// A sink for the device named `name`.
    pub(crate) fn new(name: &str) -> Arc<Self> {
        Arc::new(ErrorSink {
            name: name.to_owned(),
            ..ErrorSink::default()
        })
    }

    /// Route `device`'s uncaptured errors and loss into this sink.
    pub(crate) fn install(self: &Arc<Self>, device: &wgpu::Device) {
        let sink = self.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(describe(&e));
        }));
        let sink = self.clone();
        device.set_device_lost_callback(move |reason, message| {
            sink.lost.store(true, Ordering::Release);
            *sink.lost_reason.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("device lost ({reason:?}): {message}"));
        });
    }

    /// `Err` if the device is lost or an uncaptured error is pending (the
    /// pending errors are returned once, joined).
    pub(crate) fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::Acquire) {
            let why = self
                .lost_reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .unwrap_or_else(|| "device lost".into());
            return Err(Error::device(&self.name, why));
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut *pending).join("; ");
        Err(Error::device(&self.name, all))
    }

    /// Run `f` with validation, out-of-memory and internal error scopes
    /// pushed on `device`; an error caught there becomes a Tessera error
    /// saying it happened while doing `what` (out-of-memory errors become
    /// [`Error::OutOfMemory`] of `bytes`).
    pub(crate) fn scoped<T>(
        &self,
        device: &wgpu::Device,
        what: &str,
        bytes: usize,
        f: impl FnOnce() -> T,
    ) -> Result<T> {
        self.check()?;
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        // Scopes pop in reverse order of their pushes.
        let v = pollster::block_on(validation.pop());
        let i = pollster::block_on(internal.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: bytes,
                detail: format!("{what}: {}", describe(&e)),
            });
        }
        if let Some(e) = v.or(i) {
            return Err(Error::device(
                &self.name,
                format!("{what}: {}", describe(&e)),
            ));
        }
        Ok(value)
    }
}

/// wgpu's error with its source chain, on one line.
pub(crate) fn describe(e: &wgpu::Error) -> String {
    let mut msg = e.to_string().replace('\n', " ");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let more = s.to_string().replace('\n', " ");
        if !msg.contains(&more) {
            msg.push_str(": ");
            msg.push_str(&more);
        }
        src = s.source();
    }
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}
