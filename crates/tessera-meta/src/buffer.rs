//! The meta device's memory: one buffer of each device behind one
//! [`Buffer`].
//!
//! Two kinds, because Tessera's buffers are byte-addressed (a buffer does
//! not know which tensor a byte range belongs to):
//!
//! - **Mirror** buffers (what [`MetaBufferType::alloc_buffer`] gives: the
//!   compute memory the graph allocator plans) hold one buffer of the full
//!   size per device, so every tensor has the same offset on every device.
//!   A mirrored tensor fills its range on each device; a split one only
//!   the start of it (its compact piece). The buffer keeps a *record* of
//!   each split tensor the meta stream left there, so that host reads
//!   gather the pieces. A host write or fill over a recorded range first
//!   turns the record into mirrored bytes (gather, then write everywhere),
//!   so the bytes the host sees are always the logical tensor's.
//! - **Static** buffers ([`crate::MetaDevice::alloc_split`]: weights, KV
//!   caches) hold tensors declared with their split state up front, each
//!   device's pieces packed in its own buffer: a split weight takes its
//!   share of memory on each device, not the whole.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use tessera::buffer::UsageCell;
use tessera::{
    Buffer, BufferType, BufferUsage, Device, Error, Layout, Place, Result, Tensor, buffer,
};

use crate::state::{Split, SplitState};

/// The meta device's buffer type: alignment the largest of the devices',
/// maximum size the smallest, a tensor's size the largest.
#[derive(Debug)]
pub struct MetaBufferType {
    pub(crate) name: String,
    pub(crate) bufts: Vec<Arc<dyn BufferType>>,
    pub(crate) device: Weak<dyn Device>,
    pub(crate) meta: Weak<crate::MetaDevice>,
    pub(crate) me: Weak<MetaBufferType>,
}

impl MetaBufferType {
    fn arc(&self) -> Result<Arc<MetaBufferType>> {
        self.me
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "the meta device was dropped"))
    }

    /// The meta device that owns this buffer type.
    pub fn meta_device(&self) -> Option<Arc<crate::MetaDevice>> {
        self.meta.upgrade()
    }

    /// The devices' buffer types, in device order.
    pub fn parts(&self) -> &[Arc<dyn BufferType>] {
        &self.bufts
    }
}

impl BufferType for MetaBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let parts = self
            .bufts
            .iter()
            .map(|b| b.alloc_buffer(size))
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(MetaBuffer {
            buft: self.arc()?,
            size,
            kind: Kind::Mirror {
                parts,
                records: Mutex::new(Vec::new()),
            },
            usage: UsageCell::new(BufferUsage::Any),
        }))
    }

    fn alignment(&self) -> usize {
        self.bufts.iter().map(|b| b.alignment()).max().unwrap_or(1)
    }

    fn max_size(&self) -> usize {
        self.bufts
            .iter()
            .map(|b| b.max_size())
            .min()
            .unwrap_or(usize::MAX)
    }

    fn alloc_size(&self, layout: &Layout) -> usize {
        self.bufts
            .iter()
            .map(|b| b.alloc_size(layout))
            .max()
            .unwrap_or_else(|| layout.nbytes())
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.upgrade()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A split tensor the meta stream left in a mirror buffer.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub offset: usize,
    pub layout: Layout,
    pub split: Split,
}

impl Record {
    fn end(&self) -> usize {
        self.offset + self.layout.nbytes()
    }
    fn overlaps(&self, lo: usize, hi: usize) -> bool {
        self.offset < hi && lo < self.end()
    }
}

/// A tensor of a static buffer: its logical layout, state and pieces.
#[derive(Clone, Debug)]
pub(crate) struct StaticTensor {
    pub offset: usize,
    pub layout: Layout,
    pub state: SplitState,
    /// Per device: its piece (the whole tensor when mirrored).
    pub pieces: Vec<Option<Tensor>>,
}

#[derive(Debug)]
enum Kind {
    Mirror {
        parts: Vec<Arc<dyn Buffer>>,
        records: Mutex<Vec<Record>>,
    },
    Static {
        /// Every device's buffers (kept alive by the pieces too).
        tensors: Vec<StaticTensor>,
    },
}

/// One buffer of the meta device (see the module docs).
#[derive(Debug)]
pub struct MetaBuffer {
    buft: Arc<MetaBufferType>,
    size: usize,
    kind: Kind,
    usage: UsageCell,
}

/// How a tensor found in meta memory is held, with each device's memory.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub state: SplitState,
    /// Per device: where its piece (or whole copy) is and its layout.
    pub places: Vec<Option<(Place, Layout)>>,
}

impl MetaBuffer {
    /// A static buffer over `tensors` (see [`crate::MetaDevice::alloc_split`]).
    pub(crate) fn new_static(
        buft: Arc<MetaBufferType>,
        size: usize,
        tensors: Vec<StaticTensor>,
        usage: BufferUsage,
    ) -> MetaBuffer {
        MetaBuffer {
            buft,
            size,
            kind: Kind::Static { tensors },
            usage: UsageCell::new(usage),
        }
    }

    /// The buffers of the devices of a mirror buffer (`None` for static).
    pub(crate) fn mirror_parts(&self) -> Option<&[Arc<dyn Buffer>]> {
        match &self.kind {
            Kind::Mirror { parts, .. } => Some(parts),
            Kind::Static { .. } => None,
        }
    }

    /// Bytes each device holds for this buffer.
    pub fn bytes_per_device(&self) -> Vec<usize> {
        match &self.kind {
            Kind::Mirror { parts, .. } => parts.iter().map(|p| p.size()).collect(),
            Kind::Static { tensors } => {
                // What the pieces take (pieces may be views of memory that
                // holds more, e.g. a mapped file).
                let mut bytes = vec![0; self.buft.bufts.len()];
                for t in tensors {
                    for (b, p) in bytes.iter_mut().zip(&t.pieces) {
                        *b += p.as_ref().map_or(0, |p| p.nbytes());
                    }
                }
                bytes
            }
        }
    }

    /// How the tensor of `layout` at `offset` is held. In a mirror buffer
    /// a record of exactly that tensor makes it split; a record it only
    /// overlaps is first turned into mirrored bytes; no record: mirrored.
    pub(crate) fn held(&self, offset: usize, layout: &Layout) -> Result<Held> {
        match &self.kind {
            Kind::Mirror { parts, records } => {
                let end = offset
                    .checked_add(layout.nbytes())
                    .ok_or_else(|| Error::Overflow("meta tensor end".into()))?;
                let exact = {
                    let recs = lock(records);
                    recs.iter()
                        .find(|r| r.offset == offset && r.layout == *layout)
                        .cloned()
                };
                if let Some(r) = exact {
                    let places = (0..parts.len())
                        .map(|j| {
                            Ok(r.split.piece_layout(layout, j)?.map(|l| {
                                (
                                    Place {
                                        buffer: parts[j].clone(),
                                        offset,
                                    },
                                    l,
                                )
                            }))
                        })
                        .collect::<Result<_>>()?;
                    return Ok(Held {
                        state: SplitState::Split(r.split),
                        places,
                    });
                }
                self.materialize(offset, end)?;
                Ok(Held {
                    state: SplitState::Mirrored,
                    places: parts
                        .iter()
                        .map(|p| {
                            Some((
                                Place {
                                    buffer: p.clone(),
                                    offset,
                                },
                                *layout,
                            ))
                        })
                        .collect(),
                })
            }
            Kind::Static { tensors } => {
                let t = tensors.iter().find(|t| t.offset == offset).ok_or_else(|| {
                    Error::InvalidLayout(format!(
                        "no tensor of the split buffer starts at byte {offset}"
                    ))
                })?;
                if t.layout != *layout {
                    return Err(Error::InvalidLayout(format!(
                        "the split buffer holds {} at byte {offset}, not {layout}",
                        t.layout
                    )));
                }
                Ok(Held {
                    state: t.state.clone(),
                    places: t
                        .pieces
                        .iter()
                        .map(|p| {
                            p.as_ref().map(|p| {
                                (
                                    Place {
                                        buffer: p.buffer().clone(),
                                        offset: p.offset(),
                                    },
                                    *p.layout(),
                                )
                            })
                        })
                        .collect(),
                })
            }
        }
    }

    /// The state [`MetaBuffer::held`] would find for the tensor of
    /// `layout` at `offset`, without turning anything into mirrored bytes:
    /// `None` when it would have to (a record overlaps it inexactly).
    pub(crate) fn peek(&self, offset: usize, layout: &Layout) -> Option<SplitState> {
        match &self.kind {
            Kind::Mirror { records, .. } => {
                let end = offset.checked_add(layout.nbytes())?;
                let recs = lock(records);
                let mut state = SplitState::Mirrored;
                for r in recs.iter().filter(|r| r.overlaps(offset, end)) {
                    if r.offset == offset && r.layout == *layout {
                        state = SplitState::Split(r.split.clone());
                    } else {
                        return None;
                    }
                }
                Some(state)
            }
            Kind::Static { tensors } => tensors
                .iter()
                .find(|t| t.offset == offset && t.layout == *layout)
                .map(|t| t.state.clone()),
        }
    }

    /// After a compute: the tensor of `layout` at `offset` is now held as
    /// `state` (mirror buffers only; split tensors are recorded, mirrored
    /// ones drop the records they overwrote).
    pub(crate) fn set_held(&self, offset: usize, layout: &Layout, state: &SplitState) {
        if let Kind::Mirror { records, .. } = &self.kind {
            let end = offset + layout.nbytes();
            let mut recs = lock(records);
            recs.retain(|r| !r.overlaps(offset, end));
            if let SplitState::Split(s) = state {
                recs.push(Record {
                    offset,
                    layout: *layout,
                    split: s.clone(),
                });
            }
        }
    }

    /// Turn every record overlapping `lo..hi` into mirrored bytes.
    fn materialize(&self, lo: usize, hi: usize) -> Result<()> {
        let Kind::Mirror { parts, records } = &self.kind else {
            return Ok(());
        };
        let overlapping: Vec<Record> = {
            let mut recs = lock(records);
            let (over, keep): (Vec<_>, Vec<_>) = recs.drain(..).partition(|r| r.overlaps(lo, hi));
            *recs = keep;
            over
        };
        for r in overlapping {
            let mut whole = buffer::try_zeroed_vec(r.layout.nbytes(), "a split tensor")?;
            gather_into(&r, parts, &mut whole, 0, r.layout.nbytes())?;
            for p in parts {
                p.write(r.offset, &whole)?;
            }
        }
        Ok(())
    }

    fn static_tensors(&self, lo: usize, hi: usize) -> Vec<&StaticTensor> {
        match &self.kind {
            Kind::Static { tensors } => tensors
                .iter()
                .filter(|t| t.offset < hi && lo < t.offset + t.layout.nbytes())
                .collect(),
            Kind::Mirror { .. } => Vec::new(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copy the bytes `lo..hi` of the whole tensor of `r` (a split record of a
/// mirror buffer) into `out` (which holds bytes from `lo`).
fn gather_into(
    r: &Record,
    parts: &[Arc<dyn Buffer>],
    out: &mut [u8],
    lo: usize,
    hi: usize,
) -> Result<()> {
    for (j, runs) in r.split.runs(&r.layout)?.iter().enumerate() {
        for (w, p, len) in runs.intersect(lo, hi) {
            parts[j].read(r.offset + p, &mut out[w - lo..w - lo + len])?;
        }
    }
    Ok(())
}

/// Apply `f(piece tensor, whole offset, piece offset, len)` to every part
/// of the bytes `lo..hi` (relative to the tensor) of static tensor `t`: for
/// a split tensor the parts each piece holds, otherwise the same range of
/// every device's copy.
fn static_parts(
    t: &StaticTensor,
    lo: usize,
    hi: usize,
    mut f: impl FnMut(&Tensor, usize, usize, usize) -> Result<()>,
) -> Result<()> {
    match &t.state {
        SplitState::Split(s) => {
            for (j, runs) in s.runs(&t.layout)?.iter().enumerate() {
                if let Some(piece) = &t.pieces[j] {
                    for (w, p, len) in runs.intersect(lo, hi) {
                        f(piece, w, p, len)?;
                    }
                }
            }
        }
        _ => {
            for piece in t.pieces.iter().flatten() {
                f(piece, lo, lo, hi - lo)?;
            }
        }
    }
    Ok(())
}

fn read_static(t: &StaticTensor, lo: usize, hi: usize, out: &mut [u8], base: usize) -> Result<()> {
    match &t.state {
        SplitState::Split(_) => static_parts(t, lo, hi, |piece, w, p, len| {
            piece.read(p, &mut out[w + t.offset - base..w + t.offset - base + len])
        }),
        _ => match t.pieces.iter().flatten().next() {
            Some(piece) => piece.read(lo, &mut out[lo + t.offset - base..hi + t.offset - base]),
            None => Ok(()),
        },
    }
}

impl Buffer for MetaBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        &self.buft.name
    }

    fn size(&self) -> usize {
        self.size
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        buffer::check_range(self.name(), self.size, offset, data.len())?;
        let (lo, hi) = (offset, offset + data.len());
        match &self.kind {
            Kind::Mirror { parts, .. } => {
                self.materialize(lo, hi)?;
                for p in parts {
                    p.write(offset, data)?;
                }
                Ok(())
            }
            Kind::Static { .. } => {
                for t in self.static_tensors(lo, hi) {
                    let (a, b) = (
                        lo.max(t.offset) - t.offset,
                        hi.min(t.offset + t.layout.nbytes()) - t.offset,
                    );
                    static_parts(t, a, b, |piece, w, p, len| {
                        let src = w + t.offset - lo;
                        piece.write(p, &data[src..src + len])
                    })?;
                }
                Ok(())
            }
        }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        buffer::check_range(self.name(), self.size, offset, out.len())?;
        let (lo, hi) = (offset, offset + out.len());
        match &self.kind {
            Kind::Mirror { parts, records } => {
                if let Some(p) = parts.first() {
                    p.read(offset, out)?;
                }
                let recs: Vec<Record> = lock(records)
                    .iter()
                    .filter(|r| r.overlaps(lo, hi))
                    .cloned()
                    .collect();
                for r in recs {
                    let (a, b) = (lo.max(r.offset), hi.min(r.end()));
                    gather_into(
                        &r,
                        parts,
                        &mut out[a - lo..b - lo],
                        a - r.offset,
                        b - r.offset,
                    )?;
                }
                Ok(())
            }
            Kind::Static { .. } => {
                out.fill(0);
                for t in self.static_tensors(lo, hi) {
                    let (a, b) = (
                        lo.max(t.offset) - t.offset,
                        hi.min(t.offset + t.layout.nbytes()) - t.offset,
                    );
                    read_static(t, a, b, out, lo)?;
                }
                Ok(())
            }
        }
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer::check_range(self.name(), self.size, offset, len)?;
        match &self.kind {
            Kind::Mirror { parts, .. } => {
                self.materialize(offset, offset + len)?;
                for p in parts {
                    p.fill(offset, len, value)?;
                }
                Ok(())
            }
            Kind::Static { .. } => {
                let bytes = buffer::try_filled_vec(len, value, "a split buffer fill")?;
                self.write(offset, &bytes)
            }
        }
    }

    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
