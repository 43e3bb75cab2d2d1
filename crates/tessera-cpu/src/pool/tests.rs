//! Unit tests of the pool: jobs and barriers, panics, and that a pool that
//! cannot be built leaves no thread behind (a count above [`MAX_THREADS`],
//! or a spawn the OS refuses half-way, forced here by [`fail_spawn_at`]).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::cell::Cell;
use std::time::{Duration, Instant};

use tessera::{Error, Stream};

use super::*;
use crate::isa::Isa;
use crate::stream::CpuStream;

thread_local! {
    /// The worker index whose spawn fails on this thread (test hook).
    static FAIL_SPAWN_AT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Make the spawn of worker `ith` fail for pools built on this thread
/// (`None`: spawn normally).
pub(super) fn fail_spawn_at(ith: Option<usize>) {
    FAIL_SPAWN_AT.with(|c| c.set(ith));
}

/// The hook called before each spawn: `Err` for the chosen worker.
pub(super) fn refuse_spawn(ith: usize) -> std::io::Result<()> {
    if FAIL_SPAWN_AT.with(Cell::get) == Some(ith) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("test hook: refusing to start worker {ith}"),
        ));
    }
    Ok(())
}

/// Threads of this process, from `/proc/self/status` (Linux only).
fn process_threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Wait (up to 2 s: a joined thread is gone at once, a leaked one never
/// goes) for the process to have `want` threads; returns the last count.
fn settle_at(want: usize) -> usize {
    let start = Instant::now();
    loop {
        let now = process_threads().unwrap_or(0);
        if now == want || start.elapsed() > Duration::from_secs(2) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const ALONE: &str = "TESSERA_POOL_TEST_ALONE";

/// Thread counts are process-wide and other tests start threads in
/// parallel, so a counting test reruns itself alone in a child process.
/// Returns the baseline thread count when this is that child (run the body),
/// `None` in the parent (the child's result was checked) and where threads
/// cannot be counted.
fn alone(test: &str) -> Option<usize> {
    let baseline = process_threads()?;
    if std::env::var_os(ALONE).is_some() {
        return Some(baseline);
    }
    let name = format!("pool::tests::{test}");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed alone:\n{text}");
    assert!(text.contains("1 passed"), "{name} did not run:\n{text}");
    None
}

#[test]
fn every_thread_runs_and_barriers_order_phases() {
    let pool = ThreadPool::new(4).unwrap();
    for nth in 1..=4 {
        let hits = AtomicUsize::new(0);
        let phase_ok = AtomicBool::new(true);
        let ok = pool.run(nth, &|w| {
            for round in 0..50 {
                hits.fetch_add(1, Ordering::SeqCst);
                w.barrier.wait();
                if hits.load(Ordering::SeqCst) != (round + 1) * w.nth {
                    phase_ok.store(false, Ordering::SeqCst);
                }
                w.barrier.wait();
            }
        });
        assert!(ok);
        assert_eq!(hits.load(Ordering::SeqCst), 50 * nth);
        assert!(phase_ok.load(Ordering::SeqCst));
    }
}

#[test]
fn a_panicking_job_is_reported_and_the_pool_survives() {
    let pool = ThreadPool::new(2).unwrap();
    let ok = pool.run(2, &|w| {
        if w.ith == 1 {
            panic!("boom");
        }
        // Thread 0 would wait forever without the poisoning.
        w.barrier.wait();
    });
    assert!(!ok);
    let count = AtomicUsize::new(0);
    assert!(pool.run(2, &|_| {
        count.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[test]
fn a_failed_build_stops_and_joins_the_threads_it_started() {
    let Some(base) = alone("a_failed_build_stops_and_joins_the_threads_it_started") else {
        return;
    };
    // The count sees a pool's workers (so the checks below can fail).
    let pool = ThreadPool::new(8).unwrap();
    assert_eq!(settle_at(base + 7), base + 7);
    drop(pool);
    assert_eq!(settle_at(base), base);
    for fail_at in [1, 2, 5, 7] {
        fail_spawn_at(Some(fail_at));
        let err = ThreadPool::new(8).unwrap_err();
        fail_spawn_at(None);
        assert!(err.to_string().contains("refusing"), "{err}");
        assert_eq!(
            settle_at(base),
            base,
            "spawn {fail_at} failed: threads leaked"
        );
    }
    // The hook is off again: pools build and work.
    let pool = ThreadPool::new(3).unwrap();
    let count = AtomicUsize::new(0);
    assert!(pool.run(3, &|_| {
        count.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[test]
fn counts_above_the_cap_start_no_thread() {
    let Some(base) = alone("counts_above_the_cap_start_no_thread") else {
        return;
    };
    for n in [MAX_THREADS + 1, 100_000, usize::MAX] {
        let err = ThreadPool::new(n).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        let msg = err.to_string();
        assert!(msg.contains(&n.to_string()) && msg.contains("512"), "{msg}");
        assert_eq!(process_threads(), Some(base), "{n} threads");
    }
}

fn names_count_and_cap(r: Result<impl std::fmt::Debug, Error>, n: usize) {
    match r {
        Err(e @ Error::Unsupported { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&n.to_string()) && msg.contains(&MAX_THREADS.to_string()),
                "{msg}"
            );
        }
        other => panic!("{n} threads: expected Unsupported, got {other:?}"),
    }
}

#[test]
fn streams_refuse_100000_threads_quickly_and_keep_no_thread() {
    let dev = crate::device();
    let Some(base) = alone("streams_refuse_100000_threads_quickly_and_keep_no_thread") else {
        return;
    };
    let start = Instant::now();
    names_count_and_cap(
        dev.new_cpu_stream(&tessera::StreamOptions::new().threads(100_000)),
        100_000,
    );
    names_count_and_cap(
        dev.new_cpu_stream(&tessera::StreamOptions::new().threads(513)),
        513,
    );
    names_count_and_cap(CpuStream::new(dev.clone(), 100_000, Isa::Scalar), 100_000);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(settle_at(base), base);

    let s = dev
        .new_cpu_stream(
            &tessera::StreamOptions::new()
                .threads(2)
                .set("isa", "scalar"),
        )
        .unwrap();
    assert_eq!(settle_at(base + 1), base + 1);
    names_count_and_cap(s.set_n_threads(100_000), 100_000);
    assert_eq!(s.n_threads(), 2, "a refused count changes nothing");
    assert_eq!(settle_at(base + 1), base + 1);
    // A spawn failing half-way through growing the pool: the old pool stays.
    fail_spawn_at(Some(4));
    let err = s.set_n_threads(6).unwrap_err();
    fail_spawn_at(None);
    assert!(err.to_string().contains("refusing"), "{err}");
    assert_eq!(s.n_threads(), 2);
    assert_eq!(settle_at(base + 1), base + 1, "threads leaked");
    s.set_n_threads(6).unwrap();
    assert_eq!(settle_at(base + 5), base + 5);
    drop(s);
    assert_eq!(settle_at(base), base);
}
