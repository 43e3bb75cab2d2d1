//! A persistent thread pool with a spin-then-park wake-up and a spinning
//! barrier, built for per-node synchronisation of graph compute.
//!
//! Graph compute on the CPU works as in ggml: every thread walks the whole
//! graph, computes its share of each node, and meets the others at a barrier
//! before the next node. Per-node cost is therefore the barrier's cost, so
//! the barrier spins (an atomic counter and a phase flag) instead of sleeping.
//! Between computes, workers spin for a short while and then park, so an idle
//! pool costs no CPU.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Spins before a waiting worker parks (about 50-100 µs).
const SPIN_BEFORE_PARK: u32 = 100_000;
/// Spins inside a barrier before yielding the core to the OS.
const SPIN_BEFORE_YIELD: u32 = 10_000;

/// Most threads a pool may have: 512, ggml's `GGML_MAX_N_THREADS`. Larger
/// counts are refused before any thread starts (a typo like `threads=100000`
/// would otherwise start threads until the OS says no).
pub const MAX_THREADS: usize = tessera::stream_options::MAX_THREADS;

/// A reusable barrier for the `n` threads of one job.
#[derive(Debug)]
pub struct Barrier {
    n: AtomicUsize,
    arrived: AtomicUsize,
    phase: AtomicUsize,
    poisoned: AtomicBool,
}

impl Barrier {
    /// A barrier for one thread (reset it before using it for more).
    pub(crate) const fn new() -> Self {
        Barrier {
            n: AtomicUsize::new(1),
            arrived: AtomicUsize::new(0),
            phase: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    fn reset(&self, n: usize) {
        self.n.store(n, Ordering::Relaxed);
        self.arrived.store(0, Ordering::Relaxed);
        self.poisoned.store(false, Ordering::Relaxed);
    }

    /// Release every waiter for good: a thread of the job panicked and will
    /// never arrive. Waiters return at once; check [`Barrier::is_poisoned`].
    pub fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// A thread of the job panicked; the job's shared state is unreliable.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Block until all threads of the job have called `wait` this many times.
    /// Memory written before the call by any thread is visible after it to all.
    pub fn wait(&self) {
        let n = self.n.load(Ordering::Relaxed);
        if n <= 1 {
            return;
        }
        let phase = self.phase.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.arrived.store(0, Ordering::Relaxed);
            self.phase.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let mut spins = 0u32;
        while self.phase.load(Ordering::Acquire) == phase && !self.is_poisoned() {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPIN_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What one thread of a job gets: its index, the thread count, the barrier.
#[derive(Debug, Clone, Copy)]
pub struct WorkerCtx<'a> {
    /// This thread's index, `0..nth`; 0 is the calling thread.
    pub ith: usize,
    /// Threads in the job.
    pub nth: usize,
    /// The job's barrier.
    pub barrier: &'a Barrier,
}

type Job<'a> = &'a (dyn Fn(WorkerCtx<'_>) + Sync);

struct Shared {
    /// The current job, valid while `run` is executing it. Only read by
    /// workers between seeing a new `generation` and incrementing `finished`.
    job: UnsafeCell<Option<Job<'static>>>,
    nth: AtomicUsize,
    generation: AtomicUsize,
    finished: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    barrier: Barrier,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread inside `ThreadPool::run` while
// no worker reads it (before the generation bump, after all workers finished),
// and the pointee is `Sync`. Every other field is a sync primitive.
unsafe impl Sync for Shared {}
// SAFETY: see `Sync`; the raw job reference is only used under that protocol.
unsafe impl Send for Shared {}

/// A pool of `n - 1` worker threads; the caller is thread 0.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &(self.workers.len() + 1))
            .finish()
    }
}

impl ThreadPool {
    /// A pool for jobs of up to `n_threads` threads (at least 1, at most
    /// [`MAX_THREADS`]). Fails with `InvalidInput` above the cap, and with
    /// the OS error if it refuses to start a thread; either way no thread is
    /// left behind (the ones already started are stopped and joined).
    pub fn new(n_threads: usize) -> std::io::Result<Self> {
        let n = n_threads.max(1);
        if n > MAX_THREADS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{n} threads requested, at most {MAX_THREADS} are allowed"),
            ));
        }
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(None),
            nth: AtomicUsize::new(1),
            generation: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            barrier: Barrier::new(),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        // Built before the workers: if a spawn fails, dropping `pool` on the
        // early return tells the started workers to stop and joins them.
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(n - 1),
            run_lock: Mutex::new(()),
        };
        for ith in 1..n {
            let s = pool.shared.clone();
            let h = spawn_worker(ith, move || worker_loop(&s, ith))?;
            pool.workers.push(h);
        }
        Ok(pool)
    }

    /// Most threads a job can use.
    pub fn max_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Run `job` on `nth` threads (clamped to the pool size), the caller being
    /// thread 0; returns when every thread has finished. Returns `false` if a
    /// thread panicked (the pool stays usable).
    pub fn run(&self, nth: usize, job: &(dyn Fn(WorkerCtx<'_>) + Sync)) -> bool {
        let nth = nth.clamp(1, self.max_threads());
        let _guard = self.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let s = &*self.shared;
        s.barrier.reset(nth);
        s.panicked.store(false, Ordering::Relaxed);
        if nth == 1 {
            return catch_unwind(AssertUnwindSafe(|| {
                job(WorkerCtx {
                    ith: 0,
                    nth: 1,
                    barrier: &s.barrier,
                })
            }))
            .is_ok();
        }
        // SAFETY: the lifetime is erased only for the duration of this call:
        // we wait below until every worker has finished with the job before
        // returning, and clear the slot before releasing `run_lock`.
        let erased: Job<'static> = unsafe { std::mem::transmute::<Job<'_>, Job<'static>>(job) };
        // SAFETY: no worker reads `job` now: all finished the previous
        // generation (waited for below) and the next one is not published yet.
        unsafe { *s.job.get() = Some(erased) };
        s.nth.store(nth, Ordering::Relaxed);
        s.finished.store(0, Ordering::Relaxed);
        {
            let _l = s.sleep_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.generation.fetch_add(1, Ordering::AcqRel);
            s.wake.notify_all();
        }
        let main_ok = catch_unwind(AssertUnwindSafe(|| {
            job(WorkerCtx {
                ith: 0,
                nth,
                barrier: &s.barrier,
            })
        }))
        .is_ok();
        if !main_ok {
            s.barrier.poison();
        }
        let workers = self.workers.len();
        let mut spins = 0u32;
        while s.finished.load(Ordering::Acquire) < workers {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPIN_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: every worker has finished (counted above); nobody reads the slot.
        unsafe { *s.job.get() = None };
        main_ok && !s.panicked.load(Ordering::Relaxed)
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _l = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Start worker `ith`. Under `cfg(test)`, `tests::fail_spawn_at` can make
/// a chosen spawn fail on the calling thread.
fn spawn_worker(ith: usize, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    #[cfg(test)]
    tests::refuse_spawn(ith)?;
    std::thread::Builder::new()
        .name(format!("tessera-cpu-{ith}"))
        .spawn(f)
}

fn worker_loop(s: &Shared, ith: usize) {
    let mut seen = 0usize;
    loop {
        // Wait for a new generation: spin, then park on the condvar.
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if spins < SPIN_BEFORE_PARK {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let guard = s.sleep_lock.lock().unwrap_or_else(|p| p.into_inner());
            if s.generation.load(Ordering::Acquire) == seen {
                let _g = s.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        let nth = s.nth.load(Ordering::Relaxed);
        if ith < nth {
            // SAFETY: the job was published before the generation bump we
            // observed with Acquire, and stays valid until we bump `finished`.
            if let Some(job) = unsafe { *s.job.get() } {
                let ok = catch_unwind(AssertUnwindSafe(|| {
                    job(WorkerCtx {
                        ith,
                        nth,
                        barrier: &s.barrier,
                    })
                }))
                .is_ok();
                if !ok {
                    s.panicked.store(true, Ordering::Relaxed);
                    s.barrier.poison();
                }
            }
        }
        s.finished.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
