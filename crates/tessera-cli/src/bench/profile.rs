//! `tessera bench model --profile` / `--profile-prompt`: where a decoding
//! step's (or a prompt's) time goes, op by op, on each stream of the
//! session that can time its nodes: CPU
//! streams (`CpuStream::set_profiling`: wall time per node on thread 0) and
//! GPU streams (`WgpuStream::set_profiling`: GPU timestamps around every
//! dispatch, where the adapter has them).
//!
//! Decodes `n` tokens one at a time from an empty cache (or, for a prompt,
//! `n` tokens in one call) with every node timed, and prints per kind of
//! node (op, weight type, one column or more): milliseconds per token (per
//! prompt), share of the step, nodes per token (per prompt), and
//! for CPU streams how much of that time thread 0 waited at the barrier
//! after its share. The step's wall time is measured too: what the nodes do
//! not account for is the scheduler's and the host's (graph building,
//! copies, sampling) and, on a GPU, submission and synchronization.

use std::sync::Arc;
use std::time::Instant;

use tessera::profile::OpTime;
use tessera::{Result, Stream};
use tessera_cpu::CpuStream;
use tessera_llm::Session;
use tessera_wgpu::WgpuStream;

/// A stream that can time its nodes.
enum Profiled<'a> {
    Cpu(&'a CpuStream),
    Gpu(&'a WgpuStream),
}

impl<'a> Profiled<'a> {
    fn of(s: &'a Arc<dyn Stream>) -> Option<Self> {
        let any = s.as_any();
        if let Some(c) = any.downcast_ref::<CpuStream>() {
            return Some(Profiled::Cpu(c));
        }
        any.downcast_ref::<WgpuStream>()
            .filter(|g| g.can_profile())
            .map(Profiled::Gpu)
    }

    fn set(&self, on: bool) {
        match self {
            Profiled::Cpu(c) => c.set_profiling(on),
            Profiled::Gpu(g) => g.set_profiling(on),
        }
    }

    fn take(&self) -> Vec<OpTime> {
        match self {
            Profiled::Cpu(c) => c.take_profile(),
            Profiled::Gpu(g) => g.take_profile(),
        }
    }

    fn is_gpu(&self) -> bool {
        matches!(self, Profiled::Gpu(_))
    }
}

/// What is profiled.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Steps {
    /// `n` decoding steps, one token each.
    Decode,
    /// One prompt of `n` tokens.
    Prompt,
}

/// Profile `n` decoding steps (or one prompt of `n` tokens) of `session`,
/// each run after `depth` tokens already in the cache (evaluated untimed),
/// and print the table.
pub fn run(session: &mut Session, n: usize, what: Steps, depth: usize) -> Result<()> {
    let n = n.max(1);
    let streams: Vec<_> = session.scheduler().streams().to_vec();
    let mut timed = Vec::new();
    for s in &streams {
        match Profiled::of(s) {
            Some(p) => timed.push((s.name().to_string(), p)),
            None => println!(
                "(stream {} is not profiled: it cannot time its nodes)",
                s.name()
            ),
        }
    }
    let toks = super::model::tokens(n, session.model().n_vocab(), 7);
    let (steps, unit) = match what {
        Steps::Decode => (n, "token"),
        Steps::Prompt => (1, "prompt"),
    };
    super::model::prefill(session, depth, 7)?;
    // Warm-up (plans made, memory touched), then the measured steps.
    match what {
        Steps::Decode => session.decode(&toks[..1])?,
        Steps::Prompt => session.decode(&toks)?,
    };
    super::model::prefill(session, depth, 7)?;
    timed.iter().for_each(|(_, p)| p.set(true));
    let start = Instant::now();
    match what {
        Steps::Decode => {
            for &t in &toks {
                session.decode(&[t])?;
            }
        }
        Steps::Prompt => {
            session.decode(&toks)?;
        }
    }
    let wall = start.elapsed().as_secs_f64() * 1e3 / steps as f64;
    // (device, is GPU, totals), merged by what across streams of a device.
    let named = timed.len() > 1;
    let mut rows: Vec<(String, bool, OpTime)> = Vec::new();
    for (name, p) in &timed {
        for mut t in p.take() {
            if named {
                t.what = format!("{name}: {}", t.what);
            }
            match rows.iter_mut().find(|r| r.2.what == t.what) {
                Some(r) => {
                    r.2.calls += t.calls;
                    r.2.nanos += t.nanos;
                    r.2.wait_nanos += t.wait_nanos;
                }
                None => rows.push((name.clone(), p.is_gpu(), t)),
            }
        }
        p.set(false);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.2.nanos));
    let per_tok = |ns: u64| ns as f64 / 1e6 / steps as f64;
    // The GPU streams' host time is listed, but is not node time.
    let is_host = |r: &OpTime| r.what.ends_with(tessera_wgpu::HOST_PROFILE_LABEL);
    let nodes: f64 = rows
        .iter()
        .filter(|r| !is_host(&r.2))
        .map(|r| per_tok(r.2.nanos))
        .sum();
    let after = match depth {
        0 => String::new(),
        d => format!(" after {d} tokens in the cache"),
    };
    let title = match what {
        Steps::Decode => format!("{n} decoding steps{after}"),
        Steps::Prompt => format!("a prompt of {n} tokens{after}"),
    };
    println!(
        "\nProfile of {title}: {wall:.2} ms per {unit}, of which nodes {nodes:.2} ms \
         ({:.0} %), the rest scheduler and host{}",
        100.0 * nodes / wall.max(1e-9),
        if rows.iter().any(|r| r.1) {
            " (GPU nodes: time between the GPU timestamps around each dispatch)"
        } else {
            ""
        }
    );
    println!("| op | ms/{unit} | share | nodes/{unit} | waiting at barriers |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (_, gpu, r) in &rows {
        let ms = per_tok(r.nanos);
        let wait = if *gpu {
            "-".to_string()
        } else {
            format!(
                "{:.0} %",
                100.0 * r.wait_nanos as f64 / r.nanos.max(1) as f64
            )
        };
        println!(
            "| {} | {ms:.3} | {:.1} % | {:.1} | {wait} |",
            r.what,
            100.0 * ms / wall.max(1e-9),
            r.calls as f64 / steps as f64,
        );
    }
    let wait: f64 = rows.iter().map(|r| per_tok(r.2.wait_nanos)).sum();
    println!(
        "waiting at barriers in all: {wait:.2} ms per {unit} ({:.0} % of the step)",
        100.0 * wait / wall.max(1e-9)
    );
    Ok(())
}
