//! The operations a graph node can perform, with their typed parameters.
//!
//! Names and semantics follow ggml (`GGML_OP_*`); parameters that ggml packs
//! into `op_params` are typed fields here. The builder in [`crate::graph`]
//! validates operands and parameters; this module only describes them.

/// Element-wise unary functions (ggml's `GGML_UNARY_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `x * sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation: `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`.
    Gelu,
    /// GELU, exact: `0.5x(1 + erf(x / sqrt 2))`.
    GeluErf,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `e^x`.
    Exp,
    /// GELU, sigmoid approximation: `x * sigmoid(1.702x)` (ggml's `GELU_QUICK`).
    GeluQuick,
}

impl UnaryOp {
    /// All unary ops.
    pub const ALL: [UnaryOp; 8] = [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::GeluQuick,
    ];

    /// ggml's name.
    pub const fn name(self) -> &'static str {
        match self {
            UnaryOp::Silu => "SILU",
            UnaryOp::Gelu => "GELU",
            UnaryOp::GeluErf => "GELU_ERF",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Relu => "RELU",
            UnaryOp::Tanh => "TANH",
            UnaryOp::Exp => "EXP",
            UnaryOp::GeluQuick => "GELU_QUICK",
        }
    }
}

/// Gated linear units (ggml's `GGML_GLU_OP_*`): `act(x) * g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluOp {
    /// `silu(x) * g`.
    SwiGlu,
    /// `gelu(x) * g` (tanh approximation).
    GeGlu,
    /// `relu(x) * g`.
    ReGlu,
    /// `gelu_erf(x) * g`.
    GeGluErf,
    /// `gelu_quick(x) * g`.
    GeGluQuick,
}

impl GluOp {
    /// All GLU ops.
    pub const ALL: [GluOp; 5] = [
        GluOp::SwiGlu,
        GluOp::GeGlu,
        GluOp::ReGlu,
        GluOp::GeGluErf,
        GluOp::GeGluQuick,
    ];

    /// ggml's name.
    pub const fn name(self) -> &'static str {
        match self {
            GluOp::SwiGlu => "SWIGLU",
            GluOp::GeGlu => "GEGLU",
            GluOp::ReGlu => "REGLU",
            GluOp::GeGluErf => "GEGLU_ERF",
            GluOp::GeGluQuick => "GEGLU_QUICK",
        }
    }

    /// The activation applied to `x`.
    pub const fn activation(self) -> UnaryOp {
        match self {
            GluOp::SwiGlu => UnaryOp::Silu,
            GluOp::GeGlu => UnaryOp::Gelu,
            GluOp::ReGlu => UnaryOp::Relu,
            GluOp::GeGluErf => UnaryOp::GeluErf,
            GluOp::GeGluQuick => UnaryOp::GeluQuick,
        }
    }
}

/// Sort order of ARGSORT (ggml's `ggml_sort_order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    /// Smallest first (`GGML_SORT_ORDER_ASC`).
    Asc,
    /// Largest first (`GGML_SORT_ORDER_DESC`).
    Desc,
}

impl SortOrder {
    /// ggml's integer value.
    pub const fn ggml_order(self) -> i32 {
        match self {
            SortOrder::Asc => 0,
            SortOrder::Desc => 1,
        }
    }
}

/// How ROPE pairs the dimensions it rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0, LLaMA).
    Normal,
    /// Halves `(x[i], x[i + n_dims/2])` (ggml mode 2, GPT-NeoX, Qwen, ...).
    Neox,
    /// Multi-section RoPE (ggml `GGML_ROPE_TYPE_MROPE`, 8, Qwen2-VL): NeoX
    /// pairing; pair `i` takes its position from the stream of the section
    /// `i % sum(sections)` falls in (contiguous sections t, h, w, e).
    Mrope,
    /// Vision RoPE (ggml `GGML_ROPE_TYPE_VISION`, 24): `n_dims = ne0 / 2`,
    /// all `ne0` dimensions rotate as pairs `(x[i], x[i + n_dims])`, and each
    /// section restarts the frequency sequence.
    Vision,
    /// Interleaved multi-section RoPE (ggml `GGML_ROPE_TYPE_IMROPE`, 40,
    /// Qwen3-VL): like [`RopeMode::Mrope`], with the streams t, h, w
    /// interleaved pair by pair.
    Imrope,
}

impl RopeMode {
    /// ggml's integer mode.
    pub const fn ggml_mode(self) -> i32 {
        match self {
            RopeMode::Normal => 0,
            RopeMode::Neox => 2,
            RopeMode::Mrope => 8,
            RopeMode::Vision => 24,
            RopeMode::Imrope => 40,
        }
    }

    /// The mode of ggml's integer `mode`, if it is one Tessera knows.
    pub const fn from_ggml(mode: i32) -> Option<Self> {
        match mode {
            0 => Some(RopeMode::Normal),
            2 => Some(RopeMode::Neox),
            8 => Some(RopeMode::Mrope),
            24 => Some(RopeMode::Vision),
            40 => Some(RopeMode::Imrope),
            _ => None,
        }
    }

    /// A multi-section mode (ggml's `mode & GGML_ROPE_TYPE_MROPE`): four
    /// positions per token and `sections`.
    pub const fn is_multi(self) -> bool {
        matches!(self, RopeMode::Mrope | RopeMode::Vision | RopeMode::Imrope)
    }

    /// Pairs `(x[i], x[i + n_dims/2])` or, for vision, `(x[i], x[i + n_dims])`
    /// (everything but [`RopeMode::Normal`]).
    pub const fn is_neox_like(self) -> bool {
        !matches!(self, RopeMode::Normal)
    }
}

/// ROPE parameters (ggml's `ggml_rope_ext` arguments).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Number of leading dimensions rotated (even, at most `ne0`); the rest pass through.
    pub n_dims: usize,
    /// Pairing mode.
    pub mode: RopeMode,
    /// Original training context (YaRN).
    pub n_ctx_orig: usize,
    /// Base of the frequencies (10000 for LLaMA).
    pub freq_base: f32,
    /// Linear position scale (1 = none).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 = off).
    pub ext_factor: f32,
    /// Magnitude scale.
    pub attn_factor: f32,
    /// YaRN low correction dimension parameter.
    pub beta_fast: f32,
    /// YaRN high correction dimension parameter.
    pub beta_slow: f32,
    /// Multi-section modes only (ggml's `sections[4]` of `ggml_rope_multi`):
    /// the number of rotated pairs taking their position from the t, h, w
    /// and e streams; ignored (and zero by convention) otherwise.
    pub sections: [u32; 4],
}

impl RopeParams {
    /// Plain RoPE over `n_dims` dimensions with `freq_base`, no scaling.
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> Self {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            sections: [0; 4],
        }
    }

    /// Multi-section RoPE (`ggml_rope_multi`) with `sections`, no scaling.
    pub fn multi(n_dims: usize, mode: RopeMode, sections: [u32; 4], freq_base: f32) -> Self {
        RopeParams {
            sections,
            ..RopeParams::new(n_dims, mode, freq_base)
        }
    }

    /// The number of rotated dimension pairs the cos/sin of one token cover:
    /// `n_dims / 2`, or `n_dims` (= `ne0 / 2`) for [`RopeMode::Vision`].
    pub const fn n_pairs(&self) -> usize {
        match self.mode {
            RopeMode::Vision => self.n_dims,
            _ => self.n_dims / 2,
        }
    }
}

/// One operation, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// A leaf: a tensor whose data comes from outside the graph.
    None,
    /// Copy into a new tensor of the same type and shape.
    Dup,
    /// Copy into a new contiguous tensor of the same type.
    Cont,
    /// Copy `src0` into `src1`'s memory, converting the type; a view of `src1`.
    Cpy,
    /// Same data, new extents (source must be contiguous); a view.
    Reshape,
    /// A view with arbitrary extents, strides and offset.
    View,
    /// Axes permuted: source dimension `i` becomes dimension `axes[i]`; a view.
    Permute([u8; 4]),
    /// Dimensions 0 and 1 swapped; a view.
    Transpose,
    /// Gather rows of `src0` at the I32 indices `src1`.
    GetRows,
    /// Scatter the F32 rows `src1` into `src0` at the indices `src2`; a view of `src0`.
    SetRows,
    /// `src0 + src1`, with `src1` broadcast.
    Add,
    /// `src0 * src1`, with `src1` broadcast.
    Mul,
    /// `src0 / src1`, with `src1` broadcast.
    Div,
    /// `src0 - src1`, with `src1` broadcast.
    Sub,
    /// `x^2`, element-wise.
    Sqr,
    /// `sqrt(x)`, element-wise.
    Sqrt,
    /// `max(min(x, max), min)` element-wise, with C's comparisons (a NaN
    /// becomes `max`, as in ggml).
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// `src0 * scale + bias`.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after scaling.
        bias: f32,
    },
    /// Root-mean-square normalisation of each row.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
    /// Mean/variance normalisation of each row.
    Norm {
        /// Added to the variance.
        eps: f32,
    },
    /// `x / max(sqrt(sum x^2), eps)` over each row.
    L2Norm {
        /// Lower bound of the norm.
        eps: f32,
    },
    /// `src0` tiled to the result's extents (each a multiple of `src0`'s).
    Repeat,
    /// `src0` with `lp[i]` zeros before and `rp[i]` zeros after it along each dimension.
    Pad {
        /// Zeros before, per dimension.
        lp: [u32; 4],
        /// Zeros after, per dimension.
        rp: [u32; 4],
    },
    /// Indices (I32) that sort each row of `src0`; ties keep index order.
    Argsort {
        /// Ascending or descending.
        order: SortOrder,
    },
    /// Indices (I32) of the `ne0` largest elements of each row of `src0`,
    /// largest first (ties: lower index first).
    TopK,
    /// `dst[i, j] = sum_k src0[k, i] * src1[k, j]`, broadcast over dims 2-3.
    MulMat,
    /// Mixture-of-experts product: `src0` holds one matrix per expert
    /// `[k, m, n_as]`, `src1` the F32 activations `[k, ne11, n_tokens]`,
    /// `src2` the I32 expert ids `[n_used, n_tokens]`:
    /// `dst[:, e, t] = src0[:, :, ids[e, t]]^T src1[:, e % ne11, t]`.
    MulMatId,
    /// `src0 + src1[:, ids]`: F32 `a` `[ne0, ne1, ne2]` plus the row of the
    /// F32 `b` `[ne0, n_as]` that the I32 `ids[i1, i2]` (`src2`) selects.
    AddId,
    /// Row softmax of `src0 * scale + slope * mask` (mask `src1` optional),
    /// with optional attention sinks `src2` (F32, one logit per head = dim 2,
    /// added to the denominator only: ggml's `ggml_soft_max_add_sinks`).
    SoftMax {
        /// Logit scale.
        scale: f32,
        /// ALiBi maximum bias (0 = no ALiBi).
        max_bias: f32,
    },
    /// Rotary position embedding at positions `src1` (freq factors `src2`
    /// optional); multi-section modes read four positions per token.
    Rope(RopeParams),
    /// Element-wise function.
    Unary(UnaryOp),
    /// Gated linear unit: fused (`src0` holds `[x, g]`) or split (`src0` = x, `src1` = g).
    Glu {
        /// Which activation.
        op: GluOp,
        /// Fused form only: `g` is the first half and `x` the second.
        swapped: bool,
    },
    /// gpt-oss's clamped SwiGLU (ggml's `GGML_GLU_OP_SWIGLU_OAI`, split form):
    /// `x = min(src0, limit)`, `g = clamp(src1, -limit, limit)`,
    /// `x * sigmoid(alpha x) * (g + 1)`.
    SwiGluOai {
        /// Sigmoid slope.
        alpha: f32,
        /// Clamp bound.
        limit: f32,
    },
    /// `src0` and `src1` joined along `dim`.
    Concat {
        /// Dimension joined along.
        dim: u8,
    },
    /// Index of the largest element of each row (I32 result).
    Argmax,
    /// Sum of each row.
    SumRows,
    /// Fused attention `softmax(scale * q k^T + slope * mask) v` (q, k, v, mask
    /// optional, sinks `src4` optional: one F32 logit per query head that
    /// joins the softmax's maximum and sum but adds no value row, ggml's
    /// `ggml_flash_attn_ext_add_sinks`).
    FlashAttnExt {
        /// Logit scale.
        scale: f32,
        /// ALiBi maximum bias (0 = none).
        max_bias: f32,
        /// Logit soft-capping `c * tanh(x / c)` (0 = none).
        logit_softcap: f32,
    },
    /// A copy of `src0` on another device, same layout (strides included),
    /// made by the scheduler before the split that reads it; devices never
    /// compute it (it is a marker that keeps the source alive until copied).
    Transfer,
}

impl Op {
    /// ggml's op name (`GGML_OP_` dropped): `MUL_MAT`, `UNARY`, ...
    pub const fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cont => "CONT",
            Op::Cpy => "CPY",
            Op::Reshape => "RESHAPE",
            Op::View => "VIEW",
            Op::Permute(_) => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::GetRows => "GET_ROWS",
            Op::SetRows => "SET_ROWS",
            Op::Add => "ADD",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Sub => "SUB",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::Clamp { .. } => "CLAMP",
            Op::L2Norm { .. } => "L2_NORM",
            Op::Repeat => "REPEAT",
            Op::Pad { .. } => "PAD",
            Op::Argsort { .. } => "ARGSORT",
            Op::TopK => "TOP_K",
            Op::Scale { .. } => "SCALE",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::MulMat => "MUL_MAT",
            Op::MulMatId => "MUL_MAT_ID",
            Op::AddId => "ADD_ID",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::Rope(_) => "ROPE",
            Op::Unary(_) => "UNARY",
            Op::Glu { .. } | Op::SwiGluOai { .. } => "GLU",
            Op::Concat { .. } => "CONCAT",
            Op::Argmax => "ARGMAX",
            Op::SumRows => "SUM_ROWS",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::Transfer => "TRANSFER",
        }
    }

    /// A more specific name for listings: the unary/GLU function for
    /// `UNARY`/`GLU` (`SILU`, `SWIGLU`), the op name otherwise.
    pub const fn display_name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Glu { op, .. } => op.name(),
            Op::SwiGluOai { .. } => "SWIGLU_OAI",
            _ => self.name(),
        }
    }

    /// A leaf (no computation).
    pub const fn is_leaf(&self) -> bool {
        matches!(self, Op::None)
    }

    /// The result shares its source's memory and needs no computation
    /// (RESHAPE, VIEW, PERMUTE, TRANSPOSE).
    pub const fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape | Op::View | Op::Permute(_) | Op::Transpose
        )
    }

    /// The result is a view of a source that the op writes into (CPY, SET_ROWS).
    pub const fn writes_into_src(&self) -> bool {
        matches!(self, Op::Cpy | Op::SetRows)
    }

    /// The allocator may give the result the memory of *any* source of the
    /// same layout that has no other use (ggml's `ggml_op_can_inplace`):
    /// kernels of these ops must be correct when `dst` aliases any source
    /// whose layout equals `dst`'s (e.g. ADD writing over `b`, SOFT_MAX over
    /// an F32 mask of the same shape).
    pub const fn can_inplace(&self) -> bool {
        matches!(
            self,
            Op::Scale { .. }
                | Op::Add
                | Op::Mul
                | Op::Div
                | Op::Sub
                | Op::Sqr
                | Op::Sqrt
                | Op::Unary(_)
                | Op::Rope(_)
                | Op::RmsNorm { .. }
                | Op::SoftMax { .. }
        )
    }
}
