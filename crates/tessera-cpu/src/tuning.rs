//! Process-wide tuning knobs, for benchmarks that compare kernel paths on
//! the same shapes and for tuning a machine.
//!
//! Changing a knob while a graph is computed is safe: kernels check at run
//! time that the scratch planned for them suffices, so a change between
//! planning and running is at worst an error for that compute, never a
//! memory fault.

/// Use the packed GEMM for MUL_MAT from `cols` columns per weight matrix on
/// (`None`: the measured per-type default; `Some(1)`: always;
/// `Some(usize::MAX)`: never, the dot-product tiles only).
pub fn set_gemm_min_cols(cols: Option<usize>) {
    crate::kernels::gemm::set_min_cols_override(cols);
}
