// store_q3_k.wgsl: quantize qbuf[0..256] into the Q3_K block at `blk` of
// `d`: a port of ggml's quantize_row_q3_K_ref with its iterative scale
// search (make_q3_quants, weights x²) and nearest_int's round half to even.
// Products that the host rounds before an addition are wrapped in nofma()
// so the compiler cannot fuse them.

var<private> kq: array<i32, 256>;

// `n` plus a run-time zero: loop bounds the compiler cannot see keep
// llvmpipe from unrolling the searches (it would spend seconds compiling).
fn rt(n: u32) -> u32 {
    return n + P.off2.z;
}

// ggml's nearest_int: the magic-number trick, round half to even.
fn nearest_int(f: f32) -> i32 {
    let v = f + 12582912.0;
    return i32(bitcast<u32>(v) & 0x7fffffu) - 0x400000;
}

// make_q3_quants(16, 4, x, L, true) on sub-block j (values qbuf[16j..]);
// codes (q + 4) in kq[16j..], or 0 for an all-zero group; returns the scale.
fn make_q3(j: u32) -> f32 {
    let base = 16u * j;
    var mx = 0.0;
    var amax = 0.0;
    for (var k = 0u; k < rt(16u); k = k + 1u) {
        let xi = qbuf[base + k];
        if (abs(xi) > amax) {
            amax = abs(xi);
            mx = xi;
        }
    }
    if (amax < 1e-15) {
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kq[base + k] = 0;
        }
        return 0.0;
    }
    let iscale = div_rn(-4.0, mx);
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var k = 0u; k < rt(16u); k = k + 1u) {
        let xi = qbuf[base + k];
        let q = clamp(nearest_int(nofma(iscale * xi)), -4, 3);
        kq[base + k] = q;
        let w = nofma(xi * xi);
        sumlx = sumlx + nofma(nofma(w * xi) * f32(q));
        suml2 = suml2 + nofma(nofma(w * f32(q)) * f32(q));
    }
    for (var itry = 0u; itry < rt(5u); itry = itry + 1u) {
        var n_changed = 0u;
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            let xi = qbuf[base + k];
            let w = nofma(xi * xi);
            let lf = f32(kq[base + k]);
            var slx = sumlx - nofma(nofma(w * xi) * lf);
            if (slx > 0.0) {
                var sl2 = suml2 - nofma(nofma(w * lf) * lf);
                let new_l = clamp(nearest_int(div_rn(nofma(xi * sl2), slx)), -4, 3);
                if (new_l != kq[base + k]) {
                    let nf = f32(new_l);
                    slx = slx + nofma(nofma(w * xi) * nf);
                    sl2 = sl2 + nofma(nofma(w * nf) * nf);
                    if (sl2 > 0.0 && nofma(nofma(slx * slx) * suml2) > nofma(nofma(sumlx * sumlx) * sl2)) {
                        kq[base + k] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed = n_changed + 1u;
                    }
                }
            }
        }
        if (n_changed == 0u) {
            break;
        }
    }
    for (var k = 0u; k < rt(16u); k = k + 1u) {
        kq[base + k] = kq[base + k] + 4;
    }
    return select(0.0, div_rn(sumlx, suml2), suml2 > 0.0);
}

fn store_q3_k(blk: u32) {
    var scales: array<f32, 16>;
    var max_scale = 0.0;
    var amax = 0.0;
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        let s = make_q3(j);
        scales[j] = s;
        if (abs(s) > amax) {
            amax = abs(s);
            max_scale = s;
        }
    }
    var sc: array<u32, 12>;
    var d = 0u;
    if (max_scale != 0.0) {
        let iscale = div_rn(-32.0, max_scale);
        for (var j = 0u; j < rt(16u); j = j + 1u) {
            // C: int8_t l = nearest_int(...) keeps the low byte, then clamps.
            let l8 = (nearest_int(nofma(iscale * scales[j])) << 24u) >> 24u;
            let v = u32(clamp(l8, -32, 31) + 32);
            if (j < 8u) {
                sc[j] = v & 15u;
            } else {
                sc[j - 8u] = sc[j - 8u] | ((v & 15u) << 4u);
            }
            sc[j % 4u + 8u] = sc[j % 4u + 8u] | ((v >> 4u) << (2u * (j / 4u)));
        }
        d = f32_to_f16(div_rn(1.0, iscale));
    }
    let df = f16_to_f32(d);
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        let lo = select(sc[j & 7u] >> 4u, sc[j & 7u] & 15u, j < 8u);
        let hi = (sc[8u + j % 4u] >> (2u * (j / 4u))) & 3u;
        let dd = df * f32(i32(lo | (hi << 4u)) - 32);
        if (dd == 0.0) {
            continue;
        }
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kq[16u * j + k] = clamp(nearest_int(div_rn(qbuf[16u * j + k], dd)), -4, 3) + 4;
        }
    }
    var hm: array<u32, 32>;
    for (var e = 0u; e < rt(256u); e = e + 1u) {
        if (kq[e] > 3) {
            hm[e % 32u] = hm[e % 32u] | (1u << (e / 32u));
            kq[e] = kq[e] - 4;
        }
    }
    for (var k = 0u; k < rt(32u); k = k + 1u) {
        d_sb(blk + k, hm[k]);
    }
    for (var h = 0u; h < rt(2u); h = h + 1u) {
        for (var l = 0u; l < rt(32u); l = l + 1u) {
            let e = 128u * h + l;
            let v = u32(kq[e]) | (u32(kq[e + 32u]) << 2u) | (u32(kq[e + 64u]) << 4u) | (u32(kq[e + 96u]) << 6u);
            d_sb(blk + 32u + 32u * h + l, v & 0xffu);
        }
    }
    for (var i = 0u; i < rt(12u); i = i + 1u) {
        d_sb(blk + 96u + i, sc[i]);
    }
    d_sh(blk + 108u, d);
}

fn store_block(blk: u32) {
    store_q3_k(blk);
}
