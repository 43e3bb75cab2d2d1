//! The conformance harness on meta devices: every case of the catalogue,
//! with its inputs cut along pseudo-random axes into pseudo-random shares
//! (empty ones included), must match the f64 reference as on one device.
//! This runs every split rule (and the gathers and reductions they need)
//! on every op case: over two and three CPU devices, over the CPU and the
//! GPU (lavapipe in CI), and over two logical GPU devices with uneven
//! shares.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::Device;
use tessera_meta::{AllReduce, MetaDevice, MetaOptions, SplitPolicy};
use tessera_testkit::{Outcome, RunOptions, run_all_with};

fn meta(n: usize, seed: Option<u64>) -> Arc<MetaDevice> {
    meta_with(n, seed, AllReduce::Auto)
}

fn meta_with(n: usize, seed: Option<u64>, all_reduce: AllReduce) -> Arc<MetaDevice> {
    let cpu = tessera_cpu::device();
    MetaDevice::new(
        vec![cpu; n],
        SplitPolicy::even(n).unwrap(),
        MetaOptions {
            split_inputs: seed,
            all_reduce,
        },
    )
    .unwrap()
}

fn check(device: &dyn Device, label: &str) {
    check_threads(device, label, Some(1));
}

fn check_threads(device: &dyn Device, label: &str, n_threads: Option<usize>) {
    let filter = std::env::var("TESSERA_CONFORMANCE_FILTER").ok();
    let options = RunOptions {
        filter: filter.as_deref(),
        n_threads,
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

/// A GPU adapter (lavapipe in CI), or `None` with a note (a failure under
/// `TESSERA_REQUIRE_GPU=1`).
fn gpu() -> Option<Arc<dyn Device>> {
    tessera_wgpu::register();
    let d = tessera::Registry::global()
        .devices()
        .into_iter()
        .find(|d| d.family_name() != "CPU");
    if d.is_none() {
        assert!(
            std::env::var("TESSERA_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "TESSERA_REQUIRE_GPU=1 but no GPU adapter"
        );
        eprintln!("skipped: no GPU adapter");
    }
    d
}

#[test]
fn every_case_on_a_cpu_and_a_gpu_with_split_inputs() {
    let Some(gpu) = gpu() else { return };
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let meta = MetaDevice::new(
        vec![cpu, gpu],
        SplitPolicy::even(2).unwrap(),
        MetaOptions {
            split_inputs: Some(3),
            ..MetaOptions::default()
        },
    )
    .unwrap();
    check(meta.as_ref(), "meta(cpu, gpu), inputs split (seed 3)");
}

#[test]
fn every_case_on_two_logical_gpus_with_split_inputs() {
    if gpu().is_none() {
        return;
    }
    let open = |name: &str| -> Arc<dyn Device> {
        tessera_wgpu::family()
            .open_device(
                0,
                &tessera_wgpu::DeviceOptions {
                    name: Some(name.into()),
                    max_buffer_size: None,
                },
            )
            .unwrap()
    };
    let meta = MetaDevice::new(
        vec![open("WGPU0.a"), open("WGPU0.b")],
        SplitPolicy::new(vec![2.0, 1.0]).unwrap(),
        MetaOptions {
            split_inputs: Some(4),
            ..MetaOptions::default()
        },
    )
    .unwrap();
    // No device has threads: none is asked for.
    check_threads(
        meta.as_ref(),
        "meta(gpu.a, gpu.b), inputs split (seed 4)",
        None,
    );
}
