//! The stream contract (`tessera_testkit::contract`) on the GPU device, where
//! streams really are asynchronous: ordering of queued writes, computes and
//! reads, events between streams, and copies to and from another device.
//!
//! All streams of one wgpu device submit to the device's one queue, so two
//! streams of one device are ordered by that queue whether or not an event
//! is waited on: `check_all` cannot tell a working `wait_event` from a no-op
//! there. Two logical devices on one adapter have a queue each; an event of
//! one, waited on by a stream of the other (a host wait), is what orders
//! them, which `events_order_streams_of_two_logical_devices` checks.
//!
//! Whether that check *catches* a skipped wait depends on timing: stream A's
//! work must still be running when stream B gets ahead. On lavapipe it never
//! is: each queue submission blocks until the previous one has completed
//! (measured: a first `compute_async` returns in about 1 ms, a second one,
//! or the empty submission `record_event` makes, only after the first
//! compute, about 0.2-0.5 s later), so `record_event` returns with A's work
//! done and a no-op wait goes unseen. The proof that the event checks can
//! fail is therefore testkit's deterministic one (`GatedDevice` with
//! `sabotage::skip_events`, tests/contract.rs of tessera-testkit).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::Device;
use tessera_testkit::ReferenceDevice;
use tessera_testkit::contract;
use tessera_wgpu::{DeviceOptions, WgpuDevice};

#[test]
fn gpu_keeps_the_stream_contract() {
    let Some(d) = common::device("gpu_keeps_the_stream_contract") else {
        return;
    };
    let d: Arc<dyn Device> = d;
    contract::check_all(&d).unwrap();
}

#[test]
fn copies_between_the_gpu_and_a_host_device_are_ordered() {
    let Some(d) = common::device("copies_between_the_gpu_and_a_host_device_are_ordered") else {
        return;
    };
    let gpu: Arc<dyn Device> = d;
    let host: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_copy_between(&gpu, &host).unwrap();
    contract::check_copy_between(&host, &gpu).unwrap();
}

/// A second logical device on adapter 0 (its own wgpu device and queue).
fn logical(name: &str) -> Arc<WgpuDevice> {
    tessera_wgpu::family()
        .open_device(
            0,
            &DeviceOptions {
                name: Some(name.into()),
                max_buffer_size: None,
            },
        )
        .unwrap()
}

#[test]
fn events_order_streams_of_two_logical_devices() {
    let Some(_) = common::device("events_order_streams_of_two_logical_devices") else {
        return;
    };
    let a: Arc<dyn Device> = logical("WGPU0.a");
    let b: Arc<dyn Device> = logical("WGPU0.b");
    contract::check_events_between(&a, &b).unwrap();
    contract::check_events_between(&b, &a).unwrap();
    // The GPU's events, waited on by a host device's stream.
    let host: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_events_between(&a, &host).unwrap();
}
