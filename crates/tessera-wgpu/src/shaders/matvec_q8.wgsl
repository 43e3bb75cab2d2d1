// matvec_q8.wgsl: MUL_MAT of Q4_0 or Q8_0 weights (src0) with up to
// MQ_COLS columns that quant_act.wgsl quantized (src1: the scratch, bound as
// 16-byte vectors). Per 32-value block, an exact integer dot product of
// packed signed bytes (dot4I8Packed), scaled once: Q8_0 dw * d * isum,
// Q4_0 dw * (d * isum - 8 * s) with s = d * sum q (codes 0..15 less 8).
// Sixty-four invocations per row on consecutive blocks (their loads side
// by side), two rows a workgroup. P.iu: x = byte of the columns' bytes,
// y = byte of their (d, s) pairs, z = columns. The host prepends MQ_COLS
// (1 or 8).

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
    let m = P.ne_d.x;
    let n = P.iu.z;
    let row = 2u * g + lid.x / MQ_LANES;
    let t = lid.x % MQ_LANES;
    let k = P.ne_0.x;
    let nb = k / 32u;
    var acc: array<f32, MQ_COLS>;
    if (row < m) {
        let a = P.off.y + row * P.nb_0.y;
        for (var b = t; b < nb; b = b + MQ_LANES) {
            let blk = a + b * s0_TS;
            let dw = unpack2x16float(s0_h(blk)).x;
            var w0: vec4<u32>;
            var w1: vec4<u32>;
            if (s0_T == T_Q4_0) {
                // Bytes j: low nibble value j, high nibble value 16 + j.
                let q = mq_words4(blk + 2u);
                w0 = q & vec4<u32>(0x0f0f0f0fu);
                w1 = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
            } else {
                w0 = mq_words4(blk + 2u);
                w1 = mq_words4(blk + 18u);
            }
            for (var c = 0u; c < MQ_COLS; c = c + 1u) {
                if (MQ_COLS == 1u || c < n) {
                    let yq = P.iu.x + c * k + 32u * b;
                    let isum = mq_dot(w0, s1_v4(yq)) + mq_dot(w1, s1_v4(yq + 16u));
                    let pw = (P.iu.y >> 2u) + 2u * (c * nb + b);
                    let dy = bitcast<f32>(s1_w(pw));
                    if (s0_T == T_Q4_0) {
                        let sy = bitcast<f32>(s1_w(pw + 1u));
                        acc[c] = acc[c] + dw * (dy * f32(isum) - 8.0 * sy);
                    } else {
                        acc[c] = acc[c] + dw * dy * f32(isum);
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
        d_st(P.off.x + row * P.nb_d.x + t * P.nb_d.y, mq_part[t * MQ_WG + lid.x - t]);
    }
}
