//! The async contract checks on the reference device (synchronous: they must
//! hold trivially, which checks the checks' own plumbing).

use std::sync::Arc;

use tessera::Device;
use tessera_testkit::{ReferenceDevice, contract};

#[test]
fn reference_device_keeps_the_stream_contract() {
    let d: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_all(&d).unwrap();
}
