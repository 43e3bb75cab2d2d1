//! MUL_MAT_ID whose experts have many tokens (a prompt's) through the
//! packed GEMM (`kernels/matmul/id_gemm.rs`), end to end on a CPU stream:
//! experts with many columns take the GEMM (from 8 columns here; over 256
//! columns or 1,024 rows in several calls), one with few the tile kernels, one none; an expert
//! picked twice by each token; activations per slot and broadcast; and
//! decoding's one-column experts; against an f64 product of the
//! dequantized weights, on 1 to 3 threads; experts with a few columns
//! through the tile kernels by large units.
//! Tolerances (NMSE) as `tests/gemm.rs`'s.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, place};
use tessera::{DType, Graph, quant};

/// The weight types of both tests: float, the integer GEMM's block
/// families (32- and 256-value blocks) and a table type.
const TYPES: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4K,
    DType::Q6K,
    DType::IQ4XS,
];

fn tolerance(t: DType) -> f64 {
    match t {
        DType::F32 => 1e-10,
        DType::F16 => 1e-6,
        _ => 5e-4,
    }
}

fn nmse(got: &[f64], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

/// `as [k, m, experts]` of type `t` by `b [k, ne11, tokens]` with 2 slots
/// a token: slot 0 of every token to expert 0 (all `tokens` columns),
/// slot 1 to experts 1..=3 in turn but every 16th token to expert 4 (a
/// few columns: the tile kernels); expert 5 gets none.
fn check(t: DType, k: usize, m: usize, ne11: usize, tokens: usize) {
    let route = |tok: usize, slot: usize| match slot {
        0 => 0,
        _ if tok % 16 == 5 => 4,
        _ => 1 + tok % 3,
    };
    check_routed(t, (k, m), ne11, tokens, (6, 2), route);
}

/// `as [k, m, experts]` of type `t` by `b [k, ne11, tokens]`, `used` slots
/// a token, slot `s` of token `tok` to expert `route(tok, s)`: against
/// the f64 product, on 1 to 3 threads.
fn check_routed(
    t: DType,
    (k, m): (usize, usize),
    ne11: usize,
    tokens: usize,
    (experts, used): (usize, usize),
    route: impl Fn(usize, usize) -> usize,
) {
    let mut rng = Rng::new((k * 13 + m * 5 + tokens) as u64);
    let mut g = Graph::new();
    let a = g.new_tensor(t, &[k, m, experts]).unwrap();
    let b = g.new_tensor(DType::F32, &[k, ne11, tokens]).unwrap();
    let ids = g.new_tensor(DType::I32, &[used, tokens]).unwrap();
    let out = g.mul_mat_id(a, b, ids).unwrap();
    let r = place(g);
    let row_bytes = t.row_size(k).unwrap();
    let mut a_bytes = vec![0u8; experts * m * row_bytes];
    let mut a_vals = Vec::with_capacity(experts * m * k);
    for row in a_bytes.chunks_mut(row_bytes) {
        let v: Vec<f32> = rng.vec(k, -1.0, 1.0).iter().map(|&x| x as f32).collect();
        quant::from_f32(t, &v, row).unwrap();
        let mut d = vec![0f32; k];
        quant::to_f32(t, row, &mut d).unwrap();
        a_vals.extend(d.into_iter().map(f64::from));
    }
    r.set_raw(a, &a_bytes);
    let b_vals: Vec<f64> = rng
        .vec(k * ne11 * tokens, -1.0, 1.0)
        .iter()
        .map(|&x| f64::from(x as f32))
        .collect();
    r.set(b, &b_vals);
    let id: Vec<usize> = (0..tokens)
        .flat_map(|tok| (0..used).map(move |slot| (tok, slot)))
        .map(|(tok, slot)| route(tok, slot))
        .collect();
    r.set(ids, &id.iter().map(|&e| e as f64).collect::<Vec<_>>());
    let mut want = Vec::with_capacity(m * used * tokens);
    for tok in 0..tokens {
        for slot in 0..used {
            let e = id[tok * used + slot];
            let col = &b_vals[(tok * ne11 + slot % ne11) * k..][..k];
            for i in 0..m {
                let row = &a_vals[(e * m + i) * k..][..k];
                want.push(row.iter().zip(col).map(|(x, y)| x * y).sum::<f64>());
            }
        }
    }
    for threads in 1..=3 {
        r.compute(threads).unwrap();
        let e = nmse(&r.get(out), &want);
        assert!(
            e <= tolerance(t),
            "{t} k={k} m={m} ne11={ne11} tokens={tokens} used={used} threads={threads}: NMSE {e:e}"
        );
    }
}

#[test]
fn experts_with_many_tokens_take_the_gemm() {
    // Every test here sets the same value (one test): from 8 columns.
    tessera_cpu::tuning::set_gemm_min_cols(Some(8));
    for t in TYPES {
        let k = if t.block_size() == 256 { 512 } else { 320 };
        check(t, k, 37, 1, 48);
        check(t, k, 70, 2, 33);
        // Expert 0's 300 columns: two GEMM calls of 150.
        check(t, k, 21, 2, 300);
        // 1,100 rows: two GEMM calls of 550 rows.
        check(t, k, 1100, 2, 24);
        // Both slots of every token to one expert: 24 columns of 12 tokens
        // (the GEMM, whose area is sized for every pair).
        check_routed(t, (k, 37), 2, 12, (6, 2), |_, _| 0);
    }
}

/// Decoding: one token, 8 of 16 experts, each with one column, takes the
/// one-column kernels by units of up to 512 rows (`unit_rows`): 700 rows
/// are a whole unit and a partial one (fewer for wide rows); two tokens
/// where one expert has both and the others one each; activations per
/// slot and broadcast.
#[test]
fn experts_with_one_column_take_the_one_column_kernels() {
    for t in TYPES {
        let k = if t.block_size() == 256 { 256 } else { 320 };
        let spread = |tok: usize, slot: usize| (tok * 3 + slot * 2) % 16;
        check_routed(t, (k, 700), 8, 1, (16, 8), spread);
        check_routed(t, (k, 700), 1, 1, (16, 8), spread);
        // Token 1's slot 0 goes to token 0's slot 0's expert (0).
        let shared = |tok: usize, slot: usize| if slot == 0 { 0 } else { tok * 7 + slot };
        check_routed(t, (k, 700), 4, 2, (16, 4), shared);
    }
}

/// A few tokens: experts with two to four columns take the tile kernels by
/// units of up to 512 rows (`unit_rows`), 16 rows a call, prefetching the
/// next tiles' short rows (`row_ahead`): 700 rows are a whole unit and a
/// partial one; activations per slot and broadcast.
#[test]
fn experts_with_few_columns_take_the_tiles_by_large_units() {
    for t in TYPES {
        let k = if t.block_size() == 256 { 256 } else { 320 };
        // 6 tokens x 8 slots over 16 experts: 3 columns an expert.
        let spread = |tok: usize, slot: usize| (tok * 5 + slot * 2) % 16;
        check_routed(t, (k, 700), 8, 6, (16, 8), spread);
        check_routed(t, (k, 700), 1, 6, (16, 8), spread);
        // Wider rows (fewer rows a unit: several units an expert).
        check_routed(t, (4 * k, 700), 2, 4, (16, 8), spread);
    }
}
