// matvec_q8.wgsl: MUL_MAT of quantized weights (src0: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q6_K) with up to MQ_COLS columns that quant_act.wgsl
// quantized (src1: the scratch, bound as 16-byte vectors). Every 32 values
// (a unit: a block, or a sub-block of a K-quant) the weights' codes are
// packed four to a word and meet the activations' bytes in dot4I8Packed:
// exact integer sums isum0 (values 0..16) and isum1 (16..32), scaled once:
// dy * (fa * isum0 + fb * isum1) + fs * sy, with (dy, sy) the activations'
// (d, d * sum q) and (fa, fb, fs) the unit's (mq_unit: fs carries the
// codes' offset or the block's min).
// Sixty-four invocations per row on consecutive units (their loads side
// by side), two rows a workgroup. P.iu: x = byte of the columns' bytes,
// y = byte of their (d, s) pairs, z = columns, w = products merged into
// the dispatch beyond the first (0-2: products of the same activations by
// weights of one type, in the same buffers; see main). The host prepends
// MQ_COLS (1 or 8) and matmul_common.wgsl.

const MQ_LANES: u32 = 64u;
const MQ_WG: u32 = 128u;
var<workgroup> mq_part: array<f32, 1024>; // MQ_COLS * MQ_WG, at most 8 * 128

// Four words of src0 from byte `p` (a multiple of 2): five aligned loads
// and selects, not a branch (18- and 34-byte blocks alternate their
// alignment from lane to lane).
fn mq_words4(p: u32) -> vec4<u32> {
    let w = p >> 2u;
    let a0 = s0_w(w);
    let a1 = s0_w(w + 1u);
    let a2 = s0_w(w + 2u);
    let a3 = s0_w(w + 3u);
    let a4 = s0_w(w + 4u);
    let lo = vec4<u32>(a0, a1, a2, a3);
    let hi = vec4<u32>(a1, a2, a3, a4);
    let odd = vec4<bool>((p & 2u) != 0u);
    return select(lo, (lo >> vec4<u32>(16u)) | (hi << vec4<u32>(16u)), odd);
}

// The f16 at byte `p` of src0 (a multiple of 2).
fn mq_f16(p: u32) -> f32 {
    return unpack2x16float(s0_h(p)).x;
}

// Fifth bits: bit 4 w + i of `h` to bit 4 of byte i of word w.
fn mq_bits5(h: u32) -> vec4<u32> {
    let b = (vec4<u32>(h) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u);
    return ((b & vec4<u32>(1u)) << vec4<u32>(4u)) | ((b & vec4<u32>(2u)) << vec4<u32>(11u))
        | ((b & vec4<u32>(4u)) << vec4<u32>(18u)) | ((b & vec4<u32>(8u)) << vec4<u32>(25u));
}

// Bytes less 32 (each byte below 0x80), without borrows between bytes.
fn mq_sub32(x: vec4<u32>) -> vec4<u32> {
    let t = vec4<u32>(0x80808080u);
    return ((x | t) - vec4<u32>(0x20202020u)) ^ t;
}

struct MqUnit {
    w0: vec4<u32>,
    w1: vec4<u32>,
    // fa, fb, fs.
    f: vec3<f32>,
}

// Unit b (values 32 b..32 b + 32) of the row at byte `a`.
fn mq_unit(a: u32, b: u32) -> MqUnit {
    var u: MqUnit;
    let m4 = vec4<u32>(0x0f0f0f0fu);
    if (s0_T == T_Q8_0) {
        let blk = a + b * s0_TS;
        let dw = mq_f16(blk);
        u.w0 = mq_words4(blk + 2u);
        u.w1 = mq_words4(blk + 18u);
        u.f = vec3<f32>(dw, dw, 0.0);
    } else if (s0_T == T_Q4_K) {
        let blk = a + (b >> 3u) * s0_TS;
        let j = b & 7u;
        let d = mq_f16(blk);
        let dmin = mq_f16(blk + 2u);
        let sm = q4k_scale_min(blk, j);
        // Sub-blocks 2 i and 2 i + 1: the low and high nibbles of 32 bytes.
        let q = blk + 16u + 32u * (j >> 1u);
        let sh = vec4<u32>(4u * (j & 1u));
        u.w0 = (mq_words4(q) >> sh) & m4;
        u.w1 = (mq_words4(q + 16u) >> sh) & m4;
        u.f = vec3<f32>(d * sm.x, d * sm.x, -dmin * sm.y);
    } else if (s0_T == T_Q6_K) {
        // Half h of 128 values, quarter q of 32 in it: bytes l = 0..32 of
        // ql (from 32 (q & 1)), nibble q >> 1; two bits 2 q of qh[l];
        // scales 2 q and 2 q + 1 of the half (16 values each).
        let blk = a + (b >> 3u) * s0_TS;
        let h = (b >> 2u) & 1u;
        let q = b & 3u;
        let ql = blk + 64u * h + 32u * (q & 1u);
        let qh = blk + 128u + 32u * h;
        let nsh = vec4<u32>(4u * (q >> 1u));
        let hsh = vec4<u32>(2u * q);
        let c0 = ((mq_words4(ql) >> nsh) & m4)
            | (((mq_words4(qh) >> hsh) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
        let c1 = ((mq_words4(ql + 16u) >> nsh) & m4)
            | (((mq_words4(qh + 16u) >> hsh) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
        u.w0 = mq_sub32(c0);
        u.w1 = mq_sub32(c1);
        let sc = blk + 192u + 8u * h + 2u * q;
        let d = mq_f16(blk + 208u);
        u.f = vec3<f32>(d * f32(sext8(s0_b(sc))), d * f32(sext8(s0_b(sc + 1u))), 0.0);
    } else {
        // Q4_0, Q4_1, Q5_0, Q5_1: byte j holds values j (low nibble) and
        // 16 + j (high).
        let blk = a + b * s0_TS;
        let dw = mq_f16(blk);
        var qs = blk + 2u;
        var fs = -8.0 * dw;
        var qh = 0u;
        if (s0_T == T_Q4_1) {
            fs = mq_f16(blk + 2u);
            qs = blk + 4u;
        } else if (s0_T == T_Q5_0) {
            qh = s0_h(blk + 2u) | (s0_h(blk + 4u) << 16u);
            qs = blk + 6u;
            fs = -16.0 * dw;
        } else if (s0_T == T_Q5_1) {
            fs = mq_f16(blk + 2u);
            qh = s0_h(blk + 4u) | (s0_h(blk + 6u) << 16u);
            qs = blk + 8u;
        }
        let q = mq_words4(qs);
        u.w0 = (q & m4) | mq_bits5(qh);
        u.w1 = ((q >> vec4<u32>(4u)) & m4) | mq_bits5(qh >> 16u);
        u.f = vec3<f32>(dw, dw, fs);
    }
    return u;
}

fn mq_dot(w: vec4<u32>, y: vec4<u32>) -> i32 {
    return dot4I8Packed(w.x, y.x) + dot4I8Packed(w.y, y.y) + dot4I8Packed(w.z, y.z)
        + dot4I8Packed(w.w, y.w);
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    // The product this workgroup works on: the first (P's dst and src0),
    // or, in a merged dispatch (matvec_q8.rs's `encode_merged`), product 1 or 2
    // from its first workgroup on: ne_2 / ne_3 = (first workgroup, rows,
    // byte of the weights, byte of the destination), nb_2 / nb_3 = (weight
    // row stride, destination element stride, destination column stride).
    // Uniform per workgroup: the barriers below stay in uniform control flow.
    var gl = g;
    var m = P.ne_d.x;
    var a_at = P.off.y;
    var a_nb = P.nb_0.y;
    var d_at = P.off.x;
    var d_nb = P.nb_d.xy;
    if (P.iu.w >= 1u && g >= P.ne_2.x) {
        gl = g - P.ne_2.x;
        m = P.ne_2.y;
        a_at = P.ne_2.z;
        d_at = P.ne_2.w;
        a_nb = P.nb_2.x;
        d_nb = P.nb_2.yz;
    }
    if (P.iu.w >= 2u && g >= P.ne_3.x) {
        gl = g - P.ne_3.x;
        m = P.ne_3.y;
        a_at = P.ne_3.z;
        d_at = P.ne_3.w;
        a_nb = P.nb_3.x;
        d_nb = P.nb_3.yz;
    }
    let n = P.iu.z;
    let row = 2u * gl + lid.x / MQ_LANES;
    let t = lid.x % MQ_LANES;
    let k = P.ne_0.x;
    let nb = k / 32u;
    var acc: array<f32, MQ_COLS>;
    if (row < m) {
        let a = a_at + row * a_nb;
        for (var b = t; b < nb; b = b + MQ_LANES) {
            let u = mq_unit(a, b);
            for (var c = 0u; c < MQ_COLS; c = c + 1u) {
                if (MQ_COLS == 1u || c < n) {
                    let yq = P.iu.x + c * k + 32u * b;
                    let i0 = f32(mq_dot(u.w0, s1_v4(yq)));
                    let i1 = f32(mq_dot(u.w1, s1_v4(yq + 16u)));
                    let pw = (P.iu.y >> 2u) + 2u * (c * nb + b);
                    let dy = bitcast<f32>(s1_w(pw));
                    let sy = bitcast<f32>(s1_w(pw + 1u));
                    acc[c] = acc[c] + dy * (u.f.x * i0 + u.f.y * i1) + u.f.z * sy;
                }
            }
        }
    }
    for (var c = 0u; c < MQ_COLS; c = c + 1u) {
        mq_part[c * MQ_WG + lid.x] = acc[c];
    }
    workgroupBarrier();
    for (var s = MQ_LANES / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            for (var c = 0u; c < MQ_COLS; c = c + 1u) {
                mq_part[c * MQ_WG + lid.x] = mq_part[c * MQ_WG + lid.x]
                    + mq_part[c * MQ_WG + lid.x + s];
            }
        }
        workgroupBarrier();
    }
    // Lane c of the row's invocations writes column c.
    if (row < m && t < min(n, MQ_COLS)) {
        d_st(d_at + row * d_nb.x + t * d_nb.y, mq_part[t * MQ_WG + lid.x - t]);
    }
}
