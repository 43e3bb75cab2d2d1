//! Bad input for placements and the allocators: `Placement::set` / `bind`
//! with out-of-range offsets, wrong buffers and ids of other graphs,
//! placements of one graph used with another, and `LinearAllocator`,
//! `alloc_tensors` and `GraphAllocator` with tensors larger than the buffer
//! type allows, bad buffer ids, and buffer types that misreport their
//! alignment, sizes or allocations (the trait is public: a buggy
//! implementation is input too). An `Ok` must place every tensor inside its
//! buffer and never on top of another tensor of the same allocation.

use std::any::Any;
use std::sync::Arc;

use proptest::prelude::*;
use tessera::buffer::check_range;
use tessera::{
    Buffer, BufferType, BufferUsage, DType, Graph, GraphAllocator, Layout, LinearAllocator,
    MultiBuffer, Place, Placement, Tensor, TensorId, alloc_tensors, alloc_tensors_size,
};

use super::object_cases::{arena, host_buft, read_only};
use super::strategies::{huge, offset, raw_layout, sample, small_layout};
use super::{Case, Stop, ensure, setup};

/// A small graph: an input, a weight, their sum, a view and a transpose of
/// it, a quantized leaf, an I32 leaf; plus the ids in order.
fn small_graph() -> tessera::Result<(Graph, Vec<TensorId>)> {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 4])?;
    let w = g.new_tensor(DType::F32, &[8, 4])?;
    let y = g.add(x, w)?;
    let v = g.view_1d(y, 4, 16)?;
    let t = g.transpose(x)?;
    let q = g.new_tensor(DType::Q4_0, &[64, 2])?;
    let i = g.new_tensor(DType::I32, &[4])?;
    let s = g.scale(y, 2.0)?;
    g.set_output(s)?;
    Ok((g, vec![x, w, y, v, t, q, i, s]))
}

fn id_of(k: usize, ids: &[TensorId]) -> TensorId {
    match k % 12 {
        8 => TensorId::from_index(99),
        9 => TensorId::from_index(u32::MAX),
        10 | 11 => {
            let mut other = Graph::new();
            let _ = other.new_tensor(DType::F32, &[1]);
            other.ids().next().unwrap_or(TensorId::from_index(0))
        }
        i => ids[i],
    }
}

fn buffer(kind: usize) -> Result<Arc<dyn Buffer>, Stop> {
    Ok(match kind % 4 {
        0 => arena(256)?,
        1 => arena(0)?,
        2 => read_only(vec![0u8; 256])?,
        _ => Arc::new(MultiBuffer::new(
            vec![arena(128)?, arena(128)?],
            host_buft(),
        )),
    })
}

pub(super) fn placement_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let spec = (
        0usize..7,
        0usize..12,
        offset(),
        0usize..4,
        (0usize..12, 0usize..12),
        small_layout(),
    );
    for (op, k, off, bk, (r0, r1), l) in sample(spec, 200, 60) {
        cases.push(Case::new(
            format!(
                "placement op {op}: id #{k}, offset {off}, buffer #{bk}, range {r0}..{r1}, {l:?}"
            ),
            move || -> Result<(), Stop> {
                let (g, ids) = setup(small_graph())?;
                let id = id_of(k, &ids);
                let buf = buffer(bk)?;
                let mut p = Placement::new(&g);
                match op {
                    0 => {
                        p.set(
                            &g,
                            id,
                            Place {
                                buffer: buf.clone(),
                                offset: off,
                            },
                        )?;
                        let n = g.layout(id)?.nbytes();
                        ensure(check_range("x", buf.size(), off, n).is_ok(), || {
                            format!("{n} bytes placed at {off} of {}", buf.size())
                        })?;
                        p.tensor(&g, id).map(drop)?;
                    }
                    1 => {
                        let t = Tensor::new(l, buf, off)?;
                        p.bind(&g, id, &t)?;
                        ensure(g.layout(id)? == l, || {
                            "bound a tensor of another layout".into()
                        })?;
                    }
                    2 => {
                        p.tensor(&g, id)?;
                    }
                    3 => {
                        // The root near the end of its buffer: views must not spill.
                        let root = g.memory_root(id)?.0;
                        let n = g.layout(root)?.nbytes();
                        let at = buf.size().saturating_sub(n).saturating_sub(off % 8);
                        p.set(
                            &g,
                            root,
                            Place {
                                buffer: buf.clone(),
                                offset: at,
                            },
                        )?;
                        p.place_views(&g)?;
                        for v in g.ids() {
                            if p.get(v).is_some() {
                                p.tensor(&g, v)?;
                            }
                        }
                    }
                    4 => p.check_complete(&g, r0..r1)?,
                    5 => {
                        // A placement made for a bigger graph, used with this one.
                        let mut big = Graph::new();
                        for _ in 0..12 {
                            setup(big.new_tensor(DType::F32, &[2]))?;
                        }
                        let mut q = Placement::new(&big);
                        for b in big.ids() {
                            setup(q.set(
                                &big,
                                b,
                                Place {
                                    buffer: arena(64)?,
                                    offset: 0,
                                },
                            ))?;
                        }
                        q.place_views(&g)?;
                        q.check_complete(&g, 0..g.len())?;
                        for v in g.ids() {
                            let _ = q.tensor(&g, v);
                        }
                        q.tensor(&g, id)?;
                    }
                    _ => {
                        let _ = (p.get(id), p.len(), p.is_empty());
                        p.clear(id);
                        p.fit(&g);
                    }
                }
                Ok(())
            },
        ));
    }
    cases
}

/// A buffer type that misreports: any alignment, any maximum, an
/// `alloc_size` that is too small or absurd, buffers shorter than asked.
#[derive(Clone, Debug)]
struct Weird {
    alignment: usize,
    max: usize,
    size_mode: usize,
    short_by: usize,
}

impl BufferType for Weird {
    fn name(&self) -> &str {
        "WEIRD"
    }
    fn alloc_buffer(&self, size: usize) -> tessera::Result<Arc<dyn Buffer>> {
        host_buft().alloc_buffer(size.saturating_sub(self.short_by))
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max
    }
    fn alloc_size(&self, layout: &Layout) -> usize {
        let n = layout.nbytes();
        match self.size_mode % 4 {
            0 => n,
            1 => 0,
            2 => usize::MAX,
            _ => n.saturating_add(13),
        }
    }
    fn device(&self) -> Option<Arc<dyn tessera::Device>> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn weird() -> impl Strategy<Value = Option<Weird>> {
    let alignment = prop_oneof![Just(0usize), Just(1), Just(3), Just(64), Just(1 << 63)];
    let max = prop_oneof![Just(0usize), Just(100), Just(1 << 20), Just(usize::MAX)];
    prop_oneof![
        2 => Just(None),
        3 => (alignment, max, 0usize..4, prop_oneof![Just(0usize), Just(1), Just(64)]).prop_map(
            |(alignment, max, size_mode, short_by)| Some(Weird { alignment, max, size_mode, short_by })
        ),
    ]
}

fn layout_list() -> impl Strategy<Value = Vec<Layout>> {
    let huge_tensor = (
        huge(),
        prop::sample::select(vec![DType::F32, DType::I64, DType::Q8_0]),
    )
        .prop_map(|(n, t)| {
            let n = n / 256 * 256;
            Layout::contiguous(t, &[n]).unwrap_or(Layout {
                dtype: t,
                ne: [n, 1, 1, 1],
                nb: [t.type_size(), usize::MAX, usize::MAX, usize::MAX],
            })
        });
    let one = prop_oneof![4 => small_layout(), 1 => raw_layout(), 1 => huge_tensor];
    prop::collection::vec(one, 0..=4)
}

/// Every tensor lies inside its buffer and no two share a byte.
fn disjoint_and_inside(tensors: &[Tensor]) -> Result<(), Stop> {
    for (i, t) in tensors.iter().enumerate() {
        let end = t.offset().checked_add(t.nbytes());
        ensure(end.is_some_and(|e| e <= t.buffer().size()), || {
            format!(
                "tensor {i} at {} +{} past its buffer",
                t.offset(),
                t.nbytes()
            )
        })?;
        for (j, u) in tensors.iter().enumerate().take(i) {
            let same = std::ptr::addr_eq(Arc::as_ptr(t.buffer()), Arc::as_ptr(u.buffer()));
            let overlap = t.nbytes() > 0
                && u.nbytes() > 0
                && t.offset() < u.offset() + u.nbytes()
                && u.offset() < t.offset() + t.nbytes();
            ensure(!(same && overlap), || {
                format!("tensors {j} and {i} overlap")
            })?;
        }
    }
    Ok(())
}

pub(super) fn allocator_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let lin = (
        prop_oneof![Just(0usize), Just(100), Just(4096)],
        layout_list(),
    );
    for (size, layouts) in sample(lin, 80, 70) {
        cases.push(Case::new(
            format!("LinearAllocator over {size} bytes: {layouts:?}"),
            move || -> Result<(), Stop> {
                let mut a = LinearAllocator::new(arena(size)?)?;
                let mut got = Vec::new();
                let mut last = Ok(());
                for l in &layouts {
                    match a.alloc(l) {
                        Ok(t) => got.push(t),
                        Err(e) => last = Err(Stop::Lib(e)),
                    }
                }
                let _ = (a.offset(), a.remaining(), a.buffer());
                disjoint_and_inside(&got)?;
                last
            },
        ));
    }
    for (w, layouts) in sample((weird(), layout_list()), 100, 71) {
        cases.push(Case::new(
            format!("alloc_tensors on {w:?}: {layouts:?}"),
            move || -> Result<(), Stop> {
                let buft: Arc<dyn BufferType> = match w {
                    Some(w) => Arc::new(w),
                    None => host_buft(),
                };
                let size = alloc_tensors_size(&buft, &layouts);
                let set = alloc_tensors(&buft, &layouts, BufferUsage::Weights)?;
                ensure(set.tensors.len() == layouts.len(), || {
                    "a tensor is missing".into()
                })?;
                ensure(size.is_ok(), || {
                    format!("alloc_tensors_size failed: {size:?}")
                })?;
                disjoint_and_inside(&set.tensors)
            },
        ));
    }
    let graphs = (
        weird(),
        prop_oneof![
            Just(8usize),
            Just(1 << 18),
            Just(1 << 40),
            Just((1 << 61) + 256)
        ],
        prop::collection::vec(prop_oneof![0usize..3, huge()], 0..=12),
        0usize..6,
    );
    for (w, n, buffer_ids, mode) in sample(graphs, 100, 72) {
        cases.push(Case::new(
            format!(
                "GraphAllocator on {w:?}, input of {n} f32, buffer ids {buffer_ids:?}, mode {mode}"
            ),
            move || -> Result<(), Stop> {
                let mut g = Graph::new();
                let x = g.input("x", DType::F32, &[n])?;
                let y = g.scale(x, 2.0)?;
                let z = g.add(y, x)?;
                let v = g.view_1d(z, 4, 0)?;
                let s = g.silu(v)?;
                g.set_output(s)?;
                let mut bufts: Vec<Arc<dyn BufferType>> = Vec::new();
                if mode != 5 {
                    bufts.push(match w {
                        Some(w) => Arc::new(w),
                        None => host_buft(),
                    });
                }
                if mode == 4 {
                    bufts.push(bufts[0].clone());
                    bufts.push(host_buft());
                }
                let mut ga = GraphAllocator::with_buffer_types(bufts);
                let mut p = Placement::new(&g);
                if mode == 3 {
                    // A placement of another graph, with a view placed alone.
                    let (og, oids) = setup(small_graph())?;
                    p = Placement::new(&og);
                    let _ = p.set(
                        &og,
                        oids[3],
                        Place {
                            buffer: arena(256)?,
                            offset: 0,
                        },
                    );
                }
                let _ = ga.reserve_size(&g, &p, Some(&buffer_ids));
                match mode {
                    0 => ga.reserve(&g, &p)?,
                    1 => ga.reserve_with(&g, &p, &buffer_ids)?,
                    _ => {}
                }
                ga.alloc_graph(&g, &mut p)?;
                for id in g.ids() {
                    if g.node(id)?.is_leaf() && p.get(id).is_none() {
                        continue;
                    }
                    p.tensor(&g, id)?;
                }
                let _ = (
                    ga.planned_sizes(),
                    ga.buffer_size(usize::MAX),
                    ga.chunk_buffers(7),
                );
                Ok(())
            },
        ));
    }
    cases
}
