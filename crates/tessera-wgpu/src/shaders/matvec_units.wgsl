// matvec_units.wgsl: the matrix-vector kernel's units (prepended to
// matvec.wgsl): 16 consecutive values of a weight row against every column,
// one routine per family of layouts. Each reads its block's scales once and
// its quants as whole words, sums integer-valued products and applies each
// scale once (offsets and mins through the activations' sums, as ggml
// does); `acc` gets one partial per column.

// Four bytes of src0 at byte `p` (a multiple of 2) as one word.
fn mv_word(p: u32) -> u32 {
    let w = p >> 2u;
    if ((p & 2u) == 0u) {
        return s0_w(w);
    }
    return (s0_w(w) >> 16u) | (s0_w(w + 1u) << 16u);
}

// Unit u (16 values) of a row at byte `a` of 32-value blocks with 4-bit
// quants (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) against every column: half h of
// block u / 2, quant bytes 8h..8h+8 (values 8h + i low, 16 + 8h + i high;
// Q5's fifth bits from qh). Value = d (q + off) + m, or d kvalue(q) (IQ4_NL).
fn mv_unit_q4(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 1u) * P.nb_0.x;
    let h = u & 1u;
    let d = f16_to_f32(s0_h(blk));
    var m = 0.0;
    var off = 0.0;
    var qh = 0u;
    var qs = blk + 2u;
    if (s0_T == T_Q4_0) {
        off = -8.0;
    } else if (s0_T == T_Q4_1) {
        m = f16_to_f32(s0_h(blk + 2u));
        qs = blk + 4u;
    } else if (s0_T == T_Q5_0) {
        off = -16.0;
        qh = s0_h(blk + 2u) | (s0_h(blk + 4u) << 16u);
        qs = blk + 6u;
    } else if (s0_T == T_Q5_1) {
        m = f16_to_f32(s0_h(blk + 2u));
        qh = s0_h(blk + 4u) | (s0_h(blk + 6u) << 16u);
        qs = blk + 8u;
    }
    let q = array<u32, 2>(mv_word(qs + 8u * h), mv_word(qs + 8u * h + 4u));
    let k0 = (u >> 1u) * 32u + 8u * h;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var sqy = 0.0;
            var sy = 0.0;
            for (var i = 0u; i < 8u; i = i + 1u) {
                let byte = q[i / 4u] >> (8u * (i % 4u));
                var lo = byte & 15u;
                var hi = (byte >> 4u) & 15u;
                if (s0_T == T_Q5_0 || s0_T == T_Q5_1) {
                    lo = lo | (((qh >> (8u * h + i)) & 1u) << 4u);
                    hi = hi | (((qh >> (16u + 8u * h + i)) & 1u) << 4u);
                }
                let y_lo = s1_ld(bc + i * P.nb_1.x);
                let y_hi = s1_ld(bc + (16u + i) * P.nb_1.x);
                if (s0_T == T_IQ4_NL) {
                    sqy = sqy + kvalue_iq4nl(lo) * y_lo + kvalue_iq4nl(hi) * y_hi;
                } else {
                    sqy = sqy + f32(lo) * y_lo + f32(hi) * y_hi;
                }
                sy = sy + y_lo + y_hi;
            }
            (*acc)[c] = (*acc)[c] + d * (sqy + off * sy) + m * sy;
        }
    }
}

// Unit u (16 values) of the Q8_0 row at byte `a`: half h of block u / 2.
fn mv_unit_q8_0(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 1u) * P.nb_0.x;
    let h = u & 1u;
    let d = f16_to_f32(s0_h(blk));
    let p = blk + 2u + 16u * h;
    let q = array<u32, 4>(mv_word(p), mv_word(p + 4u), mv_word(p + 8u), mv_word(p + 12u));
    let k0 = (u >> 1u) * 32u + 16u * h;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var sqy = 0.0;
            for (var i = 0u; i < 16u; i = i + 1u) {
                let v = f32(sext8((q[i / 4u] >> (8u * (i % 4u))) & 0xffu));
                sqy = sqy + v * s1_ld(bc + i * P.nb_1.x);
            }
            (*acc)[c] = (*acc)[c] + d * sqy;
        }
    }
}

// Unit u (16 values) of the Q4_K or Q5_K row at byte `a`: block u / 16,
// group g = (u % 16) / 4 of 64 values, quarter e of its 32 quant bytes:
// values 64g + 8e + i (low nibbles, sub-block 2g) and 64g + 32 + 8e + i
// (high nibbles, 2g + 1); Q5_K's fifth bits are bits 2g and 2g + 1 of qh[8e + i].
fn mv_unit_qk(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 4u) * P.nb_0.x;
    let g = (u & 15u) >> 2u;
    let e = u & 3u;
    let d = f16_to_f32(s0_h(blk));
    let dmin = f16_to_f32(s0_h(blk + 2u));
    let lo_sm = q4k_scale_min(blk, 2u * g);
    let hi_sm = q4k_scale_min(blk, 2u * g + 1u);
    var p = blk + 16u + 32u * g + 8u * e;
    var qh = array<u32, 2>(0u, 0u);
    if (s0_T == T_Q5_K) {
        qh = array<u32, 2>(mv_word(blk + 16u + 8u * e), mv_word(blk + 20u + 8u * e));
        p = blk + 48u + 32u * g + 8u * e;
    }
    let q = array<u32, 2>(mv_word(p), mv_word(p + 4u));
    let k0 = (u >> 4u) * 256u + 64u * g + 8u * e;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var qy_lo = 0.0;
            var qy_hi = 0.0;
            var y_lo = 0.0;
            var y_hi = 0.0;
            for (var i = 0u; i < 8u; i = i + 1u) {
                let byte = q[i / 4u] >> (8u * (i % 4u));
                var lo = byte & 15u;
                var hi = (byte >> 4u) & 15u;
                if (s0_T == T_Q5_K) {
                    let hb = qh[i / 4u] >> (8u * (i % 4u));
                    lo = lo | (((hb >> (2u * g)) & 1u) << 4u);
                    hi = hi | (((hb >> (2u * g + 1u)) & 1u) << 4u);
                }
                let yl = s1_ld(bc + i * P.nb_1.x);
                let yh = s1_ld(bc + (32u + i) * P.nb_1.x);
                qy_lo = qy_lo + f32(lo) * yl;
                qy_hi = qy_hi + f32(hi) * yh;
                y_lo = y_lo + yl;
                y_hi = y_hi + yh;
            }
            (*acc)[c] = (*acc)[c] + d * (lo_sm.x * qy_lo + hi_sm.x * qy_hi)
                - dmin * (lo_sm.y * y_lo + hi_sm.y * y_hi);
        }
    }
}

// Unit u (16 values) of the IQ4_XS row at byte `a`: block u / 16, sub-block
// ib = (u % 16) / 2 of 32 values with its 6-bit scale, half h of its 16
// index bytes (values 32 ib + 8h + i low, 32 ib + 16 + 8h + i high).
fn mv_unit_iq4_xs(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 4u) * P.nb_0.x;
    let ib = (u & 15u) >> 1u;
    let h = u & 1u;
    let lo6 = (s0_b(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
    let hi6 = (s0_h(blk + 2u) >> (2u * ib)) & 3u;
    let dl = f16_to_f32(s0_h(blk)) * f32(i32(lo6 | (hi6 << 4u)) - 32);
    let p = blk + 8u + 16u * ib + 8u * h;
    let q = array<u32, 2>(mv_word(p), mv_word(p + 4u));
    let k0 = (u >> 4u) * 256u + 32u * ib + 8u * h;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var s = 0.0;
            for (var i = 0u; i < 8u; i = i + 1u) {
                let byte = q[i / 4u] >> (8u * (i % 4u));
                s = s + kvalue_iq4nl(byte & 15u) * s1_ld(bc + i * P.nb_1.x)
                    + kvalue_iq4nl((byte >> 4u) & 15u) * s1_ld(bc + (16u + i) * P.nb_1.x);
            }
            (*acc)[c] = (*acc)[c] + dl * s;
        }
    }
}

// Unit u (16 values) of the Q2_K or Q3_K row at byte `a`: sub-block
// is = u % 16 of block u / 16 (values 16 is + i): 2-bit quants from bytes
// 32 (is / 8) + 16 (is % 2) + i at shift 2 ((is % 8) / 2); Q2_K: value
// d (sc & 15) q - dmin (sc >> 4); Q3_K: d (sc - 32) (q - 4 unless the
// hmask bit is set).
fn mv_unit_q23k(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 4u) * P.nb_0.x;
    let is = u & 15u;
    let sh = 2u * ((is % 8u) / 2u);
    let at = 32u * (is / 8u) + 16u * (is % 2u);
    var qs = blk + 16u + at;
    var scale = 0.0;
    var minv = 0.0;
    var hm = array<u32, 4>(0u, 0u, 0u, 0u);
    if (s0_T == T_Q2_K) {
        let sc = s0_b(blk + is);
        scale = f16_to_f32(s0_h(blk + 80u)) * f32(sc & 15u);
        minv = f16_to_f32(s0_h(blk + 82u)) * f32(sc >> 4u);
    } else {
        qs = blk + 32u + at;
        let sb = s0_b(blk + 96u + (is & 7u));
        let lo = select(sb >> 4u, sb & 15u, is < 8u);
        let hi = (s0_b(blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
        scale = f16_to_f32(s0_h(blk + 108u)) * f32(i32(lo | (hi << 4u)) - 32);
        let hp = blk + 16u * (is % 2u);
        hm = array<u32, 4>(mv_word(hp), mv_word(hp + 4u), mv_word(hp + 8u), mv_word(hp + 12u));
    }
    let q = array<u32, 4>(mv_word(qs), mv_word(qs + 4u), mv_word(qs + 8u), mv_word(qs + 12u));
    let k0 = (u >> 4u) * 256u + 16u * is;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var qy = 0.0;
            var sy = 0.0;
            for (var i = 0u; i < 16u; i = i + 1u) {
                let y = s1_ld(bc + i * P.nb_1.x);
                var v = i32((q[i / 4u] >> (8u * (i % 4u) + sh)) & 3u);
                if (s0_T == T_Q3_K) {
                    let hbit = (hm[i / 4u] >> (8u * (i % 4u) + is / 2u)) & 1u;
                    v = v - select(4, 0, hbit == 1u);
                }
                qy = qy + f32(v) * y;
                sy = sy + y;
            }
            (*acc)[c] = (*acc)[c] + scale * qy - minv * sy;
        }
    }
}

// Unit u (16 values) of an F16 or BF16 row at byte `a`: values 16u..16u+16,
// two to a word.
fn mv_unit_half(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    var w: array<f32, 16>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        let word = mv_word(a + 32u * u + 4u * i);
        if (s0_T == T_F16) {
            let v = unpack2x16float(word);
            w[2u * i] = v.x;
            w[2u * i + 1u] = v.y;
        } else {
            w[2u * i] = bitcast<f32>(word << 16u);
            w[2u * i + 1u] = bitcast<f32>(word & 0xffff0000u);
        }
    }
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + 16u * u * P.nb_1.x;
            var s = 0.0;
            for (var i = 0u; i < 16u; i = i + 1u) {
                s = s + w[i] * s1_ld(bc + i * P.nb_1.x);
            }
            (*acc)[c] = (*acc)[c] + s;
        }
    }
}

// Unit u (16 values) of the Q6_K row at byte `a`: block u / 16, half
// h = (u % 16) / 8 of 128 values, positions l = 4 (u % 8) + i of its four
// quarters of 32 (values 128h + 32r + l, r = 0..4).
fn mv_unit_q6_k(a: u32, u: u32, b: u32, n: u32, acc: ptr<function, array<f32, MV_COLS>>) {
    let blk = a + (u >> 4u) * P.nb_0.x;
    let h = (u & 15u) >> 3u;
    let l0 = 4u * (u & 7u);
    let d = f16_to_f32(s0_h(blk + 208u));
    let ql0 = mv_word(blk + 64u * h + l0);
    let ql1 = mv_word(blk + 64u * h + 32u + l0);
    let qh = mv_word(blk + 128u + 32u * h + l0);
    var sc: array<f32, 4>;
    for (var r = 0u; r < 4u; r = r + 1u) {
        sc[r] = f32(sext8(s0_b(blk + 192u + 8u * h + l0 / 16u + 2u * r)));
    }
    let k0 = (u >> 4u) * 256u + 128u * h + l0;
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        if (MV_COLS == 1u || c < n) {
            let bc = b + c * P.nb_1.y + k0 * P.nb_1.x;
            var sum = 0.0;
            for (var r = 0u; r < 4u; r = r + 1u) {
                var qy = 0.0;
                for (var i = 0u; i < 4u; i = i + 1u) {
                    let lb = select(ql0, ql1, (r & 1u) == 1u) >> (8u * i);
                    let lo = select(lb & 15u, (lb >> 4u) & 15u, r >= 2u);
                    let hi = (qh >> (8u * i + 2u * r)) & 3u;
                    let v = f32(i32(lo | (hi << 4u)) - 32);
                    qy = qy + v * s1_ld(bc + (32u * r + i) * P.nb_1.x);
                }
                sum = sum + sc[r] * qy;
            }
            (*acc)[c] = (*acc)[c] + d * sum;
        }
    }
}

