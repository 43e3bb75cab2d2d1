// matvec_rows.wgsl: MUL_MAT with few columns (n <= MV_COLS) over MV_R rows
// at once: dst[i, j] = sum_k src0[k, i] * src1[k, j], src0 broadcast over
// dims 2-3. The host prepends MV_COLS (1 or 8), MV_LANES (32, 64 or 128
// invocations per group of rows, for the tree main), MV_R (rows per group,
// 1, 2 or 4) and MV_W4 (every word of src0's rows at a multiple of 4
// bytes), and appends a main: matvec_rows_tree.wgsl, or
// matvec_rows_subgroup.wgsl where the device has subgroup operations.
//
// Why: a one-column product reads its weights once but the activations
// once per row, from the cache; with one row per invocation group and
// scalar loads 64 bytes apart across a warp, those cache reads, not the
// weights, set the speed (on an NVIDIA H100 every weight type took the
// same ~130 us for 4096 x 14336, F32 and Q2_K alike). Here each invocation
// takes unit u (16 values) of MV_R rows: it dequantizes the rows' units to
// f32 vectors, loads the activations of the unit once per column as four
// 16-byte vectors, and uses them for all MV_R rows.
//
// Units (16 values) are four runs of 4 consecutive values of k: run v of
// unit u starts at mv_pos(u, v), and mv_unit(a, u) returns the 16
// dequantized weights of the row at byte `a` in that order. src0 and src1
// are bound as arrays of 16-byte vectors (s0_v4, s1_v4; the host picks this
// kernel only where src1's columns are contiguous F32 at 16-byte offsets
// and every row is whole units).


// Values of unit u in a row of 32-value blocks with the Q4_0 half layout:
// half h = u % 2 of block u / 2: low nibbles 8h..8h+8, high 16+8h..16+8h+8.
fn mv_pos_half32(u: u32, v: u32) -> u32 {
    return 32u * (u >> 1u) + 8u * (u & 1u) + select(0u, 16u, v >= 2u) + 4u * (v & 1u);
}

// k of the first value of run v (of four) of unit u.
fn mv_pos(u: u32, v: u32) -> u32 {
    if (s0_T == T_Q4_0 || s0_T == T_Q4_1 || s0_T == T_Q5_0 || s0_T == T_Q5_1
        || s0_T == T_IQ4_NL) {
        return mv_pos_half32(u, v);
    }
    if (s0_T == T_Q4_K || s0_T == T_Q5_K) {
        // Block u / 16, group g of 64, eighth e: low 64g + 8e, high 64g + 32 + 8e.
        let g = (u & 15u) >> 2u;
        return 256u * (u >> 4u) + 64u * g + 8u * (u & 3u) + select(0u, 32u, v >= 2u)
            + 4u * (v & 1u);
    }
    if (s0_T == T_IQ4_XS) {
        // Block u / 16, sub-block ib of 32 with the half layout.
        return 256u * (u >> 4u) + mv_pos_half32(u & 15u, v);
    }
    if (s0_T == T_Q6_K) {
        // Block u / 16, half h of 128, quarter v of 32 at l0 = 4 (u % 8).
        return 256u * (u >> 4u) + 128u * ((u & 15u) >> 3u) + 32u * v + 4u * (u & 7u);
    }
    // Q8_0 (half a block), Q2_K/Q3_K (a 16-value sub-block), F32, F16,
    // BF16: 16 consecutive values.
    return 16u * u + 4u * v;
}

// Four bytes of src0 at byte `p` (a multiple of 2) as one word: one load
// where every word of the rows is aligned (MV_W4, the host's finding), else
// two aligned loads and a select, not a branch (blocks of 18 or 34 bytes
// alternate their alignment from lane to lane).
fn mv_word(p: u32) -> u32 {
    let w = p >> 2u;
    if (MV_W4) {
        return s0_w(w);
    }
    let lo = s0_w(w);
    let hi = s0_w(w + 1u);
    return select(lo, (lo >> 16u) | (hi << 16u), (p & 2u) != 0u);
}

// The two words at byte `p` (a multiple of 2): three aligned loads.
fn mv_words2(p: u32) -> vec2<u32> {
    let w = p >> 2u;
    let a = s0_w(w);
    let b = s0_w(w + 1u);
    if (MV_W4) {
        return vec2<u32>(a, b);
    }
    let c = s0_w(w + 2u);
    let odd = (p & 2u) != 0u;
    return select(vec2<u32>(a, b), vec2<u32>((a >> 16u) | (b << 16u), (b >> 16u) | (c << 16u)), odd);
}

// The f16 at byte `p` of src0 (a multiple of 2), by the hardware's
// conversion (exact: every f16 is an f32).
fn mv_f16(p: u32) -> f32 {
    return unpack2x16float(s0_h(p)).x;
}

// The four bytes of `w` as unsigned values, shifted right by `sh` and masked.
fn mv_bytes(w: u32, sh: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(w, w >> 8u, w >> 16u, w >> 24u) >> vec4<u32>(sh)) & vec4<u32>(mask);
}

// Bit `bit` of each of the four bytes of `w`.
fn mv_bits(w: u32, bit: u32) -> vec4<u32> {
    return mv_bytes(w, bit, 1u);
}

// IQ4_NL's code book for four 4-bit codes: the values as signed bytes,
// four to a word, picked by selects (a table in function memory is slow).
fn mv_kv4(q: vec4<u32>) -> vec4<f32> {
    let b0 = (q & vec4<u32>(4u)) != vec4<u32>(0u);
    let b1 = (q & vec4<u32>(8u)) != vec4<u32>(0u);
    // kvalues -127 -104 -83 -65 | -49 -35 -22 -10 | 1 13 25 38 | 53 69 89 113
    let w = select(select(vec4<u32>(0xbfad9881u), vec4<u32>(0xf6eaddcfu), b0),
        select(vec4<u32>(0x26190d01u), vec4<u32>(0x71594535u), b0), b1);
    let byte = (w >> ((q & vec4<u32>(3u)) * 8u)) & vec4<u32>(0xffu);
    return vec4<f32>((vec4<i32>(byte << vec4<u32>(24u))) >> vec4<u32>(24u));
}

// Four F16 or BF16 values (two words) as f32.
fn mv_half4(x: vec2<u32>) -> vec4<f32> {
    if (s0_T == T_F16) {
        return vec4<f32>(unpack2x16float(x.x), unpack2x16float(x.y));
    }
    return vec4<f32>(bitcast<f32>(x.x << 16u), bitcast<f32>(x.x & 0xffff0000u),
        bitcast<f32>(x.y << 16u), bitcast<f32>(x.y & 0xffff0000u));
}

// The 16 weights of unit u of the row at byte `a`, run by run (mv_pos).
fn mv_unit(a: u32, u: u32) -> array<vec4<f32>, 4> {
    var w: array<vec4<f32>, 4>;
    if (s0_T == T_F32) {
        let p = a + 64u * u;
        for (var v = 0u; v < 4u; v = v + 1u) {
            w[v] = bitcast<vec4<f32>>(s0_v4(p + 16u * v));
        }
    } else if (s0_T == T_F16 || s0_T == T_BF16) {
        // The unit's 32 bytes: two 16-byte loads where the binding is one of
        // vectors (the host's choice for rows at multiples of 16 bytes),
        // else word by word.
        let p = a + 32u * u;
        var v0: vec4<u32>;
        var v1: vec4<u32>;
        if (MV_W4) {
            v0 = s0_v4(p);
            v1 = s0_v4(p + 16u);
        } else {
            v0 = vec4<u32>(mv_word(p), mv_word(p + 4u), mv_word(p + 8u), mv_word(p + 12u));
            v1 = vec4<u32>(mv_word(p + 16u), mv_word(p + 20u), mv_word(p + 24u),
                mv_word(p + 28u));
        }
        w[0] = mv_half4(v0.xy);
        w[1] = mv_half4(v0.zw);
        w[2] = mv_half4(v1.xy);
        w[3] = mv_half4(v1.zw);
    } else if (s0_T == T_Q4_0 || s0_T == T_Q4_1 || s0_T == T_Q5_0 || s0_T == T_Q5_1
        || s0_T == T_IQ4_NL) {
        let blk = a + (u >> 1u) * P.nb_0.x;
        let h = u & 1u;
        let d = mv_f16(blk);
        var c = 0.0;
        var qh = 0u;
        var qs = blk + 2u;
        if (s0_T == T_Q4_0) {
            c = -8.0 * d;
        } else if (s0_T == T_Q4_1) {
            c = mv_f16(blk + 2u);
            qs = blk + 4u;
        } else if (s0_T == T_Q5_0) {
            c = -16.0 * d;
            qh = s0_h(blk + 2u) | (s0_h(blk + 4u) << 16u);
            qs = blk + 6u;
        } else if (s0_T == T_Q5_1) {
            c = mv_f16(blk + 2u);
            qh = s0_h(blk + 4u) | (s0_h(blk + 6u) << 16u);
            qs = blk + 8u;
        }
        let words = mv_words2(qs + 8u * h);
        for (var v = 0u; v < 4u; v = v + 1u) {
            let word = words[v & 1u];
            var q = mv_bytes(word, select(0u, 4u, v >= 2u), 15u);
            if (s0_T == T_Q5_0 || s0_T == T_Q5_1) {
                // Fifth bits of values 8h + 4(v % 2) + j (+ 16 for high nibbles).
                let at = 8u * h + 4u * (v & 1u) + select(0u, 16u, v >= 2u);
                let hb = (qh >> at) & 15u;
                q = q | (vec4<u32>(hb, hb >> 1u, hb >> 2u, hb >> 3u) & vec4<u32>(1u)) << vec4<u32>(4u);
            }
            if (s0_T == T_IQ4_NL) {
                w[v] = d * mv_kv4(q);
            } else {
                w[v] = fma(vec4<f32>(q), vec4<f32>(d), vec4<f32>(c));
            }
        }
    } else if (s0_T == T_Q8_0) {
        let blk = a + (u >> 1u) * P.nb_0.x;
        let d = mv_f16(blk);
        let p = blk + 2u + 16u * (u & 1u);
        let lo = mv_words2(p);
        let hi = mv_words2(p + 8u);
        let words = vec4<u32>(lo, hi);
        for (var v = 0u; v < 4u; v = v + 1u) {
            let word = words[v];
            w[v] = d * vec4<f32>(vec4<i32>(sext8(word & 0xffu), sext8((word >> 8u) & 0xffu),
                sext8((word >> 16u) & 0xffu), sext8(word >> 24u)));
        }
    } else if (s0_T == T_Q4_K || s0_T == T_Q5_K) {
        let blk = a + (u >> 4u) * P.nb_0.x;
        let g = (u & 15u) >> 2u;
        let e = u & 3u;
        let d = mv_f16(blk);
        let dmin = mv_f16(blk + 2u);
        let lo_sm = q4k_scale_min(blk, 2u * g);
        let hi_sm = q4k_scale_min(blk, 2u * g + 1u);
        var p = blk + 16u + 32u * g + 8u * e;
        if (s0_T == T_Q5_K) {
            p = blk + 48u + 32u * g + 8u * e;
        }
        for (var v = 0u; v < 4u; v = v + 1u) {
            let high = v >= 2u;
            let word = mv_word(p + 4u * (v & 1u));
            var q = mv_bytes(word, select(0u, 4u, high), 15u);
            if (s0_T == T_Q5_K) {
                let hw = mv_word(blk + 16u + 8u * e + 4u * (v & 1u));
                q = q | (mv_bits(hw, 2u * g + select(0u, 1u, high)) << vec4<u32>(4u));
            }
            let sm = select(lo_sm, hi_sm, high);
            w[v] = fma(vec4<f32>(q), vec4<f32>(d * sm.x), vec4<f32>(-dmin * sm.y));
        }
    } else if (s0_T == T_IQ4_XS) {
        let blk = a + (u >> 4u) * P.nb_0.x;
        let ib = (u & 15u) >> 1u;
        let h = u & 1u;
        let lo6 = (s0_b(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
        let hi6 = (s0_h(blk + 2u) >> (2u * ib)) & 3u;
        let dl = mv_f16(blk) * f32(i32(lo6 | (hi6 << 4u)) - 32);
        let p = blk + 8u + 16u * ib + 8u * h;
        for (var v = 0u; v < 4u; v = v + 1u) {
            let word = mv_word(p + 4u * (v & 1u));
            w[v] = dl * mv_kv4(mv_bytes(word, select(0u, 4u, v >= 2u), 15u));
        }
    } else if (s0_T == T_Q2_K || s0_T == T_Q3_K) {
        let blk = a + (u >> 4u) * P.nb_0.x;
        let is = u & 15u;
        let sh = 2u * ((is % 8u) / 2u);
        let at = 32u * (is / 8u) + 16u * (is % 2u);
        if (s0_T == T_Q2_K) {
            let sc = s0_b(blk + is);
            let scale = mv_f16(blk + 80u) * f32(sc & 15u);
            let minv = mv_f16(blk + 82u) * f32(sc >> 4u);
            for (var v = 0u; v < 4u; v = v + 1u) {
                let q = mv_bytes(mv_word(blk + 16u + at + 4u * v), sh, 3u);
                w[v] = fma(vec4<f32>(q), vec4<f32>(scale), vec4<f32>(-minv));
            }
        } else {
            let sb = s0_b(blk + 96u + (is & 7u));
            let lo = select(sb >> 4u, sb & 15u, is < 8u);
            let hi = (s0_b(blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
            let scale = mv_f16(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
            for (var v = 0u; v < 4u; v = v + 1u) {
                let q = mv_bytes(mv_word(blk + 32u + at + 4u * v), sh, 3u);
                let hm = mv_bits(mv_word(blk + 16u * (is % 2u) + 4u * v), is / 2u);
                // q - 4 where the hmask bit is clear.
                w[v] = scale * (vec4<f32>(q) - 4.0 * (vec4<f32>(1.0) - vec4<f32>(hm)));
            }
        }
    } else {
        // Q6_K: block u / 16, half h, positions l0 = 4 (u % 8) .. + 4 of its
        // four quarters of 32 (run v = quarter v).
        let blk = a + (u >> 4u) * P.nb_0.x;
        let h = (u & 15u) >> 3u;
        let l0 = 4u * (u & 7u);
        let d = mv_f16(blk + 208u);
        let ql0 = mv_word(blk + 64u * h + l0);
        let ql1 = mv_word(blk + 64u * h + 32u + l0);
        let qh = mv_word(blk + 128u + 32u * h + l0);
        for (var v = 0u; v < 4u; v = v + 1u) {
            let lo = mv_bytes(select(ql0, ql1, (v & 1u) == 1u), select(0u, 4u, v >= 2u), 15u);
            let hi = mv_bytes(qh, 2u * v, 3u);
            let sc = f32(sext8(s0_b(blk + 192u + 8u * h + l0 / 16u + 2u * v)));
            w[v] = (d * sc) * (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 32.0);
        }
    }
    return w;
}

// Lane t of `lanes`'s partial sums of rows i0..i0 + MV_R (those below m)
// of batch (i2, i3) by its n columns: (row rr, column c) at rr * MV_COLS + c.
fn mv_partials(i0: u32, i2: u32, i3: u32, t: u32, lanes: u32) -> array<f32, MV_R * MV_COLS> {
    let m = P.ne_d.x;
    let n = P.ne_d.y;
    let a = mm_a_base(i2, i3) + i0 * P.nb_0.y;
    let b = mm_b_base(i2, i3);
    var acc: array<f32, MV_R * MV_COLS>;
    for (var u = t; u < P.ne_0.x / 16u; u = u + lanes) {
        var w: array<array<vec4<f32>, 4>, MV_R>;
        for (var rr = 0u; rr < MV_R; rr = rr + 1u) {
            if (i0 + rr < m) {
                w[rr] = mv_unit(a + rr * P.nb_0.y, u);
            }
        }
        for (var c = 0u; c < MV_COLS; c = c + 1u) {
            if (MV_COLS == 1u || c < n) {
                let bc = b + c * P.nb_1.y;
                let y0 = bitcast<vec4<f32>>(s1_v4(bc + 4u * mv_pos(u, 0u)));
                let y1 = bitcast<vec4<f32>>(s1_v4(bc + 4u * mv_pos(u, 1u)));
                let y2 = bitcast<vec4<f32>>(s1_v4(bc + 4u * mv_pos(u, 2u)));
                let y3 = bitcast<vec4<f32>>(s1_v4(bc + 4u * mv_pos(u, 3u)));
                for (var rr = 0u; rr < MV_R; rr = rr + 1u) {
                    acc[rr * MV_COLS + c] = acc[rr * MV_COLS + c] + dot(w[rr][0], y0)
                        + dot(w[rr][1], y1) + dot(w[rr][2], y2) + dot(w[rr][3], y3);
                }
            }
        }
    }
    return acc;
}

// Store sum j (row i0 + j / MV_COLS, column j % MV_COLS) where it is in
// the destination.
fn mv_store(i0: u32, i2: u32, i3: u32, j: u32, v: f32) {
    let rr = j / MV_COLS;
    let c = j % MV_COLS;
    if (i0 + rr < P.ne_d.x && c < P.ne_d.y) {
        d_st(P.off.x + (i0 + rr) * P.nb_d.x + c * P.nb_d.y + i2 * P.nb_d.z + i3 * P.nb_d.w, v);
    }
}
