// store_iq4_xs.wgsl: quantize qbuf[0..256] into the IQ4_XS block at `blk`
// of `d`, as ggml's quantize_row_iq4_xs_ref (quantize_row_iq4_nl_impl with
// ntry = 7, weights x * x): per 32-value sub-block the best least-squares
// scale over 15 trial scales around max / 127, then 6-bit sub-block scales
// against d = -max_scale / 32 and the indices recomputed with them.
// Products the host rounds before an addition or a comparison with a
// difference are wrapped in nofma().

// ggml's best_index_int8(16, kvalues_iq4nl, x), C's binary search.
fn best_index_iq4nl(x: f32) -> u32 {
    if (x <= -127.0) {
        return 0u;
    }
    if (x >= 113.0) {
        return 15u;
    }
    var ml = 0u;
    var mu = 15u;
    while (mu - ml > 1u) {
        let mav = (ml + mu) / 2u;
        if (x < kvalue_iq4nl(mav)) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    return select(mu, mu - 1u, x - kvalue_iq4nl(mu - 1u) < kvalue_iq4nl(mu) - x);
}

// ggml's nearest_int: the magic-number trick, round half to even.
fn nearest_int(f: f32) -> i32 {
    let v = f + 12582912.0;
    return i32(bitcast<u32>(v) & 0x7fffffu) - 0x400000;
}

// `n` plus a run-time zero: loop bounds the compiler cannot see keep
// llvmpipe from unrolling the searches.
fn rt(n: u32) -> u32 {
    return n + P.off2.z;
}

// sum w q x and sum w q q over sub-block `base` with inverse scale `id`.
fn iq4_sums(base: u32, id: f32) -> vec2<f32> {
    var sumqx = 0.0;
    var sumq2 = 0.0;
    for (var k = 0u; k < rt(32u); k = k + 1u) {
        let x = qbuf[base + k];
        let q = kvalue_iq4nl(best_index_iq4nl(nofma(id * x)));
        let wq = nofma(nofma(x * x) * q);
        sumqx = sumqx + nofma(wq * x);
        sumq2 = sumq2 + nofma(wq * q);
    }
    return vec2<f32>(sumqx, sumq2);
}

// The scale of sub-block `ib` (0 for an all-tiny one).
fn iq4_scale(ib: u32) -> f32 {
    let base = 32u * ib;
    var amax = 0.0;
    var mx = 0.0;
    for (var k = 0u; k < rt(32u); k = k + 1u) {
        let a = abs(qbuf[base + k]);
        if (a > amax) {
            amax = a;
            mx = qbuf[base + k];
        }
    }
    if (amax < 1e-15) {
        return 0.0;
    }
    let s0 = iq4_sums(base, div_rn(1.0, div_rn(-mx, -127.0)));
    var d = select(0.0, div_rn(s0.x, s0.y), s0.y > 0.0);
    var best = d * s0.x;
    for (var itry = -7; itry <= i32(rt(7u)); itry = itry + 1) {
        let s = iq4_sums(base, div_rn(f32(itry - 127), mx));
        if (s.y > 0.0 && s.x * s.x > best * s.y) {
            d = div_rn(s.x, s.y);
            best = d * s.x;
        }
    }
    return d;
}

fn store_iq4_xs(blk: u32) {
    var scales: array<f32, 8>;
    var amax_scale = 0.0;
    var max_scale = 0.0;
    for (var ib = 0u; ib < rt(8u); ib = ib + 1u) {
        let s = iq4_scale(ib);
        scales[ib] = s;
        if (abs(s) > amax_scale) {
            amax_scale = abs(s);
            max_scale = s;
        }
    }
    let d = div_rn(-max_scale, 32.0);
    let id = select(0.0, div_rn(1.0, d), d != 0.0);
    d_sh(blk, f32_to_f16(d));
    var sh = 0u;
    for (var ib = 0u; ib < rt(8u); ib = ib + 1u) {
        let l = clamp(nearest_int(nofma(id * scales[ib])), -32, 31);
        let dl = d * f32(l);
        let idl = select(0.0, div_rn(1.0, dl), dl != 0.0);
        let lu = u32(l + 32);
        sh = sh | ((lu >> 4u) << (2u * ib));
        if (ib % 2u == 1u) {
            // Both nibbles of scales_l[ib / 2] at once (bytes are written whole).
            let prev = u32(clamp(nearest_int(nofma(id * scales[ib - 1u])), -32, 31) + 32);
            d_sb(blk + 4u + ib / 2u, ((prev & 15u) | ((lu & 15u) << 4u)) & 0xffu);
        }
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            let lo = best_index_iq4nl(nofma(idl * qbuf[32u * ib + k]));
            let hi = best_index_iq4nl(nofma(idl * qbuf[32u * ib + 16u + k]));
            d_sb(blk + 8u + 16u * ib + k, (lo | (hi << 4u)) & 0xffu);
        }
    }
    d_sh(blk + 2u, sh);
}

fn store_block(blk: u32) {
    store_iq4_xs(blk);
}
