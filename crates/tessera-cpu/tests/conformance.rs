//! The conformance harness (`tessera-testkit`) on the CPU device: every case
//! of the catalogue must be supported and must match the f64 reference, with
//! the default thread count, with 1 and 2 threads, and on every kernel family
//! (ISA) this machine can run — the scalar fallback included.
//!
//! `TESSERA_CONFORMANCE_FILTER=MUL_MAT cargo test -p tessera-cpu --test conformance`
//! runs a subset (an op name or part of a case name).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tessera_testkit::{Outcome, Report, RunOptions, run_all_with};

fn run(n_threads: Option<usize>) -> Report {
    run_with(n_threads, "")
}

fn run_with(n_threads: Option<usize>, stream_params: &str) -> Report {
    let filter = std::env::var("TESSERA_CONFORMANCE_FILTER").ok();
    let options = RunOptions {
        filter: filter.as_deref(),
        n_threads,
        stream_params,
    };
    let device = tessera_cpu::device();
    run_all_with(device.as_ref(), &options).expect("a CPU stream")
}

fn assert_all_pass(report: &Report, label: &str) {
    let unsupported: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Unsupported(why) => Some(format!("  {}: {why}", c.name)),
            _ => None,
        })
        .collect();
    let failed: Vec<String> = report
        .failures()
        .filter_map(|c| match &c.outcome {
            Outcome::Failed(why) => Some(format!("  {}: {why}", c.name)),
            _ => None,
        })
        .collect();
    println!(
        "{label}: {} in {:.2} s",
        report.summary(),
        report.duration().as_secs_f64()
    );
    assert!(!report.cases.is_empty(), "no case ran");
    assert!(
        unsupported.is_empty() && failed.is_empty(),
        "{label}: {} cases not supported by the CPU:\n{}\n{} cases failed:\n{}",
        unsupported.len(),
        unsupported.join("\n"),
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn every_case_passes_on_the_cpu() {
    let report = run(None);
    println!("{report}");
    assert_all_pass(&report, "default threads");
}

#[test]
fn every_case_passes_with_one_thread() {
    assert_all_pass(&run(Some(1)), "1 thread");
}

#[test]
fn every_case_passes_with_two_threads() {
    assert_all_pass(&run(Some(2)), "2 threads");
}

#[test]
fn every_case_passes_on_every_instruction_set() {
    let isas = tessera_cpu::isa::Isa::all_available();
    assert!(isas.contains(&tessera_cpu::isa::Isa::Scalar));
    for isa in isas {
        let params = format!("isa={}", isa.name());
        assert_all_pass(&run_with(Some(2), &params), &params);
    }
}
