//! The benchmark cases: the shapes of ggml's test-backend-ops perf mode and
//! of `shared/reference/perf-anchors.md`, so the figures compare directly.

use tessera::{DType, Graph, Result, RopeMode, RopeParams, TensorId};

/// How a leaf is filled before the benchmark.
#[derive(Clone, Copy, Debug)]
pub enum Fill {
    /// Uniform random values in [-1, 1] (quantized for quantized types).
    Uniform,
    /// Positions `0..n` (I32).
    Positions,
    /// A causal-looking F16 mask of zeros.
    Zeros,
    /// Row indices below the given count (I32), pseudo-random.
    Ids(usize),
}

/// One leaf: its type, extents and how to fill it.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub dtype: DType,
    pub ne: Vec<usize>,
    pub fill: Fill,
}

/// Builds one op node from the leaf ids.
pub type BuildFn = Box<dyn Fn(&mut Graph, &[TensorId]) -> Result<TensorId>>;

/// One case: the leaves and how to build one op node from them.
pub struct PerfCase {
    /// Name in test-backend-ops style.
    pub name: String,
    /// Leaves shared by every duplicate of the op.
    pub leaves: Vec<Leaf>,
    /// Build one op node from the leaf ids.
    pub build: BuildFn,
    /// Floating-point operations per op (for GFLOPS), if the op has a flop count.
    pub flops: Option<f64>,
    /// Bytes moved per op (destination plus sources), for GB/s.
    pub bytes: f64,
    /// Bytes of weights read per op (MUL_MAT), for the share of bandwidth.
    pub weight_bytes: Option<f64>,
    /// Compared with ggml by time per op (ggml's GB/s is not meaningful for
    /// this case), not by throughput.
    pub by_time: bool,
}

fn leaf(dtype: DType, ne: &[usize], fill: Fill) -> Leaf {
    Leaf {
        dtype,
        ne: ne.to_vec(),
        fill,
    }
}

fn nbytes(dtype: DType, ne: &[usize]) -> f64 {
    let n: usize = ne.iter().product();
    (n / dtype.block_size() * dtype.type_size()) as f64
}

/// Every case, in print order.
pub fn all_cases() -> Vec<PerfCase> {
    let mut v = Vec::new();
    for n in [1usize, 8, 512] {
        for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4K] {
            v.push(mul_mat(t, 4096, n, 14336));
        }
    }
    v.push(binary("ADD", [4096, 512], [1, 1]));
    v.push(binary("ADD", [4096, 1], [1, 512]));
    v.push(binary("ADD", [4096, 4096], [1, 1]));
    v.push(binary("MUL", [4096, 512], [1, 1]));
    v.push(binary("MUL", [4096, 1], [1, 512]));
    v.push(rms_norm([4096, 512]));
    v.push(rms_norm([4096, 4096]));
    v.push(soft_max([4096, 4096, 5]));
    v.push(rope(DType::F32, RopeMode::Normal));
    v.push(rope(DType::F32, RopeMode::Neox));
    v.push(rope(DType::F16, RopeMode::Normal));
    v.push(cpy(DType::F32, DType::F16, [512, 3072]));
    v.push(cpy(DType::F32, DType::Q4_0, [512, 3072]));
    v.push(cpy(DType::Q4_0, DType::F32, [512, 3072]));
    v.push(flash_attn(128, 32, 4096, 1));
    for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
        for r in [1, 512] {
            v.push(get_rows(t, 4096, 32000, r));
        }
    }
    v
}

fn get_rows(t: DType, n: usize, m: usize, r: usize) -> PerfCase {
    PerfCase {
        name: format!("GET_ROWS(type={},n={n},m={m},r={r})", t.name()),
        leaves: vec![
            leaf(t, &[n, m], Fill::Uniform),
            leaf(DType::I32, &[r], Fill::Ids(m)),
        ],
        build: Box::new(|g, l| g.get_rows(l[0], l[1])),
        flops: None,
        // The rows read and written (ggml counts the whole table instead).
        bytes: r as f64 * (nbytes(t, &[n]) + nbytes(DType::F32, &[n])),
        weight_bytes: None,
        by_time: true,
    }
}

fn mul_mat(t: DType, m: usize, n: usize, k: usize) -> PerfCase {
    PerfCase {
        name: format!("MUL_MAT(type_a={},type_b=f32,m={m},n={n},k={k})", t.name()),
        leaves: vec![
            leaf(t, &[k, m], Fill::Uniform),
            leaf(DType::F32, &[k, n], Fill::Uniform),
        ],
        build: Box::new(|g, l| g.mul_mat(l[0], l[1])),
        flops: Some(2.0 * m as f64 * n as f64 * k as f64),
        bytes: nbytes(t, &[k, m]) + nbytes(DType::F32, &[k, n]) + nbytes(DType::F32, &[m, n]),
        weight_bytes: Some(nbytes(t, &[k, m])),
        by_time: false,
    }
}

fn binary(op: &'static str, ne: [usize; 2], nr: [usize; 2]) -> PerfCase {
    let full = [ne[0] * nr[0], ne[1] * nr[1]];
    PerfCase {
        name: format!(
            "{op}(type=f32,ne=[{},{},1,1],nr=[{},{},1,1])",
            ne[0], ne[1], nr[0], nr[1]
        ),
        leaves: vec![
            leaf(DType::F32, &full, Fill::Uniform),
            leaf(DType::F32, &ne, Fill::Uniform),
        ],
        build: Box::new(move |g, l| {
            if op == "ADD" {
                g.add(l[0], l[1])
            } else {
                g.mul(l[0], l[1])
            }
        }),
        flops: None,
        // test-backend-ops counts 3 x dst for binary broadcasts.
        bytes: 3.0 * nbytes(DType::F32, &full),
        weight_bytes: None,
        by_time: false,
    }
}

fn rms_norm(ne: [usize; 2]) -> PerfCase {
    PerfCase {
        name: format!("RMS_NORM(type=f32,ne=[{},{},1,1],eps=1e-6)", ne[0], ne[1]),
        leaves: vec![leaf(DType::F32, &ne, Fill::Uniform)],
        build: Box::new(|g, l| g.rms_norm(l[0], 1e-6)),
        flops: None,
        bytes: 2.0 * nbytes(DType::F32, &ne),
        weight_bytes: None,
        by_time: false,
    }
}

fn soft_max(ne: [usize; 3]) -> PerfCase {
    PerfCase {
        name: format!(
            "SOFT_MAX(type=f32,ne=[{},{},{},1],mask=0,scale=1)",
            ne[0], ne[1], ne[2]
        ),
        leaves: vec![leaf(DType::F32, &ne, Fill::Uniform)],
        build: Box::new(|g, l| g.soft_max(l[0])),
        flops: None,
        bytes: 2.0 * nbytes(DType::F32, &ne),
        weight_bytes: None,
        by_time: false,
    }
}

fn rope(t: DType, mode: RopeMode) -> PerfCase {
    let ne = [128usize, 32, 512];
    PerfCase {
        name: format!(
            "ROPE(type={},ne=[{},{},{},1],n_dims=128,mode={})",
            t.name(),
            ne[0],
            ne[1],
            ne[2],
            mode.ggml_mode()
        ),
        leaves: vec![
            leaf(t, &ne, Fill::Uniform),
            leaf(DType::I32, &[ne[2]], Fill::Positions),
        ],
        build: Box::new(move |g, l| g.rope(l[0], l[1], None, RopeParams::new(128, mode, 10000.0))),
        flops: None,
        bytes: 2.0 * nbytes(t, &ne) + nbytes(DType::I32, &[ne[2]]),
        weight_bytes: None,
        by_time: false,
    }
}

fn cpy(src: DType, dst: DType, ne: [usize; 2]) -> PerfCase {
    PerfCase {
        name: format!(
            "CPY(type_src={},type_dst={},ne=[{},{},1,1])",
            src.name(),
            dst.name(),
            ne[0],
            ne[1]
        ),
        leaves: vec![leaf(src, &ne, Fill::Uniform), leaf(dst, &ne, Fill::Uniform)],
        build: Box::new(|g, l| g.cpy(l[0], l[1])),
        flops: None,
        bytes: nbytes(src, &ne) + nbytes(dst, &ne),
        weight_bytes: None,
        by_time: false,
    }
}

fn flash_attn(hs: usize, nh: usize, kv: usize, nb: usize) -> PerfCase {
    PerfCase {
        name: format!("FLASH_ATTN_EXT(hsk={hs},hsv={hs},nh={nh},nr=1,kv={kv},nb={nb},type_KV=f16)"),
        leaves: vec![
            leaf(DType::F32, &[hs, nb, nh], Fill::Uniform),
            leaf(DType::F16, &[hs, kv, nh], Fill::Uniform),
            leaf(DType::F16, &[hs, kv, nh], Fill::Uniform),
            leaf(DType::F16, &[kv, nb], Fill::Zeros),
        ],
        build: Box::new(move |g, l| {
            g.flash_attn_ext(
                l[0],
                l[1],
                l[2],
                Some(l[3]),
                1.0 / (hs as f32).sqrt(),
                0.0,
                0.0,
            )
        }),
        // test-backend-ops counts only the two matrix products.
        flops: Some(2.0 * nh as f64 * nb as f64 * (hs + hs) as f64 * kv as f64),
        bytes: 0.0,
        weight_bytes: None,
        by_time: false,
    }
}
