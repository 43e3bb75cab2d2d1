// store_q4_1.wgsl: quantize qbuf[0..32] into the Q4_1 block at `blk` of
// `d`, as ggml's quantize_row_q4_1_ref: d = (max - min) / 15, m = min,
// nibbles MIN(15, (int8_t)((x - min) * id + 0.5f)) (NaNs skipped by the
// min/max scan, as C's comparisons do).

// C's min/max scan of qbuf[0..n]: (min, max), starting from (FLT_MAX, -FLT_MAX).
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

fn nibble_q4_1(v: f32) -> u32 {
    let q = i32(v + 0.5);
    return u32(min(q, 15)) & 0xffu;
}

fn store_q4_1(blk: u32) {
    let r = qbuf_min_max(32u);
    let dd = div_rn(r.y - r.x, 15.0);
    let id = select(0.0, div_rn(1.0, dd), dd != 0.0);
    d_sh(blk, f32_to_f16(dd));
    d_sh(blk + 2u, f32_to_f16(r.x));
    for (var k = 0u; k < 16u; k = k + 1u) {
        let lo = nibble_q4_1(nofma((qbuf[k] - r.x) * id));
        let hi = nibble_q4_1(nofma((qbuf[k + 16u] - r.x) * id));
        d_sb(blk + 4u + k, (lo | (hi << 4u)) & 0xffu);
    }
}

fn store_block(blk: u32) {
    store_q4_1(blk);
}
