//! Compute pipelines and bind-group layouts, built once per device and cached.
//!
//! Every kernel has the same binding scheme: binding 0 is its 256-byte
//! parameter block (a uniform), bindings 1..=n are whole storage buffers,
//! read-write, except sources in a buffer the dispatch does not write,
//! which are read-only (wgpu forbids mixing read-only and read-write uses
//! of one buffer in a dispatch, and a graph's tensors often share a
//! buffer). So there is one bind-group layout (and pipeline layout) per
//! storage count and read-only set, made on first use, and one pipeline per
//! kernel variant, keyed by its name and its bindings' element types and
//! access. Shader compilation runs inside an
//! error scope: a WGSL error is a [`tessera::Error`] naming the kernel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera::{Error, Result};

use crate::errors::ErrorSink;
use crate::params::PARAMS_SIZE;
use crate::wgsl::{self, Binding};

/// Most storage bindings of a kernel (FLASH_ATTN_EXT: dst, q, k, v, mask,
/// sinks and the scratch it quantizes into), within WebGPU's guaranteed 8
/// per shader stage.
pub(crate) const MAX_STORAGE: usize = 7;

/// A kernel variant: its body and bindings.
///
/// Keys are compared and hashed by the body's address and length, not its
/// text (bodies are `'static` constants of tens of kilobytes, and a key is
/// looked up for every dispatch): the same address and length is the same
/// text; a constant that the compiler happens to place twice only costs a
/// second compilation.
#[derive(Clone, Debug)]
pub(crate) struct KernelKey {
    /// Kernel name (also the cache key's prefix).
    pub name: &'static str,
    /// WGSL body (from `shaders/`).
    pub body: &'static str,
    /// Storage bindings, in binding order (binding 1 first).
    pub bindings: Vec<Binding>,
}

impl KernelKey {
    fn identity(&self) -> (&'static str, usize, usize, &[Binding]) {
        (
            self.name,
            self.body.as_ptr() as usize,
            self.body.len(),
            &self.bindings,
        )
    }
}

impl PartialEq for KernelKey {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for KernelKey {}

impl std::hash::Hash for KernelKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// A compiled kernel.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: Arc<wgpu::BindGroupLayout>,
}

/// A bind-group layout and the pipeline layout over it.
type Layouts = (Arc<wgpu::BindGroupLayout>, Arc<wgpu::PipelineLayout>);

/// The per-device caches.
#[derive(Debug, Default)]
pub(crate) struct Pipelines {
    /// By storage count and read-only bindings (bit i: binding i + 1).
    layouts: Mutex<HashMap<(usize, u32), Layouts>>,
    kernels: Mutex<HashMap<KernelKey, Arc<Kernel>>>,
}

impl Pipelines {
    /// Number of distinct kernels compiled so far.
    pub(crate) fn compiled(&self) -> usize {
        self.kernels.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn layout(
        &self,
        device: &wgpu::Device,
        errors: &ErrorSink,
        bindings: &[Binding],
    ) -> Result<Layouts> {
        let n = bindings.len();
        let read_only = bindings
            .iter()
            .enumerate()
            .fold(0u32, |m, (i, b)| m | (u32::from(b.read_only) << i));
        let mut layouts = self.layouts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = layouts.get(&(n, read_only)) {
            return Ok(l.clone());
        }
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                // The parameter block's slot (crate::binds).
                has_dynamic_offset: true,
                min_binding_size: wgpu::BufferSize::new(PARAMS_SIZE as u64),
            },
            count: None,
        }];
        for (i, b) in bindings.iter().enumerate() {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: i as u32 + 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: b.read_only,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let made = errors.scoped(device, "creating a bind group layout", 0, || {
            let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("tessera-kernel"),
                entries: &entries,
            });
            let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("tessera-kernel"),
                bind_group_layouts: &[Some(&bgl)],
                immediate_size: 0,
            });
            (Arc::new(bgl), Arc::new(pl))
        })?;
        layouts.insert((n, read_only), made.clone());
        Ok(made)
    }

    /// The compiled kernel for `key`, compiling it on first use.
    pub(crate) fn kernel(
        &self,
        device: &wgpu::Device,
        errors: &ErrorSink,
        key: &KernelKey,
    ) -> Result<Arc<Kernel>> {
        if let Some(k) = self
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
        {
            return Ok(k.clone());
        }
        let n = key.bindings.len();
        if n == 0 || n > MAX_STORAGE {
            return Err(Error::device(
                "wgpu",
                format!(
                    "kernel {} has {n} storage bindings (1..={MAX_STORAGE})",
                    key.name
                ),
            ));
        }
        let (bgl, pl) = self.layout(device, errors, &key.bindings)?;
        let source = wgsl::assemble(&key.bindings, key.body);
        let what = format!("compiling kernel {}", describe_key(key));
        let pipeline = errors.scoped(device, &what, 0, || {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(key.name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(key.name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            })
        })?;
        let kernel = Arc::new(Kernel {
            pipeline,
            layout: bgl,
        });
        self.kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), kernel.clone());
        Ok(kernel)
    }
}

/// `name(d: f16, s0: q4_K, ...)`, for messages.
pub(crate) fn describe_key(key: &KernelKey) -> String {
    let b: Vec<String> = key
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{}: {}{}",
                b.name,
                b.dtype,
                if b.read_only { " (read)" } else { "" }
            )
        })
        .collect();
    format!("{}({})", key.name, b.join(", "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tessera::DType;

    use super::*;

    /// These tests open error scopes on the shared device and one raises an
    /// error outside any scope: run concurrently, a scope of one test caught
    /// the other's error (seen once in a full run). They take turns.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_wgsl_error_is_an_error_not_a_panic() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let Some(dev) = crate::test_device() else {
            return;
        };
        let core = dev.core();
        let key = KernelKey {
            name: "broken",
            body: "@compute @workgroup_size(1) fn main() { let x: u32 = undefined_thing; }",
            bindings: vec![Binding::plain("d", DType::F32)],
        };
        match core.pipelines.kernel(&core.device, &core.errors, &key) {
            Err(Error::Device { message, .. }) => {
                assert!(
                    message.contains("compiling kernel broken(d: f32)"),
                    "{message}"
                )
            }
            other => panic!("expected a device error, got {other:?}"),
        }
        // The device stays usable, and kernels are compiled once.
        let good = KernelKey {
            name: "good",
            body: "@compute @workgroup_size(1) fn main() { d_sw(0u, P.off2.z); }",
            bindings: vec![Binding::plain("d", DType::F32)],
        };
        let a = core
            .pipelines
            .kernel(&core.device, &core.errors, &good)
            .unwrap();
        let b = core
            .pipelines
            .kernel(&core.device, &core.errors, &good)
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn validation_errors_are_captured() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        if crate::test_device().is_none() {
            return;
        }
        // A logical device of its own: the error it provokes outside any
        // scope waits in its device's error list for the next check, which
        // on the shared test device another test running at the same time
        // could take (and fail on) first.
        let dev = (0..16)
            .find_map(|i| {
                crate::family()
                    .open_device(i, &crate::DeviceOptions::default())
                    .ok()
            })
            .expect("an adapter opened for the test device opens again");
        let core = dev.core();
        // MAP_READ with STORAGE is invalid in WebGPU.
        let r = core.scoped("creating an invalid buffer", 16, || {
            core.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 16,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        });
        match r {
            Err(Error::Device { message, .. }) => {
                assert!(message.contains("creating an invalid buffer"), "{message}")
            }
            other => panic!("expected a device error, got {other:?}"),
        }
        core.errors.check().unwrap();
        // Outside any scope the error reaches the uncaptured-error handler,
        // which records it (wgpu's default would panic) for the next check.
        let _ = core.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        assert!(matches!(core.errors.check(), Err(Error::Device { .. })));
        core.errors.check().unwrap();
    }
}
