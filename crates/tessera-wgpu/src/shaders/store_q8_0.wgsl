// store_q8_0.wgsl: quantize qbuf[0..32] into the Q8_0 block at `blk` of
// `d`, as ggml's quantize_row_q8_0_ref (roundf: halves away from zero).

fn store_q8_0(blk: u32) {
    var amax = 0.0;
    for (var k = 0u; k < 32u; k = k + 1u) {
        amax = max(amax, abs(qbuf[k]));
    }
    let dd = div_rn(amax, 127.0);
    let id = select(0.0, div_rn(1.0, dd), dd != 0.0);
    d_sh(blk, f32_to_f16(dd));
    for (var k = 0u; k < 32u; k = k + 1u) {
        let q = i32(round_away(nofma(qbuf[k] * id)));
        d_sb(blk + 2u + k, bitcast<u32>(q) & 0xffu);
    }
}

fn store_block(blk: u32) {
    store_q8_0(blk);
}
