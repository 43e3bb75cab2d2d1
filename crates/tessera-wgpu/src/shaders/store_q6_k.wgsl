// store_q6_k.wgsl: quantize qbuf[0..256] into the Q6_K block at `blk` of
// `d`: a port of ggml's quantize_row_q6_K_ref with its scale search
// (make_qx_quants, rmse_type 1) and nearest_int's round half to even.
// Products that the host rounds before an addition are wrapped in nofma()
// so the compiler cannot fuse them: the search compares errors, and a fused
// rounding could pick another candidate than the host.

var<private> kl: array<u32, 256>;

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

// make_qx_quants(32, x, l, 1, NULL) on sub-block j (16 values of qbuf);
// quants (q + 32) in kl[16j..]; returns the scale.
fn make_qx(j: u32) -> f32 {
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
            kl[base + k] = 0u;
        }
        return 0.0;
    }
    var iscale = div_rn(-32.0, mx);
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var k = 0u; k < rt(16u); k = k + 1u) {
        let xi = qbuf[base + k];
        let w = nofma(xi * xi);
        let q = clamp(nearest_int(nofma(iscale * xi)), -32, 31);
        kl[base + k] = u32(q + 32);
        sumlx = sumlx + nofma(nofma(w * xi) * f32(q));
        suml2 = suml2 + nofma(nofma(w * f32(q)) * f32(q));
    }
    var scale = select(0.0, div_rn(sumlx, suml2), suml2 != 0.0);
    var best = scale * sumlx;
    for (var is = -9; is <= i32(rt(9u)); is = is + 1) {
        if (is == 0) {
            continue;
        }
        iscale = div_rn(-(32.0 + nofma(0.1 * f32(is))), mx);
        sumlx = 0.0;
        suml2 = 0.0;
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            let xi = qbuf[base + k];
            let w = nofma(xi * xi);
            let lf = f32(clamp(nearest_int(nofma(iscale * xi)), -32, 31));
            sumlx = sumlx + nofma(nofma(w * xi) * lf);
            suml2 = suml2 + nofma(nofma(w * lf) * lf);
        }
        if (suml2 > 0.0 && nofma(sumlx * sumlx) > nofma(best * suml2)) {
            for (var k = 0u; k < rt(16u); k = k + 1u) {
                kl[base + k] = u32(32 + clamp(nearest_int(nofma(iscale * qbuf[base + k])), -32, 31));
            }
            scale = div_rn(sumlx, suml2);
            best = scale * sumlx;
        }
    }
    return scale;
}

fn store_q6_k(blk: u32) {
    var scales: array<f32, 16>;
    var max_scale = 0.0;
    var max_abs = 0.0;
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        let s = make_qx(j);
        scales[j] = s;
        if (abs(s) > max_abs) {
            max_abs = abs(s);
            max_scale = s;
        }
    }
    if (max_abs < 1e-15) {
        for (var i = 0u; i < rt(210u); i = i + 1u) {
            d_sb(blk + i, 0u);
        }
        return;
    }
    let iscale = div_rn(-128.0, max_scale);
    let d = f32_to_f16(div_rn(1.0, iscale));
    let df = f16_to_f32(d);
    for (var j = 0u; j < rt(16u); j = j + 1u) {
        let scb = bitcast<u32>(min(nearest_int(nofma(iscale * scales[j])), 127)) & 0xffu;
        d_sb(blk + 192u + j, scb);
        let dd = df * f32(sext8(scb));
        if (dd == 0.0) {
            continue;
        }
        for (var k = 0u; k < rt(16u); k = k + 1u) {
            kl[16u * j + k] = u32(clamp(nearest_int(div_rn(qbuf[16u * j + k], dd)), -32, 31) + 32);
        }
    }
    for (var h = 0u; h < 2u; h = h + 1u) {
        for (var i = 0u; i < rt(32u); i = i + 1u) {
            let q1 = kl[128u * h + i];
            let q2 = kl[128u * h + i + 32u];
            let q3 = kl[128u * h + i + 64u];
            let q4 = kl[128u * h + i + 96u];
            d_sb(blk + 64u * h + i, ((q1 & 15u) | ((q3 & 15u) << 4u)) & 0xffu);
            d_sb(blk + 64u * h + 32u + i, ((q2 & 15u) | ((q4 & 15u) << 4u)) & 0xffu);
            d_sb(blk + 128u + 32u * h + i, ((q1 >> 4u) | ((q2 >> 4u) << 2u) | ((q3 >> 4u) << 4u) | ((q4 >> 4u) << 6u)) & 0xffu);
        }
    }
    d_sh(blk + 208u, d);
}

fn store_block(blk: u32) {
    store_q6_k(blk);
}
