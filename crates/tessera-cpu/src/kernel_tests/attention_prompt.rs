//! FLASH_ATTN_EXT on prompts: at least `GEMM_MIN_ROWS` rows share a KV
//! head, so the kernel runs its GEMM form (`attention_gemm`) — the same f64
//! reference, tolerances, threads and ISAs as `attention`'s tests, on the
//! shapes that form cuts differently: groups of 64 rows and their last
//! partial one, key blocks skipped or cut on the diagonal, head sizes past
//! one slice of the packed K and not a multiple of a panel, a mask shared
//! by the heads of a query or one per head, and keys hidden from every
//! query whose K and V rows hold NaN.

#![allow(clippy::unwrap_used, clippy::panic)]

use tessera::DType;

use super::attention::{KV_TYPES, Params, Rng, Tensor, check, mask};
use crate::kernels::attention::KV_BLOCK;
use crate::pool::ThreadPool;

/// An F16 mask `[n_kv, n_q_pad, m2, 1]`: `visible(i, j, h)` keys get a bias
/// in `(-amp, amp)`, the others `-inf`.
fn mask_with(
    n_kv: usize,
    n_q: usize,
    m2: usize,
    amp: f32,
    rng: &mut Rng,
    visible: impl Fn(usize, usize, usize) -> bool,
) -> Tensor {
    let pad = n_q.next_multiple_of(8);
    let mut vals = Vec::with_capacity(n_kv * pad * m2);
    for h in 0..m2 {
        for i in 0..pad {
            for j in 0..n_kv {
                vals.push(if visible(i, j, h) {
                    rng.f32() * amp
                } else {
                    f32::NEG_INFINITY
                });
            }
        }
    }
    let mut it = vals.into_iter();
    Tensor::contiguous(DType::F16, [n_kv, pad, m2, 1], || it.next().unwrap())
}

fn params(d: usize) -> Params {
    Params {
        scale: 1.0 / (d as f32).sqrt(),
        max_bias: 0.0,
        softcap: 0.0,
    }
}

#[test]
fn prompt_groups_every_kv_type_with_and_without_a_mask() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(21);
    // 4 query heads per KV head: 160 rows a KV head, groups of 64, 64, 32;
    // 107 keys: a partial last block, and the diagonal inside blocks.
    let (d, n_q, n_kv, n_head, n_head_kv) = (64, 40, 107, 8, 2);
    for (tk, tv) in KV_TYPES {
        let mut q = Tensor::contiguous(DType::F32, [d, n_q, n_head, 1], || rng.f32());
        let mut k = Tensor::contiguous(tk, [d, n_kv, n_head_kv, 1], || rng.f32());
        let mut v = Tensor::contiguous(tv, [d, n_kv, n_head_kv, 1], || rng.f32());
        let mut m = mask(n_kv, n_q, 1, None, 0.5, &mut rng);
        let what = format!("{tk}/{tv} n_q={n_q} n_kv={n_kv}");
        let p = params(d);
        check(&pool, &what, &mut q, &mut k, &mut v, Some(&mut m), p);
        check(
            &pool,
            &format!("{what} no mask"),
            &mut q,
            &mut k,
            &mut v,
            None,
            p,
        );
    }
}

#[test]
fn prompt_groups_alibi_softcap_long_heads_and_a_mask_per_head() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(22);
    // dk 320: two slices of the packed K; dv 40: a partial V panel.
    let (dk, dv, n_q, n_kv, n_head, n_head_kv) = (320, 40, 33, 70, 4, 1);
    for (tk, tv) in [(DType::F16, DType::F16), (DType::F32, DType::F32)] {
        let mut q = Tensor::contiguous(DType::F32, [dk, n_q, n_head, 1], || rng.f32());
        let mut k = Tensor::contiguous(tk, [dk, n_kv, n_head_kv, 1], || rng.f32() * 0.5);
        let mut v = Tensor::contiguous(tv, [dv, n_kv, n_head_kv, 1], || rng.f32());
        for (max_bias, softcap, m2) in [(8.0, 0.0, 1), (0.0, 20.0, 1), (0.0, 0.0, n_head)] {
            // One mask per head (m2 = n_head): the heads of a query do not
            // share mask values; each head hides a different key range.
            let mut m = mask_with(n_kv, n_q, m2, 2.0, &mut rng, |i, j, h| {
                j + n_q <= n_kv + i && !(m2 > 1 && (10 * h..10 * h + 5).contains(&j))
            });
            let p = Params {
                scale: 1.0 / (dk as f32).sqrt(),
                max_bias,
                softcap,
            };
            let what = format!("{tk}/{tv} max_bias {max_bias} softcap {softcap} m2 {m2}");
            check(&pool, &what, &mut q, &mut k, &mut v, Some(&mut m), p);
        }
    }
}

#[test]
fn prompt_groups_skip_keys_hidden_from_every_query() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(23);
    // A square causal prompt: a group of 16 queries sees no key of the
    // blocks after its own, and only part of the block on the diagonal.
    // Key `hidden` is masked for every query and its K and V rows hold NaN:
    // it must not reach any output. Query 5 sees nothing (zeros).
    let (d, n, n_head, n_head_kv) = (48, 150, 4, 1);
    let hidden = KV_BLOCK + 9;
    for (tk, tv) in KV_TYPES {
        let mut q = Tensor::contiguous(DType::F32, [d, n, n_head, 1], || rng.f32());
        let (mut kj, mut vj) = (0, 0);
        let mut k = Tensor::contiguous(tk, [d, n, n_head_kv, 1], || {
            kj += 1;
            if (kj - 1) / d == hidden {
                f32::NAN
            } else {
                rng.f32()
            }
        });
        let mut v = Tensor::contiguous(tv, [d, n, n_head_kv, 1], || {
            vj += 1;
            if (vj - 1) / d == hidden {
                f32::NAN
            } else {
                rng.f32()
            }
        });
        let mut m = mask_with(n, n, 1, 0.5, &mut rng, |i, j, _| {
            j <= i && j != hidden && i != 5
        });
        let what = format!("{tk}/{tv} causal {n}, key {hidden} hidden");
        let want = check(
            &pool,
            &what,
            &mut q,
            &mut k,
            &mut v,
            Some(&mut m),
            params(d),
        );
        assert!(want.iter().all(|x| x.is_finite()), "{what}: reference");
        // Query 5's rows (every head) are zeros in the reference too.
        let row = &want[5 * n_head * d..6 * n_head * d];
        assert!(row.iter().all(|&x| x == 0.0), "{what}: hidden query");
    }
}

#[test]
fn prompt_groups_with_empty_keys_weigh_by_the_mask_alone() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng(24);
    // dk = 0: every dot product is 0, the weights come from the mask.
    let (dv, n_q, n_kv, n_head) = (16, 40, 70, 4);
    let mut q = Tensor::contiguous(DType::F32, [0, n_q, n_head, 1], || rng.f32());
    let mut k = Tensor::contiguous(DType::F16, [0, n_kv, 1, 1], || rng.f32());
    let mut v = Tensor::contiguous(DType::F16, [dv, n_kv, 1, 1], || rng.f32());
    let mut m = mask(n_kv, n_q, 1, None, 2.0, &mut rng);
    check(
        &pool,
        "dk 0",
        &mut q,
        &mut k,
        &mut v,
        Some(&mut m),
        params(1),
    );
}
