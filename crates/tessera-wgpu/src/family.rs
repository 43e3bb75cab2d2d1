//! The `wgpu` device family: one device per adapter (ggml's reg).
//!
//! Adapters are enumerated once, on first use, and each opened as a device
//! named `WGPU0`, `WGPU1`, ... An adapter that fails to open is skipped with
//! a log line naming it; no adapter at all gives zero devices and a log line
//! saying why. More logical devices on an adapter come from
//! [`WgpuFamily::open_device`].

use std::any::Any;
use std::sync::{Arc, OnceLock};

use tessera::{Device, DeviceFamily, Error, Result};

use crate::adapter::{self, AdapterSummary};
use crate::device::{DeviceOptions, WgpuDevice};

/// The wgpu device family.
#[derive(Debug)]
pub struct WgpuFamily {
    instance: wgpu::Instance,
    adapters: Vec<wgpu::Adapter>,
    devices: OnceLock<Vec<Arc<WgpuDevice>>>,
}

impl WgpuFamily {
    /// Enumerate the adapters (devices are opened on first use).
    pub fn new() -> Self {
        let instance = adapter::instance();
        let adapters = adapter::adapters(&instance);
        if adapters.is_empty() {
            eprintln!(
                "tessera-wgpu: no Vulkan, Metal or DX12 adapter found: the wgpu family has no devices \
                 (on Linux without a GPU, install Mesa's lavapipe: mesa-vulkan-drivers libvulkan1)"
            );
        }
        WgpuFamily {
            instance,
            adapters,
            devices: OnceLock::new(),
        }
    }

    /// The adapters, in wgpu's order.
    pub fn adapters(&self) -> Vec<AdapterSummary> {
        self.adapters.iter().map(AdapterSummary::of).collect()
    }

    /// The devices, concretely typed (one per adapter that opened).
    pub fn wgpu_devices(&self) -> Vec<Arc<WgpuDevice>> {
        self.devices
            .get_or_init(|| {
                self.adapters
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| {
                        match WgpuDevice::open(a, &format!("WGPU{i}"), &DeviceOptions::default()) {
                            Ok(d) => Some(d),
                            Err(e) => {
                                eprintln!("tessera-wgpu: skipping adapter {i}: {e}");
                                None
                            }
                        }
                    })
                    .collect()
            })
            .clone()
    }

    /// Open another logical device on adapter `index` (its own wgpu device
    /// and queue; it shares no memory with the others).
    pub fn open_device(&self, index: usize, options: &DeviceOptions) -> Result<Arc<WgpuDevice>> {
        let a = self.adapters.get(index).ok_or_else(|| {
            Error::NotFound(format!(
                "wgpu adapter {index} ({} adapters)",
                self.adapters.len()
            ))
        })?;
        WgpuDevice::open(a, &format!("WGPU{index}"), options)
    }

    /// The wgpu instance.
    pub fn instance(&self) -> &wgpu::Instance {
        &self.instance
    }
}

impl Default for WgpuFamily {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceFamily for WgpuFamily {
    fn name(&self) -> &str {
        "wgpu"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.wgpu_devices()
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect()
    }

    fn features(&self) -> Vec<(String, String)> {
        self.adapters()
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                [
                    (format!("WGPU{i}_BACKEND"), a.backend.clone()),
                    (
                        format!("WGPU{i}_SHADER_F16"),
                        u8::from(a.shader_f16).to_string(),
                    ),
                    (
                        format!("WGPU{i}_SOFTWARE"),
                        u8::from(a.software).to_string(),
                    ),
                    // Subgroup sizes ("8", "8-32"), or 0 without them.
                    (
                        format!("WGPU{i}_SUBGROUPS"),
                        match a.subgroups {
                            Some((lo, hi)) if lo == hi => lo.to_string(),
                            Some((lo, hi)) => format!("{lo}-{hi}"),
                            None => "0".into(),
                        },
                    ),
                    // The side of the cooperative matrices, or 0.
                    (
                        format!("WGPU{i}_COOPMAT"),
                        a.cooperative_matrices.unwrap_or(0).to_string(),
                    ),
                ]
            })
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tessera::DeviceFamily;

    /// The family's features name each adapter's subgroup sizes, and the
    /// first device's smallest is the one its kernels take.
    #[test]
    fn the_features_name_the_subgroup_sizes() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let features = crate::family().features();
        let sizes = features
            .iter()
            .find(|(k, _)| k == "WGPU0_SUBGROUPS")
            .map(|(_, v)| v.clone())
            .unwrap();
        match (dev.adapter().subgroups, dev.subgroup_size()) {
            (Some((lo, _)), Some(used)) => {
                assert_eq!(lo, used);
                assert!(sizes.starts_with(&lo.to_string()), "{sizes}");
            }
            (Some(_), None) => {} // TESSERA_WGPU_SUBGROUPS=0
            (None, used) => {
                assert_eq!(sizes, "0");
                assert_eq!(used, None);
            }
        }
    }
}
