// store_q5_1.wgsl: quantize qbuf[0..32] into the Q5_1 block at `blk` of
// `d`, as ggml's quantize_row_q5_1_ref: d = (max - min) / 31, m = min,
// codes (uint8_t)((x - min) * id + 0.5f) with no clamp (only bits 0..4 are
// kept), low nibbles in qs, bit 4 of value j in bit j of qh.

fn qbuf_min_max(n: u32) -> vec2<f32> {
    var mn = 3.40282347e38;
    var mx = -3.40282347e38;
    for (var k = 0u; k < n; k = k + 1u) {
        let v = qbuf[k];
        if (v < mn) {
            mn = v;
        }
        if (v > mx) {
            mx = v;
        }
    }
    return vec2<f32>(mn, mx);
}

fn code_q5_1(v: f32) -> u32 {
    return bitcast<u32>(i32(v + 0.5)) & 0xffu;
}

fn store_q5_1(blk: u32) {
    let r = qbuf_min_max(32u);
    let dd = div_rn(r.y - r.x, 31.0);
    let id = select(0.0, div_rn(1.0, dd), dd != 0.0);
    d_sh(blk, f32_to_f16(dd));
    d_sh(blk + 2u, f32_to_f16(r.x));
    var qh = 0u;
    for (var k = 0u; k < 16u; k = k + 1u) {
        let lo = code_q5_1(nofma((qbuf[k] - r.x) * id));
        let hi = code_q5_1(nofma((qbuf[k + 16u] - r.x) * id));
        d_sb(blk + 8u + k, ((lo & 15u) | ((hi & 15u) << 4u)) & 0xffu);
        qh = qh | (((lo & 16u) >> 4u) << k) | (((hi & 16u) >> 4u) << (k + 16u));
    }
    d_sh(blk + 4u, qh & 0xffffu);
    d_sh(blk + 6u, qh >> 16u);
}

fn store_block(blk: u32) {
    store_q5_1(blk);
}
