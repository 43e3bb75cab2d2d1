// rows.wgsl: one workgroup per row of src0. iu.x: 0 RMS_NORM, 1 NORM,
// 2 SUM_ROWS, 3 SOFT_MAX (scale fp.x, ALiBi max_bias fp.y, mask src1 when
// iu.y = 1, sinks src2 (one f32 per head) when iu.z = 1), 4 ARGMAX (ties: the last index, as ggml), 5 L2_NORM (eps fp.x),
// 6 RMS_NORM then MUL by src1 (broadcast as ggml's MUL: each dimension modulo src1's),
// 7 ADD of src0 and src1 (same shape) stored in src3, then as 6 with src2's weights,
// 8 (rows of at most 256 RV values; fuse_sandwich.rs) as 6 with the F32
// vector of weights at byte iu.w of src2 and eps fp.y, then as 7 with that
// result as src0,
// 9 (fuse.rs's pairs: rows of at most 256 RV values, contiguous F32
// vectors of weights, contiguous F32 results) two of mode 6 in one
// dispatch: the workgroups after the first tensor's rows take a second's,
// its input at byte off.w of src0 (extents ne_2, strides nb_2), its
// weights at byte off2.x of src1, its result at byte iu.y of d.
// 10 (fuse_moe.rs's routing weights: one workgroup per token t = the
// row): a MoE layer's expert weights as GET_ROWS, SUM_ROWS, CLAMP and DIV
// compute them, w / clamp(sum of w), w[e] = src0[0, ids[e, t], t] (the
// router's probabilities, [1, experts, tokens]; ids: src1, I32 [used,
// tokens], clamped into range as GET_ROWS clamps them), CLAMP's bounds
// fp.x, fp.y; dst [used, tokens].
// Mode 3 with iu2.w = 1 (ascending) or 2 (descending) (fuse_router.rs:
// rows of at most 256 values, no mask) also stores the row's ARGSORT into
// s3 (I32, the row's extents), the ranks taken as sort.wgsl takes them.
// Modes 6, 7 and 8 with iu2.z = 1 (a contiguous destination, rows of at most
// 256 RV = 4096 values) also quantize each row they write for the integer
// products, as quant_act.wgsl would, into s4 (the stream's scratch): by
// blocks of 32 in the destination's order, block j's bytes at byte
// iu2.x + 32 j, its pair at iu2.y + 8 j.

// (Reductions: reduce_tree.wgsl or reduce_subgroup.wgsl, prepended.)
var<workgroup> redi: array<u32, 256>;

// The softmax logit of element i0 of the row (-inf where the mask is -inf).
fn logit(x_row: u32, m_row: u32, i0: u32, slope: f32) -> f32 {
    let x = s0_ld(x_row + i0 * P.nb_0.x) * P.fp.x;
    if (P.iu.y == 0u) {
        return x;
    }
    let m = s1_ld(m_row + i0 * P.nb_1.x);
    if (is_neg_inf(m)) {
        return neg_inf();
    }
    return x + slope * m;
}

// A part of the row being written (at most 2048 values), for quantize_part.
var<workgroup> qrow: array<f32, 2048>;

// Quantize values c0..c0 + len of row `row` (n values) of the destination,
// held in `qrow` (see the header; called in uniform control flow).
fn quantize_part(l: u32, row: u32, n: u32, c0: u32, len: u32) {
    let nb = n / 32u;
    for (var b = l; b < len / 32u; b = b + 256u) {
        var x: array<f32, 32>;
        for (var i = 0u; i < 32u; i = i + 1u) {
            x[i] = qrow[32u * b + i];
        }
        let j = c0 / 32u + b;
        s4_q8((P.iu2.x + row * n + 32u * j) >> 2u, (P.iu2.y >> 2u) + 2u * (row * nb + j),
            q8_block(x));
    }
}

// Values of a row each invocation keeps in registers in the fused norms
// (rows of at most 256 RV values: 4096, a 7-8B model's).
const RV: u32 = 16u;

// Modes 0, 6, 7 and 8 for a row of at most 256 RV values, as main's loops
// compute them (the same operations in the same order), with the
// row's values kept in registers: every load of a loop is issued before
// its first store. Stores into a storage buffer may alias any other (in a
// model the sum, the output and the input often share one buffer), so in
// main's loops each iteration's loads wait for the previous iteration's
// stores: one round trip to memory per value, which dominated a decoding
// step's one-row norms.
// w6: mode 6's weights for the row (byte of its first value, extent and
// stride of dimension 0: the weights repeat along it as ggml's MUL does).
fn norm_in_registers(l: u32, row: u32, n: u32, mode: u32, i: vec3<u32>, x_row: u32,
        d_row: u32, w6: vec3<u32>) {
    var h: array<f32, RV>;
    for (var j = 0u; j < RV; j = j + 1u) {
        let e = l + 256u * j;
        if (e < n) {
            h[j] = s0_ld(x_row + e * P.nb_0.x);
        }
    }
    if (mode == 8u) {
        // RMS_NORM and MUL by the vector at byte iu.w of s2, as mode 6
        // computes them (its result is the ADD's first operand below).
        var sq1 = 0.0;
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                sq1 = sq1 + h[j] * h[j];
            }
        }
        sq1 = reduce_sum(l, sq1);
        let scale1 = 1.0 / sqrt(sq1 / f32(n) + P.fp.y);
        var w1: array<f32, RV>;
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                w1[j] = s2_ld(P.iu.w + e * 4u);
            }
        }
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                var y = h[j] * scale1;
                y = y * w1[j];
                h[j] = y;
            }
        }
    }
    var sq = 0.0;
    var w_row = 0u;
    if (mode == 7u || mode == 8u) {
        let b_row = P.off.z + i.x * P.nb_1.y + i.y * P.nb_1.z + i.z * P.nb_1.w;
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                h[j] = h[j] + s1_ld(b_row + e * P.nb_1.x);
            }
        }
        let h_row = P.off2.x + i.x * P.nb_3.y + i.y * P.nb_3.z + i.z * P.nb_3.w;
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                s3_st(h_row + e * P.nb_3.x, h[j]);
                sq = sq + h[j] * h[j];
            }
        }
        w_row = P.off.w + (i.x % P.ne_2.y) * P.nb_2.y + (i.y % P.ne_2.z) * P.nb_2.z
            + (i.z % P.ne_2.w) * P.nb_2.w;
    } else {
        for (var j = 0u; j < RV; j = j + 1u) {
            let e = l + 256u * j;
            if (e < n) {
                sq = sq + h[j] * h[j];
            }
        }
        if (mode == 6u) {
            w_row = w6.x;
        }
    }
    sq = reduce_sum(l, sq);
    let scale = 1.0 / sqrt(sq / f32(n) + P.fp.x);
    var w: array<f32, RV>;
    for (var j = 0u; j < RV; j = j + 1u) {
        let e = l + 256u * j;
        if (e < n && mode != 0u) {
            if (mode == 7u || mode == 8u) {
                w[j] = s2_ld(w_row + (e % P.ne_2.x) * P.nb_2.x);
            } else {
                w[j] = s1_ld(w_row + (e % w6.y) * w6.z);
            }
        }
    }
    for (var j = 0u; j < RV; j = j + 1u) {
        let e = l + 256u * j;
        if (e < n) {
            var y = h[j] * scale;
            if (mode != 0u) {
                y = y * w[j];
            }
            d_st(d_row + e * P.nb_d.x, y);
            h[j] = y;
        }
    }
    if (P.iu2.z == 1u) {
        // Through workgroup memory, 2048 values at a time.
        for (var c0 = 0u; c0 < n; c0 = c0 + 2048u) {
            let len = min(n - c0, 2048u);
            workgroupBarrier();
            for (var j = 0u; j < RV; j = j + 1u) {
                let e = l + 256u * j;
                if (e >= c0 && e < c0 + len) {
                    qrow[e - c0] = h[j];
                }
            }
            workgroupBarrier();
            quantize_part(l, row, n, c0, len);
        }
    }
}

// Mode 10's w[e] of token t: the probability of the expert ids[e, t].
fn routed(e: u32, t: u32) -> f32 {
    let id = s1_ldi(P.off.z + e * P.nb_1.x + t * P.nb_1.y);
    let x = u32(clamp(id, 0, i32(max(P.ne_0.y, 1u)) - 1));
    return s0_ld(P.off.y + x * P.nb_0.y + t * P.nb_0.z);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>, lanes: Lanes) {
    lanes_init(lanes);
    let row = group_index(wid, nwg);
    let nrows = P.ne_0.y * P.ne_0.z * P.ne_0.w;
    let mode = P.iu.x;
    let n = P.ne_0.x;
    let l = lidv.x;
    if (mode == 9u) {
        // Two RMS_NORM + MUL in one dispatch (see the header): row r of
        // the first tensor, or of the second. Uniform per workgroup.
        var ne = P.ne_0;
        var nb = P.nb_0;
        var at = vec3<u32>(P.off.y, P.off.z, P.off.x);
        var r = row;
        if (row >= nrows) {
            r = row - nrows;
            ne = P.ne_2;
            nb = P.nb_2;
            at = vec3<u32>(P.off.w, P.off2.x, P.iu.y);
        }
        if (r >= ne.y * ne.z * ne.w) {
            return;
        }
        let j1 = r % ne.y;
        let j2 = (r / ne.y) % ne.z;
        let j3 = r / (ne.y * ne.z);
        let x_at = at.x + j1 * nb.y + j2 * nb.z + j3 * nb.w;
        norm_in_registers(l, r, n, 6u, vec3<u32>(0u), x_at, at.z + r * 4u * n,
            vec3<u32>(at.y, n, 4u));
        return;
    }
    if (mode == 10u) {
        if (row >= P.ne_d.y) {
            return;
        }
        let used = P.ne_d.x;
        var s = 0.0;
        for (var i = l; i < used; i = i + 256u) {
            s = s + routed(i, row);
        }
        s = reduce_sum(l, s);
        // CLAMP as unary.wgsl computes it, then DIV as binary.wgsl.
        let c = select(P.fp.y, s, s < P.fp.y);
        let bound = select(P.fp.x, c, c > P.fp.x);
        for (var i = l; i < used; i = i + 256u) {
            d_st(P.off.x + i * P.nb_d.x + row * P.nb_d.y, routed(i, row) / bound);
        }
        return;
    }
    if (row >= nrows) {
        return;
    }
    let i1 = row % P.ne_0.y;
    let i2 = (row / P.ne_0.y) % P.ne_0.z;
    let i3 = row / (P.ne_0.y * P.ne_0.z);
    let x_row = P.off.y + i1 * P.nb_0.y + i2 * P.nb_0.z + i3 * P.nb_0.w;
    let d_row = P.off.x + i1 * P.nb_d.y + i2 * P.nb_d.z + i3 * P.nb_d.w;
    if (mode == 4u) {
        var best = neg_inf();
        var idx = 0u;
        var seen = false;
        for (var i = l; i < n; i = i + 256u) {
            let x = s0_ld(x_row + i * P.nb_0.x);
            if (!seen || x >= best) {
                best = x;
                idx = i;
                seen = true;
            }
        }
        red[l] = select(neg_inf(), best, seen);
        redi[l] = select(0u, idx, seen);
        workgroupBarrier();
        for (var s = 128u; s > 0u; s = s >> 1u) {
            if (l < s) {
                let a = red[l];
                let b = red[l + s];
                if (b > a || (b == a && redi[l + s] > redi[l])) {
                    red[l] = b;
                    redi[l] = redi[l + s];
                }
            }
            workgroupBarrier();
        }
        if (l == 0u) {
            // The result is a vector: row i1's index is element i1.
            d_sti(P.off.x + i1 * P.nb_d.x, i32(redi[0]));
        }
        return;
    }
    if (mode == 3u) {
        let slope = alibi_slope(P.fp.y, P.ne_0.z, i2);
        let m_row = P.off.z + i1 * P.nb_1.y + (i2 % P.ne_1.z) * P.nb_1.z + (i3 % P.ne_1.w) * P.nb_1.w;
        var mx = neg_inf();
        for (var i = l; i < n; i = i + 256u) {
            let w = logit(x_row, m_row, i, slope);
            if (!is_neg_inf(w)) {
                mx = max(mx, w);
            }
        }
        mx = reduce_max(l, mx);
        var sink = 0.0;
        if (P.iu.z == 1u) {
            sink = s2_ld(P.off.w + i2 * P.nb_2.x);
            mx = max(mx, sink);
        }
        var sum = 0.0;
        for (var i = l; i < n; i = i + 256u) {
            let w = logit(x_row, m_row, i, slope);
            if (!is_neg_inf(w)) {
                sum = sum + exp(w - mx);
            }
        }
        sum = reduce_sum(l, sum);
        if (P.iu.z == 1u) {
            sum = sum + exp(sink - mx);
        }
        let inv = 1.0 / sum;
        for (var i = l; i < n; i = i + 256u) {
            let w = logit(x_row, m_row, i, slope);
            var y = 0.0;
            if (!is_neg_inf(w)) {
                y = exp(w - mx) * inv;
            }
            d_st(d_row + i * P.nb_d.x, y);
            if (P.iu2.w != 0u && i < 256u) {
                redi[i] = bitcast<u32>(y);
            }
        }
        if (P.iu2.w != 0u) {
            // ARGSORT of the row just written (fuse_router.rs; rows of at
            // most 256): element l's rank among the values as stored, as
            // sort.wgsl ranks them.
            workgroupBarrier();
            if (l < n) {
                let desc = P.iu2.w == 2u;
                let kj = sort_key(bitcast<f32>(redi[l]));
                var rank = 0u;
                for (var m = 0u; m < n; m = m + 1u) {
                    let km = sort_key(bitcast<f32>(redi[m]));
                    rank = rank + select(0u, 1u, sort_before(km, kj, m, l, desc));
                }
                s3_sti(P.off2.x + rank * P.nb_3.x + i1 * P.nb_3.y + i2 * P.nb_3.z + i3 * P.nb_3.w,
                    i32(l));
            }
        }
        return;
    }
    // Rows longer than 256 RV take the loops below, which do not quantize
    // (the host asks for it only for rows the registers hold). A plain
    // RMS_NORM takes the same code as the fused ones (the same bits as a
    // fused norm gives).
    if ((mode == 0u || mode == 6u || mode == 7u || mode == 8u) && n <= 256u * RV) {
        let w6 = vec3<u32>(P.off.z + (i1 % P.ne_1.y) * P.nb_1.y + (i2 % P.ne_1.z) * P.nb_1.z
            + (i3 % P.ne_1.w) * P.nb_1.w, P.ne_1.x, P.nb_1.x);
        norm_in_registers(l, row, n, mode, vec3<u32>(i1, i2, i3), x_row, d_row, w6);
        return;
    }
    if (mode == 7u) {
        let b_row = P.off.z + i1 * P.nb_1.y + i2 * P.nb_1.z + i3 * P.nb_1.w;
        let h_row = P.off2.x + i1 * P.nb_3.y + i2 * P.nb_3.z + i3 * P.nb_3.w;
        var sq = 0.0;
        for (var i = l; i < n; i = i + 256u) {
            let h = s0_ld(x_row + i * P.nb_0.x) + s1_ld(b_row + i * P.nb_1.x);
            s3_st(h_row + i * P.nb_3.x, h);
            sq = sq + h * h;
        }
        sq = reduce_sum(l, sq);
        let scale = 1.0 / sqrt(sq / f32(n) + P.fp.x);
        let w_row = P.off.w + (i1 % P.ne_2.y) * P.nb_2.y + (i2 % P.ne_2.z) * P.nb_2.z
            + (i3 % P.ne_2.w) * P.nb_2.w;
        for (var i = l; i < n; i = i + 256u) {
            let y = s3_ld(h_row + i * P.nb_3.x) * scale;
            d_st(d_row + i * P.nb_d.x, y * s2_ld(w_row + (i % P.ne_2.x) * P.nb_2.x));
        }
        return;
    }
    var s = 0.0;
    for (var i = l; i < n; i = i + 256u) {
        let x = s0_ld(x_row + i * P.nb_0.x);
        s = s + select(x, x * x, mode == 0u || mode == 5u || mode == 6u);
    }
    s = reduce_sum(l, s);
    if (mode == 5u) {
        let scale = 1.0 / max(sqrt(s), P.fp.x);
        for (var i = l; i < n; i = i + 256u) {
            d_st(d_row + i * P.nb_d.x, s0_ld(x_row + i * P.nb_0.x) * scale);
        }
        return;
    }
    if (mode == 2u) {
        if (l == 0u) {
            d_st(d_row, s);
        }
        return;
    }
    let mean = s / f32(n);
    if (mode == 0u) {
        let scale = 1.0 / sqrt(mean + P.fp.x);
        for (var i = l; i < n; i = i + 256u) {
            d_st(d_row + i * P.nb_d.x, s0_ld(x_row + i * P.nb_0.x) * scale);
        }
        return;
    }
    if (mode == 6u) {
        let scale = 1.0 / sqrt(mean + P.fp.x);
        let w_row = P.off.z + (i1 % P.ne_1.y) * P.nb_1.y + (i2 % P.ne_1.z) * P.nb_1.z
            + (i3 % P.ne_1.w) * P.nb_1.w;
        for (var i = l; i < n; i = i + 256u) {
            let y = s0_ld(x_row + i * P.nb_0.x) * scale;
            d_st(d_row + i * P.nb_d.x, y * s1_ld(w_row + (i % P.ne_1.x) * P.nb_1.x));
        }
        return;
    }
    var v = 0.0;
    for (var i = l; i < n; i = i + 256u) {
        let c = s0_ld(x_row + i * P.nb_0.x) - mean;
        v = v + c * c;
    }
    v = reduce_sum(l, v);
    let scale = 1.0 / sqrt(v / f32(n) + P.fp.x);
    for (var i = l; i < n; i = i + 256u) {
        d_st(d_row + i * P.nb_d.x, (s0_ld(x_row + i * P.nb_0.x) - mean) * scale);
    }
}
