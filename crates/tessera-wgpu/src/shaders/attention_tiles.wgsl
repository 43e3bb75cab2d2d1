// attention_tiles.wgsl: FLASH_ATTN_EXT for prompts, a block of query rows
// per workgroup sharing each tile of keys (attention_tiles.rs chooses it).
// F16 K and V of contiguous rows at multiples of 4 bytes, dk a multiple of
// 8 no larger than dv, dv = AT_DV (64, 128 or 256: a const prepended).
// Same parameters as attention.wgsl (q: src0, k: src1, v: src2, mask: src3
// when iu.x = 1, sinks: src4 at byte iu2.x when iu.w = 1; fp: scale,
// max_bias, logit_softcap; iu2.w = 1: the rows written are also quantized
// into s5).
//
// attention_rows.wgsl gives each query row its own workgroup, which reads
// every key and value of the cache: a prompt of n tokens reads the cache n
// times. Here a workgroup of 256 takes AT_BQ = 2048 / dv consecutive
// queries of one head (8, 16 or 32), so each K and V row is read once per
// block, and goes through the keys in rounds of 64:
// - scores: thread t scores key t % 64 against AT_QPT = AT_BQ / 4 queries
//   (t / 64 picks which), each K load used AT_QPT times, the queries in
//   workgroup memory; scores of masked keys (or past n_kv, or of query
//   rows past n_q) are AT_NEG;
// - thread t = r G + g (G = dv / 8) then serves query row r of the block
//   and values 8 g .. 8 g + 7: it finds the row's new maximum (each of the
//   row's G threads alike), turns 64 / G of the row's scores into weights,
//   and adds the 64 weighted V rows of its 8 values (four rows loaded
//   together), rescaling its outputs and sum as the maximum grows (online
//   softmax, as attention_rows.wgsl).
// Workgroup memory: the queries (8 KiB) and the round's scores (8 KiB).

const AT_G: u32 = AT_DV / 8u;
const AT_BQ: u32 = 256u / AT_G;
const AT_QPT: u32 = AT_BQ / 4u;
const AT_NEG: f32 = -3.0e38;

var<workgroup> at_q: array<vec4<f32>, 512>; // the block's queries, then its outputs
var<workgroup> at_s: array<f32, 2048>; // AT_BQ x 64 scores, then weights

// Score (row r, key c) in at_s: rows of 64, rotated by r so that threads
// of different rows reading the same key use different banks.
fn at_si(r: u32, c: u32) -> u32 {
    return r * 64u + ((c + r) & 63u);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>) {
    let n_head = P.ne_0.z;
    let n_q = P.ne_0.y;
    let blocks = (n_q + AT_BQ - 1u) / AT_BQ;
    let b = group_index(wid, nwg);
    // Whole workgroups leave together (the barriers below need them all).
    if (b >= n_head * blocks * P.ne_0.w) {
        return;
    }
    let t = lidv.x;
    let ih = b % n_head;
    let q0 = ((b / n_head) % blocks) * AT_BQ;
    let i3 = b / (n_head * blocks);
    let dk = P.ne_0.x;
    let n_kv = P.ne_1.y;
    let ik2 = ih / (n_head / P.ne_1.z);
    let kb = P.off.z + ik2 * P.nb_1.z + i3 * P.nb_1.w;
    let vb = P.off.w + ik2 * P.nb_2.z + i3 * P.nb_2.w;
    let mb = P.off2.x + (ih % P.ne_3.z) * P.nb_3.z + (i3 % P.ne_3.w) * P.nb_3.w;
    let slope = alibi_slope(P.fp.y, n_head, ih);
    let cap = P.fp.z;
    // The block's queries, row r at vector r dk / 4 (rows past n_q: zeros).
    let dk4 = dk / 4u;
    for (var e = t; e < AT_BQ * dk4; e = e + 256u) {
        let iq = q0 + e / dk4;
        var x = vec4<f32>(0.0);
        if (iq < n_q) {
            let a = P.off.y + iq * P.nb_0.y + ih * P.nb_0.z + i3 * P.nb_0.w + 4u * (e % dk4) * P.nb_0.x;
            x = vec4<f32>(s0_ld(a), s0_ld(a + P.nb_0.x), s0_ld(a + 2u * P.nb_0.x), s0_ld(a + 3u * P.nb_0.x));
        }
        at_q[e] = x;
    }
    workgroupBarrier();
    // Scoring: key c of the round against rows qr .. qr + AT_QPT - 1.
    let c = t % 64u;
    let qr = (t / 64u) * AT_QPT;
    // Outputs: row pr of the block, values 8 g .. 8 g + 7.
    let pr = t / AT_G;
    let g = t % AT_G;
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    var m = AT_NEG;
    var sum = 0.0;
    var seen = false;
    let rounds = (n_kv + 63u) / 64u;
    for (var r = 0u; r < rounds; r = r + 1u) {
        let j = 64u * r + c;
        var kept: array<bool, AT_QPT>;
        var bias: array<f32, AT_QPT>;
        var sc: array<f32, AT_QPT>;
        var any_kept = false;
        for (var i = 0u; i < AT_QPT; i = i + 1u) {
            let iq = q0 + qr + i;
            var k = iq < n_q && j < n_kv;
            var mv = 0.0;
            if (k && P.iu.x == 1u) {
                let mk = s3_ld(mb + iq * P.nb_3.y + j * P.nb_3.x);
                if (is_neg_inf(mk)) {
                    k = false;
                } else {
                    mv = slope * mk;
                }
            }
            kept[i] = k;
            bias[i] = mv;
            sc[i] = 0.0;
            any_kept = any_kept || k;
        }
        if (any_kept) {
            let krow = kb + j * P.nb_1.y;
            for (var d = 0u; d < dk; d = d + 8u) {
                let kv = s1_v4(krow + 2u * d);
                let lo = fa_lo(kv);
                let hi = fa_hi(kv);
                for (var i = 0u; i < AT_QPT; i = i + 1u) {
                    let qa = ((qr + i) * dk + d) / 4u;
                    sc[i] = sc[i] + (dot(at_q[qa], lo) + dot(at_q[qa + 1u], hi));
                }
            }
        }
        for (var i = 0u; i < AT_QPT; i = i + 1u) {
            var s = AT_NEG;
            if (kept[i]) {
                var x = sc[i] * P.fp.x;
                if (cap != 0.0) {
                    x = cap * act_tanh(x / cap);
                }
                s = x + bias[i];
            }
            at_s[at_si(qr + i, c)] = s;
        }
        workgroupBarrier();
        // Row pr's maximum over the round (its G threads alike).
        var rmax = AT_NEG;
        for (var u = 0u; u < 64u; u = u + 1u) {
            rmax = max(rmax, at_s[at_si(pr, u)]);
        }
        let any = rmax > AT_NEG;
        let m_new = select(m, select(rmax, max(m, rmax), seen), any);
        let corr = select(1.0, select(0.0, exp(m - m_new), seen), any);
        workgroupBarrier();
        // Scores to weights, 64 / G of the row's per thread.
        if (any) {
            for (var u = g; u < 64u; u = u + AT_G) {
                let at = at_si(pr, u);
                let s = at_s[at];
                at_s[at] = select(0.0, exp(s - m_new), s > AT_NEG);
            }
        }
        workgroupBarrier();
        sum = sum * corr;
        acc_lo = acc_lo * corr;
        acc_hi = acc_hi * corr;
        m = m_new;
        seen = seen || any;
        if (any) {
            // Four keys at a time, their V rows loaded together; a zero
            // weight (masked, or past n_kv) adds nothing, groups of them
            // are skipped.
            for (var u0 = 0u; u0 < 64u; u0 = u0 + 4u) {
                var ws: array<f32, 4>;
                var nz = false;
                for (var k = 0u; k < 4u; k = k + 1u) {
                    ws[k] = at_s[at_si(pr, u0 + k)];
                    nz = nz || ws[k] != 0.0;
                }
                if (!nz) {
                    continue;
                }
                var vs: array<vec4<u32>, 4>;
                for (var k = 0u; k < 4u; k = k + 1u) {
                    let key = min(64u * r + u0 + k, n_kv - 1u);
                    vs[k] = s2_v4(vb + key * P.nb_2.y + 16u * g);
                }
                for (var k = 0u; k < 4u; k = k + 1u) {
                    sum = sum + ws[k];
                    if (ws[k] != 0.0) {
                        acc_lo = acc_lo + ws[k] * fa_lo(vs[k]);
                        acc_hi = acc_hi + ws[k] * fa_hi(vs[k]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    var total = sum;
    var scale_o = 1.0;
    if (P.iu.w == 1u) {
        let f = fa_sink(s4_ld(P.iu2.x + ih * 4u), m, seen, total);
        scale_o = f.x;
        total = f.y;
    }
    let inv = select(0.0, 1.0 / total, total != 0.0);
    let y_lo = acc_lo * scale_o * inv;
    let y_hi = acc_hi * scale_o * inv;
    let iq = q0 + pr;
    if (iq < n_q) {
        let o = P.off.x + ih * P.nb_d.y + iq * P.nb_d.z + i3 * P.nb_d.w + 8u * g * P.nb_d.x;
        for (var k = 0u; k < 4u; k = k + 1u) {
            d_st(o + k * P.nb_d.x, y_lo[k]);
            d_st(o + (k + 4u) * P.nb_d.x, y_hi[k]);
        }
    }
    if (P.iu2.w == 1u) {
        // Quantize the rows (contiguous, whole blocks of 32) for the integer
        // products, as quant_act.wgsl would: block j of the destination's
        // bytes at byte iu2.y + 32 j, its pair at iu2.z + 8 j. The outputs
        // go through at_q (the queries are no longer read).
        at_q[2u * t] = y_lo;
        at_q[2u * t + 1u] = y_hi;
        workgroupBarrier();
        let per_row = AT_DV / 32u;
        let rr = t / per_row;
        let iq2 = q0 + rr;
        if (t < AT_BQ * per_row && iq2 < n_q) {
            let blk = t % per_row;
            let o = ih * P.nb_d.y + iq2 * P.nb_d.z + i3 * P.nb_d.w;
            let j = o / 128u + blk;
            var x: array<f32, 32>;
            for (var e = 0u; e < 8u; e = e + 1u) {
                let v = at_q[(rr * AT_DV + 32u * blk) / 4u + e];
                x[4u * e] = v.x;
                x[4u * e + 1u] = v.y;
                x[4u * e + 2u] = v.z;
                x[4u * e + 3u] = v.w;
            }
            s5_q8((P.iu2.y >> 2u) + 8u * j, (P.iu2.z >> 2u) + 2u * j, q8_block(x));
        }
    }
}
