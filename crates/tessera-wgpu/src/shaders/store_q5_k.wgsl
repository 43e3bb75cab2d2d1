// store_q5_k.wgsl: quantize qbuf[0..256] into the Q5_K block at `blk` of
// `d`: a port of ggml's quantize_row_q5_K_ref with its weighted scale and
// min search (make_qkx2_quants) and nearest_int's round half to even.
// Products that the host rounds before an addition are wrapped in nofma()
// so the compiler cannot fuse them: the search compares errors, and a fused
// rounding could pick another candidate than the host.

var<private> kl: array<u32, 256>;
var<private> kaux: array<u32, 32>;
var<private> kw: array<f32, 32>;

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

// make_qkx2_quants(31, x, w, l, -0.5, 0.1, 15, false) on sub-block j
// (values qbuf[32j..], weights kw); returns (scale, -min), quants in kl[32j..].
fn make_qkx2(j: u32) -> vec2<f32> {
    let base = 32u * j;
    var mn = qbuf[base];
    var mx = qbuf[base];
    var sum_w = kw[0];
    var sum_x = nofma(sum_w * qbuf[base]);
    for (var k = 1u; k < rt(32u); k = k + 1u) {
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
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            kl[base + k] = 0u;
        }
        return vec2<f32>(0.0, -mn);
    }
    var iscale = div_rn(31.0, mx - mn);
    var scale = div_rn(1.0, iscale);
    var best_error = 0.0;
    for (var k = 0u; k < rt(32u); k = k + 1u) {
        let xi = qbuf[base + k];
        let q = clamp(nearest_int(nofma(iscale * (xi - mn))), 0, 31);
        kl[base + k] = u32(q);
        let diff = (nofma(scale * f32(q)) + mn) - xi;
        best_error = best_error + nofma(kw[k] * (diff * diff));
    }
    for (var is = 0; is <= i32(rt(15u)); is = is + 1) {
        iscale = div_rn((-0.5 + nofma(0.1 * f32(is))) + 31.0, mx - mn);
        var sum_l = 0.0;
        var sum_l2 = 0.0;
        var sum_xl = 0.0;
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            let xi = qbuf[base + k];
            let q = clamp(nearest_int(nofma(iscale * (xi - mn))), 0, 31);
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
            for (var k = 0u; k < rt(32u); k = k + 1u) {
                let diff = (nofma(this_scale * f32(kaux[k])) + this_min) - qbuf[base + k];
                cur_error = cur_error + nofma(kw[k] * (diff * diff));
            }
            if (cur_error < best_error) {
                for (var k = 0u; k < rt(32u); k = k + 1u) {
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

fn store_q5_k(blk: u32) {
    var scales: array<f32, 8>;
    var mins: array<f32, 8>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0u; j < rt(8u); j = j + 1u) {
        var sum_x2 = 0.0;
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            let v = qbuf[32u * j + k];
            sum_x2 = sum_x2 + nofma(v * v);
        }
        let av_x = sqrt_rn(sum_x2 / 32.0);
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            kw[k] = av_x + abs(qbuf[32u * j + k]);
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
    let inv_scale = select(0.0, div_rn(63.0, max_scale), max_scale > 0.0);
    let inv_min = select(0.0, div_rn(63.0, max_min), max_min > 0.0);
    var packed: array<u32, 12>;
    for (var j = 0u; j < rt(8u); j = j + 1u) {
        let ls = min(bitcast<u32>(nearest_int(nofma(inv_scale * scales[j]))) & 0xffu, 63u);
        let lm = min(bitcast<u32>(nearest_int(nofma(inv_min * mins[j]))) & 0xffu, 63u);
        if (j < 4u) {
            packed[j] = ls;
            packed[j + 4u] = lm;
        } else {
            packed[j + 4u] = (ls & 15u) | ((lm & 15u) << 4u);
            packed[j - 4u] = packed[j - 4u] | ((ls >> 4u) << 6u);
            packed[j] = packed[j] | ((lm >> 4u) << 6u);
        }
    }
    let d = f32_to_f16(div_rn(max_scale, 63.0));
    let dmin = f32_to_f16(div_rn(max_min, 63.0));
    let df = f16_to_f32(d);
    let dminf = f16_to_f32(dmin);
    for (var j = 0u; j < rt(8u); j = j + 1u) {
        var sc: u32;
        var m: u32;
        if (j < 4u) {
            sc = packed[j] & 63u;
            m = packed[j + 4u] & 63u;
        } else {
            sc = (packed[j + 4u] & 15u) | ((packed[j - 4u] >> 6u) << 4u);
            m = (packed[j + 4u] >> 4u) | ((packed[j] >> 6u) << 4u);
        }
        let dd = df * f32(sc);
        if (dd == 0.0) {
            continue;
        }
        let dm = nofma(dminf * f32(m));
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            kl[32u * j + k] = u32(clamp(nearest_int(div_rn(qbuf[32u * j + k] + dm, dd)), 0, 31));
        }
    }
    d_sh(blk, d);
    d_sh(blk + 2u, dmin);
    for (var i = 0u; i < rt(12u); i = i + 1u) {
        d_sb(blk + 4u + i, packed[i] & 0xffu);
    }
    for (var i = 0u; i < rt(4u); i = i + 1u) {
        for (var k = 0u; k < rt(32u); k = k + 1u) {
            let a = kl[64u * i + k];
            let b = kl[64u * i + 32u + k];
            d_sb(blk + 48u + 32u * i + k, ((a & 15u) | ((b & 15u) << 4u)) & 0xffu);
        }
    }
    for (var k = 0u; k < rt(32u); k = k + 1u) {
        var h = 0u;
        for (var i = 0u; i < rt(4u); i = i + 1u) {
            h = h | ((kl[64u * i + k] >> 4u) << (2u * i)) | ((kl[64u * i + 32u + k] >> 4u) << (2u * i + 1u));
        }
        d_sb(blk + 16u + k, h & 0xffu);
    }
}

fn store_block(blk: u32) {
    store_q5_k(blk);
}
