// mq_unit.wgsl: 32 values of a quantized weight row (a unit: a block, or a
// sub-block of a K-quant) as the integer kernels take them (matvec_q8.wgsl,
// matmul_q8.wgsl; prepended to each): the codes packed four to a word for
// dot4I8Packed, and the factors (fa, fb, fs) that scale the exact sums
// isum0 (values 0..16) and isum1 (16..32): fs carries the codes' offset or
// the block's min (Q2_K: g, each half's min, for each half's sum of
// activation bytes). Types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (matvec_q8.rs's TYPES).

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

// Each byte (an index 0..16) to IQ4_NL's value, a signed byte: the 16
// values packed four to a word, picked by selects (no table in memory).
fn mq_iq4(x: vec4<u32>) -> vec4<u32> {
    var out = vec4<u32>(0u);
    for (var j = 0u; j < 32u; j = j + 8u) {
        let i = (x >> vec4<u32>(j)) & vec4<u32>(15u);
        let lo = select(vec4<u32>(0xbfad9881u), vec4<u32>(0xf6eaddcfu), i >= vec4<u32>(4u));
        let hi = select(vec4<u32>(0x26190d01u), vec4<u32>(0x71594535u), i >= vec4<u32>(12u));
        let word = select(lo, hi, i >= vec4<u32>(8u));
        out = out | (((word >> ((i & vec4<u32>(3u)) * 8u)) & vec4<u32>(0xffu)) << vec4<u32>(j));
    }
    return out;
}

// Sub-block `is`'s scale of the Q3_K block at `blk` (6 bits less 32).
fn mq_q3k_scale(blk: u32, is: u32) -> f32 {
    let sb = s0_b(blk + 96u + (is & 7u));
    let lo = select(sb >> 4u, sb & 15u, is < 8u);
    let hi = (s0_b(blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

struct MqUnit {
    w0: vec4<u32>,
    w1: vec4<u32>,
    // fa, fb, fs.
    f: vec3<f32>,
    // Q2_K: each half's min (its factor for the sum of that half's
    // activation bytes, mq_half_sums); 0 for the other types.
    g: vec2<f32>,
}

// The sums of the activation bytes of a unit's halves (y0: values 0..16,
// y1: 16..32), for Q2_K's per-half mins.
fn mq_half_sums(y0: vec4<u32>, y1: vec4<u32>) -> vec2<f32> {
    let ones = vec4<u32>(0x01010101u);
    return vec2<f32>(f32(mq_dot(ones, y0)), f32(mq_dot(ones, y1)));
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
    } else if (s0_T == T_Q5_K) {
        // As Q4_K, with the fifth bits of sub-block j: bit j of qh[l] for
        // value l of the sub-block.
        let blk = a + (b >> 3u) * s0_TS;
        let j = b & 7u;
        let d = mq_f16(blk);
        let dmin = mq_f16(blk + 2u);
        let sm = q4k_scale_min(blk, j);
        let q = blk + 48u + 32u * (j >> 1u);
        let sh = vec4<u32>(4u * (j & 1u));
        let hs = vec4<u32>(j);
        let ones = vec4<u32>(0x01010101u);
        let h0 = ((mq_words4(blk + 16u) >> hs) & ones) << vec4<u32>(4u);
        let h1 = ((mq_words4(blk + 32u) >> hs) & ones) << vec4<u32>(4u);
        u.w0 = ((mq_words4(q) >> sh) & m4) | h0;
        u.w1 = ((mq_words4(q + 16u) >> sh) & m4) | h1;
        u.f = vec3<f32>(d * sm.x, d * sm.x, -dmin * sm.y);
    } else if (s0_T == T_Q2_K) {
        // Sub-blocks 2j and 2j + 1 of 16 values (j = b % 8): 2-bit codes
        // from 16 bytes each at 16 + 32 (j / 4) (+ 16) at shift 2 (j % 4);
        // each sub-block's scale (low nibble) and min (high) times d, dmin.
        let blk = a + (b >> 3u) * s0_TS;
        let j = b & 7u;
        let q = blk + 16u + 32u * (j >> 2u);
        let sh = vec4<u32>(2u * (j & 3u));
        let three = vec4<u32>(0x03030303u);
        u.w0 = (mq_words4(q) >> sh) & three;
        u.w1 = (mq_words4(q + 16u) >> sh) & three;
        let d = mq_f16(blk + 80u);
        let dmin = mq_f16(blk + 82u);
        let s0 = s0_b(blk + 2u * j);
        let s1 = s0_b(blk + 2u * j + 1u);
        u.f = vec3<f32>(d * f32(s0 & 15u), d * f32(s1 & 15u), 0.0);
        u.g = vec2<f32>(-dmin * f32(s0 >> 4u), -dmin * f32(s1 >> 4u));
    } else if (s0_T == T_Q3_K) {
        // Sub-blocks 2j and 2j + 1 of 16 values (j = b % 8): 2-bit quants
        // from 16 bytes each at 32 + 32 (j / 4) (+ 16) at shift 2 (j % 4),
        // the third bit j of hmask's bytes 0..16 (16..32); code = that
        // 3-bit value less 4; each sub-block its 6-bit scale less 32.
        let blk = a + (b >> 3u) * s0_TS;
        let j = b & 7u;
        let q = blk + 32u + 32u * (j >> 2u);
        let sh = vec4<u32>(2u * (j & 3u));
        let hs = vec4<u32>(j);
        let three = vec4<u32>(0x03030303u);
        let ones = vec4<u32>(0x01010101u);
        let c0 = ((mq_words4(q) >> sh) & three) | (((mq_words4(blk) >> hs) & ones) << vec4<u32>(2u));
        let c1 = ((mq_words4(q + 16u) >> sh) & three)
            | (((mq_words4(blk + 16u) >> hs) & ones) << vec4<u32>(2u));
        // Less 4 byte by byte, without borrows (each byte below 8).
        let t = vec4<u32>(0x80808080u);
        u.w0 = ((c0 | t) - vec4<u32>(0x04040404u)) ^ t;
        u.w1 = ((c1 | t) - vec4<u32>(0x04040404u)) ^ t;
        let d = mq_f16(blk + 108u);
        u.f = vec3<f32>(d * mq_q3k_scale(blk, 2u * j), d * mq_q3k_scale(blk, 2u * j + 1u), 0.0);
    } else if (s0_T == T_IQ4_NL || s0_T == T_IQ4_XS) {
        // Byte j of the 16 holds indices j (low nibble) and 16 + j (high)
        // into the non-linear values: an IQ4_NL block, or sub-block
        // ib = b % 8 of an IQ4_XS block with its 6-bit scale.
        var qs: u32;
        var dl: f32;
        if (s0_T == T_IQ4_XS) {
            let blk = a + (b >> 3u) * s0_TS;
            let ib = b & 7u;
            let lo = (s0_b(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
            let hi = (s0_h(blk + 2u) >> (2u * ib)) & 3u;
            dl = mq_f16(blk) * f32(i32(lo | (hi << 4u)) - 32);
            qs = blk + 8u + 16u * ib;
        } else {
            let blk = a + b * s0_TS;
            dl = mq_f16(blk);
            qs = blk + 2u;
        }
        let q = mq_words4(qs);
        u.w0 = mq_iq4(q & m4);
        u.w1 = mq_iq4((q >> vec4<u32>(4u)) & m4);
        u.f = vec3<f32>(dl, dl, 0.0);
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
