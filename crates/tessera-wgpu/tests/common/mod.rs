//! Shared by the GPU tests: the device to test on, or a printed reason to
//! skip (a failure when `TESSERA_REQUIRE_GPU=1`, as CI sets).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera_wgpu::WgpuDevice;

/// CI demands a real adapter.
pub fn gpu_required() -> bool {
    std::env::var("TESSERA_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The first wgpu device, or `None` (with a printed reason) when there is no
/// adapter; panics instead when `TESSERA_REQUIRE_GPU=1`.
pub fn device(test: &str) -> Option<Arc<WgpuDevice>> {
    let family = tessera_wgpu::family();
    match family.wgpu_devices().into_iter().next() {
        Some(d) => Some(d),
        None if gpu_required() => {
            panic!("{test}: TESSERA_REQUIRE_GPU=1 but no Vulkan/Metal/DX12 adapter was found")
        }
        None => {
            eprintln!(
                "{test}: skipped: no Vulkan/Metal/DX12 adapter (install mesa-vulkan-drivers for lavapipe)"
            );
            None
        }
    }
}
