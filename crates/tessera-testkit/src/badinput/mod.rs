//! The bad-input suite: Tessera's promise is that anything a user feeds it
//! returns `Err` (or a correct `Ok`), never a panic, abort, segfault, hang
//! or leaked thread. This module holds the cases that try to break it and
//! the runner that survives them.
//!
//! - [`runner`]: runs each group of cases in child processes, so that a
//!   crash or a hang is counted rather than fatal, and prints one summary
//!   line per group (`group: N cases, ok A, err B, panic 0, crash 0, ...`);
//! - [`strategies`]: proptest strategies for hostile inputs (shapes, dtypes,
//!   strides, offsets, option strings), sampled with a fixed seed so every
//!   run (and the parent and child of one run) sees the same cases;
//! - case groups, each a function returning a [`Group`]:
//!   [`core_groups`] (tessera-core: layouts, types, quantization, the graph
//!   builder), [`object_groups`] (tessera without a device: tensors, host
//!   buffers, placements, stream options, allocators) and
//!   [`device_groups`] (any [`tessera::Device`]: buffers, streams, events,
//!   compute, allocators on its buffer type).
//!
//! A case returns a [`Verdict`]: `Ok`, `Err` (the library refused, which is
//! what bad input should get) or `Wrong` (an `Ok` that is not correct, e.g.
//! bytes written outside a result or an absurd allocation that succeeded).

pub mod runner;
pub mod strategies;

mod alloc_cases;
mod core_cases;
mod device_cases;
mod device_compute;
mod graph_cases;
mod object_cases;

use std::fmt;
use std::sync::Arc;

pub use core_cases::core_groups;
pub use device_cases::{DeviceProvider, device_groups};
pub use object_cases::object_groups;
pub use runner::{GroupSummary, Options, run_suite};

/// What a case says about the call it made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The call succeeded (and the case found the result correct).
    Ok,
    /// The call returned an error (message).
    Err(String),
    /// The call succeeded but broke its contract (what was wrong).
    Wrong(String),
}

impl<T> From<tessera::Result<T>> for Verdict {
    fn from(r: tessera::Result<T>) -> Self {
        match r {
            Ok(_) => Verdict::Ok,
            Err(e) => Verdict::Err(e.to_string()),
        }
    }
}

/// Why a case stopped early: a library error (the verdict is `Err`) or a
/// contract violation found by the case (`Wrong`). Lets cases use `?`.
#[derive(Debug)]
pub enum Stop {
    /// The library refused.
    Lib(tessera::Error),
    /// The case found a broken contract.
    Wrong(String),
}

impl From<tessera::Error> for Stop {
    fn from(e: tessera::Error) -> Self {
        Stop::Lib(e)
    }
}

impl From<Result<(), Stop>> for Verdict {
    fn from(r: Result<(), Stop>) -> Self {
        match r {
            Ok(()) => Verdict::Ok,
            Err(Stop::Lib(e)) => Verdict::Err(e.to_string()),
            Err(Stop::Wrong(m)) => Verdict::Wrong(m),
        }
    }
}

/// `Err(Stop::Wrong(msg))` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Stop> {
    if cond {
        Ok(())
    } else {
        Err(Stop::Wrong(msg()))
    }
}

/// A setup step that must succeed for the case to mean anything: its error
/// is a broken case (`Wrong`), not the library refusing bad input.
pub fn setup<T>(r: tessera::Result<T>) -> Result<T, Stop> {
    r.map_err(|e| Stop::Wrong(format!("case setup failed: {e}")))
}

/// The call must fail: `Ok` is `Wrong(msg)`, an error is the verdict `Err`.
pub fn must_fail<T>(r: tessera::Result<T>, msg: &str) -> Result<(), Stop> {
    match r {
        Ok(_) => Err(Stop::Wrong(format!("expected an error: {msg}"))),
        Err(e) => Err(Stop::Lib(e)),
    }
}

/// One case: a name and the code that runs it.
pub struct Case {
    /// What the case does, with its inputs (one line).
    pub name: String,
    /// Runs the case.
    pub run: Box<dyn FnOnce() -> Verdict + Send>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

impl Case {
    /// A case named `name` whose code returns anything convertible to a
    /// [`Verdict`] (a `tessera::Result`, or a `Result<(), Stop>`).
    pub fn new<V: Into<Verdict>>(
        name: impl Into<String>,
        run: impl FnOnce() -> V + Send + 'static,
    ) -> Self {
        Case {
            name: name.into(),
            run: Box::new(move || run().into()),
        }
    }
}

/// Builds a group's case list (deterministically: the parent and each child
/// build it again and must agree).
pub type Builder = Arc<dyn Fn() -> Vec<Case> + Send + Sync>;

/// Runs once in each child before its first case (e.g. opening a device, so
/// that threads it starts are not blamed on a case).
pub type Setup = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A named list of cases, run in one child process at a time.
#[derive(Clone)]
pub struct Group {
    /// Name, as printed in the summary.
    pub name: String,
    /// Per-child setup.
    pub setup: Option<Setup>,
    /// The case list.
    pub build: Builder,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group").field("name", &self.name).finish()
    }
}

impl Group {
    /// A group without setup.
    pub fn new(name: &str, build: impl Fn() -> Vec<Case> + Send + Sync + 'static) -> Self {
        Group {
            name: name.to_owned(),
            setup: None,
            build: Arc::new(build),
        }
    }

    /// The same group with a per-child setup step.
    pub fn with_setup(
        mut self,
        setup: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.setup = Some(Arc::new(setup));
        self
    }
}

/// What happened to one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded.
    Ok,
    /// The call returned an error.
    Err(String),
    /// A panic, on the case's thread or any other.
    Panic(String),
    /// The child process died (abort, signal, exit) during the case.
    Crash(String),
    /// The case ran past the timeout and the child was killed.
    Hang(String),
    /// The call succeeded but broke its contract.
    Wrong(String),
    /// Threads started by the case were still running after it.
    Leak(String),
}

impl Outcome {
    /// `ok`, `err`, `panic`, `crash`, `hang`, `wrong` or `leak`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Err(_) => "err",
            Outcome::Panic(_) => "panic",
            Outcome::Crash(_) => "crash",
            Outcome::Hang(_) => "hang",
            Outcome::Wrong(_) => "wrong",
            Outcome::Leak(_) => "leak",
        }
    }

    /// Anything but `ok` and `err`.
    pub fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Ok | Outcome::Err(_))
    }

    fn message(&self) -> &str {
        match self {
            Outcome::Ok => "",
            Outcome::Err(m)
            | Outcome::Panic(m)
            | Outcome::Crash(m)
            | Outcome::Hang(m)
            | Outcome::Wrong(m)
            | Outcome::Leak(m) => m,
        }
    }

    /// The child's one-line form: `kind message`.
    fn encode(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            o => format!("{} {}", o.kind(), runner::one_line(o.message())),
        }
    }

    /// Inverse of `encode`; anything unreadable is a crash.
    fn decode(s: &str) -> Outcome {
        let (kind, msg) = s.split_once(' ').unwrap_or((s, ""));
        let msg = msg.to_owned();
        match kind {
            "ok" => Outcome::Ok,
            "err" => Outcome::Err(msg),
            "panic" => Outcome::Panic(msg),
            "crash" => Outcome::Crash(msg),
            "hang" => Outcome::Hang(msg),
            "wrong" => Outcome::Wrong(msg),
            "leak" => Outcome::Leak(msg),
            _ => Outcome::Crash(format!("unreadable outcome '{s}'")),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            o => write!(f, "{} {}", o.kind(), o.message()),
        }
    }
}
