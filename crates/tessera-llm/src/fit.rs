//! Fitting a model to devices before loading it (`--fit`): for a layer
//! placement, the bytes each device would hold — weights, KV cache and
//! compute buffers — are *measured*, not estimated: the weights and the
//! cache are placed by the real allocators into planning buffers
//! ([`tessera::alloc::PlanningType`]: same offsets, no memory), and the
//! scheduler plans the largest graph a session runs (a full batch over the
//! whole context) with [`Scheduler::reserve_size`], which is exactly what
//! [`Session::reserve`](crate::Session::reserve) then allocates.
//!
//! The fit fills the devices in priority order: the first takes as many of
//! the last layers as fit its budget (all of them and the output layer if
//! it can), the next the layers before those, and so on; the last device
//! (the CPU) takes the rest, within its budget if one is given.

use std::fmt;
use std::sync::Arc;

use tessera::{Error, Result, Scheduler, SchedulerOptions, Stream};
use tessera_gguf::GgufFile;

use crate::decoder::{self, Shape};
use crate::kv_cache::KvCache;
use crate::layers::LayerMap;
use crate::params::Params;
use crate::session::SessionOptions;
use crate::weights::Weights;

/// What one device holds under a placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicePlan {
    /// The device's name.
    pub device: String,
    /// Layers whose weights (and cache) it holds.
    pub layers: usize,
    /// It holds the output layer.
    pub output: bool,
    /// Bytes of weights: allocated, or mapped from the file on host memory.
    pub weights: usize,
    /// Bytes of KV cache.
    pub kv: usize,
    /// Bytes of compute buffers.
    pub compute: usize,
    /// The most it may hold (`None`: no limit).
    pub budget: Option<usize>,
}

impl DevicePlan {
    /// Weights, cache and compute together.
    pub fn total(&self) -> usize {
        self.weights + self.kv + self.compute
    }

    fn fits(&self) -> bool {
        self.budget.is_none_or(|b| self.total() <= b)
    }
}

/// A placement and what it takes on each device.
#[derive(Clone, Debug)]
pub struct FitPlan {
    /// Where each layer goes (load the model with it).
    pub map: LayerMap,
    /// Per device, in the streams' order.
    pub devices: Vec<DevicePlan>,
}

impl fmt::Display for FitPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_plans(f, &self.devices)
    }
}

/// One line per device: layers, bytes of weights, cache and compute, budget.
pub(crate) fn write_plans(f: &mut fmt::Formatter<'_>, devices: &[DevicePlan]) -> fmt::Result {
    {
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        for d in devices {
            write!(
                f,
                "{}: {} layers{}, weights {:.1} MiB + KV cache {:.1} MiB + compute {:.1} MiB = {:.1} MiB",
                d.device,
                d.layers,
                if d.output { " + output" } else { "" },
                mib(d.weights),
                mib(d.kv),
                mib(d.compute),
                mib(d.total()),
            )?;
            match d.budget {
                Some(b) => writeln!(f, " (budget {:.1} MiB)", mib(b))?,
                None => writeln!(f)?,
            }
        }
        Ok(())
    }
}

/// The largest graph a session with `options` runs: a full batch (or the
/// whole context, if smaller) attending to every slot.
pub fn worst_shape(options: &SessionOptions, n_slots: usize) -> Shape {
    Shape {
        n_tokens: options.n_batch.min(options.n_ctx).max(1),
        n_kv: n_slots,
        all_logits: false,
    }
}

/// The bytes each device of `streams` would hold with the model of `file`
/// placed by `map` and a session of `options`.
pub fn measure(
    file: &GgufFile,
    map: &LayerMap,
    streams: &[Arc<dyn Stream>],
    options: &SessionOptions,
) -> Result<Vec<DevicePlan>> {
    let p = Params::from_gguf(file)?;
    let weights = Weights::plan(file, map)?;
    decoder::check_weights(&p, file, &weights)?;
    let cache = KvCache::plan(&p, options, &|il| {
        map.layer(il)
            .cloned()
            .unwrap_or_else(|_| map.output().clone())
    })?;
    let shape = worst_shape(options, cache.n_slots());
    let dg = decoder::build(&p, file, &weights, &cache, shape)?;
    let mut sched = Scheduler::new(streams.to_vec(), SchedulerOptions::default())?;
    let placement = dg.placement()?;
    let compute = sched.reserve_size(&dg.graph, &placement)?;
    let by_buft = weights.bytes_by_buffer_type();
    let mut out = Vec::with_capacity(streams.len());
    for (i, s) in streams.iter().enumerate() {
        let dev = s.device();
        let buft = dev.buffer_type();
        let name = buft.name();
        out.push(DevicePlan {
            device: dev.name().to_string(),
            layers: map.layers_in(name),
            output: map.output().name() == name,
            weights: by_buft
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, b)| b)
                .sum(),
            kv: cache.bytes_in(name),
            compute: compute.get(i).copied().unwrap_or(0),
            budget: None,
        });
    }
    Ok(out)
}

/// Place the model of `file` over `streams` (priority order; the last is
/// the fallback, normally the CPU), each device within `budgets[i]` bytes
/// (`None`: no limit), for a session of `options`.
pub fn fit(
    file: &GgufFile,
    streams: &[Arc<dyn Stream>],
    budgets: &[Option<usize>],
    options: &SessionOptions,
) -> Result<FitPlan> {
    let p = Params::from_gguf(file)?;
    let n = p.n_layer;
    let Some(last) = streams.last() else {
        return Err(Error::NotFound("a device to fit the model to".into()));
    };
    let bufts: Vec<_> = streams.iter().map(|s| s.device().buffer_type()).collect();
    let budget = |i: usize| budgets.get(i).copied().flatten();
    let fallback = last.device().buffer_type();
    let mut map = LayerMap::uniform(fallback, n);
    // Layers `first..n` are placed; device d takes some before `first`.
    let mut first = n;
    for d in 0..streams.len() - 1 {
        // Candidates: everything left (and the output when nothing is
        // placed yet), then one layer fewer at a time.
        let most = first + usize::from(first == n);
        let mut chosen = None;
        for c in (0..=most).rev() {
            let mut m = map.clone();
            let layers = c.min(first);
            m.set_layers(first - layers..first, &bufts[d]);
            if c > first {
                m.set_output(bufts[d].clone());
            }
            let mut plan = measure(file, &m, streams, options)?;
            plan[d].budget = budget(d);
            if plan[d].fits() {
                chosen = Some((m, layers));
                break;
            }
        }
        if let Some((m, layers)) = chosen {
            map = m;
            first -= layers;
        }
    }
    let mut devices = measure(file, &map, streams, options)?;
    for (i, d) in devices.iter_mut().enumerate() {
        d.budget = budget(i);
    }
    if let Some(d) = devices.iter().find(|d| !d.fits()) {
        return Err(Error::OutOfMemory {
            device: d.device.clone(),
            requested: d.total(),
            detail: format!(
                "the model does not fit: {} needs {} bytes with {} layers, over its budget of {} \
                 bytes (plan:\n{})",
                d.device,
                d.total(),
                d.layers,
                d.budget.unwrap_or(0),
                FitPlan {
                    map: map.clone(),
                    devices: devices.clone()
                }
            ),
        });
    }
    Ok(FitPlan { map, devices })
}
