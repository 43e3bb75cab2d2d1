// matvec_q8.wgsl: the shared part of the matrix-vector integer kernels
// (their main: matvec_q8_tree.wgsl, or matvec_q8_subgroup.wgsl where the
// device has subgroup operations). MUL_MAT of quantized weights (src0:
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS) with up to MQ_COLS columns that quant_act.wgsl quantized (src1:
// the scratch, bound as 16-byte vectors). Every 32 values (a unit: a
// block, or a sub-block of a K-quant) the weights' codes are packed four
// to a word and meet the activations' bytes in dot4I8Packed: exact
// integer sums isum0 (values 0..16) and isum1 (16..32), scaled once:
// dy * (fa * isum0 + fb * isum1) + fs * sy, with (dy, sy) the activations'
// (d, d * sum q) and (fa, fb, fs) the unit's (mq_unit: fs carries the
// codes' offset or the block's min). The lanes of a row take consecutive
// units (their loads side by side).
// P.iu: x = byte of the columns' bytes, y = byte of their (d, s) pairs,
// z = columns, w = products merged into the dispatch beyond the first
// (0-2: products of the same activations by weights of one type, in the
// same buffers; see mq_product). The host prepends MQ_COLS (1 or 8),
// matmul_common.wgsl and mq_unit.wgsl, and appends a main.

// The product workgroup g works on: the first (P's dst and src0), or, in
// a merged dispatch (matvec_q8.rs's `encode_merged`), product 1 or 2 from
// its first workgroup on: ne_2 / ne_3 = (first workgroup, rows, byte of
// the weights, byte of the destination), nb_2 / nb_3 = (weight row
// stride, destination element stride, destination column stride).
// Uniform per workgroup.
struct MqProduct {
    group: u32, // the workgroup's index within its product
    m: u32,     // the product's rows
    a_at: u32,  // byte of its weights
    a_nb: u32,  // their row stride
    d_at: u32,  // byte of its destination
    d_nb: vec2<u32>,
}

fn mq_product(g: u32) -> MqProduct {
    var p = MqProduct(g, P.ne_d.x, P.off.y, P.nb_0.y, P.off.x, P.nb_d.xy);
    if (P.iu.w >= 1u && g >= P.ne_2.x) {
        p = MqProduct(g - P.ne_2.x, P.ne_2.y, P.ne_2.z, P.nb_2.x, P.ne_2.w, P.nb_2.yz);
    }
    if (P.iu.w >= 2u && g >= P.ne_3.x) {
        p = MqProduct(g - P.ne_3.x, P.ne_3.y, P.ne_3.z, P.nb_3.x, P.ne_3.w, P.nb_3.yz);
    }
    return p;
}

// Lane t of `lanes`'s partial sums of the row whose weights start at byte
// a, one per column (n columns from column c0 of the scratch).
fn mq_row(a: u32, t: u32, lanes: u32, c0: u32, n: u32) -> array<f32, MQ_COLS> {
    let k = P.ne_0.x;
    let nb = k / 32u;
    var acc: array<f32, MQ_COLS>;
    for (var b = t; b < nb; b = b + lanes) {
        let u = mq_unit(a, b);
        for (var c = 0u; c < MQ_COLS; c = c + 1u) {
            if (MQ_COLS == 1u || c < n) {
                let yq = P.iu.x + (c0 + c) * k + 32u * b;
                let y0 = s1_v4(yq);
                let y1 = s1_v4(yq + 16u);
                let i0 = f32(mq_dot(u.w0, y0));
                let i1 = f32(mq_dot(u.w1, y1));
                let pw = (P.iu.y >> 2u) + 2u * ((c0 + c) * nb + b);
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
    return acc;
}
