//! Device families and the registry (ggml's `ggml_backend_reg` and the
//! global backend registry).
//!
//! A [`DeviceFamily`] enumerates the devices of one kind (CPU, wgpu, RPC).
//! A [`Registry`] holds families and loose devices in registration order and
//! finds devices by name (case-insensitive) or type. There is a process-wide
//! [`Registry::global`]; device crates add their family to it (for example
//! `tessera_cpu::register()`), and tests can build private registries.

use std::any::Any;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock, RwLock};

use crate::device::{Device, DeviceType};
use crate::stream::Stream;
use crate::stream_options::StreamOptions;
use crate::{Error, Result};

/// A family of devices (ggml's reg).
pub trait DeviceFamily: Send + Sync + Debug {
    /// Name, e.g. `CPU`, `wgpu`.
    fn name(&self) -> &str;

    /// The devices, in a stable order.
    fn devices(&self) -> Vec<Arc<dyn Device>>;

    /// Feature flags as name/value pairs (ggml's `get_features`), e.g.
    /// `("AVX2", "1")`. Default: none.
    fn features(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// For downcasting to family-specific functions (ggml's `get_proc_address`).
    fn as_any(&self) -> &dyn Any;
}

/// Families and devices in registration order.
#[derive(Debug, Default)]
pub struct Registry {
    families: RwLock<Vec<Arc<dyn DeviceFamily>>>,
    loose: RwLock<Vec<Arc<dyn Device>>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// The process-wide registry.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::new)
    }

    /// Add a family; a family with the same name (case-insensitive) is not
    /// added twice. Returns whether it was added.
    pub fn register(&self, family: Arc<dyn DeviceFamily>) -> bool {
        let mut fams = self.families.write().unwrap_or_else(|p| p.into_inner());
        if fams
            .iter()
            .any(|f| f.name().eq_ignore_ascii_case(family.name()))
        {
            return false;
        }
        fams.push(family);
        true
    }

    /// Add a device that belongs to no registered family (ggml's
    /// `ggml_backend_device_register`); duplicates by name are skipped.
    pub fn register_device(&self, device: Arc<dyn Device>) -> bool {
        if self.device_by_name(device.name()).is_ok() {
            return false;
        }
        self.loose
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(device);
        true
    }

    /// Registered families.
    pub fn families(&self) -> Vec<Arc<dyn DeviceFamily>> {
        self.families
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The family named `name` (case-insensitive).
    pub fn family_by_name(&self, name: &str) -> Result<Arc<dyn DeviceFamily>> {
        self.families()
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::NotFound(format!("device family '{name}'")))
    }

    /// Every device: each family's in registration order, then loose ones.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        let mut all: Vec<Arc<dyn Device>> =
            self.families().iter().flat_map(|f| f.devices()).collect();
        all.extend(
            self.loose
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        all
    }

    /// The device named `name` (case-insensitive).
    pub fn device_by_name(&self, name: &str) -> Result<Arc<dyn Device>> {
        self.devices()
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::NotFound(format!("device '{name}'")))
    }

    /// The first device of type `t`.
    pub fn device_by_type(&self, t: DeviceType) -> Result<Arc<dyn Device>> {
        self.devices()
            .into_iter()
            .find(|d| d.device_type() == t)
            .ok_or_else(|| Error::NotFound(format!("a device of type {}", t.name())))
    }

    /// A stream on the device named `name`.
    pub fn init_by_name(&self, name: &str, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        self.device_by_name(name)?.new_stream(options)
    }

    /// A stream on the first device of type `t`.
    pub fn init_by_type(&self, t: DeviceType, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        self.device_by_type(t)?.new_stream(options)
    }

    /// A stream on the best device: a GPU, else an integrated GPU, else the CPU.
    pub fn init_best(&self) -> Result<Arc<dyn Stream>> {
        for t in [DeviceType::Gpu, DeviceType::IGpu, DeviceType::Cpu] {
            if let Ok(d) = self.device_by_type(t) {
                return d.new_stream(&StreamOptions::new());
            }
        }
        Err(Error::NotFound(
            "any GPU, integrated GPU or CPU device".into(),
        ))
    }
}
