//! Every conformance case scheduled over two devices (the decorator device,
//! then the CPU) gives, byte for byte, what the CPU alone gives (both run
//! the CPU's kernels, so any difference is the scheduler's: a wrong copy, a
//! wrong placement, memory reused too early). Three layouts per case: all
//! on the decorator; the checked ops refused by it (they run on the CPU,
//! with copies in and out); the checked ops pinned to the CPU while the
//! decorator runs the rest.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::{Device, Graph, Placement, Scheduler, SchedulerOptions, StreamOptions, TensorId};
use tessera_testkit::decorate::Refusing;
use tessera_testkit::harness::initial_leaves;
use tessera_testkit::{Built, catalogue};

fn run(built: &Built, devs: &[Arc<dyn Device>], pin_checks: bool) -> tessera::Result<Vec<Vec<u8>>> {
    let g = &built.graph;
    let streams = devs
        .iter()
        .map(|d| d.new_stream(&StreamOptions::new().threads(2)))
        .collect::<tessera::Result<Vec<_>>>()?;
    let mut sc = Scheduler::new(streams, SchedulerOptions::default())?;
    if pin_checks {
        for c in &built.checks {
            if !g.node(c.id)?.op.is_view() {
                sc.pin(c.id, devs.len() - 1)?;
            }
        }
    }
    let mut p = Placement::new(g);
    sc.alloc_graph(g, &mut p)?;
    for (id, bytes) in initial_leaves(built, 7)? {
        p.tensor(g, id)?.write(0, &bytes)?;
    }
    sc.compute(g, &p)?;
    built
        .checks
        .iter()
        .map(|c| p.tensor(g, c.id)?.to_bytes())
        .collect()
}

#[test]
fn every_case_scheduled_over_two_devices_matches_the_cpu() {
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let mut cases = 0;
    for case in catalogue() {
        let built = case.build().unwrap();
        let g = &built.graph;
        if g.op_ids().any(|id| !cpu.supports_op(g, id)) {
            continue;
        }
        let want = run(&built, std::slice::from_ref(&cpu), false).unwrap();
        let checked: Vec<TensorId> = built.checks.iter().map(|c| c.id).collect();
        let all: Arc<dyn Device> = Refusing::new(cpu.clone(), "DEC", |_: &Graph, _| false);
        let refusing: Arc<dyn Device> = Refusing::new(cpu.clone(), "DEC", move |_: &Graph, id| {
            checked.contains(&id)
        });
        for (what, devs, pin) in [
            ("all on DEC", vec![all.clone(), cpu.clone()], false),
            ("checked ops refused", vec![refusing, cpu.clone()], false),
            (
                "checked ops pinned to the CPU",
                vec![all, cpu.clone()],
                true,
            ),
        ] {
            let got =
                run(&built, &devs, pin).unwrap_or_else(|e| panic!("{} ({what}): {e}", case.name));
            assert!(
                got == want,
                "{} ({what}): differs from the CPU alone",
                case.name
            );
        }
        cases += 1;
    }
    assert!(cases > 300, "only {cases} cases ran");
    eprintln!("{cases} cases, each in 3 layouts");
}
