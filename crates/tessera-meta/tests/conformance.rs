//! The conformance harness on meta devices: every case of the catalogue,
//! with its inputs cut along pseudo-random axes into pseudo-random shares
//! (empty ones included), must match the f64 reference as on one device.
//! This runs every split rule (and the gathers and reductions they need)
//! on every op case.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::Device;
use tessera_meta::{MetaDevice, MetaOptions, SplitPolicy};
use tessera_testkit::{Outcome, RunOptions, run_all_with};

fn meta(n: usize, seed: Option<u64>) -> Arc<MetaDevice> {
    let cpu = tessera_cpu::device();
    MetaDevice::new(
        vec![cpu; n],
        SplitPolicy::even(n).unwrap(),
        MetaOptions { split_inputs: seed },
    )
    .unwrap()
}

fn check(device: &dyn Device, label: &str) {
    let filter = std::env::var("TESSERA_CONFORMANCE_FILTER").ok();
    let options = RunOptions {
        filter: filter.as_deref(),
        n_threads: Some(1),
        stream_params: "",
    };
    let report = run_all_with(device, &options).expect("a meta stream");
    let bad: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Passed { .. } => None,
            other => Some(format!("  {}: {other:?}", c.name)),
        })
        .collect();
    println!("{label}: {}", report.summary());
    assert!(!report.cases.is_empty(), "no case ran");
    assert!(
        bad.is_empty(),
        "{label}: {} cases did not pass:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_case_on_two_cpus_with_mirrored_inputs() {
    check(meta(2, None).as_ref(), "meta(cpu, cpu), mirrored inputs");
}

#[test]
fn every_case_on_two_cpus_with_split_inputs() {
    for seed in [1, 2] {
        check(
            meta(2, Some(seed)).as_ref(),
            &format!("meta(cpu, cpu), inputs split (seed {seed})"),
        );
    }
}

#[test]
fn every_case_on_three_cpus_with_split_inputs() {
    check(
        meta(3, Some(7)).as_ref(),
        "meta(cpu x3), inputs split (seed 7)",
    );
}
