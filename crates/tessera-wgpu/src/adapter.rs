//! Finding adapters: Vulkan, Metal and DX12 only, never GL.
//!
//! wgpu with GL enabled silently falls back to GL when Vulkan is missing (no
//! f16, few storage buffers per stage), and tests would then pass on the
//! wrong thing; the crate is built without the GL backend and asks only for
//! the three modern ones. No driver (or no `libvulkan`) means an empty list,
//! never a panic.
//!
//! [`AdapterSummary`] is what a device reports about its adapter: a software
//! adapter (Mesa's llvmpipe / lavapipe, WARP) is reported as what it is, a
//! [`DeviceType::Cpu`], and its memory as the host's (estimated).

use tessera::{DeviceType, MemoryInfo};

/// The backends Tessera uses.
pub const BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN
    .union(wgpu::Backends::METAL)
    .union(wgpu::Backends::DX12);

/// Whether the adapters are wgpu's noop backend's (built with the `noop`
/// feature and run with `TESSERA_WGPU_NOOP=1`): a device that records,
/// validates and submits everything but runs nothing, for measuring the
/// host's share of a compute without a GPU (its results are garbage).
fn noop() -> bool {
    cfg!(feature = "noop") && std::env::var("TESSERA_WGPU_NOOP").is_ok_and(|v| v.trim() == "1")
}

/// A wgpu instance over [`BACKENDS`] (or the noop backend: [`noop`]).
pub(crate) fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = BACKENDS;
    #[cfg(feature = "noop")]
    if noop() {
        // As a discrete GPU with subgroups of 32 (NVIDIA's) and every
        // feature but none of the cooperative matrices.
        desc.backends = wgpu::Backends::NOOP;
        let mut options = wgpu::NoopBackendOptions::enabled();
        options.device_type = Some(wgpu::DeviceType::DiscreteGpu);
        options.subgroup_min_size = Some(32);
        options.subgroup_max_size = Some(32);
        desc.backend_options.noop = options;
    }
    // Validation layers are not wanted in production; wgpu-core still
    // validates every call, which is what the error capture relies on.
    desc.flags = wgpu::InstanceFlags::empty();
    wgpu::Instance::new(desc)
}

/// Every adapter of [`BACKENDS`], in wgpu's order (GL filtered out again, in
/// case a dependency enabled it).
pub(crate) fn adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    if noop() {
        return pollster::block_on(instance.enumerate_adapters(wgpu::Backends::NOOP));
    }
    pollster::block_on(instance.enumerate_adapters(BACKENDS))
        .into_iter()
        .filter(|a| {
            matches!(
                a.get_info().backend,
                wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12
            )
        })
        .collect()
}

/// What a device tells about its adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    /// The adapter's name, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// Backend, e.g. `Vulkan`.
    pub backend: String,
    /// Driver and version, e.g. `llvmpipe, Mesa 22.3.6`.
    pub driver: String,
    /// Tessera's device type.
    pub device_type: DeviceType,
    /// A software rasterizer running on the CPU.
    pub software: bool,
    /// The PCI bus id, when the backend reports one.
    pub pci_bus_id: Option<String>,
    /// The adapter supports `SHADER_F16` (reported; the kernels do not need it).
    pub shader_f16: bool,
    /// Its subgroups' sizes (smallest, largest), where it has wgpu's
    /// subgroup operations (the kernels' reductions use them:
    /// `crate::subgroups`).
    pub subgroups: Option<(u32, u32)>,
    /// The side of the cooperative matrices (f16, summed in f32) the
    /// prompts' products take on it, where it has them (`crate::coopmat`).
    pub cooperative_matrices: Option<u32>,
}

impl AdapterSummary {
    /// The summary of `adapter`.
    pub fn of(adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let software = info.device_type == wgpu::DeviceType::Cpu;
        let device_type = match info.device_type {
            wgpu::DeviceType::Cpu => DeviceType::Cpu,
            wgpu::DeviceType::IntegratedGpu => DeviceType::IGpu,
            _ => DeviceType::Gpu,
        };
        let driver = [info.driver.trim(), info.driver_info.trim()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", ");
        let pci = info.device_pci_bus_id.trim().to_lowercase();
        AdapterSummary {
            name: info.name.trim().to_owned(),
            backend: format!("{:?}", info.backend),
            driver,
            device_type,
            software,
            pci_bus_id: (!pci.is_empty()).then_some(pci),
            shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
            subgroups: adapter
                .features()
                .contains(wgpu::Features::SUBGROUP)
                .then_some((info.subgroup_min_size, info.subgroup_max_size)),
            cooperative_matrices: crate::coopmat::capable(adapter),
        }
    }

    /// One-line description: name, backend, driver, and "software adapter"
    /// when it is one.
    pub fn description(&self) -> String {
        let mut s = format!("{} ({}", self.name, self.backend);
        if !self.driver.is_empty() {
            s.push_str(", ");
            s.push_str(&self.driver);
        }
        if self.software {
            s.push_str(", software adapter running on the CPU");
        }
        s.push(')');
        s
    }

    /// Memory figures. wgpu does not report device memory, so they are
    /// estimates: the host's memory for software and integrated adapters
    /// (they allocate from it), the largest buffer the adapter accepts for a
    /// discrete one (a lower bound).
    pub fn memory(&self, max_buffer_size: u64) -> MemoryInfo {
        let host = host_memory();
        match (self.device_type, host) {
            (DeviceType::Cpu | DeviceType::IGpu, Some((free, total))) => MemoryInfo {
                free,
                total,
                estimated: true,
            },
            _ => {
                let total = usize::try_from(max_buffer_size).unwrap_or(usize::MAX);
                MemoryInfo {
                    free: total,
                    total,
                    estimated: true,
                }
            }
        }
    }
}

/// `(available, total)` bytes of host memory from `/proc/meminfo`.
fn host_memory() -> Option<(usize, usize)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<usize> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gl_in_the_backends() {
        assert!(!BACKENDS.contains(wgpu::Backends::GL));
        assert!(BACKENDS.contains(wgpu::Backends::VULKAN));
    }

    #[test]
    fn software_adapters_say_so() {
        let s = AdapterSummary {
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            backend: "Vulkan".into(),
            driver: "llvmpipe, Mesa 22.3.6".into(),
            device_type: DeviceType::Cpu,
            software: true,
            pci_bus_id: None,
            shader_f16: true,
            subgroups: Some((8, 8)),
            cooperative_matrices: None,
        };
        assert!(s.description().contains("software adapter"));
        assert!(s.memory(1 << 30).estimated);
    }
}
