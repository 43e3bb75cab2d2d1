//! ggml's figures recorded on **another machine**: a 2 vCPU AMD EPYC (Zen 3,
//! AVX2 only), 2 threads, from `shared/reference/perf-anchors.md` (upstream
//! `test-backend-ops` perf mode, "the better of its default and LLAMAFILE
//! builds", ggml d99724f2, median of 3 clean runs).
//!
//! They are not measurements of the machine running the bench, so they are
//! never turned into a ratio: `bench ops` prints them labelled with where
//! they come from, and a ratio only against ggml measured live on the same
//! machine (`--ggml`). A few figures were not recorded for the exact case
//! and are estimated from neighbouring ones ([`Anchor::estimate`]).

/// Where the recorded figures come from, for labels.
pub const RECORDED_ON: &str = "AMD EPYC (Zen 3), 2 vCPU, 2 threads";

/// One recorded figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anchor {
    /// ggml's figure in the case's own unit (GFLOPS or GB/s), or µs per op
    /// for the cases compared by time (GET_ROWS, graph overhead).
    pub value: f64,
    /// `Some(how)` when the figure is not a measurement of this exact case.
    pub estimate: Option<&'static str>,
}

/// ggml's recorded figure for a case.
pub fn ggml_figure(case: &str) -> Option<Anchor> {
    ANCHORS
        .iter()
        .find(|(name, _)| *name == case)
        .map(|&(_, value)| Anchor {
            value,
            estimate: ESTIMATES
                .iter()
                .find(|(name, _)| *name == case)
                .map(|&(_, how)| how),
        })
}

/// The names of every case with a recorded figure (estimated or not).
#[cfg(test)]
pub fn names() -> impl Iterator<Item = &'static str> {
    ANCHORS
        .iter()
        .map(|&(n, _)| n)
        .chain(ESTIMATES.iter().map(|&(n, _)| n))
}

/// Figures that are not measurements of the exact case: (case, how).
const ESTIMATES: &[(&str, &str)] = &[
    (
        "ROPE(type=f32,ne=[64,8,512,1],n_dims=64,mode=2)",
        "middle of ggml's 7.8-12.7 GB/s over its NeoX cases",
    ),
    (
        "ROPE(type=f16,ne=[128,32,512,1],n_dims=128,mode=0)",
        "converted from 5274 us/run",
    ),
    (
        "FLASH_ATTN_EXT(hsk=128,hsv=128,nh=8,nr23=[4,1],kv=4096,nb=1,type_KV=f16)",
        "top of ggml's 16.3-19.0 GFLOPS over its f16 head-size-128 decode cases",
    ),
    (
        "CPY(type_src=f32,type_dst=q4_0,ne=[8192,512,2,1])",
        "the shape of ggml's case was not recorded",
    ),
    (
        "CPY(type_src=q4_0,type_dst=f32,ne=[8192,512,2,1])",
        "the shape of ggml's case was not recorded",
    ),
];

/// (case name, figure). Names match `cases.rs` exactly.
const ANCHORS: &[(&str, f64)] = &[
    ("MUL_MAT(type_a=f32,type_b=f32,m=4096,n=1,k=14336)", 12.64),
    ("MUL_MAT(type_a=f16,type_b=f32,m=4096,n=1,k=14336)", 21.30),
    ("MUL_MAT(type_a=q8_0,type_b=f32,m=4096,n=1,k=14336)", 33.99),
    ("MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=1,k=14336)", 48.72),
    ("MUL_MAT(type_a=q4_K,type_b=f32,m=4096,n=1,k=14336)", 53.49),
    ("MUL_MAT(type_a=f32,type_b=f32,m=4096,n=8,k=14336)", 62.72),
    ("MUL_MAT(type_a=f16,type_b=f32,m=4096,n=8,k=14336)", 112.48),
    ("MUL_MAT(type_a=q8_0,type_b=f32,m=4096,n=8,k=14336)", 82.83),
    ("MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=8,k=14336)", 80.46),
    ("MUL_MAT(type_a=q4_K,type_b=f32,m=4096,n=8,k=14336)", 84.48),
    (
        "MUL_MAT(type_a=f32,type_b=f32,m=4096,n=512,k=14336)",
        102.89,
    ),
    (
        "MUL_MAT(type_a=f16,type_b=f32,m=4096,n=512,k=14336)",
        151.22,
    ),
    (
        "MUL_MAT(type_a=q8_0,type_b=f32,m=4096,n=512,k=14336)",
        100.85,
    ),
    (
        "MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=512,k=14336)",
        83.30,
    ),
    (
        "MUL_MAT(type_a=q4_K,type_b=f32,m=4096,n=512,k=14336)",
        83.30,
    ),
    ("ADD(type=f32,ne=[4096,512,1,1],nr=[1,1,1,1])", 54.11),
    ("ADD(type=f32,ne=[4096,1,1,1],nr=[1,512,1,1])", 112.72),
    ("ADD(type=f32,ne=[4096,4096,1,1],nr=[1,1,1,1])", 20.96),
    ("MUL(type=f32,ne=[4096,512,1,1],nr=[1,1,1,1])", 43.32),
    ("MUL(type=f32,ne=[4096,1,1,1],nr=[1,512,1,1])", 75.94),
    ("RMS_NORM(type=f32,ne=[4096,512,1,1],eps=1e-6)", 9.57),
    ("RMS_NORM(type=f32,ne=[4096,4096,1,1],eps=1e-6)", 8.65),
    ("SOFT_MAX(type=f32,ne=[4096,4096,5,1],mask=0,scale=1)", 5.31),
    ("ROPE(type=f32,ne=[128,32,512,1],n_dims=128,mode=0)", 26.65),
    // Estimated or converted: see ESTIMATES.
    ("ROPE(type=f32,ne=[64,8,512,1],n_dims=64,mode=2)", 10.0),
    ("ROPE(type=f16,ne=[128,32,512,1],n_dims=128,mode=0)", 1.48),
    ("CPY(type_src=f32,type_dst=f16,ne=[512,3072,1,1])", 3.63),
    ("CPY(type_src=f32,type_dst=q4_0,ne=[8192,512,2,1])", 3.47),
    ("CPY(type_src=q4_0,type_dst=f32,ne=[8192,512,2,1])", 4.84),
    (
        "FLASH_ATTN_EXT(hsk=128,hsv=128,nh=8,nr23=[4,1],kv=4096,nb=1,type_KV=f16)",
        19.0,
    ),
    // GET_ROWS from a 4096 x 32000 table: microseconds per op (lower is better).
    ("GET_ROWS(type=f32,n=4096,m=32000,r=1)", 0.53),
    ("GET_ROWS(type=f32,n=4096,m=32000,r=512)", 709.0),
    ("GET_ROWS(type=f16,n=4096,m=32000,r=1)", 0.37),
    ("GET_ROWS(type=f16,n=4096,m=32000,r=512)", 369.9),
    ("GET_ROWS(type=q8_0,n=4096,m=32000,r=1)", 0.79),
    ("GET_ROWS(type=q8_0,n=4096,m=32000,r=512)", 639.0),
    ("GET_ROWS(type=q4_0,n=4096,m=32000,r=1)", 2.92),
    ("GET_ROWS(type=q4_0,n=4096,m=32000,r=512)", 1621.7),
    ("GRAPH_OVERHEAD(op=ADD,ne=16,nodes=1000,threads=1)", 0.09),
    ("GRAPH_OVERHEAD(op=ADD,ne=16,nodes=1000,threads=2)", 0.41),
];
