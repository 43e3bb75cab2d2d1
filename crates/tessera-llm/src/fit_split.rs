//! Fitting a tensor split (`--fit` with `--split tensor`): the shares of a
//! meta device's devices such that each holds its weights, KV cache and
//! compute memory within its budget — *measured*, as [`crate::fit`] does
//! for layers: on a planning twin of the meta device
//! ([`MetaDevice::planning`]), the real allocators lay out the weights, the
//! cache, the scheduler's compute buffers and every device's own memory of
//! the lowered worst-case graph, without taking any memory.
//!
//! What a device of the split holds: its pieces of the split weights and
//! cache and the mirrored ones, the meta device's compute buffers (every
//! device holds them whole), and its own compute memory (partial sums,
//! received chunks, gathered operands: [`MetaStream::scratch_bytes`]). The
//! input layer (token embeddings) stays on the fallback device.
//!
//! Shares: as close to the preferred ratios (the user's `--tensor-split`,
//! else even) as the budgets allow. Two measurements, each with all split
//! rows on one device, give every device's fixed bytes and the bytes the
//! split spreads; a device whose preferred share does not fit gets what
//! fits and the others share the rest in their ratios (water filling).
//! One device named twice (two CPU parts) has one budget for both, and the
//! fallback device counts against its own name's budget too. The result is
//! measured again; when rounding to whole heads and blocks overshoots a
//! budget, that device's room shrinks by the overshoot and the shares are
//! chosen again (a few rounds).

use std::fmt;
use std::sync::Arc;

use tessera::alloc::PlanningType;
use tessera::{Device, Error, Result, Scheduler, SchedulerOptions, Stream, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_meta::{MetaDevice, MetaStream, SplitPolicy};

use crate::decoder;
use crate::fit::{DevicePlan, worst_shape};
use crate::kv_cache::KvCache;
use crate::layers::LayerMap;
use crate::params::Params;
use crate::session::{Session, SessionOptions};
use crate::weights::Weights;

/// What a tensor split takes on each device.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitFit {
    /// The shares of the meta device's devices (make the meta device with
    /// `SplitPolicy::new(ratios)`).
    pub ratios: Vec<f64>,
    /// Per device of the meta device, in its order: `compute` is the meta
    /// device's compute buffers plus the device's own compute memory.
    pub parts: Vec<DevicePlan>,
    /// The fallback device: the input layer and its compute buffers.
    pub input: DevicePlan,
}

impl fmt::Display for SplitFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ratios: Vec<String> = self.ratios.iter().map(|r| format!("{r:.3}")).collect();
        writeln!(f, "tensor split {}", ratios.join(","))?;
        let devices: Vec<DevicePlan> = self
            .parts
            .iter()
            .chain(std::iter::once(&self.input))
            .cloned()
            .collect();
        crate::fit::write_plans(f, &devices)
    }
}

/// The bytes each device holds with `meta`'s devices splitting the model of
/// `file` in the proportions `ratios`, the input layer on `input`'s device,
/// for a session of `options`: measured on a planning twin of `meta`.
pub fn measure_split(
    file: &GgufFile,
    meta: &MetaDevice,
    input: &Arc<dyn Stream>,
    ratios: &[f64],
    options: &SessionOptions,
) -> Result<SplitFit> {
    let p = Params::from_gguf(file)?;
    let planning = meta.planning(SplitPolicy::new(ratios.to_vec())?)?;
    let mbuft = planning.buffer_type();
    let ibuft = input.device().buffer_type();
    let mut map = LayerMap::uniform(mbuft.clone(), p.n_layer);
    map.set_input(ibuft.clone());
    let weights = Weights::plan(file, &map)?;
    decoder::check_weights(&p, file, &weights)?;
    let cache = KvCache::plan(&p, options, &|_| mbuft.clone())?;
    let dg = decoder::build(
        &p,
        file,
        &weights,
        &cache,
        worst_shape(options, cache.n_slots()),
    )?;
    let streams = vec![planning.new_stream(&StreamOptions::new())?, input.clone()];
    let bufts = vec![mbuft.clone(), PlanningType::wrap(ibuft.clone())];
    let mut sched = Scheduler::with_buffer_types(streams, bufts, SchedulerOptions::default())?;
    let mut placement = dg.placement()?;
    sched.alloc_graph(&dg.graph, &mut placement)?;
    let scratch = prepare_meta(&sched)?;
    let n = meta.devices().len();
    let mirror = sched.buffer_size(0)?;
    let w = weights
        .bytes_per_part(mbuft.name())
        .unwrap_or_else(|| vec![0; n]);
    let kv = cache.bytes_per_part(mbuft.name());
    Ok(SplitFit {
        ratios: ratios.to_vec(),
        parts: part_plans(meta, p.n_layer, &w, &kv, mirror, &scratch),
        input: input_plan(input, &weights, sched.buffer_size(1)?),
    })
}

/// What a session on a meta device (stream 0) and a fallback (stream 1)
/// holds now: after [`Session::reserve`], what [`measure_split`] predicts.
pub fn split_usage(session: &Session) -> Result<SplitFit> {
    let sched = session.scheduler();
    let (Some(ms), Some(input)) = (sched.streams().first(), sched.streams().get(1)) else {
        return Err(Error::NotFound(
            "a session on a meta device and a fallback device".into(),
        ));
    };
    let meta_stream = ms
        .as_any()
        .downcast_ref::<MetaStream>()
        .ok_or_else(|| Error::NotFound(format!("a meta device (the first is {})", ms.name())))?;
    let buft = ms.device().buffer_type();
    let meta = crate::tensor_split::meta_device(&buft)
        .ok_or_else(|| Error::NotFound("the meta device of the session".into()))?;
    let n = meta.devices().len();
    let w = session
        .model()
        .weights()
        .bytes_per_part(buft.name())
        .unwrap_or_else(|| vec![0; n]);
    let kv = session.cache().bytes_per_part(buft.name());
    let mirror = sched.buffer_size(0)?;
    let scratch = meta_stream.scratch_bytes();
    let n_layer = session.model().params().n_layer;
    Ok(SplitFit {
        ratios: meta.policy().ratios().to_vec(),
        parts: part_plans(&meta, n_layer, &w, &kv, mirror, &scratch),
        input: input_plan(input, session.model().weights(), sched.buffer_size(1)?),
    })
}

/// What each device of `meta` holds: its weights and cache pieces, the
/// meta device's compute buffers (`mirror`, whole on every device) and its
/// own compute memory.
fn part_plans(
    meta: &MetaDevice,
    n_layer: usize,
    weights: &[usize],
    kv: &[usize],
    mirror: usize,
    scratch: &[usize],
) -> Vec<DevicePlan> {
    let at = |v: &[usize], j: usize| v.get(j).copied().unwrap_or(0);
    meta.devices()
        .iter()
        .enumerate()
        .map(|(j, d)| DevicePlan {
            device: d.name().to_string(),
            layers: n_layer,
            output: true,
            weights: at(weights, j),
            kv: at(kv, j),
            compute: mirror + at(scratch, j),
            budget: None,
        })
        .collect()
}

fn input_plan(input: &Arc<dyn Stream>, weights: &Weights, compute: usize) -> DevicePlan {
    let dev = input.device();
    let name = dev.buffer_type().name().to_string();
    DevicePlan {
        device: dev.name().to_string(),
        layers: 0,
        output: false,
        weights: weights
            .bytes_by_buffer_type()
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, b)| b)
            .sum(),
        kv: 0,
        compute,
        budget: None,
    }
}

/// Lower and plan the meta splits of the scheduler's placed graph (what
/// their first compute would do) and return each meta device's own memory.
pub(crate) fn prepare_meta(sched: &Scheduler) -> Result<Vec<usize>> {
    let (Some(graph), Some(placement)) = (sched.split_graph(), sched.split_placement()) else {
        return Ok(Vec::new());
    };
    let mut scratch = Vec::new();
    for split in sched.splits() {
        let Some(stream) = sched.streams().get(split.device) else {
            continue;
        };
        if let Some(ms) = stream.as_any().downcast_ref::<MetaStream>() {
            ms.prepare(graph, placement, split.nodes.clone())?;
            scratch = ms.scratch_bytes();
        }
    }
    Ok(scratch)
}

/// Which budget a device draws on: devices of the same name are one.
fn group_of(names: &[String], name: &str) -> usize {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .unwrap_or(usize::MAX)
}

/// Choose the shares of `meta`'s devices for the model of `file` and a
/// session of `options`: as close to `prefer` (one ratio per device) as
/// `budgets` (bytes per device name; a name not listed has no limit)
/// allow, with the input layer on `input`'s device. The plan returned was
/// measured with the shares returned; an error when no shares fit.
pub fn fit_split(
    file: &GgufFile,
    meta: &MetaDevice,
    input: &Arc<dyn Stream>,
    budgets: &[(String, usize)],
    prefer: &[f64],
    options: &SessionOptions,
) -> Result<SplitFit> {
    let n = meta.devices().len();
    if prefer.len() != n {
        return Err(Error::InvalidLayout(format!(
            "{} preferred shares for {n} devices",
            prefer.len()
        )));
    }
    SplitPolicy::new(prefer.to_vec())?;
    // Groups: one per distinct device name (parts, then the input device).
    let mut names: Vec<String> = Vec::new();
    let input_name = input.device().name().to_string();
    for name in meta
        .devices()
        .iter()
        .map(|d| d.name().to_string())
        .chain(std::iter::once(input_name.clone()))
    {
        if group_of(&names, &name) == usize::MAX {
            names.push(name);
        }
    }
    let budget_of = |g: usize| {
        budgets
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&names[g]))
            .map(|(_, b)| *b)
    };
    let part_group: Vec<usize> = meta
        .devices()
        .iter()
        .map(|d| group_of(&names, d.name()))
        .collect();
    let input_group = group_of(&names, &input_name);
    let totals = |fit: &SplitFit| -> Vec<usize> {
        let mut t = vec![0; names.len()];
        for (j, d) in fit.parts.iter().enumerate() {
            t[part_group[j]] += d.total();
        }
        t[input_group] += fit.input.total();
        t
    };
    let over = |fit: &SplitFit| -> Option<usize> {
        let t = totals(fit);
        (0..names.len()).find(|&g| budget_of(g).is_some_and(|b| t[g] > b))
    };
    let with_budgets = |mut fit: SplitFit| -> SplitFit {
        for (j, d) in fit.parts.iter_mut().enumerate() {
            d.budget = budget_of(part_group[j]);
        }
        fit.input.budget = budget_of(input_group);
        fit
    };
    let no_fit = |fit: &SplitFit, g: usize, why: &str| -> Error {
        Error::OutOfMemory {
            device: names[g].clone(),
            requested: totals(fit)[g],
            detail: format!(
                "the model does not fit a tensor split within the budgets: {why} (the closest \
                 shares measured:\n{})",
                with_budgets(fit.clone())
            ),
        }
    };
    // Largest share (of the split rows) each group may take; groups over
    // budget get theirs found by bisection on measured totals, one group a
    // round, until the shares fit.
    let mut cap = vec![f64::INFINITY; names.len()];
    let mut fit = measure_split(file, meta, input, &normalized(prefer), options)?;
    for _round in 0..=names.len() {
        let Some(g) = over(&fit) else {
            return Ok(with_budgets(fit));
        };
        cap[g] = 0.0;
        let Some(ratios) = water_fill(prefer, &part_group, &cap) else {
            return Err(no_fit(&fit, g, "the other devices cannot take its share"));
        };
        let least = measure_split(file, meta, input, &ratios, options)?;
        if totals(&least)[g] > budget_of(g).unwrap_or(usize::MAX) {
            return Err(no_fit(
                &least,
                g,
                "its mirrored weights and compute alone are over",
            ));
        }
        let (mut lo, mut hi) = (0.0, group_share(&fit.ratios, &part_group, g));
        let mut best = least;
        for _ in 0..BISECTIONS {
            let mid = 0.5 * (lo + hi);
            cap[g] = mid;
            let Some(ratios) = water_fill(prefer, &part_group, &cap) else {
                lo = mid;
                continue;
            };
            let m = measure_split(file, meta, input, &ratios, options)?;
            if totals(&m)[g] <= budget_of(g).unwrap_or(usize::MAX) {
                lo = mid;
                best = m;
            } else {
                hi = mid;
            }
        }
        cap[g] = lo;
        fit = best;
    }
    match over(&fit) {
        None => Ok(with_budgets(fit)),
        Some(g) => Err(no_fit(&fit, g, "no shares found")),
    }
}

/// Bisection steps per device over budget: the share found is within
/// 2^-12 of the largest that fits.
const BISECTIONS: usize = 12;

fn normalized(prefer: &[f64]) -> Vec<f64> {
    let total: f64 = prefer.iter().sum();
    prefer.iter().map(|p| p / total).collect()
}

/// The share of group `g`'s devices together.
fn group_share(ratios: &[f64], part_group: &[usize], g: usize) -> f64 {
    let total: f64 = ratios.iter().sum();
    part_group
        .iter()
        .zip(ratios)
        .filter(|(pg, _)| **pg == g)
        .map(|(_, r)| r / total)
        .sum()
}

/// Shares as close to `prefer` as each group's `cap` (the most of the
/// split rows it may take) allows, or `None` when the caps cannot hold
/// them all. Groups that hit their cap are held there; the others share
/// what is left in their preferred proportions, and a group's devices
/// split its share in theirs.
fn water_fill(prefer: &[f64], part_group: &[usize], cap: &[f64]) -> Option<Vec<f64>> {
    let n_groups = cap.len();
    let total: f64 = prefer.iter().sum();
    let mut want = vec![0.0; n_groups];
    for (j, &g) in part_group.iter().enumerate() {
        want[g] += prefer[j] / total;
    }
    let mut share = vec![0.0; n_groups];
    let mut held = vec![false; n_groups];
    let mut left = 1.0;
    loop {
        let active: Vec<usize> = (0..n_groups).filter(|&g| !held[g]).collect();
        let weight: f64 = active.iter().map(|&g| want[g]).sum();
        if weight <= 0.0 {
            break;
        }
        let mut any = false;
        for &g in &active {
            share[g] = left * want[g] / weight;
        }
        for &g in &active {
            if share[g] > cap[g] {
                share[g] = cap[g].max(0.0);
                held[g] = true;
                left -= share[g];
                any = true;
            }
        }
        if !any {
            left = 0.0;
            break;
        }
    }
    if left > 1e-9 {
        return None;
    }
    Some(
        part_group
            .iter()
            .enumerate()
            .map(|(j, &g)| {
                if want[g] > 0.0 {
                    share[g] * (prefer[j] / total) / want[g]
                } else {
                    0.0
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::water_fill;

    const INF: f64 = f64::INFINITY;

    #[test]
    fn water_filling_keeps_preferences_within_caps() {
        // No caps: the preference.
        let r = water_fill(&[1.0, 1.0], &[0, 1], &[INF, INF]).unwrap();
        assert_eq!(r, vec![0.5, 0.5]);
        // Device 0 may take 0.2: it does, the other the rest.
        let r = water_fill(&[1.0, 1.0], &[0, 1], &[0.2, INF]).unwrap();
        assert!(
            (r[0] - 0.2).abs() < 1e-12 && (r[1] - 0.8).abs() < 1e-12,
            "{r:?}"
        );
        // Three devices, one capped: the other two keep their 1:2 ratio.
        let r = water_fill(&[1.0, 1.0, 2.0], &[0, 1, 2], &[0.1, INF, INF]).unwrap();
        assert!((r[0] - 0.1).abs() < 1e-12, "{r:?}");
        assert!((r[2] / r[1] - 2.0).abs() < 1e-9, "{r:?}");
        // Caps that cannot hold everything.
        assert!(water_fill(&[1.0, 1.0], &[0, 1], &[0.3, 0.3]).is_none());
        // One device twice (one group): its two parts share one cap.
        let r = water_fill(&[1.0, 1.0, 1.0], &[0, 0, 1], &[0.4, INF]).unwrap();
        assert!(
            (r[0] - 0.2).abs() < 1e-12 && (r[1] - 0.2).abs() < 1e-12,
            "{r:?}"
        );
        // The only device that wants rows is capped at nothing.
        assert!(water_fill(&[1.0, 0.0], &[0, 1], &[0.0, INF]).is_none());
    }
}
