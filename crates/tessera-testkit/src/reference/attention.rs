//! FLASH_ATTN_EXT in the reference: for query `iq1` of head `iq2` in batch
//! `iq3`, over the keys of KV head `iq2 / (n_head / n_head_kv)` (grouped-query
//! attention):
//!
//! `s_j = softcap(scale * q . k_j) + slope * mask[j, iq1, iq2 % m2, iq3 % m3]`,
//! where `softcap(x) = c * tanh(x / c)` when `logit_softcap = c > 0`, keys whose
//! masked bias is `-inf` are skipped, and the output `softmax(s) . V` goes to
//! `dst[:, iq2, iq1, iq3]` (`[dv, n_head, n_q, ne3]`, heads and queries swapped
//! as in ggml). Sinks (optional, one logit per query head) join the maximum
//! and the sum as a key with a zero value row. Computed in f64 from the stored K/V values and the exact Q
//! (a device may round Q to K's type first; the 5e-4 tolerance covers that).

use tessera::{Error, Result};

use super::memory::Dense;
use super::scalar::alibi_slope;

/// Parameters of FLASH_ATTN_EXT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams {
    /// Logit scale.
    pub scale: f64,
    /// ALiBi maximum bias (0 = none).
    pub max_bias: f64,
    /// Soft cap `c` (0 = none).
    pub logit_softcap: f64,
}

/// Fused attention of `q` `[d, n_q, n_head, ne3]` over `k` `[d, n_kv, n_kv_head, ne3]`
/// and `v` `[dv, n_kv, n_kv_head, ne3]` with an optional `mask` `[n_kv, >= n_q, m2, m3]`.
pub fn flash_attn_ext(
    q: &Dense,
    k: &Dense,
    v: &Dense,
    mask: Option<&Dense>,
    p: AttnParams,
) -> Result<Dense> {
    flash_attn_ext_sinks(q, k, v, mask, None, p)
}

/// [`flash_attn_ext`] with attention sinks (ggml's
/// `ggml_flash_attn_ext_add_sinks`): `sinks` holds one logit per query head.
pub fn flash_attn_ext_sinks(
    q: &Dense,
    k: &Dense,
    v: &Dense,
    mask: Option<&Dense>,
    sinks: Option<&Dense>,
    p: AttnParams,
) -> Result<Dense> {
    if let Some(s) = sinks.filter(|s| s.data.len() != q.ne[2]) {
        return Err(Error::op(
            "FLASH_ATTN_EXT",
            format!(
                "sinks {:?} must hold one logit per head of q {:?}",
                s.ne, q.ne
            ),
        ));
    }
    let (d, n_q, n_head, ne3) = (q.ne[0], q.ne[1], q.ne[2], q.ne[3]);
    let (n_kv, n_kv_head, dv) = (k.ne[1], k.ne[2], v.ne[0]);
    let fits = k.ne[0] == d
        && v.ne[1] == n_kv
        && v.ne[2] == n_kv_head
        && n_kv_head > 0
        && n_head % n_kv_head == 0
        && k.ne[3] == ne3
        && v.ne[3] == ne3
        && mask.is_none_or(|m| {
            m.ne[0] == n_kv
                && m.ne[1] >= n_q
                && m.ne[2] > 0
                && m.ne[3] > 0
                && n_head % m.ne[2] == 0
                && ne3 % m.ne[3] == 0
        });
    if !fits {
        return Err(Error::op(
            "FLASH_ATTN_EXT",
            format!(
                "q {:?}, k {:?}, v {:?}, mask {:?} do not fit",
                q.ne,
                k.ne,
                v.ne,
                mask.map(|m| m.ne)
            ),
        ));
    }
    let group = n_head / n_kv_head;
    let mut out = Dense::zeros([dv, n_head, n_q, ne3])?;
    let mut s = vec![0.0f64; n_kv];
    let mut keep = vec![false; n_kv];
    for iq3 in 0..ne3 {
        for iq2 in 0..n_head {
            let slope = alibi_slope(p.max_bias, n_head, iq2);
            let ik2 = iq2 / group;
            for iq1 in 0..n_q {
                let qrow = q.row(iq1, iq2, iq3);
                let mrow = mask.map(|m| m.row(iq1, iq2 % m.ne[2], iq3 % m.ne[3]));
                let mut max = f64::NEG_INFINITY;
                for j in 0..n_kv {
                    let mv = mrow.map_or(0.0, |m| slope * m[j]);
                    keep[j] = mv != f64::NEG_INFINITY;
                    if !keep[j] {
                        continue;
                    }
                    let dot: f64 = qrow
                        .iter()
                        .zip(k.row(j, ik2, iq3))
                        .map(|(a, b)| a * b)
                        .sum();
                    let mut x = dot * p.scale;
                    if p.logit_softcap != 0.0 {
                        x = p.logit_softcap * (x / p.logit_softcap).tanh();
                    }
                    s[j] = x + mv;
                    max = max.max(s[j]);
                }
                let sink = sinks.map(|sk| sk.data[iq2]);
                if let Some(sk) = sink {
                    max = max.max(sk);
                }
                let start = out.flat([0, iq2, iq1, iq3]);
                let o = &mut out.data[start..start + dv];
                let mut sum = sink.map_or(0.0, |sk| (sk - max).exp());
                for j in (0..n_kv).filter(|&j| keep[j]) {
                    let w = (s[j] - max).exp();
                    sum += w;
                    for (oi, vi) in o.iter_mut().zip(v.row(j, ik2, iq3)) {
                        *oi += w * vi;
                    }
                }
                // A fully masked row has no weights: ggml writes zeros.
                let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                o.iter_mut().for_each(|x| *x *= inv);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn d(ne: [usize; 4], v: &[f64]) -> Dense {
        Dense::from_vec(ne, v.to_vec()).unwrap()
    }

    const PLAIN: AttnParams = AttnParams {
        scale: 1.0,
        max_bias: 0.0,
        logit_softcap: 0.0,
    };

    #[test]
    fn one_query_two_keys_by_hand() {
        // q = [1, 0]; keys [1, 0] and [0, 1]: scores 1 and 0.
        let q = d([2, 1, 1, 1], &[1.0, 0.0]);
        let k = d([2, 2, 1, 1], &[1.0, 0.0, 0.0, 1.0]);
        let v = d([1, 2, 1, 1], &[10.0, 20.0]);
        let o = flash_attn_ext(&q, &k, &v, None, PLAIN).unwrap();
        let w = [1f64.exp(), 1.0];
        let want = (10.0 * w[0] + 20.0 * w[1]) / (w[0] + w[1]);
        assert!((o.data[0] - want).abs() < 1e-12);
        // Masking key 0 leaves v1.
        let m = d([2, 1, 1, 1], &[f64::NEG_INFINITY, 0.0]);
        let o = flash_attn_ext(&q, &k, &v, Some(&m), PLAIN).unwrap();
        assert_eq!(o.data[0], 20.0);
        // Soft cap c = 0.5 turns score 1 into 0.5 tanh(2).
        let p = AttnParams {
            logit_softcap: 0.5,
            ..PLAIN
        };
        let o = flash_attn_ext(&q, &k, &v, None, p).unwrap();
        let w0 = (0.5 * 2f64.tanh()).exp();
        assert!((o.data[0] - (10.0 * w0 + 20.0) / (w0 + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn grouped_query_heads_share_kv_and_output_is_head_major() {
        // q [1, n_q = 2, n_head = 2]: q[iq1, h] = 1 + iq1 + 2h; one KV head
        // with keys [1, -1] and values [10, 20].
        let q = d([1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let k = d([1, 2, 1, 1], &[1.0, -1.0]);
        let v = d([1, 2, 1, 1], &[10.0, 20.0]);
        let o = flash_attn_ext(&q, &k, &v, None, PLAIN).unwrap();
        assert_eq!(o.ne, [1, 2, 2, 1]);
        for h in 0..2 {
            for iq1 in 0..2 {
                let x = (1 + iq1 + 2 * h) as f64;
                let (w0, w1) = (x.exp(), (-x).exp());
                let want = (10.0 * w0 + 20.0 * w1) / (w0 + w1);
                // dst[:, head, query]
                assert!((o.get([0, h, iq1, 0]).unwrap() - want).abs() < 1e-12);
            }
        }
        let bad = d([1, 2, 3, 1], &[1.0; 6]);
        assert!(flash_attn_ext(&q, &bad, &bad, None, PLAIN).is_err());
    }

    #[test]
    fn sinks_weigh_a_zero_value_row() {
        // One key with score 0 and value 2, sink 0: 2 * 1 / (1 + 1).
        let q = d([1, 1, 1, 1], &[0.0]);
        let k = d([1, 1, 1, 1], &[1.0]);
        let v = d([1, 1, 1, 1], &[2.0]);
        let sk = d([1, 1, 1, 1], &[0.0]);
        let o = flash_attn_ext_sinks(&q, &k, &v, None, Some(&sk), PLAIN).unwrap();
        assert!((o.data[0] - 1.0).abs() < 1e-15, "{:?}", o.data);
        // A fully masked row with a sink is zero (ggml: S = 1, no values).
        let m = d([1, 1, 1, 1], &[f64::NEG_INFINITY]);
        let o = flash_attn_ext_sinks(&q, &k, &v, Some(&m), Some(&sk), PLAIN).unwrap();
        assert_eq!(o.data, vec![0.0]);
        let two = d([2, 1, 1, 1], &[0.0, 0.0]);
        assert!(flash_attn_ext_sinks(&q, &k, &v, None, Some(&two), PLAIN).is_err());
    }
}
