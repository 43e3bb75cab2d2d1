// matvec_q8.wgsl: MUL_MAT of quantized weights (src0: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) with up to
// MQ_COLS columns that quant_act.wgsl
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
// MQ_COLS (1 or 8), matmul_common.wgsl and mq_unit.wgsl.

const MQ_LANES: u32 = 64u;
const MQ_WG: u32 = 128u;
var<workgroup> mq_part: array<f32, 1024>; // MQ_COLS * MQ_WG, at most 8 * 128

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
                    let y0 = s1_v4(yq);
                    let y1 = s1_v4(yq + 16u);
                    let i0 = f32(mq_dot(u.w0, y0));
                    let i1 = f32(mq_dot(u.w1, y1));
                    let pw = (P.iu.y >> 2u) + 2u * (c * nb + b);
                    let dy = bitcast<f32>(s1_w(pw));
                    let sy = bitcast<f32>(s1_w(pw + 1u));
                    acc[c] = acc[c] + dy * (u.f.x * i0 + u.f.y * i1) + u.f.z * sy;
                    if (s0_T == T_Q2_K) {
                        let hs = mq_half_sums(y0, y1);
                        acc[c] = acc[c] + dy * (u.g.x * hs.x + u.g.y * hs.y);
                    }
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
