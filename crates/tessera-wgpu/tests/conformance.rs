//! The conformance harness (every op case of `tessera-testkit`) on the wgpu
//! device: every case must be supported and must pass. A device that
//! declined cases would otherwise pass by running fewer of them, so coverage
//! is asserted like the CPU's (`crates/tessera-cpu/tests/conformance.rs`):
//! a case may be unsupported only if [`ALLOWED_UNSUPPORTED`] names it with a
//! reason.
//!
//! `TESSERA_CASES=MUL_MAT` runs a subset (an op name or part of a case
//! name); `TESSERA_CASE_TIMES=1` prints each case's time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera::Device;
use tessera_testkit::{Outcome, catalogue, run_all};

/// Cases the wgpu device may decline: `(case name, why)`. Every case of the
/// catalogue has a kernel (lavapipe included), so the list is empty. An
/// entry needs a justification here, and must go once the case is supported
/// (the test fails on an entry whose case runs).
const ALLOWED_UNSUPPORTED: &[(&str, &str)] = &[];

#[test]
fn every_case_is_supported_and_passes() {
    let Some(device) = common::device("every_case_is_supported_and_passes") else {
        return;
    };
    // CI runs lavapipe, which has subgroup operations: this run takes the
    // kernels' subgroup variants there (`conformance_no_subgroups.rs`: the
    // trees).
    if common::gpu_required()
        && device.adapter().software
        && std::env::var("TESSERA_WGPU_SUBGROUPS").map_or(true, |v| v.trim() != "0")
    {
        assert!(
            device.subgroup_size().is_some(),
            "the software adapter opened without subgroup operations"
        );
    }
    let filter = std::env::var("TESSERA_CASES").ok();
    let report = run_all(device.as_ref(), filter.as_deref());
    if std::env::var_os("TESSERA_CASE_TIMES").is_some() {
        for c in &report.cases {
            eprintln!("{:8.1} ms  {}", c.duration.as_secs_f64() * 1e3, c.name);
        }
    }
    let allowed = |name: &str| ALLOWED_UNSUPPORTED.iter().any(|(n, _)| *n == name);
    let mut unsupported = Vec::new();
    let mut failed = Vec::new();
    let mut stale = Vec::new();
    for c in &report.cases {
        match &c.outcome {
            Outcome::Unsupported(why) if !allowed(&c.name) => {
                unsupported.push(format!("  {}: {why}", c.name));
            }
            Outcome::Unsupported(_) => {}
            Outcome::Failed(why) => failed.push(format!("  {}: {why}", c.name)),
            Outcome::Passed { .. } if allowed(&c.name) => {
                stale.push(format!("  {} (now supported)", c.name));
            }
            Outcome::Passed { .. } => {}
        }
    }
    eprintln!(
        "{} in {:.1} s",
        report.summary(),
        report.duration().as_secs_f64()
    );
    let expected = catalogue()
        .iter()
        .filter(|c| c.matches(filter.as_deref()))
        .count();
    assert!(!report.cases.is_empty(), "no case ran (filter {filter:?})");
    assert_eq!(
        report.cases.len(),
        expected,
        "the report does not cover the catalogue: {}",
        report.summary()
    );
    assert!(
        unsupported.is_empty() && failed.is_empty() && stale.is_empty(),
        "{}\n{} cases not supported by {} (and not in ALLOWED_UNSUPPORTED):\n{}\n\
         {} cases failed:\n{}\n{} entries of ALLOWED_UNSUPPORTED to remove:\n{}",
        report.summary(),
        unsupported.len(),
        device.name(),
        unsupported.join("\n"),
        failed.len(),
        failed.join("\n"),
        stale.len(),
        stale.join("\n")
    );
    let declined = report.unsupported();
    assert!(
        declined <= ALLOWED_UNSUPPORTED.len(),
        "{declined} cases declined, at most {} allowed",
        ALLOWED_UNSUPPORTED.len()
    );
}
