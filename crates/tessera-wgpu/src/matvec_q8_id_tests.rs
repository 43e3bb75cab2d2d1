//! Tests of [`super`]: MUL_MAT_ID by the integer kernel against the f64
//! product of each column's expert's dequantized weights and the
//! activations as the shaders quantize them.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, Stream};

use crate::matvec_q8::tests::{weights, within_rounding_by};

/// One MUL_MAT_ID of `wt` weights (`k` x `m` x `experts`) by activations
/// of `ne11` columns a token (1: every picked expert reads the token's
/// one column, as a layer's gate and up; `used`: one each, as its down
/// product) for `tokens` tokens, `used` experts a token, ids from `rnd`
/// with one out of range each way (clamped, as `matmul_id.wgsl` does):
/// a quantization and one dispatch, each column within float rounding of
/// the f64 product of its expert's rows and its activations as quantized.
fn check(
    dev: &crate::WgpuDevice,
    wt: DType,
    (k, m, experts): (usize, usize, usize),
    (used, ne11, tokens): (usize, usize, usize),
    rnd: &mut impl FnMut() -> f32,
) {
    let mut id: Vec<i32> = (0..used * tokens)
        .map(|_| ((rnd() + 1.0) * 0.5 * experts as f32) as i32 % experts as i32)
        .collect();
    id[0] = experts as i32 + 5;
    let last = id.len() - 1;
    id[last] = -1;
    check_ids(
        dev,
        wt,
        (k, m, experts),
        (used, ne11, tokens),
        &id,
        rnd,
        1e-5,
    );
}

/// [`check`] with these ids (`used` x `tokens`), within `rel` of the
/// products' magnitudes.
pub(crate) fn check_ids(
    dev: &crate::WgpuDevice,
    wt: DType,
    (k, m, experts): (usize, usize, usize),
    (used, ne11, tokens): (usize, usize, usize),
    id: &[i32],
    rnd: &mut impl FnMut() -> f32,
    rel: f64,
) {
    let stream = dev.new_wgpu_stream().unwrap();
    let mut g = Graph::new();
    let a = g.input("a", wt, &[k, m, experts]).unwrap();
    let b = g.input("b", DType::F32, &[k, ne11, tokens]).unwrap();
    let ids = g.input("ids", DType::I32, &[used, tokens]).unwrap();
    let y = g.mul_mat_id(a, b, ids).unwrap();
    g.set_output(y).unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    let (q, deq) = weights(wt, k, m * experts, rnd);
    pl.tensor(&g, a).unwrap().write(0, &q).unwrap();
    let xs: Vec<f32> = (0..k * ne11 * tokens).map(|_| rnd()).collect();
    pl.tensor(&g, b).unwrap().write_f32(&xs).unwrap();
    let bytes: Vec<u8> = id.iter().flat_map(|v| v.to_le_bytes()).collect();
    pl.tensor(&g, ids).unwrap().write(0, &bytes).unwrap();
    let before = crate::batch::counts::now().0;
    let tiled = crate::matmul_q8_id::RECORDED.with(|c| c.get());
    stream.compute(&g, &pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(dispatches, 2, "{wt}: one quantization, one product");
    assert_eq!(
        crate::matmul_q8_id::RECORDED.with(|c| c.get()) - tiled,
        u64::from(crate::matmul_q8_id::takes(tokens, used, experts)),
        "{wt}, {tokens} tokens: by the tiled kernel where it takes them"
    );
    let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
    for t in 0..tokens {
        for e in 0..used {
            let x = id[t * used + e].clamp(0, experts as i32 - 1) as usize;
            let c = e % ne11 + ne11 * t;
            let col = &got[(t * used + e) * m..][..m];
            let what = format!("{wt} token {t} slot {e} (expert {x})");
            let w = &deq[x * m * k..(x + 1) * m * k];
            within_rounding_by(w, &xs[c * k..(c + 1) * k], col, (k, m, 1), &what, rel);
        }
    }
}

/// Every weight type the integer kernels take, as a layer's gate and up
/// (one column a token) and as its down product (a column an expert), 1
/// and 3 tokens, rows that end mid-workgroup; also as devices of other
/// subgroup sizes run it (1 and 32 rows a workgroup).
#[test]
fn expert_products_are_within_float_rounding_of_the_quantized_product() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    if dev.subgroup_size().is_none() {
        eprintln!("skipped: the device has no subgroup operations (the kernel needs them)");
        return;
    }
    super::force(Some(true));
    crate::matvec_q8::force(Some(true));
    let mut values = crate::test_values(53);
    let mut rnd = move || values.next().unwrap();
    for rows in [None, Some(1), Some(32)] {
        crate::subgroups::force_rows(rows);
        for wt in crate::matvec_q8::TYPES {
            let k = if wt.block_size() == 32 { 288 } else { 256 };
            check(&dev, wt, (k, 37, 6), (3, 1, 1), &mut rnd);
            check(&dev, wt, (k, 70, 5), (2, 2, 3), &mut rnd);
        }
    }
    crate::subgroups::force_rows(None);
    crate::matvec_q8::force(None);
    super::force(None);
}

/// A prompt's expert ids (`used` x `tokens` of `experts`; 420 pairs, more
/// than a workgroup's invocations, so each counts several): slot 0 picks
/// expert 0 (three tiles of columns, the last partial), slot 1 expert 0
/// too every fourth token (a token picking one expert twice: neighbouring
/// pairs of one expert in one invocation's share), else experts 1 and 2 in
/// turn, slot 2 expert 3 or 4; expert 5 no token; expert 6 only through an
/// out-of-range id (99, clamped); the last token's slot 2 expert 0 (-4,
/// clamped).
pub(crate) fn prompt_ids() -> ((usize, usize, usize), Vec<i32>) {
    let (used, tokens, experts) = (3, 140, 7);
    let mut id: Vec<i32> = (0..tokens as i32)
        .flat_map(|t| {
            let second = if t % 4 == 0 { 0 } else { 1 + t % 2 };
            [0, second, 3 + i32::from(t % 3 == 0)]
        })
        .collect();
    id[1] = 99;
    let last = id.len() - 1;
    id[last] = -4;
    ((used, tokens, experts), id)
}

/// Prompts (more than 8 tokens) by the tiled kernel, which gathers each
/// expert's tokens ([`prompt_ids`]): every weight type, gate/up-like and
/// down-like, rows ending mid-tile.
#[test]
fn prompt_products_gather_each_experts_tokens() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    crate::matvec_q8::force(Some(true));
    crate::matmul_q8::force(Some(true));
    crate::matmul_q8_id::force(Some(true));
    crate::coopmat::force(Some(false));
    let mut values = crate::test_values(59);
    let mut rnd = move || values.next().unwrap();
    let ((used, tokens, experts), id) = prompt_ids();
    assert!(crate::matmul_q8_id::takes(tokens, used, experts));
    assert!(!crate::matmul_q8_id::takes(8, 16, 1), "8 tokens");
    assert!(!crate::matmul_q8_id::takes(64, 4, 32), "8 pairs an expert");
    for wt in crate::matvec_q8::TYPES {
        let k = if wt.block_size() == 32 { 288 } else { 256 };
        let dims = [(k, 70, experts), (k, 37, experts)];
        check_ids(&dev, wt, dims[0], (used, 1, tokens), &id, &mut rnd, 1e-5);
        check_ids(&dev, wt, dims[1], (used, used, tokens), &id, &mut rnd, 1e-5);
    }
    crate::coopmat::force(None);
    crate::matmul_q8_id::force(None);
    crate::matmul_q8::force(None);
    crate::matvec_q8::force(None);
    super::force(None);
}
