//! Per-op timing, shared by the devices that can time their nodes (the CPU
//! stream's clock, the GPU's timestamps): what a node counts as, and the
//! totals a profile reports.

use std::collections::HashMap;

use tessera_core::{DType, Layout, Op};

/// Time spent in one kind of node, summed over the computes profiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpTime {
    /// The op and what distinguishes its kernels: `MUL_MAT q4_K n=1`,
    /// `GET_ROWS q8_0`, `CPY f32->f16`, `ADD`.
    pub what: String,
    /// Nodes run.
    pub calls: u64,
    /// Time of those nodes, in nanoseconds.
    pub nanos: u64,
    /// Of which spent waiting for other threads (0 where that is not
    /// measured, as on a GPU).
    pub wait_nanos: u64,
}

/// What a node of `op` with sources `src0`, `src1` and destination type
/// `dst` counts as: the op, with the weight type and column count of a
/// matrix product, the table type of GET_ROWS and the types of a copy.
pub fn op_label(op: Op, src0: Option<&Layout>, src1: Option<&Layout>, dst: DType) -> String {
    let name = op.name();
    let dtype = |s: Option<&Layout>| s.map_or(DType::F32, |l| l.dtype);
    match op {
        Op::MulMat | Op::MulMatId => {
            let cols = src1.map_or(0, |b| b.ne[1]);
            let n = if cols == 1 { "n=1" } else { "n>1" };
            format!("{name} {} {n}", dtype(src0).name())
        }
        Op::GetRows => format!("{name} {}", dtype(src0).name()),
        Op::Cpy | Op::Dup => format!("{name} {}->{}", dtype(src0).name(), dst.name()),
        _ => name.to_string(),
    }
}

/// Totals by [`OpTime::what`].
#[derive(Debug, Default)]
pub struct OpTotals(HashMap<String, OpTime>);

impl OpTotals {
    /// Count one node of kind `what` that took `nanos` (`wait` of them waiting).
    pub fn add(&mut self, what: &str, nanos: u64, wait: u64) {
        let e = self.0.entry(what.to_string()).or_insert_with(|| OpTime {
            what: what.to_string(),
            calls: 0,
            nanos: 0,
            wait_nanos: 0,
        });
        e.calls += 1;
        e.nanos = e.nanos.saturating_add(nanos);
        e.wait_nanos = e.wait_nanos.saturating_add(wait);
    }

    /// The totals, largest first; starts over.
    pub fn take(&mut self) -> Vec<OpTime> {
        let mut v: Vec<OpTime> = self.0.drain().map(|(_, t)| t).collect();
        v.sort_by(|a, b| b.nanos.cmp(&a.nanos).then_with(|| a.what.cmp(&b.what)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_totals() {
        let w = Layout::contiguous(DType::Q4K, &[256, 8]).unwrap_or_else(|e| panic!("{e}"));
        let x1 = Layout::contiguous(DType::F32, &[256, 1]).unwrap_or_else(|e| panic!("{e}"));
        let x4 = Layout::contiguous(DType::F32, &[256, 4]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            op_label(Op::MulMat, Some(&w), Some(&x1), DType::F32),
            "MUL_MAT q4_K n=1"
        );
        assert_eq!(
            op_label(Op::MulMat, Some(&w), Some(&x4), DType::F32),
            "MUL_MAT q4_K n>1"
        );
        assert_eq!(
            op_label(Op::Cpy, Some(&x1), None, DType::F16),
            "CPY f32->f16"
        );
        let mut t = OpTotals::default();
        t.add("ADD", 5, 1);
        t.add("MUL", 9, 0);
        t.add("ADD", 7, 2);
        let v = t.take();
        assert_eq!(v[0].what, "ADD");
        assert_eq!((v[0].calls, v[0].nanos, v[0].wait_nanos), (2, 12, 3));
        assert_eq!((v[1].what.as_str(), v[1].nanos), ("MUL", 9));
        assert!(t.take().is_empty());
    }
}
