//! Every conformance case scheduled over the GPU and the CPU (lavapipe in
//! CI), whole on the GPU and with the checked nodes pinned to the CPU
//! (copies both ways), agrees with the case on the CPU alone: bit for bit
//! where the harness demands exactness, otherwise within four times the
//! case's NMSE threshold (both devices differ from the reference by up to
//! the threshold).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{Device, Placement, Scheduler, SchedulerOptions, StreamOptions, Tensor};
use tessera_testkit::harness::initial_leaves;
use tessera_testkit::{Built, Tolerance, catalogue};

fn run(built: &Built, devs: &[Arc<dyn Device>], pin_checks: bool) -> Vec<Tensor> {
    let g = &built.graph;
    let streams = devs
        .iter()
        .map(|d| {
            let o = if d.name() == "CPU" {
                StreamOptions::new().threads(2)
            } else {
                StreamOptions::new()
            };
            d.new_stream(&o).unwrap()
        })
        .collect();
    let mut sc = Scheduler::new(streams, SchedulerOptions::default()).unwrap();
    if pin_checks {
        for c in &built.checks {
            if !g.node(c.id).unwrap().op.is_view() {
                sc.pin(c.id, devs.len() - 1).unwrap();
            }
        }
    }
    let mut p = Placement::new(g);
    sc.alloc_graph(g, &mut p).unwrap();
    for (id, bytes) in initial_leaves(built, 7).unwrap() {
        p.tensor(g, id).unwrap().write(0, &bytes).unwrap();
    }
    sc.compute(g, &p).unwrap();
    built
        .checks
        .iter()
        .map(|c| p.tensor(g, c.id).unwrap())
        .collect()
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (f64::from(*g) - f64::from(*w)).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

#[test]
fn every_case_scheduled_over_gpu_and_cpu_agrees_with_the_cpu() {
    let Some(gpu) = common::device("every_case_scheduled_over_gpu_and_cpu_agrees_with_the_cpu")
    else {
        return;
    };
    let gpu: Arc<dyn Device> = gpu;
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let (mut cases, mut compared) = (0, 0);
    for case in catalogue() {
        let built = case.build().unwrap();
        let g = &built.graph;
        if g.op_ids()
            .any(|id| !cpu.supports_op(g, id) || !gpu.supports_op(g, id))
        {
            continue;
        }
        let want = run(&built, std::slice::from_ref(&cpu), false);
        for (what, pin) in [
            ("all on the GPU", false),
            ("checks pinned to the CPU", true),
        ] {
            let got = run(&built, &[gpu.clone(), cpu.clone()], pin);
            for ((c, gt), wt) in built.checks.iter().zip(&got).zip(&want) {
                let ctx = format!("{} ({what}), node {}", case.name, c.id);
                match c.tolerance {
                    Tolerance::Exact => {
                        assert_eq!(gt.to_bytes().unwrap(), wt.to_bytes().unwrap(), "{ctx}");
                    }
                    Tolerance::Nmse(t) => {
                        if !gt.layout().is_contiguous() {
                            continue;
                        }
                        let e = nmse(&gt.read_f32().unwrap(), &wt.read_f32().unwrap());
                        assert!(e <= 4.0 * t, "{ctx}: NMSE {e:e} above 4 x {t:e}");
                    }
                }
                compared += 1;
            }
        }
        cases += 1;
    }
    assert!(cases > 300, "only {cases} cases ran");
    eprintln!("{cases} cases, {compared} checks compared");
}
