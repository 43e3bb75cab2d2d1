//! `tessera bench model --profile`: where a decoding step's time goes, op
//! by op, on each CPU stream of the session (`CpuStream::set_profiling`).
//!
//! Decodes `n` tokens one at a time from an empty cache with every node
//! timed, and prints per kind of node (op, weight type, one column or
//! more): milliseconds per token, share of the step, nodes per token, and
//! how much of that time thread 0 waited at the barrier after its share.
//! The step's wall time is measured too: what the nodes do not account for
//! is the scheduler's and the host's (graph building, copies, sampling).

use std::time::Instant;

use tessera::Result;
use tessera_cpu::CpuStream;
use tessera_llm::Session;

/// Profile `n` decoding steps of `session` and print the table.
pub fn run(session: &mut Session, n: usize) -> Result<()> {
    let n = n.max(1);
    let streams: Vec<_> = session.scheduler().streams().to_vec();
    let cpu: Vec<&CpuStream> = streams
        .iter()
        .filter_map(|s| s.as_any().downcast_ref::<CpuStream>())
        .collect();
    for s in &streams {
        if s.as_any().downcast_ref::<CpuStream>().is_none() {
            println!("(stream {} is not profiled: CPU streams only)", s.name());
        }
    }
    let toks = super::model::tokens(n, session.model().n_vocab(), 7);
    session.clear();
    // Warm-up (plans made, memory touched), then the measured steps.
    session.decode(&toks[..1])?;
    session.clear();
    cpu.iter().for_each(|s| s.set_profiling(true));
    let start = Instant::now();
    for &t in &toks {
        session.decode(&[t])?;
    }
    let wall = start.elapsed().as_secs_f64() * 1e3 / n as f64;
    let mut rows: Vec<tessera_cpu::OpTime> = Vec::new();
    for s in &cpu {
        for t in s.take_profile() {
            match rows.iter_mut().find(|r| r.what == t.what) {
                Some(r) => {
                    r.calls += t.calls;
                    r.nanos += t.nanos;
                    r.wait_nanos += t.wait_nanos;
                }
                None => rows.push(t),
            }
        }
        s.set_profiling(false);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.nanos));
    let per_tok = |ns: u64| ns as f64 / 1e6 / n as f64;
    let nodes: f64 = rows.iter().map(|r| per_tok(r.nanos)).sum();
    println!(
        "\nProfile of {n} decoding steps: {wall:.2} ms per token, of which nodes {nodes:.2} ms \
         ({:.0} %), the rest scheduler and host",
        100.0 * nodes / wall.max(1e-9)
    );
    println!("| op | ms/token | share | nodes/token | waiting at barriers |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let ms = per_tok(r.nanos);
        println!(
            "| {} | {ms:.3} | {:.1} % | {:.1} | {:.0} % |",
            r.what,
            100.0 * ms / wall.max(1e-9),
            r.calls as f64 / n as f64,
            100.0 * r.wait_nanos as f64 / r.nanos.max(1) as f64
        );
    }
    let wait: f64 = rows.iter().map(|r| per_tok(r.wait_nanos)).sum();
    println!(
        "waiting at barriers in all: {wait:.2} ms per token ({:.0} % of the step)",
        100.0 * wait / wall.max(1e-9)
    );
    Ok(())
}
