//! Events: markers recorded on a stream, waited on by another stream or the host.
//!
//! An event belongs to a device. [`crate::Stream::record_event`] enqueues a
//! signal after everything already queued on the stream;
//! [`crate::Stream::wait_event`] makes a stream wait for the most recent
//! recording before running anything queued after the wait;
//! [`Event::synchronize`] blocks the host until the most recent recording has
//! signalled. An event never recorded counts as signalled. Unlike ggml, a
//! stream checks that an event is one it can wait on natively and otherwise
//! falls back to a host wait (the default [`crate::Stream::wait_event`]), so
//! passing an event across devices is safe.

use std::any::Any;
use std::fmt::Debug;

use crate::Result;

/// A synchronisation marker.
pub trait Event: Send + Sync + Debug {
    /// Name of the device that created it.
    fn device_name(&self) -> &str;

    /// Block the calling thread until the most recent recording has signalled.
    fn synchronize(&self) -> Result<()>;

    /// The most recent recording has signalled (non-blocking).
    fn is_signaled(&self) -> Result<bool>;

    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}
