// store_q5_0.wgsl: quantize qbuf[0..32] into the Q5_0 block at `blk` of
// `d`, as ggml's quantize_row_q5_0_ref (the value of largest magnitude
// maps to 0: d = max / -16; codes MIN(31, (int8_t)(x * id + 16.5f)), low
// nibbles in qs, bit 4 of value j in bit j of qh).

fn code_q5_0(v: f32) -> u32 {
    let q = i32(v + 16.5);
    return u32(min(q, 31)) & 0xffu;
}

fn store_q5_0(blk: u32) {
    var amax = 0.0;
    var mx = 0.0;
    for (var k = 0u; k < 32u; k = k + 1u) {
        let a = abs(qbuf[k]);
        if (amax < a) {
            amax = a;
            mx = qbuf[k];
        }
    }
    let dd = div_rn(mx, -16.0);
    let id = select(0.0, div_rn(1.0, dd), dd != 0.0);
    d_sh(blk, f32_to_f16(dd));
    var qh = 0u;
    for (var k = 0u; k < 16u; k = k + 1u) {
        let lo = code_q5_0(nofma(qbuf[k] * id));
        let hi = code_q5_0(nofma(qbuf[k + 16u] * id));
        d_sb(blk + 6u + k, ((lo & 15u) | ((hi & 15u) << 4u)) & 0xffu);
        qh = qh | (((lo & 16u) >> 4u) << k) | (((hi & 16u) >> 4u) << (k + 16u));
    }
    d_sh(blk + 2u, qh & 0xffffu);
    d_sh(blk + 4u, qh >> 16u);
}

fn store_block(blk: u32) {
    store_q5_0(blk);
}
