// store_iq4_nl.wgsl: quantize qbuf[0..32] into the IQ4_NL block at `blk` of
// `d`, as ggml's quantize_row_iq4_nl_ref (quantize_row_iq4_nl_impl with
// ntry = -1, weights x * x): d = max / -127, nearest table values, then
// the least-squares scale div_rn(sumqx, sumq2); the indices of that first pass.
// A block whose largest magnitude is below GROUP_MAX_EPS gets d = 0 and
// index 8 everywhere, as Tessera's host quantizer (ggml leaves stale
// indices there). Products the host rounds before an addition or a
// comparison with a difference are wrapped in nofma().

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

var<private> kl: array<u32, 32>;

fn store_iq4_nl(blk: u32) {
    var amax = 0.0;
    var mx = 0.0;
    for (var k = 0u; k < 32u; k = k + 1u) {
        let a = abs(qbuf[k]);
        if (a > amax) {
            amax = a;
            mx = qbuf[k];
        }
    }
    var dd = 0.0;
    if (amax < 1e-15) {
        for (var k = 0u; k < 32u; k = k + 1u) {
            kl[k] = 8u;
        }
    } else {
        let id = div_rn(1.0, div_rn(mx, -127.0));
        var sumqx = 0.0;
        var sumq2 = 0.0;
        for (var k = 0u; k < 32u; k = k + 1u) {
            let x = qbuf[k];
            let l = best_index_iq4nl(nofma(id * x));
            kl[k] = l;
            let q = kvalue_iq4nl(l);
            let wq = nofma(nofma(x * x) * q);
            sumqx = sumqx + nofma(wq * x);
            sumq2 = sumq2 + nofma(wq * q);
        }
        dd = select(0.0, div_rn(sumqx, sumq2), sumq2 > 0.0);
    }
    d_sh(blk, f32_to_f16(dd));
    for (var k = 0u; k < 16u; k = k + 1u) {
        d_sb(blk + 2u + k, (kl[k] | (kl[k + 16u] << 4u)) & 0xffu);
    }
}

fn store_block(blk: u32) {
    store_iq4_nl(blk);
}
