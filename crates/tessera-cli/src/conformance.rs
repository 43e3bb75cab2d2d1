//! `tessera test` and `tessera support`: the conformance harness
//! (`tessera-testkit`) from the command line, like ggml's
//! `test-backend-ops test` and `test-backend-ops support`.

use std::process::ExitCode;
use std::sync::Arc;

use tessera::{Device, Registry, Result};
use tessera_testkit::harness::{Outcome, RunOptions, run_all_with};
use tessera_testkit::support::support_listing;

fn devices(name: Option<&str>) -> Result<Vec<Arc<dyn Device>>> {
    let reg = Registry::global();
    Ok(match name {
        Some(n) => vec![reg.device_by_name(n)?],
        None => reg.devices(),
    })
}

pub fn run_test(device: Option<&str>, filter: Option<&str>, verbose: bool) -> Result<ExitCode> {
    let mut ok = true;
    for d in devices(device)? {
        let report = run_all_with(
            d.as_ref(),
            &RunOptions {
                filter,
                ..RunOptions::default()
            },
        )?;
        if verbose {
            print!("{report}");
        } else {
            println!("Testing {} ({})", d.name(), d.description());
            for c in report.failures() {
                if let Outcome::Failed(why) = &c.outcome {
                    println!("  {}: FAIL\n    {why}", c.name);
                }
            }
        }
        println!("  {}", report.summary());
        ok &= report.failed() == 0;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn run_support() -> Result<ExitCode> {
    print!("{}", support_listing(&devices(None)?));
    Ok(ExitCode::SUCCESS)
}
