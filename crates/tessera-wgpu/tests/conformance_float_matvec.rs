//! The MUL_MAT cases of the conformance harness with the integer
//! few-column products off (`TESSERA_WGPU_MV_Q8=0`): the float row-group
//! and general kernels still take every weight type where the integer
//! kernel is off or does not apply, and the default run of the catalogue
//! (`conformance.rs`) sends Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K to the
//! integer kernel instead. Its own test binary, so that the switch is read
//! by this process alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera_testkit::{Outcome, run_all};

#[test]
fn mul_mat_cases_pass_on_the_float_kernels() {
    // SAFETY: the only test of this binary, and no other thread of it reads
    // the environment yet (the device is opened below, after the write).
    unsafe { std::env::set_var("TESSERA_WGPU_MV_Q8", "0") };
    let Some(device) = common::device("mul_mat_cases_pass_on_the_float_kernels") else {
        return;
    };
    let report = run_all(device.as_ref(), Some("MUL_MAT("));
    let failed: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Passed { .. } => None,
            other => Some(format!("  {}: {other:?}", c.name)),
        })
        .collect();
    eprintln!("{}", report.summary());
    assert!(report.cases.len() > 100, "{}", report.summary());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
