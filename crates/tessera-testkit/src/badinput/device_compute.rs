//! Bad input for a device's compute: graphs with unplaced tensors,
//! placements of another graph, results in read-only or foreign memory,
//! misaligned offsets, overlapping results, ranges past the graph, GET_ROWS
//! and SET_ROWS with out-of-range row ids in the data, and random graphs
//! (random leaves, odd strides included, and one to three random ops from
//! the graph builder's cases) computed for real.
//!
//! Every tensor of those graphs is placed by hand in one device buffer, each
//! with canary bytes around it; after the compute (successful or not) every
//! byte outside every tensor must still be the canary, so a kernel that
//! writes past its result is caught even when it does not crash.

use std::sync::Arc;

use proptest::prelude::*;
use tessera::{
    Buffer, DType, Device, Graph, HostBufferType, HostMemory, Place, Placement, Stream,
    StreamOptions, TensorId,
};

use super::device_cases::{DeviceProvider, affine, dev_arena};
use super::graph_cases::{Pick, Spec, apply, pool, spec};
use super::object_cases::CANARY;
use super::strategies::{row_id, sample, small_layout};
use super::{Case, Stop, ensure, must_fail, setup};
use crate::ReferenceDevice;

/// One small compute on a fresh stream (starts whatever the device starts once).
pub(super) fn warm_up(dev: &dyn Device) -> Result<(), String> {
    let (g, pl, tx, ty) = affine(dev, 8).map_err(|e| format!("{e:?}"))?;
    let st = dev
        .new_stream(&StreamOptions::new())
        .map_err(|e| e.to_string())?;
    tx.write_f32(&[1.0; 8]).map_err(|e| e.to_string())?;
    st.compute(&g, &pl).map_err(|e| e.to_string())?;
    let out = ty.read_f32().map_err(|e| e.to_string())?;
    if out != vec![2.0; 8] {
        return Err(format!("warm-up computed {out:?}"));
    }
    Ok(())
}

/// Every tensor that owns memory placed in one canary-filled device buffer,
/// 64 canary bytes (at least) apart; views placed over their roots.
struct Arena {
    buffer: Arc<dyn Buffer>,
    placement: Placement,
    spans: Vec<(usize, usize)>,
}

fn place_all(dev: &dyn Device, g: &Graph) -> Result<Arena, Stop> {
    let align = dev.buffer_type().alignment().clamp(64, 4096);
    let mut at = align;
    let mut spans = Vec::new();
    let mut places = Vec::new();
    for id in g.ids() {
        let node = g.node(id)?;
        if node.is_view() {
            continue;
        }
        let n = node.layout.checked_nbytes()?;
        if n > 1 << 20 {
            return Err(Stop::Lib(tessera::Error::Overflow(format!(
                "{n} bytes: too big for a bad-input arena"
            ))));
        }
        places.push((id, at));
        spans.push((at, n));
        at = (at + n + 64).next_multiple_of(align);
    }
    let buffer = dev_arena(dev, at + align)?;
    let mut placement = Placement::new(g);
    for (id, offset) in places {
        placement.set(
            g,
            id,
            Place {
                buffer: buffer.clone(),
                offset,
            },
        )?;
    }
    placement.place_views(g)?;
    Ok(Arena {
        buffer,
        placement,
        spans,
    })
}

/// Fill every leaf with deterministic bytes: small row ids for integer
/// leaves, anything (NaN and infinities included) for the others.
fn fill_leaves(g: &Graph, a: &Arena, seed: u64) -> Result<(), Stop> {
    let mut x = seed | 1;
    for id in g.leaf_ids() {
        let l = g.node(id)?.layout;
        let Ok(t) = a.placement.tensor(g, id) else {
            continue;
        };
        let n = t.nbytes();
        let bytes: Vec<u8> = match l.dtype {
            DType::I32 | DType::I64 => {
                let w = l.dtype.type_size();
                (0..n)
                    .map(|i| if i % w == 0 { (i / w % 5) as u8 } else { 0 })
                    .collect()
            }
            _ => (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect(),
        };
        setup(t.write(0, &bytes))?;
    }
    Ok(())
}

/// Every byte outside every tensor is still the canary.
fn canary_intact(a: &Arena) -> Result<(), Stop> {
    let mut bytes = vec![0u8; a.buffer.size()];
    setup(a.buffer.read(0, &mut bytes))?;
    let mut inside = vec![false; bytes.len()];
    for &(o, n) in &a.spans {
        inside[o..o + n].fill(true);
    }
    let bad = (0..bytes.len()).find(|&i| !inside[i] && bytes[i] != CANARY);
    ensure(bad.is_none(), || {
        format!("the compute wrote byte {bad:?} of the arena, outside every tensor")
    })
}

/// Place, fill, compute `range` (the whole graph if `None`), check canaries.
fn run_checked(
    dev: &dyn Device,
    g: &Graph,
    seed: u64,
    range: Option<std::ops::Range<usize>>,
) -> Result<(), Stop> {
    let a = place_all(dev, g)?;
    fill_leaves(g, &a, seed)?;
    let st = setup(dev.new_stream(&StreamOptions::new()))?;
    let r = match range {
        Some(r) => st
            .compute_async(g, &a.placement, r)
            .and_then(|()| st.synchronize()),
        None => st.compute(g, &a.placement),
    };
    canary_intact(&a)?;
    r.map_err(Stop::Lib)
}

fn rows_graph(t: DType, ids: &[i64], set: bool, wide: bool) -> tessera::Result<Graph> {
    let ne0 = if t.is_quantized() { t.block_size() } else { 8 };
    let mut g = Graph::new();
    let idt = if wide { DType::I64 } else { DType::I32 };
    let idx = g.new_tensor(idt, &[ids.len()])?;
    if set {
        let dst = g.new_tensor(t, &[ne0, 4])?;
        let src = g.new_tensor(DType::F32, &[ne0, ids.len()])?;
        let r = g.set_rows(dst, src, idx)?;
        g.set_output(r)?;
    } else {
        let a = g.new_tensor(t, &[ne0, 4])?;
        let r = g.get_rows(a, idx)?;
        g.set_output(r)?;
    }
    Ok(g)
}

fn rows_cases(p: &DeviceProvider, cases: &mut Vec<Case>) {
    let types = prop::sample::select(vec![
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_0,
        DType::I32,
    ]);
    let spec = (
        types,
        prop::collection::vec(row_id(), 1..=5),
        any::<bool>(),
        any::<bool>(),
    );
    for (t, ids, set, wide) in sample(spec, 80, 110) {
        let p = p.clone();
        let op = if set { "SET_ROWS" } else { "GET_ROWS" };
        cases.push(Case::new(
            format!("{op} of {t} [.., 4 rows] with row ids {ids:?} (i64 ids {wide})"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let wide = wide && set;
                let g = rows_graph(t, &ids, set, wide)?;
                let a = place_all(dev.as_ref(), &g)?;
                fill_leaves(&g, &a, 7)?;
                let idx = a.placement.tensor(&g, TensorId::from_index(0))?;
                if wide {
                    setup(idx.write_slice(&ids))?;
                } else {
                    let narrow: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
                    setup(idx.write_slice(&narrow))?;
                }
                let st = setup(dev.new_stream(&StreamOptions::new()))?;
                let r = st.compute(&g, &a.placement);
                canary_intact(&a)?;
                r.map_err(Stop::Lib)
            },
        ));
    }
}

/// MUL_MAT_ID (4 experts of weights `t`) or ADD_ID (4 bias rows) with the
/// expert ids `ids` (two per token) in the data: an id outside `0..4` is an
/// error (the CPU) or clamped into range (wgpu, as its GET_ROWS), never a
/// wild access; in-range ids compute.
fn expert_cases(p: &DeviceProvider, cases: &mut Vec<Case>) {
    let types = prop::sample::select(vec![DType::F32, DType::F16, DType::Q8_0, DType::Q4_0]);
    let spec = (types, prop::collection::vec(row_id(), 2..=2), any::<bool>());
    for (t, ids, add) in sample(spec, 40, 111) {
        let p = p.clone();
        let op = if add { "ADD_ID" } else { "MUL_MAT_ID" };
        cases.push(Case::new(
            format!("{op} with {t} experts and expert ids {ids:?}"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let k = if t.is_quantized() { t.block_size() } else { 8 };
                let mut g = Graph::new();
                let idx = g.new_tensor(DType::I32, &[2, 1])?;
                let r = if add {
                    let a = g.new_tensor(DType::F32, &[k, 2, 1])?;
                    let b = g.new_tensor(DType::F32, &[k, 4])?;
                    g.add_id(a, b, idx)?
                } else {
                    let w = g.new_tensor(t, &[k, 3, 4])?;
                    let b = g.new_tensor(DType::F32, &[k, 1, 1])?;
                    g.mul_mat_id(w, b, idx)?
                };
                g.set_output(r)?;
                if !dev.supports_op(&g, r) {
                    return Ok(());
                }
                let a = place_all(dev.as_ref(), &g)?;
                fill_leaves(&g, &a, 7)?;
                let it = a.placement.tensor(&g, idx)?;
                let narrow: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
                setup(it.write_slice(&narrow))?;
                let st = setup(dev.new_stream(&StreamOptions::new()))?;
                let res = st.compute(&g, &a.placement);
                canary_intact(&a)?;
                let bad = narrow.iter().any(|&i| !(0..4).contains(&i));
                match res {
                    Ok(()) => Ok(()),
                    Err(tessera::Error::OutOfBounds(_)) if bad => Ok(()),
                    Err(e) => Err(Stop::Lib(e)),
                }
            },
        ));
    }
}

/// The misuse cases, by number.
const MISUSE: [&str; 12] = [
    "compute with nothing placed",
    "placement of a smaller graph used with a bigger one",
    "result in read-only host memory",
    "operands at misaligned offsets",
    "result overlapping its operand with another layout",
    "ranges past the graph (3..1, 0..MAX, MAX..MAX)",
    "operand in another device's memory",
    "graph grown after its placement was made",
    "view placed apart from its root",
    "result in the other device's stream",
    "graph_copy with the placement of another graph",
    "compare_graph with a placement missing tensors",
];

fn misuse(dev: &Arc<dyn Device>, k: usize, shift: usize) -> Result<(), Stop> {
    let d = dev.as_ref();
    let st: Arc<dyn Stream> = setup(d.new_stream(&StreamOptions::new()))?;
    let (g, pl, tx, ty) = affine(d, 64)?;
    setup(tx.write_f32(&[1.0; 64]))?;
    match k {
        0 => must_fail(st.compute(&g, &Placement::new(&g)), "nothing placed")?,
        1 => {
            let mut small = Graph::new();
            let a = setup(small.new_tensor(DType::F32, &[1]))?;
            let b = setup(small.scale(a, 1.0))?;
            let buf = dev_arena(d, 64)?;
            let mut q = Placement::new(&small);
            setup(q.set(
                &small,
                a,
                Place {
                    buffer: buf.clone(),
                    offset: 56,
                },
            ))?;
            setup(q.set(
                &small,
                b,
                Place {
                    buffer: buf.clone(),
                    offset: 60,
                },
            ))?;
            must_fail(st.compute(&g, &q), "tensors placed for another graph")?;
        }
        2 => {
            let mem = HostMemory::borrowed(vec![0u8; 512]);
            let ro = d.buffer_from_host_memory(mem, 512).or_else(|_| {
                let buft = HostBufferType::new("RO", 1 << 20, None);
                Ok::<_, tessera::Error>(Arc::new(tessera::HostBuffer::from_memory(
                    HostMemory::borrowed(vec![0u8; 512]),
                    buft,
                )) as Arc<dyn Buffer>)
            })?;
            let mut q = pl.clone();
            let y = TensorId::from_index(1);
            setup(q.set(
                &g,
                y,
                Place {
                    buffer: ro,
                    offset: 0,
                },
            ))?;
            must_fail(st.compute(&g, &q), "a result in read-only memory")?;
        }
        3 | 4 => {
            let buf = dev_arena(d, 1024)?;
            let mut q = Placement::new(&g);
            let (xo, yo) = if k == 3 {
                (1 + shift % 3, 512)
            } else {
                (0, 4 + 4 * (shift % 8))
            };
            setup(q.set(
                &g,
                TensorId::from_index(0),
                Place {
                    buffer: buf.clone(),
                    offset: xo,
                },
            ))?;
            setup(q.set(
                &g,
                TensorId::from_index(1),
                Place {
                    buffer: buf,
                    offset: yo,
                },
            ))?;
            st.compute(&g, &q)?;
        }
        5 => {
            for (start, end) in [
                (3, 1),
                (0, usize::MAX),
                (usize::MAX, usize::MAX),
                (1, usize::MAX),
            ] {
                st.compute_async(&g, &pl, start..end)?;
            }
            st.synchronize()?;
        }
        6 => {
            let other = ReferenceDevice::new();
            let (_, _, ox, _) = affine(other.as_ref(), 64)?;
            let mut q = pl.clone();
            setup(q.bind(&g, TensorId::from_index(0), &ox))?;
            st.compute(&g, &q)?;
        }
        7 => {
            let mut g2 = g.clone();
            let y = TensorId::from_index(1);
            let z = setup(g2.silu(y))?;
            setup(g2.set_output(z))?;
            must_fail(st.compute(&g2, &pl), "a node without memory")?;
        }
        8 => {
            let mut g2 = g.clone();
            let v = setup(g2.view_1d(TensorId::from_index(1), 8, 4 * (shift % 56)))?;
            let w = setup(g2.scale(v, 3.0))?;
            let buf = dev_arena(d, 256)?;
            let mut q = pl.clone();
            q.fit(&g2);
            let n = setup(g2.layout(w))?.nbytes();
            q.set(
                &g2,
                v,
                Place {
                    buffer: buf.clone(),
                    offset: 256 - 32,
                },
            )?;
            q.set(
                &g2,
                w,
                Place {
                    buffer: buf,
                    offset: 256 - n,
                },
            )?;
            st.compute(&g2, &q)?;
        }
        9 => {
            let other = ReferenceDevice::new();
            let ost = setup(other.new_stream(&StreamOptions::new()))?;
            ost.compute(&g, &pl)?;
        }
        10 => {
            let mut small = Graph::new();
            let a = setup(small.new_tensor(DType::F32, &[2]))?;
            let mut q = Placement::new(&small);
            setup(q.set(
                &small,
                a,
                Place {
                    buffer: dev_arena(d, 8)?,
                    offset: 0,
                },
            ))?;
            let copy = tessera::graph_copy(&g, &q, dev)?;
            st.compute(&g, &copy.placement)?;
        }
        _ => {
            let other: Arc<dyn Device> = ReferenceDevice::new();
            let ost = setup(other.new_stream(&StreamOptions::new()))?;
            let mut q = pl.clone();
            q.clear(TensorId::from_index(u32::from(shift % 2 == 1)));
            tessera::compare_graph(st.as_ref(), ost.as_ref(), &g, &q, |_, _, _| true)?;
        }
    }
    let _ = ty.read_f32();
    Ok(())
}

/// Quantized tensors whose rows are one block, with a block stride `nb0`
/// other than the block size (the layout's fields are public; for a
/// one-block row `is_contiguous_rows` ignores `nb0`), read and written by
/// every op that takes quantized operands.
fn odd_quant_cases(p: &DeviceProvider, cases: &mut Vec<Case>) {
    let types = [
        DType::Q4_0,
        DType::Q8_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ];
    let ops = [
        "cpy f32->q",
        "cpy q->f32",
        "dup",
        "get_rows",
        "set_rows",
        "mul_mat",
    ];
    for t in types {
        let ts = t.type_size();
        for nb0 in [0, 2, 4, ts - 2, ts + 2] {
            for (k, op) in ops.into_iter().enumerate() {
                let p = p.clone();
                cases.push(Case::new(
                    format!("{op} with a {t} [block, 3] tensor whose nb0 is {nb0}"),
                    move || -> Result<(), Stop> {
                        let dev = setup(p())?;
                        let bs = t.block_size();
                        let ql = tessera::Layout {
                            dtype: t,
                            ne: [bs, 3, 1, 1],
                            nb: [nb0, ts, 3 * ts, 3 * ts],
                        };
                        let mut g = Graph::new();
                        let q = g.new_leaf(ql)?;
                        let f = g.new_tensor(DType::F32, &[bs, 3])?;
                        let ids = g.new_tensor(DType::I32, &[3])?;
                        let r = match k {
                            0 => g.cpy(f, q)?,
                            1 => g.cpy(q, f)?,
                            2 => g.dup(q)?,
                            3 => g.get_rows(q, ids)?,
                            4 => g.set_rows(q, f, ids)?,
                            _ => g.mul_mat(q, f)?,
                        };
                        g.set_output(r)?;
                        run_checked(dev.as_ref(), &g, 3, None)
                    },
                ));
            }
        }
    }
}

/// An op call biased towards graphs that build: operands mostly among the
/// first tensors of the pick order (the random leaves), small extents,
/// strides and offsets that are multiples of 4, ordinary parameters.
fn compute_spec() -> impl Strategy<Value = Spec> {
    let pick =
        prop_oneof![6 => (0usize..4).prop_map(Pick::Pool), 2 => (0usize..64).prop_map(Pick::Pool)];
    let ext =
        prop_oneof![6 => 1usize..=9, 1 => Just(32usize), 1 => Just(256usize), 1 => Just(0usize)];
    let float = prop_oneof![6 => -2.0f32..2.0, 1 => Just(1e-6f32), 1 => Just(f32::NAN)];
    let perms = prop::sample::select(vec![
        [0usize, 1, 2, 3],
        [1, 0, 2, 3],
        [0, 2, 1, 3],
        [2, 0, 1, 3],
        [3, 1, 2, 0],
        [0, 1, 3, 2],
    ]);
    (
        (0usize..31, prop::array::uniform4(pick)),
        (
            prop::array::uniform4(ext),
            prop::array::uniform4((1usize..=64).prop_map(|k| k * 4)),
        ),
        (
            (0usize..16).prop_map(|k| k * 4),
            prop::array::uniform4(float),
        ),
        (perms, any::<bool>(), super::strategies::dtype()),
        (prop::collection::vec(1usize..=9, 1..=4), small_layout()),
    )
        .prop_map(
            |((kind, ops), (ext, nb), (off, f), (axes, flag, ty), (shape, layout))| Spec {
                kind,
                ops,
                ext,
                nb,
                off,
                f,
                axes,
                flag,
                ty,
                shape,
                layout,
            },
        )
}

/// A random leaf for compute fuzzing: half of them F32 (most ops want it).
fn compute_leaf() -> impl Strategy<Value = tessera::Layout> {
    let f32_leaf = small_layout().prop_map(|l| {
        let mut ne = l.ne;
        ne[0] /= l.dtype.block_size();
        tessera::Layout::contiguous4(DType::F32, ne).unwrap_or(l)
    });
    prop_oneof![f32_leaf, small_layout()]
}

pub(super) fn compute_cases(p: &DeviceProvider) -> Vec<Case> {
    let mut cases = Vec::new();
    odd_quant_cases(p, &mut cases);
    for (k, name) in MISUSE.into_iter().enumerate() {
        for shift in [0usize, 1, 5] {
            let p = p.clone();
            cases.push(Case::new(format!("{name} (variant {shift})"), move || {
                let dev = setup(p())?;
                misuse(&dev, k, shift)
            }));
        }
    }
    rows_cases(p, &mut cases);
    expert_cases(p, &mut cases);
    let fuzz = (
        prop::collection::vec(compute_leaf(), 1..=3),
        prop::collection::vec(prop_oneof![3 => compute_spec(), 1 => spec()], 1..=3),
        any::<u64>(),
        prop_oneof![4 => Just(None), 1 => (0usize..40, 0usize..40).prop_map(|(a, b)| Some(a..b))],
    );
    for (leaves, chain, seed, range) in sample(fuzz, 260, 120) {
        let p = p.clone();
        let name = format!(
            "compute of leaves {leaves:?} then {} (range {range:?})",
            chain
                .iter()
                .map(Spec::describe)
                .collect::<Vec<_>>()
                .join(" ; ")
        );
        cases.push(Case::new(name, move || -> Result<(), Stop> {
            let dev = setup(p())?;
            let (mut g, mut ids, other) = setup(pool())?;
            let mut added = 0;
            for l in &leaves {
                if let Ok(id) = g.new_leaf(*l) {
                    ids.push(id);
                    added += 1;
                }
            }
            // Random leaves first in the pick order.
            ids.rotate_right(added);
            let mut built = 0;
            for s in &chain {
                if let Ok(Some(id)) = apply(s, &mut g, &ids, &other) {
                    ids.push(id);
                    built += 1;
                }
            }
            if built == 0 {
                return Err(Stop::Lib(tessera::Error::op("BUILD", "no op was accepted")));
            }
            if let Some(id) = ids.last() {
                let _ = dev.supports_op(&g, *id);
            }
            run_checked(dev.as_ref(), &g, seed, range.clone())
        }));
    }
    cases
}
