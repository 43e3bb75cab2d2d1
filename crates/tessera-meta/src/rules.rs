//! Split-state propagation, op by op: from the operands' states, the
//! result's, and which operands must be converted first.
//!
//! | op | operands | result |
//! |---|---|---|
//! | element-wise (ADD, MUL, UNARY, GLU, SCALE, CONT, ...) | the first split operand's cut; the others cut the same way, or mirrored where they broadcast along it | that cut |
//! | per-row (RMS_NORM, SOFT_MAX, ROPE, ARGSORT, ...) | cut along any axis but 0 (rows stay whole); masks, positions and sinks cut to match | that cut |
//! | MUL_MAT `a·b` | `a` cut on rows (1), `b` mirrored | cut on 0 (column-parallel) |
//! | | `a` and `b` cut alike on 0 | partial sums (row-parallel), all-reduced at once |
//! | | `b` cut on 1, 2 or 3, `a` mirrored or cut alike / broadcast | cut the same |
//! | MUL_MAT_ID | experts cut on rows, or on 0 with `b` | cut on 0, or partial |
//! | GET_ROWS | the table cut on 0, ids mirrored | cut on 0 |
//! | SET_ROWS, CPY | the destination's cut; the source cut to match | the destination's |
//! | FLASH_ATTN_EXT | q cut on heads (2), k/v on their heads (GQA groups whole) or mirrored with one KV head; mask mirrored, sinks cut | cut on heads (1) |
//! | anything else | gathered (all-gather) | mirrored |
//!
//! A combination no rule takes falls back to gathering every operand and
//! computing the op whole on every device: slower, never wrong. Only
//! writes into a split destination that the source cannot match are
//! errors, naming the node.

use tessera::{Error, Op, Result, TensorId};

use crate::lower::{Held, Lower};
use crate::state::{Split, SplitState};

/// Lower op node `id`.
pub(crate) fn lower_op(lw: &mut Lower<'_>, id: TensorId) -> Result<Held> {
    let node = lw.graph.node(id)?.clone();
    let mut raw: Vec<Option<Held>> = Vec::with_capacity(node.srcs.len());
    for s in node.srcs {
        raw.push(match s {
            Some(s) => Some(lw.get_partial(s)?),
            None => None,
        });
    }
    if let Some(h) = carry_partial(lw, id, &node.op, &raw)? {
        return Ok(h);
    }
    // Every other op needs whole sums: partial operands are all-reduced.
    let mut srcs: Vec<Option<Held>> = Vec::with_capacity(node.srcs.len());
    for (s, h) in node.srcs.iter().zip(raw) {
        srcs.push(match (s, h) {
            (Some(s), Some(h)) if h.state == SplitState::Partial => Some(lw.get(*s)?),
            (_, h) => h,
        });
    }
    let out = node.layout;
    match node.op {
        Op::Dup
        | Op::Cont
        | Op::Add
        | Op::Mul
        | Op::Div
        | Op::Sub
        | Op::Sqr
        | Op::Sqrt
        | Op::Clamp { .. }
        | Op::Scale { .. }
        | Op::Unary(_)
        | Op::SwiGluOai { .. }
        | Op::Glu { .. } => {
            let fused_glu = matches!(node.op, Op::Glu { .. }) && node.src(1).is_none();
            // A CONT that reshapes (`cont_4d`) moves elements across rows:
            // computed whole.
            let reshapes = srcs
                .first()
                .and_then(Option::as_ref)
                .is_some_and(|s| matches!(node.op, Op::Cont) && s.layout.ne != out.ne);
            let target = srcs
                .iter()
                .flatten()
                .filter(|_| !reshapes)
                .find_map(|s| match &s.state {
                    SplitState::Split(sp)
                        if s.layout.ne[sp.axis] == out.ne[sp.axis]
                            && !(fused_glu && sp.axis == 0) =>
                    {
                        Some(sp.clone())
                    }
                    _ => None,
                });
            match target {
                Some(sp) => {
                    let mut conv = Vec::with_capacity(srcs.len());
                    for s in &srcs {
                        conv.push(match s {
                            None => Some(None),
                            Some(h) => conform(lw, h, &sp, sp.axis)?.map(Some),
                        });
                    }
                    match conv.into_iter().collect::<Option<Vec<_>>>() {
                        Some(c) => lw.emit(id, &c, SplitState::Split(sp)),
                        None => whole(lw, id, &srcs),
                    }
                }
                None => whole(lw, id, &srcs),
            }
        }
        Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::L2Norm { .. }
        | Op::Argsort { .. }
        | Op::TopK
        | Op::Argmax
        | Op::SumRows
        | Op::SoftMax { .. }
        | Op::Rope(_) => {
            let target = match srcs.first().and_then(|s| s.as_ref()).map(|s| &s.state) {
                Some(SplitState::Split(sp))
                    if sp.axis != 0 && out.ne[sp.axis] == srcs_ne(&srcs, 0, sp.axis) =>
                {
                    Some(sp.clone())
                }
                _ => None,
            };
            // ALiBi slopes depend on the head index (axis 2).
            let alibi = matches!(node.op, Op::SoftMax { max_bias, .. } if max_bias != 0.0);
            let Some(sp) = target.filter(|sp| !(alibi && sp.axis == 2)) else {
                return whole(lw, id, &srcs);
            };
            let mut conv: Vec<Option<Held>> = vec![srcs[0].clone()];
            for (i, s) in srcs.iter().enumerate().skip(1) {
                let Some(h) = s else {
                    conv.push(None);
                    continue;
                };
                // Masks run along the cut; sinks (one per head) and
                // positions (one per token) along axis 0 of theirs.
                let r = match (&node.op, i) {
                    (Op::SoftMax { .. }, 1) => conform(lw, h, &sp, sp.axis)?,
                    (Op::SoftMax { .. }, 2) | (Op::Rope(_), 1) if sp.axis == 2 => {
                        conform(lw, h, &sp, 0)?
                    }
                    _ => Some(lw.mirrored(h)?),
                };
                match r {
                    Some(r) => conv.push(Some(r)),
                    None => return whole(lw, id, &srcs),
                }
            }
            lw.emit(id, &conv, SplitState::Split(sp))
        }
        Op::MulMat => mul_mat(lw, id, &srcs),
        Op::MulMatId => {
            let (a, b, ids) = (req(&srcs, 0)?, req(&srcs, 1)?, req(&srcs, 2)?);
            match a.state.clone() {
                SplitState::Split(sp) if sp.axis == 1 => {
                    let b = lw.mirrored(&b)?;
                    let ids = lw.mirrored(&ids)?;
                    lw.emit(id, &[Some(a), Some(b), Some(ids)], out_split(0, &sp))
                }
                SplitState::Split(sp) if sp.axis == 0 && b.layout.ne[0] == a.layout.ne[0] => {
                    let b = lw.sliced(&b, &sp)?;
                    let ids = lw.mirrored(&ids)?;
                    lw.emit(id, &[Some(a), Some(b), Some(ids)], SplitState::Partial)
                }
                _ => whole(lw, id, &srcs),
            }
        }
        Op::GetRows => {
            let (a, ids) = (req(&srcs, 0)?, req(&srcs, 1)?);
            match &a.state {
                SplitState::Split(sp) if sp.axis == 0 => {
                    let ids = lw.mirrored(&ids)?;
                    lw.emit(id, &[Some(a.clone()), Some(ids)], out_split(0, sp))
                }
                _ => whole(lw, id, &srcs),
            }
        }
        Op::SetRows | Op::Cpy => {
            let (dst_i, src_i) = if node.op == Op::SetRows {
                (0, 1)
            } else {
                (1, 0)
            };
            let dst = req(&srcs, dst_i)?;
            let src = req(&srcs, src_i)?;
            match &dst.state {
                SplitState::Split(sp) => {
                    let ok = match node.op {
                        Op::SetRows => {
                            sp.axis != 1 && src.layout.ne[sp.axis] == dst.layout.ne[sp.axis]
                        }
                        _ => src.layout.ne == dst.layout.ne,
                    };
                    if !ok {
                        return Err(Error::unsupported(
                            "Meta",
                            format!("writing into a destination split on axis {}", sp.axis),
                        ));
                    }
                    let src = lw.sliced(&src, sp)?;
                    let mut conv = srcs.clone();
                    conv[src_i] = Some(src);
                    if let Some(ids) = srcs.get(2).cloned().flatten()
                        && node.op == Op::SetRows
                    {
                        conv[2] = Some(lw.mirrored(&ids)?);
                    }
                    lw.emit(id, &conv, SplitState::Split(sp.clone()))
                }
                _ => whole(lw, id, &srcs),
            }
        }
        Op::FlashAttnExt { .. } => flash_attn(lw, id, &srcs),
        _ => whole(lw, id, &srcs),
    }
}

/// Every operand gathered; the op computed whole on every device.
/// Ops that carry a partial sum on as one (each device applies them to its
/// own term, and the terms still add up to the result): the sum of two
/// partial sums held by the same devices, a product by a mirrored factor,
/// a scaling without bias. Delaying the all-reduce past them reduces a
/// mixture of experts' weighted sum once instead of every expert's output
/// (upstream's "delayed all-reduce"), and lets the nodes that do not need
/// the sum run before the cut. `None`: the op needs whole sums.
fn carry_partial(
    lw: &mut Lower<'_>,
    id: TensorId,
    op: &Op,
    srcs: &[Option<Held>],
) -> Result<Option<Held>> {
    let partial = |h: &Option<Held>| h.as_ref().is_some_and(|h| h.state == SplitState::Partial);
    let mirrored = |h: &Option<Held>| h.as_ref().is_some_and(|h| h.state == SplitState::Mirrored);
    let out = lw.graph.node(id)?.layout;
    let carried = match (op, srcs) {
        (Op::Add, [Some(a), Some(b), ..]) if partial(&srcs[0]) && partial(&srcs[1]) => {
            let same_devices = a
                .ids
                .iter()
                .zip(&b.ids)
                .all(|(x, y)| x.is_some() == y.is_some());
            same_devices && a.layout.ne == out.ne && b.layout.ne == out.ne
        }
        (Op::Mul, [Some(a), Some(b), ..]) => {
            // The partial operand must have the result's shape (the
            // mirrored factor may broadcast).
            (partial(&srcs[0]) && mirrored(&srcs[1]) && a.layout.ne == out.ne)
                || (mirrored(&srcs[0]) && partial(&srcs[1]) && b.layout.ne == out.ne)
        }
        (Op::Scale { bias, .. }, [Some(_), ..]) => partial(&srcs[0]) && *bias == 0.0,
        _ => false,
    };
    if !carried {
        return Ok(None);
    }
    lw.emit(id, srcs, SplitState::Partial).map(Some)
}

fn whole(lw: &mut Lower<'_>, id: TensorId, srcs: &[Option<Held>]) -> Result<Held> {
    let node = lw.graph.node(id)?.clone();
    let mut conv = Vec::with_capacity(srcs.len());
    for s in srcs {
        conv.push(match s {
            Some(h) => Some(lw.mirrored(h)?),
            None => None,
        });
    }
    if node.op.writes_into_src() {
        // Writing a gathered copy would not reach the destination's pieces.
        let dst_i = if node.op == Op::SetRows { 0 } else { 1 };
        if let Some(Some(d)) = srcs.get(dst_i)
            && d.state != SplitState::Mirrored
        {
            return Err(Error::unsupported(
                "Meta",
                "writing into a split destination",
            ));
        }
    }
    lw.emit(id, &conv, SplitState::Mirrored)
}

/// Operand `h` made to match a result cut as `sp`, where `h`'s axis `ax`
/// runs along the cut: mirrored where it broadcasts (extent 1), cut alike
/// where it has the cut extent; `None` when neither.
fn conform(lw: &mut Lower<'_>, h: &Held, sp: &Split, ax: usize) -> Result<Option<Held>> {
    let total: usize = sp.sizes.iter().sum();
    let ne = h.layout.ne[ax];
    if ne == total && total != 1 {
        let want = Split {
            axis: ax,
            sizes: sp.sizes.clone(),
        };
        if ax == 0
            && want
                .sizes
                .iter()
                .any(|s| s % h.layout.dtype.block_size() != 0)
        {
            return Ok(None);
        }
        return lw.sliced(h, &want).map(Some);
    }
    if ne == 1 {
        return lw.mirrored(h).map(Some);
    }
    Ok(None)
}

fn srcs_ne(srcs: &[Option<Held>], i: usize, axis: usize) -> usize {
    srcs.get(i)
        .and_then(|s| s.as_ref())
        .map(|s| s.layout.ne[axis])
        .unwrap_or(0)
}

fn req(srcs: &[Option<Held>], i: usize) -> Result<Held> {
    srcs.get(i)
        .cloned()
        .flatten()
        .ok_or_else(|| Error::op("META", format!("operand {i} missing")))
}

fn out_split(axis: usize, sp: &Split) -> SplitState {
    SplitState::Split(Split {
        axis,
        sizes: sp.sizes.clone(),
    })
}

fn mul_mat(lw: &mut Lower<'_>, id: TensorId, srcs: &[Option<Held>]) -> Result<Held> {
    let (a, b) = (req(srcs, 0)?, req(srcs, 1)?);
    let sa = match &a.state {
        SplitState::Split(s) => Some(s.clone()),
        _ => None,
    };
    let sb = match &b.state {
        SplitState::Split(s) => Some(s.clone()),
        _ => None,
    };
    match (sa, sb) {
        (None, None) => lw.emit(id, &[Some(a), Some(b)], SplitState::Mirrored),
        (Some(s), _) if s.axis == 1 => {
            let b = lw.mirrored(&b)?;
            lw.emit(id, &[Some(a), Some(b)], out_split(0, &s))
        }
        (Some(s), _) if s.axis == 0 => {
            let b = lw.sliced(&b, &s)?;
            lw.emit(id, &[Some(a), Some(b)], SplitState::Partial)
        }
        (None, Some(s)) if s.axis == 0 => {
            if s.sizes.iter().any(|x| x % a.layout.dtype.block_size() != 0) {
                return whole(lw, id, srcs);
            }
            let a = lw.sliced(&a, &s)?;
            lw.emit(id, &[Some(a), Some(b)], SplitState::Partial)
        }
        (None, Some(s)) if s.axis == 1 => lw.emit(id, &[Some(a), Some(b)], SplitState::Split(s)),
        (None, Some(s)) => {
            // Batch dimensions: `a` broadcast (extent 1) or cut alike.
            match conform(lw, &a, &s, s.axis)? {
                Some(a) => lw.emit(id, &[Some(a), Some(b)], SplitState::Split(s)),
                None => whole(lw, id, srcs),
            }
        }
        (Some(s), _) => {
            // `a` cut on a batch dimension: `b` must be cut alike.
            if b.layout.ne[s.axis] != a.layout.ne[s.axis] {
                return whole(lw, id, srcs);
            }
            let b = lw.sliced(&b, &s)?;
            lw.emit(id, &[Some(a), Some(b)], SplitState::Split(s))
        }
    }
}

/// FLASH_ATTN_EXT: q `[d, T, H, S]`, k/v `[d, n_kv, H_kv, S]`, mask
/// `[n_kv, T_pad, 1, S]`, sinks `[H]`; result `[d_v, H, T, S]`.
fn flash_attn(lw: &mut Lower<'_>, id: TensorId, srcs: &[Option<Held>]) -> Result<Held> {
    let (q, k, v) = (req(srcs, 0)?, req(srcs, 1)?, req(srcs, 2)?);
    let h = q.layout.ne[2];
    let hkv = k.layout.ne[2].max(1);
    let g = h / hkv;
    // The cut of q's heads, from q or from k.
    let q_heads = match (&q.state, &k.state) {
        (SplitState::Split(s), _) if s.axis == 2 => Some(s.sizes.clone()),
        (SplitState::Mirrored, SplitState::Split(s)) if s.axis == 2 && hkv > 1 => {
            Some(s.sizes.iter().map(|x| x * g).collect())
        }
        _ => None,
    };
    let alibi =
        matches!(lw.graph.node(id)?.op, Op::FlashAttnExt { max_bias, .. } if max_bias != 0.0);
    let Some(sizes) = q_heads.filter(|_| !alibi) else {
        return whole(lw, id, srcs);
    };
    if hkv > 1 && sizes.iter().any(|x| x % g != 0) {
        return whole(lw, id, srcs);
    }
    let sq = Split {
        axis: 2,
        sizes: sizes.clone(),
    };
    let q = lw.sliced(&q, &sq)?;
    let (k, v) = if hkv == 1 {
        (lw.mirrored(&k)?, lw.mirrored(&v)?)
    } else {
        let sk = Split {
            axis: 2,
            sizes: sizes.iter().map(|x| x / g).collect(),
        };
        (lw.sliced(&k, &sk)?, lw.sliced(&v, &sk)?)
    };
    let mask = match srcs.get(3).cloned().flatten() {
        None => None,
        Some(m) if m.layout.ne[2] == 1 => Some(lw.mirrored(&m)?),
        Some(_) => return whole(lw, id, srcs),
    };
    let sinks = match srcs.get(4).cloned().flatten() {
        None => None,
        Some(s) => Some(lw.sliced(
            &s,
            &Split {
                axis: 0,
                sizes: sizes.clone(),
            },
        )?),
    };
    lw.emit(
        id,
        &[Some(q), Some(k), Some(v), mask, sinks],
        SplitState::Split(Split { axis: 1, sizes }),
    )
}
