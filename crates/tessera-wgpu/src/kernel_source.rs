//! Macros that compose kernel sources from `shaders/` at compile time,
//! for kernels whose parts several modules put together.

/// The source of a matrix-vector integer kernel (`matvec_q8.wgsl`'s
/// shared part) for `$cols` columns (1 or 8) with the main `$main`, a file
/// of `shaders/` (`matvec_q8_tree.wgsl`, `matvec_q8_subgroup.wgsl`,
/// `matvec_q8_glu.wgsl`).
macro_rules! matvec_q8_source {
    ($cols:literal, $main:literal) => {
        concat!(
            "const MQ_COLS: u32 = ",
            $cols,
            "u;\n",
            include_str!("shaders/matmul_common.wgsl"),
            include_str!("shaders/mq_unit.wgsl"),
            include_str!("shaders/matvec_q8.wgsl"),
            include_str!(concat!("shaders/", $main))
        )
    };
}
