//! The conformance harness (every op case of `tessera-testkit`) on the wgpu
//! device: every case the device says it supports must pass.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera_testkit::{Outcome, run_all};

#[test]
fn every_supported_case_passes() {
    let Some(device) = common::device("every_supported_case_passes") else {
        return;
    };
    let filter = std::env::var("TESSERA_CASES").ok();
    let report = run_all(device.as_ref(), filter.as_deref());
    if std::env::var_os("TESSERA_CASE_TIMES").is_some() {
        for c in &report.cases {
            eprintln!("{:8.1} ms  {}", c.duration.as_secs_f64() * 1e3, c.name);
        }
    }
    for c in report.cases.iter().filter(|c| !c.outcome.is_passed()) {
        match &c.outcome {
            Outcome::Failed(why) => eprintln!("FAIL {}: {why}", c.name),
            Outcome::Unsupported(why) => eprintln!("unsupported {}: {why}", c.name),
            Outcome::Passed { .. } => {}
        }
    }
    eprintln!(
        "{} in {:.1} s",
        report.summary(),
        report.duration().as_secs_f64()
    );
    assert_eq!(report.failed(), 0, "{}", report.summary());
    assert!(report.passed() > 0, "no case ran: {}", report.summary());
}
