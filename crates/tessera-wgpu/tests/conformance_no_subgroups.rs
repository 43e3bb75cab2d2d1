//! The conformance harness with the kernels' reductions by trees in
//! workgroup memory (`TESSERA_WGPU_SUBGROUPS=0`), the kernels of devices
//! without subgroup operations: the default run (`conformance.rs`) takes
//! the subgroup variants where the adapter has them (lavapipe has). Its
//! own test binary, so that the switch is read by this process alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera_testkit::{Outcome, run_all};

#[test]
fn every_case_passes_with_reductions_by_trees() {
    // SAFETY: the only test of this binary, and no other thread of it reads
    // the environment yet (the device is opened below, after the write).
    unsafe { std::env::set_var("TESSERA_WGPU_SUBGROUPS", "0") };
    let Some(device) = common::device("every_case_passes_with_reductions_by_trees") else {
        return;
    };
    assert_eq!(
        device.subgroup_size(),
        None,
        "the switch opens the device without them"
    );
    let report = run_all(device.as_ref(), None);
    let failed: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Passed { .. } => None,
            other => Some(format!("  {}: {other:?}", c.name)),
        })
        .collect();
    eprintln!("{}", report.summary());
    assert!(report.cases.len() > 900, "{}", report.summary());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
