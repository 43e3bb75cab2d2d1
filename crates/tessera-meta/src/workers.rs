//! One persistent thread per device (but the first, which runs on the
//! caller's thread): a meta graph runs as tens of short per-device steps
//! per token (two per layer), so starting threads per step would cost
//! more than some steps. A worker waits for its next step spinning
//! briefly, then blocking; results come back the same way.

use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera::{Error, Result};

/// Work for one device: runs on its worker thread.
pub(crate) type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// How long a thread spins for a message before it blocks.
const SPIN: Duration = Duration::from_micros(20);

/// Receive a message, spinning for [`SPIN`] first.
fn recv<T>(rx: &Receiver<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(m) => return Some(m),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

/// A persistent worker thread.
pub(crate) struct Worker {
    jobs: Option<Sender<Job>>,
    done: Mutex<Receiver<Result<()>>>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Worker")
    }
}

impl Worker {
    /// A worker thread named `name`.
    pub fn spawn(name: String) -> Result<Worker> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while let Some(job) = recv(&job_rx) {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        .unwrap_or_else(|_| Err(Error::device("Meta", "a device step panicked")));
                    if done_tx.send(r).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::device("Meta", format!("starting a device thread: {e}")))?;
        Ok(Worker {
            jobs: Some(jobs),
            done: Mutex::new(done),
            handle: Some(handle),
        })
    }

    /// Start `job` on the worker.
    pub fn start(&self, job: Job) -> Result<()> {
        self.jobs
            .as_ref()
            .and_then(|j| j.send(job).ok())
            .ok_or_else(|| Error::device("Meta", "a device thread has stopped"))
    }

    /// The result of the job started last.
    pub fn wait(&self) -> Result<()> {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        recv(&done).unwrap_or_else(|| Err(Error::device("Meta", "a device thread has stopped")))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.jobs = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
