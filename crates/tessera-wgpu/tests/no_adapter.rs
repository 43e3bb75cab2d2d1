//! Without a Vulkan driver the family has zero devices and says why; nothing
//! panics. The test re-runs itself in a child process whose Vulkan loader
//! is pointed at a driver list that does not exist (Linux only: that is
//! where the loader reads `VK_ICD_FILENAMES` / `VK_DRIVER_FILES`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tessera::{DeviceFamily, Registry};

const CHILD: &str = "TESSERA_WGPU_NO_ADAPTER_CHILD";

#[test]
fn no_adapter_means_zero_devices_and_a_log_line() {
    if std::env::var_os(CHILD).is_some() {
        let family = tessera_wgpu::WgpuFamily::new();
        assert!(family.adapters().is_empty());
        assert!(family.devices().is_empty());
        let registry = Registry::new();
        assert!(registry.register(std::sync::Arc::new(family)));
        assert!(registry.devices().is_empty());
        assert!(registry.device_by_name("WGPU0").is_err());
        return;
    }
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: hiding the Vulkan driver works through the Linux loader only");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "no_adapter_means_zero_devices_and_a_log_line",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("VK_ICD_FILENAMES", "/nonexistent/tessera-no-driver.json")
        .env("VK_DRIVER_FILES", "/nonexistent/tessera-no-driver.json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test:\n{stdout}"
    );
    assert!(
        stderr.contains("no Vulkan, Metal or DX12 adapter found"),
        "no log line:\n{stderr}"
    );
}

#[test]
fn register_adds_the_family_once() {
    tessera_wgpu::register();
    tessera_wgpu::register();
    let global = Registry::global();
    let n = global
        .families()
        .iter()
        .filter(|f| f.name() == "wgpu")
        .count();
    assert_eq!(n, 1);
    let family = global.family_by_name("WGPU").unwrap();
    for d in family.devices() {
        assert_eq!(d.family_name(), "wgpu");
        assert!(global.device_by_name(d.name()).is_ok());
    }
}
