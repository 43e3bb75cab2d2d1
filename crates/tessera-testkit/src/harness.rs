//! The test mode: run each case on a device and compare with the reference
//! (Tessera's `test-backend-ops test`).
//!
//! For one case on one device:
//!
//! 1. skip as *not supported* unless `device.supports_op` holds for every op
//!    node (pure views need no kernel and are not asked);
//! 2. place every non-view tensor in one buffer of `device.buffer_type()`,
//!    at offsets aligned to the buffer type's alignment and `alloc_size` apart,
//!    with [`GUARD_BYTES`] of a position-dependent pattern before and after
//!    every tensor;
//! 3. write each leaf's initial bytes and fill every op output with `0xFF`
//!    (a NaN in every float type and in every quantized block's scale, so an
//!    output the device never writes is caught);
//! 4. compute on a stream of the device and read the whole buffer back;
//! 5. fail the case if a guard byte changed (naming the neighbouring
//!    tensors), if a leaf changed where no CPY/SET_ROWS of the graph writes
//!    it, or if a checked node disagrees with the reference
//!    ([`crate::compare`]).
//!
//! The leaf data of a case depends only on its name, so failures reproduce.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera::{
    Buffer, BufferUsage, Device, Error, Graph, Layout, Place, Placement, Result, Stream, TensorId,
};

use crate::cases::{Built, Case, catalogue, leaf_bytes};
use crate::compare::compare_values;
use crate::reference::{self, RefMemory};
use crate::rng::{Rng, seed_from_name};

/// Guard bytes before and after every tensor (rounded up to the alignment).
pub const GUARD_BYTES: usize = 1024;

/// The byte an op output is filled with before compute.
pub const NAN_FILL: u8 = 0xFF;

/// The guard pattern at absolute buffer position `pos` (position-dependent,
/// so a shifted copy of it is still caught).
pub fn guard_byte(pos: usize) -> u8 {
    (pos.wrapping_mul(151) ^ (pos >> 8)) as u8 ^ 0xA5
}

/// The result of one case on one device.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every check passed; the largest NMSE of the checks (0 when all were
    /// exact), to show the margin to the thresholds.
    Passed {
        /// Largest NMSE over the checked nodes.
        max_nmse: f64,
    },
    /// Something failed; the reason names what, where, the value and the
    /// expected value.
    Failed(String),
    /// The device does not support these ops (listed).
    Unsupported(String),
}

impl Outcome {
    /// Passed.
    pub fn is_passed(&self) -> bool {
        matches!(self, Outcome::Passed { .. })
    }
}

/// One case's outcome.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// Case name.
    pub name: String,
    /// Op under test.
    pub op: &'static str,
    /// What happened.
    pub outcome: Outcome,
    /// Wall time of the whole case (reference included).
    pub duration: Duration,
}

/// The outcome of a run of the catalogue on one device.
#[derive(Clone, Debug)]
pub struct Report {
    /// Device name.
    pub device: String,
    /// Device description.
    pub description: String,
    /// Every case run, in catalogue order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.outcome.is_passed()).count()
    }

    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.failures().count()
    }

    /// Cases the device does not support.
    pub fn unsupported(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Unsupported(_)))
            .count()
    }

    /// The failed cases.
    pub fn failures(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
    }

    /// One line: `CPU: 300 cases, 298 passed, 1 failed, 1 not supported`.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} cases, {} passed, {} failed, {} not supported",
            self.device,
            self.cases.len(),
            self.passed(),
            self.failed(),
            self.unsupported()
        )
    }

    /// Total wall time.
    pub fn duration(&self) -> Duration {
        self.cases.iter().map(|c| c.duration).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Testing {} ({})", self.device, self.description)?;
        for c in &self.cases {
            match &c.outcome {
                Outcome::Passed { max_nmse } => {
                    writeln!(f, "  {}: OK (NMSE {max_nmse:.1e})", c.name)?
                }
                Outcome::Failed(why) => writeln!(f, "  {}: FAIL: {why}", c.name)?,
                Outcome::Unsupported(why) => writeln!(f, "  {}: not supported ({why})", c.name)?,
            }
        }
        writeln!(
            f,
            "{} in {:.2} s",
            self.summary(),
            self.duration().as_secs_f64()
        )
    }
}

/// Options of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions<'a> {
    /// Only cases whose op equals or whose name contains this.
    pub filter: Option<&'a str>,
    /// Threads of the stream, for devices that have them.
    pub n_threads: Option<usize>,
    /// Parameters for `Device::new_stream` (e.g. `isa=scalar` on the CPU).
    pub stream_params: &'a str,
}

/// Run every case matching `filter` on `device`. A failure to create the
/// stream fails every case with that reason.
pub fn run_all(device: &dyn Device, filter: Option<&str>) -> Report {
    let options = RunOptions {
        filter,
        ..RunOptions::default()
    };
    run_all_with(device, &options).unwrap_or_else(|e| {
        let cases = catalogue()
            .into_iter()
            .filter(|c| c.matches(filter))
            .map(|c| CaseReport {
                name: c.name,
                op: c.op,
                outcome: Outcome::Failed(format!("creating a stream: {e}")),
                duration: Duration::ZERO,
            })
            .collect();
        Report {
            device: device.name().to_owned(),
            description: device.description().to_owned(),
            cases,
        }
    })
}

/// Run the matching cases on one stream of `device` configured by `options`.
pub fn run_all_with(device: &dyn Device, options: &RunOptions<'_>) -> Result<Report> {
    let stream = device.new_stream(&tessera::StreamOptions::parse(options.stream_params)?)?;
    if let Some(n) = options.n_threads {
        stream.set_n_threads(n)?;
    }
    let cases = catalogue()
        .into_iter()
        .filter(|c| c.matches(options.filter))
        .map(|c| {
            let start = Instant::now();
            let outcome = run_case(device, stream.as_ref(), &c);
            CaseReport {
                name: c.name,
                op: c.op,
                outcome,
                duration: start.elapsed(),
            }
        })
        .collect();
    Ok(Report {
        device: device.name().to_owned(),
        description: device.description().to_owned(),
        cases,
    })
}

/// Build and run one case.
pub fn run_case(device: &dyn Device, stream: &dyn Stream, case: &Case) -> Outcome {
    match case.build() {
        Ok(built) => run_built(device, stream, &built, seed_from_name(&case.name)),
        Err(e) => Outcome::Failed(format!("building the graph: {e}")),
    }
}

/// The op nodes of `graph` that `device` does not support, by display name
/// (pure views are never asked: they need no kernel).
pub fn unsupported_ops(device: &dyn Device, graph: &Graph) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in graph.op_ids() {
        let op = graph.nodes()[id.index()].op;
        if !op.is_view() && !device.supports_op(graph, id) {
            let name = format!(
                "{} ({})",
                op.display_name(),
                graph.nodes()[id.index()].layout
            );
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// The initial bytes of every leaf of `built`, from `seed`.
pub fn initial_leaves(built: &Built, seed: u64) -> Result<Vec<(TensorId, Vec<u8>)>> {
    let g = &built.graph;
    g.leaf_ids()
        .filter(|&id| !g.nodes()[id.index()].is_view())
        .map(|id| {
            let mut rng =
                Rng::new(seed ^ (id.index() as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let bytes = leaf_bytes(g, id, &built.init_of(id)?, &mut rng)?;
            Ok((id, bytes))
        })
        .collect()
}

/// Evaluate `built` with the reference from the given leaf bytes.
pub fn reference_memory(built: &Built, leaves: &[(TensorId, Vec<u8>)]) -> Result<RefMemory> {
    let mut mem = RefMemory::new(&built.graph)?;
    for (id, bytes) in leaves {
        mem.set_bytes(*id, bytes)?;
    }
    reference::evaluate(&built.graph, &mut mem)?;
    Ok(mem)
}

/// Where one root tensor lives in the case's buffer.
#[derive(Clone, Copy, Debug)]
struct Slot {
    id: TensorId,
    offset: usize,
    nbytes: usize,
    alloc: usize,
}

fn round_up(x: usize, align: usize) -> Option<usize> {
    x.checked_add(align - 1).map(|v| v / align * align)
}

/// Offsets of every root tensor with guards around each, and the total size.
fn plan_slots(graph: &Graph, device: &dyn Device) -> Result<(Vec<Slot>, usize)> {
    let buft = device.buffer_type();
    let align = buft.alignment().max(1);
    let ovf = || Error::Overflow("case buffer size".into());
    let guard = round_up(GUARD_BYTES, align).ok_or_else(ovf)?;
    let mut slots = Vec::new();
    let mut cursor = 0usize;
    for id in graph
        .ids()
        .filter(|&id| !graph.nodes()[id.index()].is_view())
    {
        let layout = graph.nodes()[id.index()].layout;
        let nbytes = layout.checked_nbytes()?;
        let alloc = buft.alloc_size(&layout).max(nbytes);
        let offset = cursor
            .checked_add(guard)
            .and_then(|x| round_up(x, align))
            .ok_or_else(ovf)?;
        cursor = offset.checked_add(alloc).ok_or_else(ovf)?;
        slots.push(Slot {
            id,
            offset,
            nbytes,
            alloc,
        });
    }
    let total = cursor.checked_add(guard).ok_or_else(ovf)?;
    Ok((slots, total))
}

/// Run a built case with leaf data drawn from `seed`.
pub fn run_built(device: &dyn Device, stream: &dyn Stream, built: &Built, seed: u64) -> Outcome {
    let missing = unsupported_ops(device, &built.graph);
    if !missing.is_empty() {
        return Outcome::Unsupported(missing.join(", "));
    }
    match compare_with_reference(device, stream, built, seed) {
        Ok(max_nmse) => Outcome::Passed { max_nmse },
        Err(why) => Outcome::Failed(why),
    }
}

/// Run `built` on `device` and compare it with the reference: guards,
/// untouched leaves and every check. `Ok` carries the largest NMSE of the
/// checks, `Err` the failure message. Does not consult `supports_op` (see
/// [`run_built`]).
pub fn compare_with_reference(
    device: &dyn Device,
    stream: &dyn Stream,
    built: &Built,
    seed: u64,
) -> Result<f64, String> {
    let g = &built.graph;
    let leaves =
        initial_leaves(built, seed).map_err(|e| format!("initialising the leaves: {e}"))?;
    let expected = reference_memory(built, &leaves).map_err(|e| format!("reference: {e}"))?;
    let (slots, total) = plan_slots(g, device).map_err(|e| format!("planning the buffer: {e}"))?;
    let buffer = device
        .buffer_type()
        .alloc_buffer(total)
        .map_err(|e| format!("allocating {total} bytes: {e}"))?;
    buffer.set_usage(BufferUsage::Compute);
    let placement = place(g, &buffer, &slots, &leaves, total)
        .map_err(|e| format!("writing the inputs: {e}"))?;
    stream
        .compute(g, &placement)
        .map_err(|e| format!("compute failed: {e}"))?;
    let mut after = vec![0u8; total];
    buffer
        .read(0, &mut after)
        .map_err(|e| format!("reading back: {e}"))?;
    check_guards(g, &slots, &after)?;
    check_leaves(g, &slots, &leaves, &after)?;
    check_results(built, &slots, &after, &expected)
}

/// Fill the buffer: guards everywhere, then leaf bytes and the NaN pattern.
fn place(
    g: &Graph,
    buffer: &Arc<dyn Buffer>,
    slots: &[Slot],
    leaves: &[(TensorId, Vec<u8>)],
    total: usize,
) -> Result<Placement> {
    let pattern: Vec<u8> = (0..total).map(guard_byte).collect();
    buffer.write(0, &pattern)?;
    let mut placement = Placement::new(g);
    for s in slots {
        let layout = g.nodes()[s.id.index()].layout;
        buffer.init_tensor(&layout, s.offset)?;
        match leaves.iter().find(|(id, _)| *id == s.id) {
            Some((_, bytes)) => buffer.write(s.offset, bytes)?,
            None => buffer.fill(s.offset, s.nbytes, NAN_FILL)?,
        }
        let place = Place {
            buffer: buffer.clone(),
            offset: s.offset,
        };
        placement.set(g, s.id, place)?;
    }
    placement.place_views(g)?;
    Ok(placement)
}

fn describe(g: &Graph, id: TensorId) -> String {
    let n = &g.nodes()[id.index()];
    format!("{} ({} {})", n.label(id), n.op.display_name(), n.layout)
}

/// Every guard byte must still hold the pattern.
fn check_guards(g: &Graph, slots: &[Slot], after: &[u8]) -> Result<(), String> {
    let mut start = 0usize;
    for i in 0..=slots.len() {
        let end = slots.get(i).map_or(after.len(), |s| s.offset);
        if let Some(pos) = (start..end).find(|&p| after.get(p) != Some(&guard_byte(p))) {
            let prev = i.checked_sub(1).and_then(|j| slots.get(j));
            let next = slots.get(i);
            let mut what = Vec::new();
            if let Some(p) = prev {
                what.push(format!(
                    "{} bytes past the end of {}",
                    pos - (p.offset + p.nbytes),
                    describe(g, p.id)
                ));
            }
            if let Some(n) = next {
                what.push(format!(
                    "{} bytes before the start of {}",
                    n.offset - pos,
                    describe(g, n.id)
                ));
            }
            return Err(format!(
                "out-of-bounds write: a guard byte changed at {}",
                what.join(" and ")
            ));
        }
        if let Some(s) = slots.get(i) {
            start = s.offset + s.alloc;
        }
    }
    Ok(())
}

/// Bytes of `layout` placed at `base`: one range per element (per block for
/// quantized types).
fn element_ranges(layout: &Layout, base: usize) -> Vec<(usize, usize)> {
    let bs = layout.dtype.block_size();
    let es = layout.dtype.type_size();
    let mut out = Vec::new();
    for i3 in 0..layout.ne[3] {
        for i2 in 0..layout.ne[2] {
            for i1 in 0..layout.ne[1] {
                for i0 in (0..layout.ne[0]).step_by(bs) {
                    let off = base + layout.offset_of([i0, i1, i2, i3]);
                    out.push((off, off + es));
                }
            }
        }
    }
    out
}

/// Leaves keep their bytes except where a CPY or SET_ROWS of the graph writes.
fn check_leaves(
    g: &Graph,
    slots: &[Slot],
    leaves: &[(TensorId, Vec<u8>)],
    after: &[u8],
) -> Result<(), String> {
    for (id, before) in leaves {
        let Some(slot) = slots.iter().find(|s| s.id == *id) else {
            continue;
        };
        let mut writable = vec![false; before.len()];
        for w in g.op_ids().filter(|&w| {
            g.nodes()[w.index()].op.writes_into_src() && g.nodes()[w.index()].view_src == Some(*id)
        }) {
            for (a, b) in
                element_ranges(&g.nodes()[w.index()].layout, g.nodes()[w.index()].view_offs)
            {
                writable.iter_mut().take(b).skip(a).for_each(|x| *x = true);
            }
        }
        let now = after
            .get(slot.offset..slot.offset + slot.nbytes)
            .unwrap_or(&[]);
        let changed = before
            .iter()
            .zip(now)
            .enumerate()
            .find(|&(k, (x, y))| x != y && !writable.get(k).copied().unwrap_or(false));
        if let Some((k, (x, y))) = changed {
            return Err(format!(
                "input {} was modified at byte {k} (0x{x:02x} -> 0x{y:02x}), where the graph does not write",
                describe(g, *id)
            ));
        }
    }
    Ok(())
}

/// Every check against the reference; the largest NMSE if all pass.
fn check_results(
    built: &Built,
    slots: &[Slot],
    after: &[u8],
    expected: &RefMemory,
) -> Result<f64, String> {
    let g = &built.graph;
    let mut actual = RefMemory::new(g).map_err(|e| e.to_string())?;
    for s in slots {
        let bytes = after.get(s.offset..s.offset + s.nbytes).unwrap_or(&[]);
        actual
            .set_bytes(s.id, bytes)
            .map_err(|e| format!("decoding {}: {e}", describe(g, s.id)))?;
    }
    let mut failures = Vec::new();
    let mut max_nmse = 0.0f64;
    for c in &built.checks {
        let dtype = g.nodes()[c.id.index()].layout.dtype;
        let got = actual
            .load(g, c.id)
            .map_err(|e| format!("reading {}: {e}", describe(g, c.id)))?;
        let want = expected
            .load(g, c.id)
            .map_err(|e| format!("reference {}: {e}", describe(g, c.id)))?;
        match compare_values(&got, &want, dtype, c.tolerance) {
            Ok(cmp) => max_nmse = max_nmse.max(cmp.nmse),
            Err(why) => failures.push(format!("{} [{}]: {why}", describe(g, c.id), c.tolerance)),
        }
    }
    if failures.is_empty() {
        Ok(max_nmse)
    } else {
        Err(failures.join("; "))
    }
}
