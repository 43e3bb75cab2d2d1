//! Encoding one node: every op node becomes one kernel dispatch (the
//! driver over a graph range is [`crate::compute`]).
//!
//! For each node: resolve every operand to a wgpu buffer of this
//! device and a byte offset (an operand elsewhere is an
//! [`Error::Unsupported`] naming it), pick the kernel variant for the
//! operand types, fill its parameter block and record the dispatch. The
//! kernels read their operands through byte strides, so views, permutations
//! and broadcasts need no copies.

use std::sync::Arc;

use tessera::{DType, Error, Graph, Layout, Op, Placement, Result, SortOrder, TensorId};

use crate::batch::Batch;
use crate::call::{Call, Operand, SRC_NAMES, operand};
use crate::device::Core;
use crate::matvec_q8;
use crate::matvec_rows;
use crate::params::Params;

/// A kernel body that may quantize into its destination, with the quantizer
/// of each destination type (a kernel compiles only the one it uses).
macro_rules! with_store {
    ($name:ident, $file:literal) => {
        const $name: [&str; 13] = [
    with_store!(@ "store_none.wgsl", $file),
    with_store!(@ "store_q8_0.wgsl", $file),
    with_store!(@ "store_q4_0.wgsl", $file),
    with_store!(@ "store_q4_k.wgsl", $file),
    with_store!(@ "store_q6_k.wgsl", $file),
    with_store!(@ "store_q4_1.wgsl", $file),
    with_store!(@ "store_q5_0.wgsl", $file),
    with_store!(@ "store_q5_1.wgsl", $file),
    with_store!(@ "store_q2_k.wgsl", $file),
    with_store!(@ "store_q3_k.wgsl", $file),
    with_store!(@ "store_q5_k.wgsl", $file),
    with_store!(@ "store_iq4_nl.wgsl", $file),
    with_store!(@ "store_iq4_xs.wgsl", $file),
        ];
    };
    (@ $store:literal, $file:literal) => {
        concat!(
            include_str!("shaders/quant_buf.wgsl"),
            include_str!(concat!("shaders/", $store)),
            include_str!(concat!("shaders/", $file))
        )
    };
}

with_store!(COPY, "copy.wgsl");
with_store!(INDEX, "index.wgsl");

/// The variant of a `with_store!` body for destination type `dtype`.
fn for_dst(bodies: &[&'static str; 13], dtype: DType) -> &'static str {
    match dtype {
        DType::Q8_0 => bodies[1],
        DType::Q4_0 => bodies[2],
        DType::Q4K => bodies[3],
        DType::Q6K => bodies[4],
        DType::Q4_1 => bodies[5],
        DType::Q5_0 => bodies[6],
        DType::Q5_1 => bodies[7],
        DType::Q2K => bodies[8],
        DType::Q3K => bodies[9],
        DType::Q5K => bodies[10],
        DType::IQ4NL => bodies[11],
        DType::IQ4XS => bodies[12],
        _ => bodies[0],
    }
}

const BINARY: &str = include_str!("shaders/binary.wgsl");
const UNARY: &str = include_str!("shaders/unary.wgsl");
const GLU: &str = include_str!("shaders/glu.wgsl");
/// `rows.wgsl` by [`crate::subgroups::on`]: with trees or subgroups.
const ROWS: [&str; 2] = [
    concat!(
        include_str!("shaders/reduce_tree.wgsl"),
        include_str!("shaders/sort_key.wgsl"),
        include_str!("shaders/rows.wgsl")
    ),
    concat!(
        include_str!("shaders/reduce_subgroup.wgsl"),
        include_str!("shaders/sort_key.wgsl"),
        include_str!("shaders/rows.wgsl")
    ),
];
pub(crate) const ROPE: &str = include_str!("shaders/rope.wgsl");
macro_rules! matvec {
    ($cols:literal, $vec:literal) => {
        concat!(
            "const MV_COLS: u32 = ",
            $cols,
            "u;\nconst MV_VEC: u32 = ",
            $vec,
            "u;\n",
            include_str!("shaders/matmul_common.wgsl"),
            include_str!("shaders/matvec_units.wgsl"),
            include_str!("shaders/matvec.wgsl")
        )
    };
}
/// The matrix-vector kernel by [one column / up to 8][1 / 8 elements a step],
/// for what [`matvec_rows`] does not take.
const MATVEC: [[&str; 2]; 2] = [
    [matvec!(1, 1), matvec!(1, 8)],
    [matvec!(8, 1), matvec!(8, 8)],
];
const MATMUL_TILED: &str = concat!(
    include_str!("shaders/matmul_common.wgsl"),
    include_str!("shaders/matmul_tiled.wgsl")
);
const MATMUL_TILED8: &str = concat!(
    include_str!("shaders/matmul_common.wgsl"),
    include_str!("shaders/matmul_tiled8.wgsl")
);
const MATMUL_ELEM: &str = include_str!("shaders/matmul.wgsl");
/// Rows shorter than this (and at most [`MATVEC_MAX_COLS`] columns) take one
/// invocation per output: a 128-wide workgroup per row would idle.
pub(crate) const MATVEC_MIN_K: usize = 256;
/// Most src1 columns MUL_MAT gives to the matrix-vector kernel (above: tiles).
const MATVEC_MAX_COLS: usize = 8;
/// Whether the matrix-vector kernel takes 8 elements a step (the default)
/// or 1 (`TESSERA_WGPU_MATVEC_VEC=1`, for measuring one against the other).
fn matvec_octets() -> bool {
    static OCTETS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OCTETS
        .get_or_init(|| std::env::var("TESSERA_WGPU_MATVEC_VEC").map_or(true, |v| v.trim() != "1"))
}

/// A tiled MUL_MAT workgroup's output tile (rows x columns), and the
/// larger one of `matmul_tiled8.wgsl`.
const MATMUL_TILE: usize = 64;
const MATMUL_TILE8: usize = 128;

/// Whether products of many columns take the 128 x 128 tile kernel
/// (`TESSERA_WGPU_MM=big`, for measuring: not yet timed on a GPU; tests
/// set it for their own thread).
fn big_tiles() -> bool {
    #[cfg(test)]
    if let Some(on) = BIG_TILES.with(std::cell::Cell::get) {
        return on;
    }
    static BIG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BIG.get_or_init(|| std::env::var("TESSERA_WGPU_MM").is_ok_and(|v| v.trim() == "big"))
}

#[cfg(test)]
thread_local! {
    /// Tests choose the tile kernel for their own thread.
    pub(crate) static BIG_TILES: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}
const MATMUL_ID: &str = include_str!("shaders/matmul_id.wgsl");
const SORT: &str = concat!(
    include_str!("shaders/sort_key.wgsl"),
    include_str!("shaders/sort.wgsl")
);

/// `layout` counted in blocks along dimension 0 (block stride `nb0`).
fn in_blocks(l: &Layout, nb0: usize) -> Layout {
    let mut b = *l;
    b.ne[0] /= l.dtype.block_size().max(1);
    b.nb[0] = nb0;
    b
}

pub(crate) fn unary_code(op: tessera::UnaryOp) -> u32 {
    tessera::UnaryOp::ALL
        .iter()
        .position(|&u| u == op)
        .unwrap_or(0) as u32
}

pub(crate) fn encode_node(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    id: TensorId,
    q8: Option<&mut matvec_q8::Compute>,
) -> Result<()> {
    let node = &graph.nodes()[id.index()];
    let Some(dst) = operand(core, graph, placement, id)? else {
        return Ok(());
    };
    let mut srcs: Vec<Option<Operand>> = Vec::new();
    for s in node.srcs.iter().take(SRC_NAMES.len()) {
        srcs.push(match s {
            Some(s) => operand(core, graph, placement, *s)?,
            None => None,
        });
    }
    let src = |i: usize| srcs.get(i).and_then(Option::as_ref);
    let missing = || Error::op(node.op.name(), "an operand is empty or missing");
    let d = dst.layout;
    let n = d.checked_nelements()?;
    match node.op {
        Op::Dup | Op::Cont | Op::Cpy => {
            let a = src(0).ok_or_else(missing)?;
            let (s, t) = (a.layout.dtype, d.dtype);
            let mut call = Call::new(&dst, &[Some(a)])?;
            if s.is_quantized() && s == t {
                let ts = s.type_size();
                let p = Params::new(
                    (&in_blocks(&d, ts), dst.offset),
                    &[(&in_blocks(&a.layout, ts), a.offset)],
                )?;
                call.params = p;
                call.params.iu[0] = 3;
                call.items(batch, core, "copy", COPY[0], n / s.block_size())
            } else if s.is_quantized() {
                call.params.iu = [2, s.block_size() as u32, 0, 0];
                call.items(batch, core, "copy", COPY[0], n)
            } else if t.is_quantized() {
                let bs = t.block_size();
                let src_blocks = in_blocks(
                    &Layout {
                        dtype: t,
                        ..a.layout
                    },
                    a.layout.nb[0] * bs,
                );
                let p = Params::new(
                    (&in_blocks(&d, t.type_size()), dst.offset),
                    &[(&src_blocks, a.offset)],
                )?;
                call.params = p;
                call.params.iu = [4, bs as u32, a.layout.nb[0] as u32, 0];
                call.items(batch, core, "quantize", for_dst(&COPY, d.dtype), n / bs)
            } else {
                call.params.iu[0] = if s == t { 1 } else { 0 };
                call.items(batch, core, "copy", COPY[0], n)
            }
        }
        Op::GetRows => {
            let a = src(0).ok_or_else(missing)?;
            let ids = src(1).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), Some(ids)])?;
            call.params.iu = [0, 0, a.layout.dtype.block_size() as u32, 0];
            call.items(batch, core, "index", INDEX[0], n)
        }
        Op::SetRows => {
            let rows = src(1).ok_or_else(missing)?;
            let ids = src(2).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(rows), Some(ids)])?;
            let nr = rows.layout.checked_nelements()?;
            if d.dtype.is_quantized() {
                let bs = d.dtype.block_size();
                let blocks = in_blocks(
                    &Layout {
                        dtype: d.dtype,
                        ..rows.layout
                    },
                    rows.layout.nb[0] * bs,
                );
                let p = Params::new(
                    (&d, dst.offset),
                    &[(&blocks, rows.offset), (&ids.layout, ids.offset)],
                )?;
                call.params = p;
                call.params.iu = [2, 0, bs as u32, 0];
                call.items(
                    batch,
                    core,
                    "set_rows_quantize",
                    for_dst(&INDEX, d.dtype),
                    nr / bs,
                )
            } else {
                call.params.iu[0] = 1;
                call.items(batch, core, "index", INDEX[0], nr)
            }
        }
        Op::Concat { dim } => {
            let mut call = Call::new(&dst, &[src(0), src(1)])?;
            if src(0).is_none() {
                // An empty first operand: every element comes from b.
                call.params.src[0][0] = [0; 4];
            }
            call.params.iu = [3, u32::from(dim), 0, 0];
            call.items(batch, core, "index", INDEX[0], n)
        }
        Op::Add | Op::Mul | Op::Div | Op::Sub => {
            let a = src(0).ok_or_else(missing)?;
            let b = src(1).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), Some(b)])?;
            call.params.iu[0] = match node.op {
                Op::Add => 0,
                Op::Mul => 1,
                Op::Sub => 3,
                _ => 2,
            };
            call.items(batch, core, "binary", BINARY, n)
        }
        Op::Scale { scale, bias } => {
            let mut call = Call::new(&dst, &[Some(src(0).ok_or_else(missing)?)])?;
            call.params.iu[0] = 64;
            call.params.fp = [scale, bias, 0.0, 0.0];
            call.items(batch, core, "unary", UNARY, n)
        }
        Op::Sqr | Op::Sqrt | Op::Clamp { .. } => {
            let mut call = Call::new(&dst, &[Some(src(0).ok_or_else(missing)?)])?;
            call.params.iu[0] = match node.op {
                Op::Sqr => 65,
                Op::Sqrt => 66,
                _ => 67,
            };
            if let Op::Clamp { min, max } = node.op {
                call.params.fp = [min, max, 0.0, 0.0];
            }
            call.items(batch, core, "unary", UNARY, n)
        }
        Op::Repeat => {
            let mut call = Call::new(&dst, &[Some(src(0).ok_or_else(missing)?), None])?;
            call.params.iu[0] = 4;
            call.items(batch, core, "index", INDEX[0], n)
        }
        Op::Pad { lp, .. } => {
            let mut call = Call::new(&dst, &[Some(src(0).ok_or_else(missing)?), None])?;
            call.params.iu[0] = 5;
            call.params.iu2 = lp;
            call.items(batch, core, "index", INDEX[0], n)
        }
        Op::Argsort { .. } | Op::TopK => {
            let a = src(0).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a)])?;
            let desc = node.op == Op::TopK
                || node.op
                    == Op::Argsort {
                        order: SortOrder::Desc,
                    };
            call.params.iu[0] = u32::from(desc);
            call.items(batch, core, "sort", SORT, a.layout.checked_nelements()?)
        }
        Op::L2Norm { eps } => {
            let a = src(0).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), None, None])?;
            call.params.iu[0] = 5;
            call.params.fp[0] = eps;
            rows(batch, core, call, &a.layout)
        }
        Op::Unary(f) => {
            let mut call = Call::new(&dst, &[Some(src(0).ok_or_else(missing)?)])?;
            call.params.iu[0] = unary_code(f);
            call.items(batch, core, "unary", UNARY, n)
        }
        Op::Glu { op, swapped } => {
            let a = src(0).ok_or_else(missing)?;
            let split = node.src(1).is_some();
            let g = if split {
                Some(src(1).ok_or_else(missing)?)
            } else {
                Some(a)
            };
            let mut call = Call::new(&dst, &[Some(a), g])?;
            call.params.iu = [
                unary_code(op.activation()),
                u32::from(split),
                u32::from(swapped),
                0,
            ];
            // The products that read the result find it quantized.
            let mut q8 = q8;
            let quant = q8.as_mut().and_then(|q| q.plan_for(graph, id));
            match (&quant, q8) {
                (Some(q), Some(q8)) => {
                    q.bind(&mut call, 2, 0)?;
                    call.items(batch, core, "glu", GLU, n)?;
                    q8.commit(graph.memory_root(id)?.0, q);
                    Ok(())
                }
                _ => {
                    call.pad_sources(3);
                    call.items(batch, core, "glu", GLU, n)
                }
            }
        }
        Op::SwiGluOai { alpha, limit } => {
            let a = src(0).ok_or_else(missing)?;
            let g = src(1).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), Some(g)])?;
            call.params.iu = [0, 1, 0, 1];
            call.params.fp = [alpha, limit, 0.0, 0.0];
            call.pad_sources(3);
            call.items(batch, core, "glu", GLU, n)
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            let a = src(0).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), None, None])?;
            call.params.iu[0] = if matches!(node.op, Op::RmsNorm { .. }) {
                0
            } else {
                1
            };
            call.params.fp[0] = eps;
            rows(batch, core, call, &a.layout)
        }
        Op::SumRows | Op::Argmax => {
            let a = src(0).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), None, None])?;
            call.params.iu[0] = if node.op == Op::SumRows { 2 } else { 4 };
            rows(batch, core, call, &a.layout)
        }
        Op::SoftMax { scale, max_bias } => {
            let a = src(0).ok_or_else(missing)?;
            let mask = src(1);
            let sinks = src(2);
            let mut call = Call::new(&dst, &[Some(a), mask, sinks])?;
            call.params.iu = [3, u32::from(mask.is_some()), u32::from(sinks.is_some()), 0];
            call.params.fp = [scale, max_bias, 0.0, 0.0];
            rows(batch, core, call, &a.layout)
        }
        Op::Rope(p) => {
            let a = src(0).ok_or_else(missing)?;
            let pos = src(1).ok_or_else(missing)?;
            let (call, items) = rope_call(&dst, [a, pos], src(2), None, &p)?;
            call.items(batch, core, "rope", ROPE, items)
        }
        Op::MulMat => {
            let a = src(0).ok_or_else(missing)?;
            let b = src(1).ok_or_else(missing)?;
            let mut call = Call::new(&dst, &[Some(a), Some(b)])?;
            let (m, cols) = (d.ne[0], d.ne[1]);
            if cols <= MATVEC_MAX_COLS && a.layout.ne[0] < MATVEC_MIN_K {
                call.params.iu[0] = a.layout.dtype.block_size() as u32;
                return call.items(batch, core, "mul_mat", MATMUL_ELEM, n);
            }
            if let (Some(q8), Some(b_id)) = (q8, node.src(1))
                && matvec_q8::takes(&a.layout, &b.layout)
            {
                let (root, _) = graph.memory_root(b_id)?;
                if matvec_q8::encode(batch, core, q8, (b_id, root, b), &dst, a)? {
                    return Ok(());
                }
            }
            let overflow = || Error::Overflow("MUL_MAT workgroups".into());
            let batches = d.ne[2].checked_mul(d.ne[3]).ok_or_else(overflow)?;
            let (name, body, groups) = if cols <= MATVEC_MAX_COLS {
                if let Some(v) =
                    matvec_rows::variant(core, &a.layout, a.offset, &b.layout, b.offset, cols)
                {
                    let groups = m
                        .div_ceil(v.rows_per_workgroup(core))
                        .checked_mul(batches)
                        .ok_or_else(overflow)?;
                    if v.a4 {
                        call.bindings[1] = call.bindings[1].as_vec4();
                    }
                    if v.y4 {
                        call.bindings[2] = call.bindings[2].as_vec4();
                    }
                    let mut params = call.params.items(groups)?;
                    params.off2[2] = 0;
                    v.params(core, &mut params)?;
                    return call.record(batch, core, "mul_mat_vec_rows", v.body(), params, groups);
                }
                let octets = a.layout.ne[0] % 8 == 0 && matvec_octets();
                let body = MATVEC[usize::from(cols > 1)][usize::from(octets)];
                (
                    "mul_mat_vec",
                    body,
                    m.checked_mul(batches).ok_or_else(overflow)?,
                )
            } else {
                let (tile, body) = if big_tiles() {
                    (MATMUL_TILE8, MATMUL_TILED8)
                } else {
                    (MATMUL_TILE, MATMUL_TILED)
                };
                let tiles = m
                    .div_ceil(tile)
                    .checked_mul(cols.div_ceil(tile))
                    .and_then(|t| t.checked_mul(batches))
                    .ok_or_else(overflow)?;
                ("mul_mat_tiled", body, tiles)
            };
            let mut params = call.params.items(groups)?;
            params.off2[2] = 0;
            call.record(batch, core, name, body, params, groups)
        }
        Op::MulMatId | Op::AddId => {
            let a = src(0).ok_or_else(missing)?;
            let b = src(1).ok_or_else(missing)?;
            let ids = src(2).ok_or_else(missing)?;
            if node.op == Op::MulMatId
                && let (Some(q8), Some(b_id)) = (q8, node.src(1))
                && crate::matvec_q8_id::takes(&a.layout, &b.layout)
            {
                let (root, _) = graph.memory_root(b_id)?;
                if crate::matvec_q8_id::encode(
                    batch,
                    core,
                    q8,
                    (b_id, root, b),
                    &dst,
                    (a, ids, crate::matvec_q8_id::Mode::Products),
                )? {
                    return Ok(());
                }
            }
            let mut call = Call::new(&dst, &[Some(a), Some(b), Some(ids)])?;
            call.params.iu[0] = a.layout.dtype.block_size() as u32;
            call.params.iu[1] = if node.op == Op::MulMatId { 1 } else { 2 };
            call.items(batch, core, "mul_mat_id", MATMUL_ID, n)
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => {
            let q = src(0).ok_or_else(missing)?;
            let k = src(1).ok_or_else(missing)?;
            let v = src(2).ok_or_else(missing)?;
            let at = crate::attention::Attention {
                qkv: [q, k, v],
                mask: src(3),
                sinks: src(4),
                fp: [scale, max_bias, logit_softcap],
            };
            crate::attention::encode(batch, core, graph, id, &dst, &at, q8)
        }
        _ => Err(Error::unsupported(&core.name, graph.describe_node(id))),
    }
}

/// Record a one-workgroup-per-row kernel over the rows of `a`. Every
/// `rows.wgsl` call binds three sources (`a`, SOFT_MAX's mask and sinks,
/// unused ones bound to a placeholder): the shader names all three.
pub(crate) fn rows(batch: &mut Batch<'_>, core: &Core, call: Call, a: &Layout) -> Result<()> {
    rows_of(batch, core, call, a.nrows())
}

/// Record `call` with `rows.wgsl`, `groups` workgroups (one per row).
pub(crate) fn rows_of(
    batch: &mut Batch<'_>,
    core: &Core,
    mut call: Call,
    groups: usize,
) -> Result<()> {
    // The kernel names five sources (s3: the sum that ADD + RMS_NORM + MUL
    // stores, s4: the scratch a fused norm quantizes into).
    call.pad_sources(5);
    let params = call.params;
    let body = ROWS[usize::from(crate::subgroups::on(core))];
    call.record(batch, core, "rows", body, params, groups)
}

/// The call of ROPE of `a` at positions `pos` (frequency factors `ff`) into
/// `dst`, and its work items. With `ids` (a SET_ROWS's row ids,
/// [`crate::fuse_rope`]), row `i2` of the result goes to row `ids[i2]` of
/// `dst` (byte stride `nb[2]` of `dst`'s layout; ids clamped into
/// `ids_rows`, the rows `dst` has, as SET_ROWS clamps them).
pub(crate) fn rope_call(
    dst: &Operand,
    [a, pos]: [&Operand; 2],
    ff: Option<&Operand>,
    ids: Option<(&Operand, usize)>,
    p: &tessera::RopeParams,
) -> Result<(Call, usize)> {
    let mut call = Call::new(dst, &[Some(a), Some(pos), ff, ids.map(|i| i.0)])?;
    // s4: the queries' result where they join a keys' dispatch
    // (crate::fuse_rope), else a placeholder.
    call.pad_sources(5);
    let mode = p.mode.ggml_mode() as u32;
    let pairs = p.n_pairs() as u32;
    call.params.iu = [p.n_dims as u32, mode, u32::from(ff.is_some()), pairs];
    if p.mode.is_multi() {
        call.params.iu2 = p.sections;
    } else if let Some((_, rows)) = ids {
        call.params.iu2[0] = 1;
        call.params.iu2[1] = crate::params::u32_of(rows, "the cache's rows")?;
    }
    let theta_scale = f64::from(p.freq_base).powf(-2.0 / p.n_dims as f64);
    let corr = yarn_corr_dims(p);
    let mscale_ext = f64::from(p.attn_factor) * (1.0 + 0.1 * (1.0 / f64::from(p.freq_scale)).ln());
    call.params.fp = [
        theta_scale as f32,
        p.freq_scale,
        p.ext_factor,
        p.attn_factor,
    ];
    call.params.fp2 = [corr[0] as f32, corr[1] as f32, mscale_ext as f32, 0.0];
    let per_row = p.n_pairs() + (a.layout.ne[0] - 2 * p.n_pairs());
    let items = per_row
        .checked_mul(a.layout.nrows())
        .ok_or_else(|| Error::Overflow("ROPE work items".into()))?;
    Ok((call, items))
}

/// YaRN correction dimensions, as ggml's `ggml_rope_yarn_corr_dims` (in f64).
fn yarn_corr_dims(p: &tessera::RopeParams) -> [f64; 2] {
    let corr = |n_rot: f32| {
        let (nd, nc, base) = (p.n_dims as f64, p.n_ctx_orig as f64, f64::from(p.freq_base));
        nd * (nc / (f64::from(n_rot) * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    let start = corr(p.beta_fast).floor().max(0.0);
    let end = corr(p.beta_slow).ceil().min(p.n_dims as f64 - 1.0);
    [start, end]
}
