// store_q2_k.wgsl: quantize qbuf[0..256] into the Q2_K block at `blk` of
// `d`: a port of ggml's quantize_row_q2_K_ref with its weighted scale and
// min search (make_qkx2_quants on 16 values, absolute error) and
// nearest_int's round half to even. Products that the host rounds before an
// addition are wrapped in nofma() so the compiler cannot fuse them.

var<private> kl: array<u32, 256>;
var<private> kaux: array<u32, 16>;
var<private> kw: array<f32, 16>;

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

// make_qkx2_quants(3, x, w, l, -0.5, 0.1, 15, true) on sub-block j
// (values qbuf[16j..], weights kw); returns (scale, -min), quants in kl[16j..].
fn make_qkx2(j: u32) -> vec2<f32> {
    let base = 16u * j;
    var mn = qbuf[base];
    var mx = qbuf[base];
    var sum_w = kw[0];
    var sum_x = nofma(sum_w * qbuf[base]);
    for (var k = 1u; k < rt(16u); k = k + 1u) {
        let xi = qbuf[base + k];
        if (xi < mn) {
            mn = xi;
        }
        if (xi > mx) {
            mx = xi;
        }
        sum_w = sum_w + kw[k];
        sum_x = sum_x + nofma(kw[k] * xi);
    }
    if (mn > 0.0) {
        mn = 0.0;
    }
    if (mx == mn) {
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kl[base + k] = 0u;
        }
        return vec2<f32>(0.0, -mn);
    }
    var iscale = div_rn(3.0, mx - mn);
    var scale = div_rn(1.0, iscale);
    var best_error = 0.0;
    for (var k = 0u; k < rt(16u); k = k + 1u) {
        let xi = qbuf[base + k];
        let q = clamp(nearest_int(nofma(iscale * (xi - mn))), 0, 3);
        kl[base + k] = u32(q);
        let diff = (nofma(scale * f32(q)) + mn) - xi;
        best_error = best_error + nofma(kw[k] * abs(diff));
    }
    for (var is = 0; is <= i32(rt(15u)); is = is + 1) {
        iscale = div_rn((-0.5 + nofma(0.1 * f32(is))) + 3.0, mx - mn);
        var sum_l = 0.0;
        var sum_l2 = 0.0;
        var sum_xl = 0.0;
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            let xi = qbuf[base + k];
            let q = clamp(nearest_int(nofma(iscale * (xi - mn))), 0, 3);
            kaux[k] = u32(q);
            let wl = nofma(kw[k] * f32(q));
            sum_l = sum_l + wl;
            sum_l2 = sum_l2 + nofma(wl * f32(q));
            sum_xl = sum_xl + nofma(wl * xi);
        }
        let dd = nofma(sum_w * sum_l2) - nofma(sum_l * sum_l);
        if (dd > 0.0) {
            var this_scale = div_rn(nofma(sum_w * sum_xl) - nofma(sum_x * sum_l), dd);
            var this_min = div_rn(nofma(sum_l2 * sum_x) - nofma(sum_l * sum_xl), dd);
            if (this_min > 0.0) {
                this_min = 0.0;
                this_scale = div_rn(sum_xl, sum_l2);
            }
            var cur_error = 0.0;
            for (var k = 0u; k < rt(16u); k = k + 1u) {
                let diff = (nofma(this_scale * f32(kaux[k])) + this_min) - qbuf[base + k];
                cur_error = cur_error + nofma(kw[k] * abs(diff));
            }
            if (cur_error < best_error) {
                for (var k = 0u; k < rt(16u); k = k + 1u) {
                    kl[base + k] = kaux[k];
                }
                best_error = cur_error;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    return vec2<f32>(scale, -mn);
}

fn store_q2_k(blk: u32) {
    var scales: array<f32, 16>;
    var mins: array<f32, 16>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kw[k] = abs(qbuf[16u * j + k]);
        }
        let r = make_qkx2(j);
        scales[j] = r.x;
        mins[j] = r.y;
        if (r.x > max_scale) {
            max_scale = r.x;
        }
        if (r.y > max_min) {
            max_min = r.y;
        }
    }
    var sc: array<u32, 16>;
    var d = 0u;
    var dmin = 0u;
    if (max_scale > 0.0) {
        let iscale = div_rn(15.0, max_scale);
        for (var j = 0u; j < rt(16u); j = j + 1u) {
            sc[j] = bitcast<u32>(nearest_int(nofma(iscale * scales[j]))) & 0xffu;
        }
        d = f32_to_f16(div_rn(max_scale, 15.0));
    }
    if (max_min > 0.0) {
        let iscale = div_rn(15.0, max_min);
        for (var j = 0u; j < rt(16u); j = j + 1u) {
            sc[j] = (sc[j] | (bitcast<u32>(nearest_int(nofma(iscale * mins[j]))) << 4u)) & 0xffu;
        }
        dmin = f32_to_f16(div_rn(max_min, 15.0));
    }
    let df = f16_to_f32(d);
    let dminf = f16_to_f32(dmin);
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        let dd = df * f32(sc[j] & 15u);
        if (dd == 0.0) {
            continue;
        }
        let dm = nofma(dminf * f32(sc[j] >> 4u));
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kl[16u * j + k] = u32(clamp(nearest_int(div_rn(qbuf[16u * j + k] + dm, dd)), 0, 3));
        }
    }
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        d_sb(blk + j, sc[j]);
    }
    for (var h = 0u; h < rt(2u); h = h + 1u) {
        for (var l = 0u; l < rt(32u); l = l + 1u) {
            let e = 128u * h + l;
            let v = kl[e] | (kl[e + 32u] << 2u) | (kl[e + 64u] << 4u) | (kl[e + 96u] << 6u);
            d_sb(blk + 16u + 32u * h + l, v & 0xffu);
        }
    }
    d_sh(blk + 80u, d);
    d_sh(blk + 82u, dmin);
}

fn store_block(blk: u32) {
    store_q2_k(blk);
}
