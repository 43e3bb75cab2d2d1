//! Tessera's conformance harness (ggml's `test-backend-ops`), shared by every
//! device.
//!
//! - [`reference`](mod@reference): an independent f64 implementation of every op, with a
//!   faithful model of device memory (typed regions, views, storage rounding);
//! - [`cases`]: the catalogue of op cases, as data;
//! - [`harness`]: the test mode: run each case on a device with guard bytes
//!   and NaN-filled outputs, compare with the reference ([`compare`]) at the
//!   thresholds of [`tolerance`];
//! - [`support`]: the support mode, one line per case and device;
//! - [`contract`]: the async contract of streams (ordering, events, copies);
//! - [`decorate`]: a device decorator that refuses chosen ops (forces
//!   splits in multi-device tests);
//! - [`badinput`]: the bad-input suite (hostile input for every public
//!   entry point, run in child processes so crashes and hangs are counted);
//! - [`refdev`]: a device that computes with the reference (a self-check of
//!   the harness and a second device for multi-device tests);
//! - [`gated`]: a device whose streams run nothing until the host waits (a
//!   deterministic asynchronous device for the contract checks);
//! - [`sabotage`]: wrappers that break one guarantee of a device, to prove
//!   that a check notices.
//!
//! ```no_run
//! # fn demo(device: &dyn tessera::Device) {
//! let report = tessera_testkit::run_all(device, Some("MUL_MAT"));
//! println!("{report}");
//! assert_eq!(report.failed(), 0);
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod badinput;
pub mod block;
pub mod cases;
pub mod compare;
pub mod contract;
pub mod decorate;
pub mod gated;
pub mod harness;
pub mod refdev;
pub mod reference;
pub mod rng;
pub mod sabotage;
pub mod support;
pub mod tolerance;

pub use cases::{Built, Case, CaseGraph, Check, Init, catalogue};
pub use compare::{Comparison, compare_values};
pub use gated::GatedDevice;
pub use harness::{
    CaseReport, Outcome, Report, RunOptions, compare_with_reference, run_all, run_all_with,
    run_built, run_case,
};
pub use refdev::ReferenceDevice;
pub use support::support_listing;
pub use tolerance::Tolerance;
