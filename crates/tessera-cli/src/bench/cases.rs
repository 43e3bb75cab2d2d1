//! The benchmark cases: the shapes and parameters of ggml's test-backend-ops
//! perf mode (its stock cases where one exists, else the ones in
//! `shared/reference/perf-anchors.md`), so the figures compare directly.
//! `scripts/ggml-bench/patch_cases.py` adds exactly these cases to a
//! throw-away test-backend-ops for live comparison: keep the two in step.

use tessera::{DType, Graph, Result, RopeMode, RopeParams, TensorId};

/// How a leaf is filled before the benchmark.
#[derive(Clone, Copy, Debug)]
pub enum Fill {
    /// Uniform random values in [-1, 1] (quantized for quantized types).
    Uniform,
    /// Positions `0..n` (I32).
    Positions,
    /// An F16 mask of zeros.
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
    /// The same case in ggml's words: op name and the `key=value` pairs its
    /// test-backend-ops case name must contain (`MUL_MAT|type_a=q4_0,n=1,...`).
    pub ggml: String,
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
    /// Compared with ggml's built-in figure by time per op (its GB/s is not
    /// meaningful for this case) rather than by throughput.
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

fn base(name: String, ggml: String, leaves: Vec<Leaf>, build: BuildFn, bytes: f64) -> PerfCase {
    PerfCase {
        name,
        ggml,
        leaves,
        build,
        flops: None,
        bytes,
        weight_bytes: None,
        by_time: false,
    }
}

/// Every case, in print order.
pub fn all_cases() -> Vec<PerfCase> {
    let mut v = Vec::new();
    for n in [1usize, 8, 512] {
        for t in [
            DType::F32,
            DType::F16,
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q2K,
            DType::Q3K,
            DType::Q4K,
            DType::Q5K,
            DType::IQ4NL,
            DType::IQ4XS,
        ] {
            v.push(mul_mat(t, 4096, n, 14336));
        }
    }
    // Qwen3 30B-A3B's expert products (128 experts of 768 x 2048, 8 a
    // token): decoding, a small batch, a prompt.
    for n in [1usize, 32, 512] {
        for t in [DType::Q8_0, DType::Q4_0, DType::Q4K, DType::Q6K] {
            v.push(mul_mat_id(t, (128, 8), 768, n, 2048));
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
    v.push(rope(DType::F32, [128, 32, 512], 128, RopeMode::Normal));
    v.push(rope(DType::F32, [64, 8, 512], 64, RopeMode::Neox));
    v.push(rope(DType::F16, [128, 32, 512], 128, RopeMode::Normal));
    v.push(cpy(DType::F32, DType::F16, [512, 3072, 1]));
    v.push(cpy(DType::F32, DType::Q8_0, [8192, 512, 2]));
    v.push(cpy(DType::F32, DType::Q4_0, [8192, 512, 2]));
    v.push(cpy(DType::Q4_0, DType::F32, [8192, 512, 2]));
    v.push(flash_attn(128, 8, 4, 4096, 1));
    // Prompts: a 1B Llama's and Gemma 3 270M's heads, 512 queries.
    v.push(flash_attn(64, 8, 4, 512, 512));
    v.push(flash_attn(256, 1, 4, 512, 512));
    for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
        for r in [1, 512] {
            v.push(get_rows(t, 4096, 32000, r));
        }
    }
    v
}

pub fn mul_mat(t: DType, m: usize, n: usize, k: usize) -> PerfCase {
    let name = format!("MUL_MAT(type_a={},type_b=f32,m={m},n={n},k={k})", t.name());
    let ggml = format!(
        "MUL_MAT|type_a={},type_b=f32,m={m},n={n},k={k},bs=[1,1],nr=[1,1]",
        t.name()
    );
    PerfCase {
        flops: Some(2.0 * m as f64 * n as f64 * k as f64),
        weight_bytes: Some(nbytes(t, &[k, m])),
        ..base(
            name,
            ggml,
            vec![
                leaf(t, &[k, m], Fill::Uniform),
                leaf(DType::F32, &[k, n], Fill::Uniform),
            ],
            Box::new(|g, l| g.mul_mat(l[0], l[1])),
            nbytes(t, &[k, m]) + nbytes(DType::F32, &[k, n]) + nbytes(DType::F32, &[m, n]),
        )
    }
}

/// MUL_MAT_ID of `experts = (n_mats, n_used)`: `n` tokens, each by
/// `n_used` distinct experts of `m x k` weights.
pub fn mul_mat_id(
    t: DType,
    (mats, used): (usize, usize),
    m: usize,
    n: usize,
    k: usize,
) -> PerfCase {
    let shape = format!("n_mats={mats},n_used={used},b=0,m={m},n={n},k={k}");
    let name = format!("MUL_MAT_ID(type_a={},type_b=f32,{shape})", t.name());
    let ggml = format!("MUL_MAT_ID|type_a={},type_b=f32,{shape}", t.name());
    // The weights read: each expert's once at most (ggml counts them so
    // for its bandwidth too).
    let read = mats.min(n * used);
    PerfCase {
        flops: Some(2.0 * m as f64 * n as f64 * k as f64 * used as f64),
        weight_bytes: Some(nbytes(t, &[k, m, read])),
        ..base(
            name,
            ggml,
            vec![
                leaf(t, &[k, m, mats], Fill::Uniform),
                leaf(DType::F32, &[k, used, n], Fill::Uniform),
                // Distinct ids a token: the hash is a bijection modulo a
                // power of two.
                leaf(DType::I32, &[used, n], Fill::Ids(mats)),
            ],
            Box::new(|g, l| g.mul_mat_id(l[0], l[1], l[2])),
            nbytes(t, &[k, m, read])
                + nbytes(DType::F32, &[k, used, n])
                + nbytes(DType::F32, &[m, used, n]),
        )
    }
}

fn binary(op: &'static str, ne: [usize; 2], nr: [usize; 2]) -> PerfCase {
    let full = [ne[0] * nr[0], ne[1] * nr[1]];
    let shape = format!("ne=[{},{},1,1],nr=[{},{},1,1]", ne[0], ne[1], nr[0], nr[1]);
    base(
        format!("{op}(type=f32,{shape})"),
        format!("{op}|type=f32,{shape}"),
        vec![
            leaf(DType::F32, &full, Fill::Uniform),
            leaf(DType::F32, &ne, Fill::Uniform),
        ],
        Box::new(move |g, l| {
            if op == "ADD" {
                g.add(l[0], l[1])
            } else {
                g.mul(l[0], l[1])
            }
        }),
        // test-backend-ops counts 3 x dst for binary broadcasts.
        3.0 * nbytes(DType::F32, &full),
    )
}

fn rms_norm(ne: [usize; 2]) -> PerfCase {
    let shape = format!("ne=[{},{},1,1]", ne[0], ne[1]);
    base(
        format!("RMS_NORM(type=f32,{shape},eps=1e-6)"),
        format!("RMS_NORM|type=f32,{shape},v=0"),
        vec![leaf(DType::F32, &ne, Fill::Uniform)],
        Box::new(|g, l| g.rms_norm(l[0], 1e-6)),
        2.0 * nbytes(DType::F32, &ne),
    )
}

fn soft_max(ne: [usize; 3]) -> PerfCase {
    let shape = format!("ne=[{},{},{},1]", ne[0], ne[1], ne[2]);
    base(
        format!("SOFT_MAX(type=f32,{shape},mask=0,scale=1)"),
        format!("SOFT_MAX|type=f32,{shape},mask=0,sinks=0"),
        vec![leaf(DType::F32, &ne, Fill::Uniform)],
        Box::new(|g, l| g.soft_max(l[0])),
        2.0 * nbytes(DType::F32, &ne),
    )
}

fn rope(t: DType, ne: [usize; 3], n_dims: usize, mode: RopeMode) -> PerfCase {
    let shape = format!("ne=[{},{},{},1]", ne[0], ne[1], ne[2]);
    let m = mode.ggml_mode();
    base(
        format!("ROPE(type={},{shape},n_dims={n_dims},mode={m})", t.name()),
        format!(
            "ROPE|type={},ne_a=[{},{},{},1],n_dims={n_dims},mode={m},v=0",
            t.name(),
            ne[0],
            ne[1],
            ne[2]
        ),
        vec![
            leaf(t, &ne, Fill::Uniform),
            leaf(DType::I32, &[ne[2]], Fill::Positions),
        ],
        Box::new(move |g, l| g.rope(l[0], l[1], None, RopeParams::new(n_dims, mode, 10000.0))),
        2.0 * nbytes(t, &ne) + nbytes(DType::I32, &[ne[2]]),
    )
}

fn cpy(src: DType, dst: DType, ne: [usize; 3]) -> PerfCase {
    let shape = format!("[{},{},{},1]", ne[0], ne[1], ne[2]);
    base(
        format!(
            "CPY(type_src={},type_dst={},ne={shape})",
            src.name(),
            dst.name()
        ),
        format!(
            "CPY|type_src={},type_dst={},ne_src={shape}",
            src.name(),
            dst.name()
        ),
        vec![leaf(src, &ne, Fill::Uniform), leaf(dst, &ne, Fill::Uniform)],
        Box::new(|g, l| g.cpy(l[0], l[1])),
        nbytes(src, &ne) + nbytes(dst, &ne),
    )
}

/// Attention of `nb` queries over `kv` keys: `nh_kv` KV heads, `nr` query
/// heads per KV head.
fn flash_attn(hs: usize, nh_kv: usize, nr: usize, kv: usize, nb: usize) -> PerfCase {
    let nh = nh_kv * nr;
    let params = format!("hsk={hs},hsv={hs},nh={nh_kv},nr23=[{nr},1],kv={kv},nb={nb}");
    PerfCase {
        // test-backend-ops counts only the two matrix products.
        flops: Some(2.0 * nh as f64 * nb as f64 * (hs + hs) as f64 * kv as f64),
        ..base(
            format!("FLASH_ATTN_EXT({params},type_KV=f16)"),
            format!("FLASH_ATTN_EXT|{params},mask=1,sinks=0,type_K=f16,type_V=f16"),
            vec![
                leaf(DType::F32, &[hs, nb, nh], Fill::Uniform),
                leaf(DType::F16, &[hs, kv, nh_kv], Fill::Uniform),
                leaf(DType::F16, &[hs, kv, nh_kv], Fill::Uniform),
                leaf(DType::F16, &[kv, nb], Fill::Zeros),
            ],
            Box::new(move |g, l| {
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
            0.0,
        )
    }
}

fn get_rows(t: DType, n: usize, m: usize, r: usize) -> PerfCase {
    PerfCase {
        by_time: true,
        ..base(
            format!("GET_ROWS(type={},n={n},m={m},r={r})", t.name()),
            format!(
                "GET_ROWS|type={},n={n},m={m},r={r},be1=1,be2=1,v=0",
                t.name()
            ),
            vec![
                leaf(t, &[n, m], Fill::Uniform),
                leaf(DType::I32, &[r], Fill::Ids(m)),
            ],
            Box::new(|g, l| g.get_rows(l[0], l[1])),
            // The rows read and written (ggml counts the whole table instead).
            r as f64 * (nbytes(t, &[n]) + nbytes(DType::F32, &[n])),
        )
    }
}
