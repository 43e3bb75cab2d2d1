//! The op allow-list: ggml op ids and `op_params` ↔ Tessera [`Op`]s.
//!
//! The server rebuilds every node through Tessera's validating graph
//! constructors ([`Graph::mul_mat`], [`Graph::rope`], ...) from the op id,
//! its parameters and its sources, then demands that the layout the
//! constructor computed equals the layout on the wire. Ops not listed here
//! (custom ops whose params hold function pointers, ACC/SET with strides in
//! their params, SSM_SCAN, ...) are refused. The client encodes with the
//! same table, so what it can send is exactly what [`encode`] accepts.
//!
//! Source order follows ggml: SET_ROWS is `[rows, ids, dst]` on the wire and
//! `[dst, rows, ids]` in Tessera.

use tessera::{
    DType, Error, GluOp, Graph, Layout, MAX_DIMS, MAX_SRC, Op, Result, RopeMode, RopeParams,
    SortOrder, TensorId, UnaryOp,
};

use crate::proto::{OP_PARAMS, WIRE_MAX_SRC};

/// ggml op ids (`enum ggml_op`, 101 ops) used here.
#[allow(missing_docs)]
pub mod id {
    pub const NONE: u32 = 0;
    pub const DUP: u32 = 1;
    pub const ADD: u32 = 2;
    pub const ADD_ID: u32 = 3;
    pub const SUB: u32 = 6;
    pub const MUL: u32 = 7;
    pub const DIV: u32 = 8;
    pub const SQR: u32 = 9;
    pub const SQRT: u32 = 10;
    pub const SUM_ROWS: u32 = 15;
    pub const ARGMAX: u32 = 18;
    pub const REPEAT: u32 = 20;
    pub const CONCAT: u32 = 22;
    pub const NORM: u32 = 24;
    pub const RMS_NORM: u32 = 25;
    pub const L2_NORM: u32 = 28;
    pub const MUL_MAT: u32 = 29;
    pub const MUL_MAT_ID: u32 = 30;
    pub const SCALE: u32 = 32;
    pub const CPY: u32 = 34;
    pub const CONT: u32 = 35;
    pub const RESHAPE: u32 = 36;
    pub const VIEW: u32 = 37;
    pub const PERMUTE: u32 = 38;
    pub const TRANSPOSE: u32 = 39;
    pub const GET_ROWS: u32 = 40;
    pub const SET_ROWS: u32 = 42;
    pub const SOFT_MAX: u32 = 46;
    pub const ROPE: u32 = 48;
    pub const CLAMP: u32 = 50;
    pub const ARGSORT: u32 = 69;
    pub const TOP_K: u32 = 70;
    pub const FLASH_ATTN_EXT: u32 = 74;
    pub const UNARY: u32 = 91;
    pub const MAP_CUSTOM1: u32 = 92;
    pub const CUSTOM: u32 = 95;
    pub const GLU: u32 = 100;
    /// `GGML_OP_COUNT`.
    pub const COUNT: u32 = 101;
}

/// Raw op parameters.
pub type Params = [i32; OP_PARAMS];

/// Wire sources (ggml order).
pub type WireSrcs = [Option<TensorId>; WIRE_MAX_SRC];

const UNARY_IDS: [(UnaryOp, i32); 8] = [
    (UnaryOp::Tanh, 4),
    (UnaryOp::Relu, 6),
    (UnaryOp::Sigmoid, 7),
    (UnaryOp::Gelu, 8),
    (UnaryOp::GeluQuick, 9),
    (UnaryOp::Silu, 10),
    (UnaryOp::Exp, 13),
    (UnaryOp::GeluErf, 16),
];

const GLU_IDS: [(GluOp, i32); 5] = [
    (GluOp::ReGlu, 0),
    (GluOp::GeGlu, 1),
    (GluOp::SwiGlu, 2),
    (GluOp::GeGluErf, 4),
    (GluOp::GeGluQuick, 5),
];
const GLU_SWIGLU_OAI: i32 = 3;

/// `GGML_PREC_F32` (FLASH_ATTN_EXT's `op_params[3]`).
const GGML_PREC_F32: i32 = 10;

fn f(p: i32) -> f32 {
    f32::from_bits(p as u32)
}

fn b(x: f32) -> i32 {
    x.to_bits() as i32
}

fn refuse(op: u32, why: impl Into<String>) -> Error {
    Error::Malformed(format!("ggml op {op}: {}", why.into()))
}

/// Encode node `nid` of `graph`: ggml op id, params and sources in wire
/// order. Errors for ops outside the allow-list.
pub fn encode(graph: &Graph, nid: TensorId) -> Result<(u32, Params, WireSrcs)> {
    let node = graph.node(nid)?;
    let mut p: Params = [0; OP_PARAMS];
    let mut s: WireSrcs = [None; WIRE_MAX_SRC];
    s[..MAX_SRC].copy_from_slice(&node.srcs);
    let op = match node.op {
        Op::Dup => id::DUP,
        Op::Cont => id::CONT,
        Op::Cpy => id::CPY,
        Op::Reshape => id::RESHAPE,
        Op::View => {
            let src = node
                .src(0)
                .ok_or_else(|| Error::Malformed("VIEW without a source".into()))?;
            let (_, base) = graph.memory_root(src)?;
            let off = node
                .view_offs
                .checked_sub(base)
                .ok_or_else(|| Error::Overflow("VIEW offset".into()))? as u64;
            p[0] = off as u32 as i32;
            p[1] = (off >> 32) as u32 as i32;
            id::VIEW
        }
        Op::Permute(axes) => {
            for (d, a) in p.iter_mut().zip(axes) {
                *d = i32::from(a);
            }
            id::PERMUTE
        }
        Op::Transpose => id::TRANSPOSE,
        Op::GetRows => id::GET_ROWS,
        Op::SetRows => {
            s[0] = node.srcs[1];
            s[1] = node.srcs[2];
            s[2] = node.srcs[0];
            id::SET_ROWS
        }
        Op::Add => id::ADD,
        Op::Mul => id::MUL,
        Op::Div => id::DIV,
        Op::Sub => id::SUB,
        Op::Sqr => id::SQR,
        Op::Sqrt => id::SQRT,
        Op::Clamp { min, max } => {
            p[0] = b(min);
            p[1] = b(max);
            id::CLAMP
        }
        Op::Scale { scale, bias } => {
            p[0] = b(scale);
            p[1] = b(bias);
            id::SCALE
        }
        Op::RmsNorm { eps } => {
            p[0] = b(eps);
            id::RMS_NORM
        }
        Op::Norm { eps } => {
            p[0] = b(eps);
            id::NORM
        }
        Op::L2Norm { eps } => {
            p[0] = b(eps);
            id::L2_NORM
        }
        Op::Repeat => id::REPEAT,
        Op::MulMat => id::MUL_MAT,
        Op::MulMatId => id::MUL_MAT_ID,
        Op::AddId => id::ADD_ID,
        Op::SoftMax { scale, max_bias } => {
            p[0] = b(scale);
            p[1] = b(max_bias);
            id::SOFT_MAX
        }
        Op::Rope(r) => {
            p[1] = i32::try_from(r.n_dims).map_err(|_| Error::Overflow("n_dims".into()))?;
            p[2] = r.mode.ggml_mode();
            p[4] = i32::try_from(r.n_ctx_orig).map_err(|_| Error::Overflow("n_ctx".into()))?;
            let fl = [
                r.freq_base,
                r.freq_scale,
                r.ext_factor,
                r.attn_factor,
                r.beta_fast,
                r.beta_slow,
            ];
            for (d, x) in p[5..11].iter_mut().zip(fl) {
                *d = b(x);
            }
            for (d, x) in p[11..15].iter_mut().zip(r.sections) {
                *d = x as i32;
            }
            id::ROPE
        }
        Op::Unary(u) => {
            p[0] = UNARY_IDS
                .iter()
                .find(|(x, _)| *x == u)
                .map(|(_, i)| *i)
                .ok_or_else(|| Error::unsupported("RPC", format!("unary {}", u.name())))?;
            id::UNARY
        }
        Op::Glu { op, swapped } => {
            p[0] = GLU_IDS
                .iter()
                .find(|(x, _)| *x == op)
                .map(|(_, i)| *i)
                .ok_or_else(|| Error::unsupported("RPC", format!("glu {}", op.name())))?;
            p[1] = i32::from(swapped);
            id::GLU
        }
        Op::SwiGluOai { alpha, limit } => {
            p[0] = GLU_SWIGLU_OAI;
            p[2] = b(alpha);
            p[3] = b(limit);
            id::GLU
        }
        Op::Concat { dim } => {
            p[0] = i32::from(dim);
            id::CONCAT
        }
        Op::Argmax => id::ARGMAX,
        Op::SumRows => id::SUM_ROWS,
        Op::Argsort { order } => {
            p[0] = order.ggml_order();
            id::ARGSORT
        }
        // TOP_K is not sent: ggml's leaves its k indices in no particular
        // order, Tessera's sorts them (largest first); the scheduler runs
        // it locally. (A ggml client's TOP_K is served: sorted is one of
        // the orders it accepts.)
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => {
            p[0] = b(scale);
            p[1] = b(max_bias);
            p[2] = b(logit_softcap);
            // p[3]: precision, GGML_PREC_F32 (Tessera accumulates in F32).
            p[3] = GGML_PREC_F32;
            id::FLASH_ATTN_EXT
        }
        other => {
            return Err(Error::unsupported(
                "RPC",
                format!("op {} over ggml-rpc", other.display_name()),
            ));
        }
    };
    Ok((op, p, s))
}

/// Rebuild one node in `g` through the validating constructors: op id
/// `op`, params `p`, sources `s` (ggml order), and the wire layout
/// `want`, which the constructed node must match exactly.
pub fn decode(g: &mut Graph, op: u32, p: &Params, s: &WireSrcs, want: &Layout) -> Result<TensorId> {
    let n_src = s.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
    let src = |i: usize| -> Result<TensorId> {
        s[i].ok_or_else(|| refuse(op, format!("source {i} is missing")))
    };
    let at_most = |n: usize| -> Result<()> {
        if n_src > n {
            Err(refuse(op, format!("{n_src} sources, at most {n} expected")))
        } else {
            Ok(())
        }
    };
    let ne4 = want.ne;
    let out = match op {
        id::DUP | id::CONT | id::SQR | id::SQRT | id::SUM_ROWS | id::ARGMAX | id::TRANSPOSE => {
            at_most(1)?;
            let a = src(0)?;
            match op {
                id::DUP => g.dup(a)?,
                // ggml's CONT may reshape too (`ggml_cont_4d`).
                id::CONT => g.cont_4d(a, ne4)?,
                id::SQR => g.sqr(a)?,
                id::SQRT => g.sqrt(a)?,
                id::SUM_ROWS => g.sum_rows(a)?,
                id::ARGMAX => g.argmax(a)?,
                _ => g.transpose(a)?,
            }
        }
        id::ARGSORT => {
            at_most(1)?;
            let order = match p[0] {
                0 => SortOrder::Asc,
                1 => SortOrder::Desc,
                o => return Err(refuse(op, format!("sort order {o}"))),
            };
            g.argsort(src(0)?, order)?
        }
        id::TOP_K => {
            at_most(1)?;
            let k = ne4[0];
            g.top_k(src(0)?, k)?
        }
        id::ADD | id::SUB | id::MUL | id::DIV | id::MUL_MAT | id::GET_ROWS | id::CPY => {
            at_most(2)?;
            let (a, bb) = (src(0)?, src(1)?);
            match op {
                id::ADD => g.add(a, bb)?,
                id::SUB => g.sub(a, bb)?,
                id::MUL => g.mul(a, bb)?,
                id::DIV => g.div(a, bb)?,
                id::MUL_MAT => g.mul_mat(a, bb)?,
                id::GET_ROWS => g.get_rows(a, bb)?,
                _ => g.cpy(a, bb)?,
            }
        }
        id::MUL_MAT_ID | id::ADD_ID | id::SET_ROWS => {
            at_most(3)?;
            let (a, bb, c) = (src(0)?, src(1)?, src(2)?);
            match op {
                id::MUL_MAT_ID => g.mul_mat_id(a, bb, c)?,
                id::ADD_ID => g.add_id(a, bb, c)?,
                _ => g.set_rows(c, a, bb)?,
            }
        }
        id::SCALE | id::CLAMP | id::RMS_NORM | id::NORM | id::L2_NORM => {
            at_most(1)?;
            let a = src(0)?;
            match op {
                id::SCALE => g.scale_bias(a, f(p[0]), f(p[1]))?,
                id::CLAMP => g.clamp(a, f(p[0]), f(p[1]))?,
                id::RMS_NORM => g.rms_norm(a, f(p[0]))?,
                id::NORM => g.norm(a, f(p[0]))?,
                _ => g.l2_norm(a, f(p[0]))?,
            }
        }
        id::REPEAT => {
            at_most(1)?;
            g.repeat_4d(src(0)?, ne4)?
        }
        id::CONCAT => {
            at_most(2)?;
            let dim = usize::try_from(p[0]).map_err(|_| refuse(op, "negative dim"))?;
            g.concat(src(0)?, src(1)?, dim)?
        }
        id::RESHAPE => {
            at_most(1)?;
            g.reshape(src(0)?, &ne4)?
        }
        id::VIEW => {
            at_most(1)?;
            let off = u64::from(p[0] as u32) | (u64::from(p[1] as u32) << 32);
            let off = usize::try_from(off).map_err(|_| refuse(op, "offset"))?;
            g.view(src(0)?, ne4, [want.nb[1], want.nb[2], want.nb[3]], off)?
        }
        id::PERMUTE => {
            at_most(1)?;
            let mut axes = [0usize; MAX_DIMS];
            for (a, &x) in axes.iter_mut().zip(p.iter()) {
                *a = usize::try_from(x).map_err(|_| refuse(op, "negative axis"))?;
            }
            g.permute(src(0)?, axes)?
        }
        id::SOFT_MAX => {
            at_most(3)?;
            let a = src(0)?;
            match s[2] {
                Some(sinks) => g.soft_max_ext_sinks(a, s[1], sinks, f(p[0]), f(p[1]))?,
                None => g.soft_max_ext(a, s[1], f(p[0]), f(p[1]))?,
            }
        }
        id::FLASH_ATTN_EXT => {
            at_most(5)?;
            // p[3] is the precision (default or F32: Tessera accumulates in
            // F32 either way), p[4] a hint for CUDA (`n_kv_max`) that ggml's
            // CPU backend ignores too.
            if p[3] != 0 && p[3] != GGML_PREC_F32 {
                return Err(refuse(op, format!("precision {}", p[3])));
            }
            let (q, k, v) = (src(0)?, src(1)?, src(2)?);
            let (scale, max_bias, softcap) = (f(p[0]), f(p[1]), f(p[2]));
            match s[4] {
                Some(sinks) => {
                    g.flash_attn_ext_sinks(q, k, v, s[3], sinks, scale, max_bias, softcap)?
                }
                None => g.flash_attn_ext(q, k, v, s[3], scale, max_bias, softcap)?,
            }
        }
        id::ROPE => {
            at_most(3)?;
            g.rope(src(0)?, src(1)?, s[2], rope_params(p)?)?
        }
        id::UNARY => {
            at_most(1)?;
            let u = UNARY_IDS
                .iter()
                .find(|(_, i)| *i == p[0])
                .map(|(u, _)| *u)
                .ok_or_else(|| refuse(op, format!("unary op {} not allowed", p[0])))?;
            g.unary(src(0)?, u)?
        }
        id::GLU => {
            at_most(2)?;
            let a = src(0)?;
            if p[0] == GLU_SWIGLU_OAI {
                g.swiglu_oai(a, src(1)?, f(p[2]), f(p[3]))?
            } else {
                let gop = GLU_IDS
                    .iter()
                    .find(|(_, i)| *i == p[0])
                    .map(|(o, _)| *o)
                    .ok_or_else(|| refuse(op, format!("glu op {} not allowed", p[0])))?;
                match s[1] {
                    Some(gate) => g.glu_split(a, gate, gop)?,
                    None => g.glu(a, gop, p[1] != 0)?,
                }
            }
        }
        _ => return Err(refuse(op, "not in the allow-list")),
    };
    let got = g.layout(out)?;
    if got != *want {
        return Err(refuse(
            op,
            format!("the rebuilt node is {got}, the wire says {want}"),
        ));
    }
    Ok(out)
}

fn rope_params(p: &Params) -> Result<RopeParams> {
    let mode = RopeMode::from_ggml(p[2])
        .ok_or_else(|| refuse(id::ROPE, format!("mode {} not supported", p[2])))?;
    if p[15] != 0 {
        return Err(refuse(id::ROPE, "position offsets (n_offs) not supported"));
    }
    let n_dims = usize::try_from(p[1]).map_err(|_| refuse(id::ROPE, "negative n_dims"))?;
    let n_ctx_orig = usize::try_from(p[4]).map_err(|_| refuse(id::ROPE, "negative n_ctx"))?;
    let mut sections = [0u32; 4];
    for (d, &x) in sections.iter_mut().zip(&p[11..15]) {
        *d = u32::try_from(x).map_err(|_| refuse(id::ROPE, "negative section"))?;
    }
    Ok(RopeParams {
        n_dims,
        mode,
        n_ctx_orig,
        freq_base: f(p[5]),
        freq_scale: f(p[6]),
        ext_factor: f(p[7]),
        attn_factor: f(p[8]),
        beta_fast: f(p[9]),
        beta_slow: f(p[10]),
        sections,
    })
}

/// The Tessera type of a ggml type id, for tensors of a graph.
pub fn dtype(ggml: u32) -> Result<DType> {
    DType::from_ggml_id(ggml)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round_trip(build: impl Fn(&mut Graph, TensorId, TensorId) -> TensorId) {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[8, 4, 2]).unwrap();
        let c = g.new_tensor(DType::F32, &[8, 4, 2]).unwrap();
        let n = build(&mut g, a, c);
        let (op, p, s) = encode(&g, n).unwrap();
        let mut h = Graph::new();
        let a2 = h.new_tensor(DType::F32, &[8, 4, 2]).unwrap();
        let c2 = h.new_tensor(DType::F32, &[8, 4, 2]).unwrap();
        let map = |x: Option<TensorId>| x.map(|x| if x == a { a2 } else { c2 });
        let s2: WireSrcs = s.map(map);
        let want = g.layout(n).unwrap();
        let n2 = decode(&mut h, op, &p, &s2, &want).unwrap();
        assert_eq!(h.node(n2).unwrap().op, g.node(n).unwrap().op);
    }

    #[test]
    fn ops_round_trip_through_the_wire_encoding() {
        round_trip(|g, a, b| g.add(a, b).unwrap());
        round_trip(|g, a, _| g.rms_norm(a, 1e-5).unwrap());
        round_trip(|g, a, _| g.scale_bias(a, 0.5, 2.0).unwrap());
        round_trip(|g, a, _| g.soft_max_ext(a, None, 0.25, 0.0).unwrap());
        round_trip(|g, a, _| g.permute(a, [1, 0, 2, 3]).unwrap());
        round_trip(|g, a, _| g.view_2d(a, 4, 2, 32, 16).unwrap());
        round_trip(|g, a, _| g.silu(a).unwrap());
        round_trip(|g, a, _| g.glu(a, GluOp::SwiGlu, true).unwrap());
        round_trip(|g, a, b| g.mul_mat(a, b).unwrap());
        round_trip(|g, a, _| g.argsort(a, SortOrder::Asc).unwrap());
        round_trip(|g, a, _| g.argsort(a, SortOrder::Desc).unwrap());
    }

    #[test]
    fn sorts_travel_as_ggml_has_them() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[8, 4]).unwrap();
        let t = g.top_k(a, 3).unwrap();
        // TOP_K is not sent (ggml's is unordered, Tessera's sorted) ...
        assert!(encode(&g, t).is_err());
        // ... but a ggml client's is served: k from the wire layout.
        let mut s: WireSrcs = [None; WIRE_MAX_SRC];
        s[0] = Some(a);
        let p: Params = [0; OP_PARAMS];
        let want = g.layout(t).unwrap();
        let got = decode(&mut g, id::TOP_K, &p, &s, &want).unwrap();
        assert_eq!(g.node(got).unwrap().op, Op::TopK);
        assert_eq!(g.layout(got).unwrap(), want);
        // k of 0 or past the row: refused by the constructor.
        for k in [0, 9] {
            let mut bad = want;
            bad.ne[0] = k;
            assert!(decode(&mut g, id::TOP_K, &p, &s, &bad).is_err(), "k = {k}");
        }
        // ARGSORT with an order ggml does not have.
        let sorted = g.argsort(a, SortOrder::Desc).unwrap();
        let want = g.layout(sorted).unwrap();
        let (op, mut p, s) = encode(&g, sorted).unwrap();
        assert_eq!((op, p[0]), (id::ARGSORT, 1));
        p[0] = 2;
        assert!(decode(&mut g, op, &p, &s, &want).is_err());
    }

    #[test]
    fn flash_attention_round_trips_and_checks_its_precision() {
        let mut g = Graph::new();
        let q = g.new_tensor(DType::F32, &[32, 3, 4]).unwrap();
        let k = g.new_tensor(DType::F16, &[32, 16, 2]).unwrap();
        let v = g.new_tensor(DType::F16, &[32, 16, 2]).unwrap();
        let m = g.new_tensor(DType::F16, &[16, 3]).unwrap();
        let sk = g.new_tensor(DType::F32, &[4]).unwrap();
        let n = g.flash_attn_ext(q, k, v, Some(m), 0.125, 0.0, 0.0).unwrap();
        let n2 = g
            .flash_attn_ext_sinks(q, k, v, Some(m), sk, 0.125, 0.0, 30.0)
            .unwrap();
        for node in [n, n2] {
            let (op, mut p, s) = encode(&g, node).unwrap();
            assert_eq!(op, id::FLASH_ATTN_EXT);
            let want = g.layout(node).unwrap();
            let got = decode(&mut g, op, &p, &s, &want).unwrap();
            assert_eq!(g.node(got).unwrap().op, g.node(node).unwrap().op);
            assert_eq!(g.node(got).unwrap().srcs, g.node(node).unwrap().srcs);
            p[3] = 0;
            assert!(decode(&mut g, op, &p, &s, &want).is_ok());
            p[3] = 7;
            assert!(decode(&mut g, op, &p, &s, &want).is_err());
        }
        // An F32 mask: refused by the constructor.
        let (op, p, mut s) = encode(&g, n).unwrap();
        s[3] = Some(q);
        let want = g.layout(n).unwrap();
        assert!(decode(&mut g, op, &p, &s, &want).is_err());
    }

    #[test]
    fn custom_and_unknown_ops_are_refused() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[4]).unwrap();
        let want = g.layout(a).unwrap();
        let mut s: WireSrcs = [None; WIRE_MAX_SRC];
        s[0] = Some(a);
        let mut p: Params = [0; OP_PARAMS];
        // A "function pointer" in the params of a custom op (llama.cpp #25289).
        p[0] = 0x4141_4141;
        p[1] = 0x4242;
        for op in [
            id::MAP_CUSTOM1,
            93,
            94,
            id::CUSTOM,
            5,
            77,
            id::COUNT,
            u32::MAX,
        ] {
            assert!(decode(&mut g, op, &p, &s, &want).is_err(), "op {op}");
        }
        // An allowed op with an unknown unary function, or too many sources.
        assert!(decode(&mut g, id::UNARY, &[99; 16], &s, &want).is_err());
        s[5] = Some(a);
        assert!(decode(&mut g, id::SQR, &p, &s, &want).is_err());
        // A wire layout that disagrees with the constructor's.
        s[5] = None;
        let mut lie = want;
        lie.ne[0] = 2;
        assert!(decode(&mut g, id::SQR, &p, &s, &lie).is_err());
    }
}
