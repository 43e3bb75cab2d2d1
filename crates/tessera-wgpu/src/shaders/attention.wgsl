// attention.wgsl: FLASH_ATTN_EXT, one workgroup of 64 per (head, query, ne3)
// with an online softmax over tiles of 64 keys. Thread l scores key
// t0 + l of a tile; every thread then owns output columns l, l + 64, ...
// (head sizes up to 512). q: src0 (F32), k: src1, v: src2 (F16/F32, or
// Q8_0 when iu.y / iu.z = 1: a quantized cache, read by blocks),
// mask: src3 (F16) when iu.x = 1; sinks: src4 (F32, one per head, at byte
// iu2.x) when iu.w = 1, joining the maximum and the sum after the keys as
// ggml does. fp: scale, max_bias, logit_softcap.

// Value d of the K row at byte `row`.
fn k_val(row: u32, d: u32) -> f32 {
    if (P.iu.y == 1u) {
        return s1_dq(row + (d / 32u) * P.nb_1.x, d % 32u);
    }
    return s1_ld(row + d * P.nb_1.x);
}

// Value e of the V row at byte `row`.
fn v_val(row: u32, e: u32) -> f32 {
    if (P.iu.z == 1u) {
        return s2_dq(row + (e / 32u) * P.nb_2.x, e % 32u);
    }
    return s2_ld(row + e * P.nb_2.x);
}

var<workgroup> score: array<f32, 64>;
var<workgroup> keep: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>) {
    let g = group_index(wid, nwg);
    let n_head = P.ne_0.z;
    let n_q = P.ne_0.y;
    if (g >= n_head * n_q * P.ne_0.w) {
        return;
    }
    let l = lidv.x;
    let ih = g % n_head;
    let iq = (g / n_head) % n_q;
    let i3 = g / (n_head * n_q);
    let dk = P.ne_0.x;
    let dv = P.ne_2.x;
    let n_kv = P.ne_1.y;
    let ik2 = ih / (n_head / P.ne_1.z);
    let q = P.off.y + iq * P.nb_0.y + ih * P.nb_0.z + i3 * P.nb_0.w;
    let kb = P.off.z + ik2 * P.nb_1.z + i3 * P.nb_1.w;
    let vb = P.off.w + ik2 * P.nb_2.z + i3 * P.nb_2.w;
    let mb = P.off2.x + iq * P.nb_3.y + (ih % P.ne_3.z) * P.nb_3.z + (i3 % P.ne_3.w) * P.nb_3.w;
    let slope = alibi_slope(P.fp.y, n_head, ih);
    let cap = P.fp.z;
    var acc: array<f32, 8>;
    var m = 0.0;
    var sum = 0.0;
    var seen = false;
    for (var t0 = 0u; t0 < n_kv; t0 = t0 + 64u) {
        let j = t0 + l;
        var s = 0.0;
        var kept = 0u;
        if (j < n_kv) {
            var mv = 0.0;
            kept = 1u;
            if (P.iu.x == 1u) {
                let mk = s3_ld(mb + j * P.nb_3.x);
                if (is_neg_inf(mk)) {
                    kept = 0u;
                } else {
                    mv = slope * mk;
                }
            }
            if (kept == 1u) {
                var dot = 0.0;
                for (var d = 0u; d < dk; d = d + 1u) {
                    dot = dot + s0_ld(q + d * P.nb_0.x) * k_val(kb + j * P.nb_1.y, d);
                }
                var x = dot * P.fp.x;
                if (cap != 0.0) {
                    x = cap * act_tanh(x / cap);
                }
                s = x + mv;
            }
        }
        score[l] = s;
        keep[l] = kept;
        workgroupBarrier();
        var tmax = m;
        var tany = seen;
        for (var u = 0u; u < 64u; u = u + 1u) {
            if (keep[u] == 1u) {
                tmax = select(score[u], max(tmax, score[u]), tany);
                tany = true;
            }
        }
        if (tany) {
            let corr = select(0.0, exp(m - tmax), seen);
            sum = sum * corr;
            for (var c = 0u; c < 8u; c = c + 1u) {
                acc[c] = acc[c] * corr;
            }
            for (var u = 0u; u < 64u; u = u + 1u) {
                if (keep[u] == 1u) {
                    let w = exp(score[u] - tmax);
                    sum = sum + w;
                    let vrow = vb + (t0 + u) * P.nb_2.y;
                    for (var c = 0u; c < 8u; c = c + 1u) {
                        let e = l + 64u * c;
                        if (e < dv) {
                            acc[c] = acc[c] + w * v_val(vrow, e);
                        }
                    }
                }
            }
            m = tmax;
            seen = true;
        }
        workgroupBarrier();
    }
    if (P.iu.w == 1u) {
        let sk = s4_ld(P.iu2.x + ih * 4u);
        if (!seen) {
            // No key: ggml's M = -inf, S = 0 give S = 1 and a zero row.
            sum = 1.0;
        } else if (sk > m) {
            let ms = exp(m - sk);
            for (var c = 0u; c < 8u; c = c + 1u) {
                acc[c] = acc[c] * ms;
            }
            sum = sum * ms + 1.0;
        } else {
            sum = sum + exp(sk - m);
        }
    }
    let inv = select(0.0, 1.0 / sum, sum != 0.0);
    let o = P.off.x + ih * P.nb_d.y + iq * P.nb_d.z + i3 * P.nb_d.w;
    for (var c = 0u; c < 8u; c = c + 1u) {
        let e = l + 64u * c;
        if (e < dv) {
            d_st(o + e * P.nb_d.x, acc[c] * inv);
        }
    }
}
