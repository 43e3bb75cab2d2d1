//! Error thresholds: how close a device's result must be to the reference.
//!
//! The metric is ggml's test-backend-ops NMSE, `sum (a - b)^2 / sum b^2` with
//! `b` the reference, and the thresholds are ggml's (see
//! `reference/ggml-backend-notes.md` §6): 1e-7 by default; 5e-4 for MUL_MAT and
//! FLASH_ATTN_EXT (devices may round activations to the weights' dot type);
//! 1e-3 for ROPE; 1e-4 for ADD and 1e-3 for MUL/DIV; 1e-6 for SOFT_MAX.
//! 1e-4 for SUB (as ADD). Index and copy ops must be **exact** (bitwise
//! equal to the stored reference values): ARGMAX, ARGSORT, TOP_K, GET_ROWS,
//! DUP, CONT, CONCAT, REPEAT, PAD, CPY to the same type and SET_ROWS into
//! float types.
//!
//! Copies into lower precision: into F16/BF16 (1e-6, ggml's value; a device
//! rounding to nearest even matches the reference exactly), into a quantized
//! type (ggml's "one quantized value off by one step" estimate,
//! `(2 / 2^bits)^2 / (0.25 n)` for values in [-1, 1], `bits` = 8 for Q8_0, 6 for
//! Q6_K, 5 for Q5_0, Q5_1 and Q5_K, 4 for Q4_0, Q4_1 and Q4_K, 3 for Q3_K, IQ4_NL and IQ4_XS (non-linear
//! levels, widest gap about 1.6 uniform 4-bit steps), 2 for Q2_K: a device quantizer whose f32 arithmetic differs
//! may pick the neighbouring level for a value on a rounding boundary).
//!
//! The tables are plain data so that other crates can list and reuse them.

use tessera::{DType, Error, Graph, Node, Op, Result, TensorId};

/// How a checked node is compared with the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// Bitwise equal to the reference's stored values.
    Exact,
    /// NMSE at most this.
    Nmse(f64),
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tolerance::Exact => f.write_str("exact"),
            Tolerance::Nmse(t) => write!(f, "NMSE <= {t:e}"),
        }
    }
}

/// The NMSE threshold of ops without an entry in [`OP_NMSE`].
pub const DEFAULT_NMSE: f64 = 1e-7;

/// NMSE thresholds by op name (ggml's `max_nmse_err` overrides).
pub const OP_NMSE: [(&str, f64); 9] = [
    ("MUL_MAT", 5e-4),
    ("MUL_MAT_ID", 5e-4),
    ("FLASH_ATTN_EXT", 5e-4),
    ("ROPE", 1e-3),
    ("ADD", 1e-4),
    ("SUB", 1e-4),
    ("MUL", 1e-3),
    ("DIV", 1e-3),
    ("SOFT_MAX", 1e-6),
];

/// Ops whose results must be bitwise exact (CPY and SET_ROWS depend on types).
pub const EXACT_OPS: [&str; 9] = [
    "ARGMAX", "GET_ROWS", "DUP", "CONT", "CONCAT", "REPEAT", "PAD", "ARGSORT", "TOP_K",
];

/// NMSE threshold of a copy between different non-quantized types.
pub const CONVERT_NMSE: f64 = 1e-6;

/// The NMSE threshold of op `name`.
pub fn op_nmse(name: &str) -> f64 {
    OP_NMSE
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(DEFAULT_NMSE, |&(_, t)| t)
}

/// Bits per value that set the step of quantized type `dtype` (`None` for
/// non-quantized types).
pub const fn quant_bits(dtype: DType) -> Option<u32> {
    match dtype {
        DType::Q8_0 | DType::Q8_1 | DType::Q8K => Some(8),
        DType::Q6K => Some(6),
        DType::Q5_0 | DType::Q5_1 | DType::Q5K => Some(5),
        DType::Q4_0 | DType::Q4_1 | DType::Q4K => Some(4),
        DType::Q3K => Some(3),
        DType::Q2K => Some(2),
        // A 4-bit index into a non-linear table whose widest gap (89 to
        // 113 of 240) is about 1.6 uniform 4-bit steps: counted as 3 bits.
        DType::IQ4NL | DType::IQ4XS => Some(3),
        _ => None,
    }
}

/// NMSE allowed when `n` values in [-1, 1] are quantized into `dtype`:
/// one value off by one quantization step (ggml's estimate).
pub fn quantized_store_nmse(dtype: DType, n: usize) -> f64 {
    let bits = quant_bits(dtype).unwrap_or(8);
    let step = 2.0 / f64::from(1u32 << bits);
    step * step / (0.25 * n.max(1) as f64)
}

fn operand(node: &Node, i: usize) -> Result<TensorId> {
    node.src(i)
        .ok_or_else(|| Error::op(node.op.name(), format!("operand {i} is missing")))
}

/// The tolerance of node `id` of `graph` by the rules above.
pub fn default_tolerance(graph: &Graph, id: TensorId) -> Result<Tolerance> {
    let node = graph.node(id)?;
    let name = node.op.name();
    if EXACT_OPS.contains(&name) {
        return Ok(Tolerance::Exact);
    }
    let dst = node.layout.dtype;
    Ok(match node.op {
        Op::Cpy => {
            let src = graph.layout(operand(node, 0)?)?;
            if src.dtype == dst {
                Tolerance::Exact
            } else if dst.is_quantized() {
                Tolerance::Nmse(quantized_store_nmse(dst, src.checked_nelements()?))
            } else {
                Tolerance::Nmse(CONVERT_NMSE)
            }
        }
        Op::SetRows => {
            if dst.is_quantized() {
                let rows = graph.layout(operand(node, 1)?)?;
                Tolerance::Nmse(quantized_store_nmse(dst, rows.checked_nelements()?))
            } else {
                Tolerance::Exact
            }
        }
        _ => Tolerance::Nmse(op_nmse(name)),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_by_op_and_type() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[64, 2]).unwrap();
        let w = g.new_tensor(DType::Q4_0, &[64, 3]).unwrap();
        let mm = g.mul_mat(w, a).unwrap();
        assert_eq!(default_tolerance(&g, mm).unwrap(), Tolerance::Nmse(5e-4));
        let s = g.silu(a).unwrap();
        assert_eq!(default_tolerance(&g, s).unwrap(), Tolerance::Nmse(1e-7));
        let q = g.new_tensor(DType::Q8_0, &[64, 2]).unwrap();
        let c = g.cpy(a, q).unwrap();
        // One Q8_0 step (2/256) squared over 0.25 * 128 elements.
        let want = (2.0f64 / 256.0).powi(2) / 32.0;
        assert_eq!(default_tolerance(&g, c).unwrap(), Tolerance::Nmse(want));
        let h = g.new_tensor(DType::F16, &[64, 2]).unwrap();
        let c = g.cpy(a, h).unwrap();
        assert_eq!(default_tolerance(&g, c).unwrap(), Tolerance::Nmse(1e-6));
        let f = g.new_tensor(DType::F32, &[64, 2]).unwrap();
        let c = g.cpy(a, f).unwrap();
        assert_eq!(default_tolerance(&g, c).unwrap(), Tolerance::Exact);
        let ids = g.new_tensor(DType::I32, &[2]).unwrap();
        let r = g.get_rows(w, ids).unwrap();
        assert_eq!(default_tolerance(&g, r).unwrap(), Tolerance::Exact);
    }
}
