//! The stream contract (`tessera_testkit::contract`) on the GPU device, where
//! streams really are asynchronous: ordering of queued writes, computes and
//! reads, events between streams, and copies to and from another device.

mod common;

use std::sync::Arc;

use tessera::Device;
use tessera_testkit::{ReferenceDevice, contract};

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
