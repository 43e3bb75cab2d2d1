//! Tables that several nodes of one compute share: ROPE's angle tables,
//! and the packed activations of GEMMs that multiply the same input.
//!
//! A ROPE node computes `cos`/`sin` of every rotated pair for every
//! position it rotates. A model rotates Q and K in every layer with the
//! same positions and parameters (Gemma 3: 36 ROPE nodes a step, with two
//! parameter sets), so all but the first of them recompute the same
//! values: on a 512-token Gemma 3 prompt about 3 % of the time. The planner
//! groups ROPE nodes whose op (parameters included), positions and
//! frequency factors are the same memory with the same layout and whose
//! result has as many positions; the first node of a group fills the
//! group's table (every thread a share of the positions, then one barrier),
//! the others only read it ([`crate::kernels::rope`]). The values are those
//! each node would compute itself, bit for bit.
//!
//! A group ends at the first node after it that writes bytes of its
//! positions or factors: a later ROPE node with the same key starts a new
//! group (and fills again). Groups of one node get no table. The tables lie
//! in the compute's scratch before the nodes' own scratch, so no node's
//! scratch overlaps them; each table is filled anew by every compute (the
//! positions change from step to step).
//!
//! MUL_MAT nodes on the GEMM path whose activations are the same memory
//! with the same layout and would be packed alike ([`PackKey`]: Q, K and
//! V; gate and up) are grouped the same way: the first packs its B panels
//! into the group's table, the others read them
//! (`kernels::gemm_shared_b`). A new packed-B group closes the
//! open ones, so their nodes never interleave and all of them share one
//! region, as large as the largest.

use tessera::Op;

use crate::isa::Isa;
use crate::kernels::{PackKey, TensorRef, pack_key};

/// The largest table one group may have (bytes): 4,096 positions of 256
/// rotated dimensions. Larger groups compute their angles per node.
const MAX_TABLE_BYTES: usize = 4 << 20;

/// The most bytes all tables of a compute may take together.
const MAX_TOTAL_BYTES: usize = 16 << 20;

/// The largest packed activations one group may share (bytes): 512
/// columns of 8,192 f32 values.
const MAX_PACKED_BYTES: usize = 16 << 20;

/// What makes two nodes' tables the same.
#[derive(PartialEq)]
enum Key {
    /// ROPE angles.
    Rope {
        op: Op,
        pos: (usize, tessera::Layout),
        factors: Option<(usize, tessera::Layout)>,
        /// Positions rotated (`ne2` of the result).
        positions: usize,
    },
    /// A GEMM's packed activations.
    PackedB {
        b: (usize, tessera::Layout),
        pack: PackKey,
    },
}

/// The byte span `[start, end)` of a resolved operand.
fn span(r: &TensorRef, bytes: usize) -> (usize, usize) {
    let start = r.ptr as usize;
    (start, start.saturating_add(bytes))
}

struct Group {
    key: Key,
    /// The memory the angles are computed from (positions, factors).
    inputs: [Option<(usize, usize)>; 2],
    bytes: usize,
    users: usize,
    /// Still joinable: no node since its first wrote its inputs.
    open: bool,
}

/// Where a planned node's table is and whether it fills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TableUse {
    /// Offset of the table in the compute's scratch (64-byte aligned).
    pub offset: usize,
    /// Bytes of the table.
    pub len: usize,
    /// This node computes the table (the group's first node).
    pub fill: bool,
}

/// Builds the groups while the executor plans its nodes, in plan order.
#[derive(Default)]
pub(super) struct TablePlanner {
    groups: Vec<Group>,
}

impl TablePlanner {
    /// A ROPE node with result `dst`, positions `pos` and optional frequency
    /// factors (each with its byte length): the group it joins or starts,
    /// or `None` when its table would be too large.
    pub(super) fn rope(
        &mut self,
        op: &Op,
        dst: &TensorRef,
        pos: (&TensorRef, usize),
        factors: Option<(&TensorRef, usize)>,
    ) -> Option<usize> {
        let Op::Rope(p) = op else { return None };
        let positions = dst.layout.ne[2];
        let bytes = positions
            .checked_mul(2 * p.n_pairs())?
            .checked_mul(4)?
            .checked_add(63)?
            / 64
            * 64;
        if bytes > MAX_TABLE_BYTES {
            return None;
        }
        let key = Key::Rope {
            op: *op,
            pos: (pos.0.ptr as usize, pos.0.layout),
            factors: factors.map(|(f, _)| (f.ptr as usize, f.layout)),
            positions,
        };
        let inputs = [Some(span(pos.0, pos.1)), factors.map(|(f, b)| span(f, b))];
        Some(self.join(key, inputs, bytes))
    }

    /// A MUL_MAT node with weights `a` and activations `b` (with its byte
    /// length) on `nth` threads running `isa`'s kernels: the group of
    /// products whose packed activations it shares, or `None` where it
    /// packs none (not the GEMM path, several blocks, too large).
    pub(super) fn packed_b(
        &mut self,
        a: &TensorRef,
        b: (&TensorRef, usize),
        nth: usize,
        isa: Isa,
    ) -> Option<usize> {
        let (pack, bytes) = pack_key(&a.layout, a.packing, &b.0.layout, nth, isa)?;
        let bytes = bytes.checked_add(63)? / 64 * 64;
        if bytes > MAX_PACKED_BYTES {
            return None;
        }
        let key = Key::PackedB {
            b: (b.0.ptr as usize, b.0.layout),
            pack,
        };
        if !self.groups.iter().any(|g| g.open && g.key == key) {
            // Packed-B groups one after the other: they share one region.
            for g in self.groups.iter_mut() {
                if matches!(g.key, Key::PackedB { .. }) {
                    g.open = false;
                }
            }
        }
        Some(self.join(key, [Some(span(b.0, b.1)), None], bytes))
    }

    /// The open group with `key`, joined, or a new one.
    fn join(&mut self, key: Key, inputs: [Option<(usize, usize)>; 2], bytes: usize) -> usize {
        if let Some(i) = self.groups.iter().position(|g| g.open && g.key == key) {
            self.groups[i].users += 1;
            return i;
        }
        self.groups.push(Group {
            key,
            inputs,
            bytes,
            users: 1,
            open: true,
        });
        self.groups.len() - 1
    }

    /// A node writes `dst` (`bytes` long): groups whose inputs it touches
    /// take no more nodes.
    pub(super) fn written(&mut self, dst: &TensorRef, bytes: usize) {
        let (start, end) = span(dst, bytes);
        for g in self.groups.iter_mut().filter(|g| g.open) {
            if g.inputs
                .iter()
                .flatten()
                .any(|&(s, e)| s < end && start < e)
            {
                g.open = false;
            }
        }
    }

    /// The tables' offsets (`None` for groups of one node, or past the
    /// total cap) and the bytes they take together: the angle tables one
    /// after the other, then one region for every packed-B group.
    pub(super) fn layout(&self) -> (Vec<Option<usize>>, usize) {
        let shared = |g: &Group| g.users >= 2 && matches!(g.key, Key::PackedB { .. });
        let packed = self
            .groups
            .iter()
            .filter(|g| shared(g))
            .map(|g| g.bytes)
            .max()
            .unwrap_or(0);
        let mut total = 0usize;
        let mut offsets: Vec<Option<usize>> = self
            .groups
            .iter()
            .map(|g| {
                if g.users < 2 || shared(g) || total + g.bytes > MAX_TOTAL_BYTES {
                    return None;
                }
                let at = total;
                total += g.bytes;
                Some(at)
            })
            .collect();
        if packed > 0 {
            for (o, g) in offsets.iter_mut().zip(&self.groups) {
                if shared(g) {
                    *o = Some(total);
                }
            }
            total += packed;
        }
        (offsets, total)
    }

    /// The table use of the nodes of group `group`: the first one found
    /// (`first`) fills it.
    pub(super) fn table_use(
        &self,
        offsets: &[Option<usize>],
        group: usize,
        first: bool,
    ) -> Option<TableUse> {
        let offset = (*offsets.get(group)?)?;
        Some(TableUse {
            offset,
            len: self.groups.get(group)?.bytes,
            fill: first,
        })
    }
}
