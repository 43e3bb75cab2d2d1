// matmul_common.wgsl: what the MUL_MAT kernels share (prepended to each).

// No column (the tiled kernels' column hooks: q8_col, ids_col, ids_dst).
const Q8_NONE: u32 = 0xffffffffu;

// Byte offset of the src0 matrix that dst batch (i2, i3) uses: src0 is
// broadcast over dims 2-3.
fn mm_a_base(i2: u32, i3: u32) -> u32 {
    return P.off.y + (i2 / (P.ne_1.z / P.ne_0.z)) * P.nb_0.z
        + (i3 / (P.ne_1.w / P.ne_0.w)) * P.nb_0.w;
}

// The output tile of workgroup g, tiles of tm x tn: (tile row, tile column,
// i2, i3) over dst's extents.
fn mm_tile(g: u32, tm: u32, tn: u32) -> vec4<u32> {
    let mt = (P.ne_d.x + tm - 1u) / tm;
    let nt = (P.ne_d.y + tn - 1u) / tn;
    let r = g / mt / nt;
    return vec4<u32>(g % mt, (g / mt) % nt, r % P.ne_d.z, r / P.ne_d.z);
}

// Byte offset of the src1 matrix of dst batch (i2, i3).
fn mm_b_base(i2: u32, i3: u32) -> u32 {
    return P.off.z + i2 * P.nb_1.z + i3 * P.nb_1.w;
}

// Value kk of the src0 row at byte `a` (dequantized from its block).
fn mm_weight(a: u32, kk: u32) -> f32 {
    if (s0_BS > 1u) {
        return s0_dq(a + (kk / s0_BS) * P.nb_0.x, kk % s0_BS);
    }
    return s0_ld(a + kk * P.nb_0.x);
}

// Sub-block `sub`'s 6-bit scale and min of the Q4_K or Q5_K block at `blk`.
fn q4k_scale_min(blk: u32, sub: u32) -> vec2<f32> {
    let sc = blk + 4u;
    if (sub < 4u) {
        return vec2<f32>(f32(s0_b(sc + sub) & 63u), f32(s0_b(sc + sub + 4u) & 63u));
    }
    let s = (s0_b(sc + sub + 4u) & 15u) | ((s0_b(sc + sub - 4u) >> 6u) << 4u);
    let m = (s0_b(sc + sub + 4u) >> 4u) | ((s0_b(sc + sub) >> 6u) << 4u);
    return vec2<f32>(f32(s), f32(m));
}
