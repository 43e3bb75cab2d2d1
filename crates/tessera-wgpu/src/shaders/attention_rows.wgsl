// attention_rows.wgsl: FLASH_ATTN_EXT for F16 K and V of contiguous rows at
// multiples of 4 bytes, dk a multiple of 32 up to 256, dv 32, 64, 128 or
// 256 (the caches of the models people run). Same parameters as
// attention.wgsl (q: src0, k: src1, v: src2, mask: src3 when iu.x = 1,
// sinks: src4 at byte iu2.x when iu.w = 1; fp: scale, max_bias,
// logit_softcap; iu2.w = 1: the row written is also quantized into s5).
// iu2.w = 2 (a long cache and few query rows, attention_split.rs): iu2.z
// workgroups per query row, each on its share of the rounds, write their
// maximum, sum and dv partial outputs (f32) to s5 from byte iu2.y, part p
// of row g at float (g iu2.z + p) (dv + 2); attention_merge.wgsl finishes.
//
// Built so that a thread waits for memory few times: one workgroup of 256
// per query row takes the keys in rounds of 256. Thread t scores key
// 256 r + t (its K row read four words at a time, 32 values a step); the
// round's maximum and the weights' sum come from workgroup reductions; then
// thread t = s G + g (G = dv / 8 groups of 8 values, S = 256 / G key
// subsets) adds the weighted V values of its 8 dimensions for keys s, s + S,
// ... of the round, four rows loaded together. Each thread's partial
// outputs are rescaled as the maximum grows (online softmax) and the S
// subsets are summed through workgroup memory at the end.

const AR_NEG: f32 = -3.0e38;

var<workgroup> ar_q: array<f32, 256>; // the query, then the output row
var<workgroup> ar_w: array<f32, 256>; // the round's weights
var<workgroup> ar_acc: array<f32, 2048>; // S x dv partial outputs

// (Reductions: reduce_tree.wgsl or reduce_subgroup.wgsl, prepended.)

// The query (in ar_q) dotted with the K row at byte `row`, dk values.
fn ar_dot(row: u32, dk: u32) -> f32 {
    var s = vec4<f32>(0.0);
    for (var d = 0u; d < dk; d = d + 32u) {
        let v0 = s1_v4(row + 2u * d);
        let v1 = s1_v4(row + 2u * d + 16u);
        let v2 = s1_v4(row + 2u * d + 32u);
        let v3 = s1_v4(row + 2u * d + 48u);
        let q0 = vec4<f32>(ar_q[d], ar_q[d + 1u], ar_q[d + 2u], ar_q[d + 3u]);
        let q1 = vec4<f32>(ar_q[d + 4u], ar_q[d + 5u], ar_q[d + 6u], ar_q[d + 7u]);
        let q2 = vec4<f32>(ar_q[d + 8u], ar_q[d + 9u], ar_q[d + 10u], ar_q[d + 11u]);
        let q3 = vec4<f32>(ar_q[d + 12u], ar_q[d + 13u], ar_q[d + 14u], ar_q[d + 15u]);
        let q4 = vec4<f32>(ar_q[d + 16u], ar_q[d + 17u], ar_q[d + 18u], ar_q[d + 19u]);
        let q5 = vec4<f32>(ar_q[d + 20u], ar_q[d + 21u], ar_q[d + 22u], ar_q[d + 23u]);
        let q6 = vec4<f32>(ar_q[d + 24u], ar_q[d + 25u], ar_q[d + 26u], ar_q[d + 27u]);
        let q7 = vec4<f32>(ar_q[d + 28u], ar_q[d + 29u], ar_q[d + 30u], ar_q[d + 31u]);
        s = s + q0 * fa_lo(v0) + q1 * fa_hi(v0) + q2 * fa_lo(v1) + q3 * fa_hi(v1)
            + q4 * fa_lo(v2) + q5 * fa_hi(v2) + q6 * fa_lo(v3) + q7 * fa_hi(v3);
    }
    return (s.x + s.y) + (s.z + s.w);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>, lanes: Lanes) {
    lanes_init(lanes);
    let split = P.iu2.w == 2u;
    let parts = select(1u, P.iu2.z, split);
    let g_all = group_index(wid, nwg);
    let g_row = g_all / parts;
    let part = g_all % parts;
    let n_head = P.ne_0.z;
    let n_q = P.ne_0.y;
    // Whole workgroups leave together (the barriers below need them all).
    if (g_row >= n_head * n_q * P.ne_0.w) {
        return;
    }
    let t = lidv.x;
    let ih = g_row % n_head;
    let iq = (g_row / n_head) % n_q;
    let i3 = g_row / (n_head * n_q);
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
    if (t < dk) {
        ar_q[t] = s0_ld(q + t * P.nb_0.x);
    }
    workgroupBarrier();
    let gs = dv / 8u;
    let g = t % gs;
    let sub = t / gs;
    let subs = 256u / gs;
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    var m = AR_NEG;
    var sum = 0.0;
    var seen = false;
    let rounds = (n_kv + 255u) / 256u;
    let per = (rounds + parts - 1u) / parts;
    let r_end = min(rounds, per * (part + 1u));
    for (var r = per * part; r < r_end; r = r + 1u) {
        let j = 256u * r + t;
        var s = AR_NEG;
        var kept = false;
        if (j < n_kv) {
            var mv = 0.0;
            kept = true;
            if (P.iu.x == 1u) {
                let mk = s3_ld(mb + j * P.nb_3.x);
                if (is_neg_inf(mk)) {
                    kept = false;
                } else {
                    mv = slope * mk;
                }
            }
            if (kept) {
                var x = ar_dot(kb + j * P.nb_1.y, dk) * P.fp.x;
                if (cap != 0.0) {
                    x = cap * act_tanh(x / cap);
                }
                s = x + mv;
            }
        }
        let rmax = reduce_max(t, select(AR_NEG, s, kept));
        let any = rmax > AR_NEG;
        let m_new = select(m, select(rmax, max(m, rmax), seen), any);
        let corr = select(1.0, select(0.0, exp(m - m_new), seen), any);
        let w = select(0.0, exp(s - m_new), kept);
        ar_w[t] = w;
        let rsum = reduce_sum(t, w);
        sum = sum * corr + rsum;
        acc_lo = acc_lo * corr;
        acc_hi = acc_hi * corr;
        m = m_new;
        seen = seen || any;
        if (any) {
            // Keys sub, sub + subs, ... of the round: gs of them, four rows
            // loaded together; a zero weight (masked, or past n_kv) adds
            // nothing, whatever its row holds.
            for (var i0 = 0u; i0 < gs; i0 = i0 + 4u) {
                var ws: array<f32, 4>;
                var vs: array<vec4<u32>, 4>;
                for (var k = 0u; k < 4u; k = k + 1u) {
                    let u = sub + subs * (i0 + k);
                    ws[k] = ar_w[u];
                    let key = min(256u * r + u, n_kv - 1u);
                    vs[k] = s2_v4(vb + key * P.nb_2.y + 16u * g);
                }
                for (var k = 0u; k < 4u; k = k + 1u) {
                    if (ws[k] != 0.0) {
                        acc_lo = acc_lo + ws[k] * fa_lo(vs[k]);
                        acc_hi = acc_hi + ws[k] * fa_hi(vs[k]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    // The subsets' partial outputs summed per dimension.
    let at = sub * dv + 8u * g;
    ar_acc[at] = acc_lo.x;
    ar_acc[at + 1u] = acc_lo.y;
    ar_acc[at + 2u] = acc_lo.z;
    ar_acc[at + 3u] = acc_lo.w;
    ar_acc[at + 4u] = acc_hi.x;
    ar_acc[at + 5u] = acc_hi.y;
    ar_acc[at + 6u] = acc_hi.z;
    ar_acc[at + 7u] = acc_hi.w;
    workgroupBarrier();
    if (split) {
        // This part's maximum (AR_NEG: no key), sum and partial outputs.
        let at = (P.iu2.y >> 2u) + (g_row * parts + part) * (dv + 2u);
        if (t == 0u) {
            s5_sw(at, bitcast<u32>(select(AR_NEG, m, seen)));
            s5_sw(at + 1u, bitcast<u32>(sum));
        }
        if (t < dv) {
            var out = 0.0;
            for (var k = 0u; k < subs; k = k + 1u) {
                out = out + ar_acc[k * dv + t];
            }
            s5_sw(at + 2u + t, bitcast<u32>(out));
        }
        return;
    }
    var total = sum;
    var scale_o = 1.0;
    if (P.iu.w == 1u) {
        let f = fa_sink(s4_ld(P.iu2.x + ih * 4u), m, seen, total);
        scale_o = f.x;
        total = f.y;
    }
    let inv = select(0.0, 1.0 / total, total != 0.0);
    let o = P.off.x + ih * P.nb_d.y + iq * P.nb_d.z + i3 * P.nb_d.w;
    if (t < dv) {
        var out = 0.0;
        for (var k = 0u; k < subs; k = k + 1u) {
            out = out + ar_acc[k * dv + t];
        }
        let y = out * scale_o * inv;
        d_st(o + t * P.nb_d.x, y);
        ar_q[t] = y;
    }
    if (P.iu2.w == 1u) {
        // Quantize the row (contiguous, whole blocks of 32) for the integer
        // products, as quant_act.wgsl would: block j of the
        // destination's bytes at byte iu2.y + 32 j, its pair at iu2.z + 8 j.
        workgroupBarrier();
        if (t < dv / 32u) {
            let j = (o - P.off.x) / 128u + t;
            var x: array<f32, 32>;
            for (var e = 0u; e < 32u; e = e + 1u) {
                x[e] = ar_q[32u * t + e];
            }
            s5_q8((P.iu2.y >> 2u) + 8u * j, (P.iu2.z >> 2u) + 2u * j, q8_block(x));
        }
    }
}
