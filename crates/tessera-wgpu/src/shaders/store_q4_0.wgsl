// store_q4_0.wgsl: quantize qbuf[0..32] into the Q4_0 block at `blk` of
// `d`, as ggml's quantize_row_q4_0_ref (the value of largest magnitude
// maps to -8; nibbles from the truncating int8 cast).

fn nibble_q4_0(v: f32) -> u32 {
    let q = i32(v + 8.5);
    return u32(min(q, 15)) & 0xffu;
}

fn store_q4_0(blk: u32) {
    var amax = 0.0;
    var mx = 0.0;
    for (var k = 0u; k < 32u; k = k + 1u) {
        let a = abs(qbuf[k]);
        if (amax < a) {
            amax = a;
            mx = qbuf[k];
        }
    }
    let dd = div_rn(mx, -8.0);
    let id = select(0.0, div_rn(1.0, dd), dd != 0.0);
    d_sh(blk, f32_to_f16(dd));
    for (var k = 0u; k < 16u; k = k + 1u) {
        let lo = nibble_q4_0(nofma(qbuf[k] * id));
        let hi = nibble_q4_0(nofma(qbuf[k + 16u] * id));
        d_sb(blk + 2u + k, (lo | (hi << 4u)) & 0xffu);
    }
}

fn store_block(blk: u32) {
    store_q4_0(blk);
}
