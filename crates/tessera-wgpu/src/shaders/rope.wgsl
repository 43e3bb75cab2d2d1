// rope.wgsl: rotary position embedding. One item per rotated pair or
// passed-through element of a row: iu.x = n_dims, iu.y = ggml mode (0 normal,
// 2 NeoX, 8 M-RoPE, 24 vision, 40 interleaved M-RoPE), iu.z = 1 with
// frequency factors in src2, iu.w = rotated pairs per row; iu2 = sections
// (multi-section modes: four positions per token, stream s of token i2 at
// pos[i2 + s * ne2], as ggml's ggml_mrope_cache_init). fp: theta_scale,
// freq_scale, ext_factor, attn_factor; fp2: YaRN corr dims [low, high] and
// the magnitude scale used when ext_factor != 0. Positions: src1 (I32).
// iu2.x = 1 in the single-section modes (ROPE + SET_ROWS, fuse_rope.rs):
// row i2 of the result goes to row ids[i2] of d (ids: src3, I32 or I64,
// stride nb_d.z; clamped into d's iu2.y rows as SET_ROWS clamps them),
// converted to d's type as SET_ROWS would. Single-section modes only, as
// what follows: iu2.z = 1: a SET_ROWS of
// values joins (fuse_rope.rs): items from ne_3.x on copy element e of
// value row i2 (F32 in s0 at byte ne_3.y + i2 ne_3.z + 4 e, ne_3.w values
// a row) to row ids[i2] of the values' cache in d (byte ne_2.x + row ne_2.y
// + e nb_d.x). off2.w > 0: the first off2.w items rotate queries alike
// (fuse_rope.rs) into s4 (F32): ne_1.y heads, source at byte ne_1.z of s0
// (head and token strides nb_1.y, nb_1.z), result at byte ne_1.w of s4
// (strides nb_1.w, nb_2.y; elements contiguous), stored as a SCALE stores
// x * scale + bias where ne_1.x = 1 (scale, bias: the bits ne_2.z, ne_2.w);
// the items after them are the keys' and values' as above.

const TWO_PI_HI: f32 = 6.28318548202514648;
const TWO_PI_LO: f32 = -1.7484556000744487e-7;
const INV_TWO_PI: f32 = 0.15915494309189535;

// x reduced to [-pi, pi] (WGSL leaves sin/cos accuracy open outside it).
fn reduce_angle(x: f32) -> f32 {
    let k = round(x * INV_TWO_PI);
    return (x - k * TWO_PI_HI) - k * TWO_PI_LO;
}

// Multi-section modes: the stream (t, h, w, e) pair k takes its position
// from, and the number of pairs since that stream's angle (re)started.
fn rope_stream(k: u32) -> vec2<u32> {
    let sec = P.iu2;
    let sect = max(1u, sec.x + sec.y + sec.z + sec.w);
    let sec_w = sec.x + sec.y;
    let sec_e = sec_w + sec.z;
    let sector = k % sect;
    var stream = 0u;
    if (P.iu.y == 40u) {
        if (sector % 3u == 1u && sector < 3u * sec.y) {
            stream = 1u;
        } else if (sector % 3u == 2u && sector < 3u * sec.z) {
            stream = 2u;
        } else if (sector % 3u == 0u && sector < 3u * sec.x) {
            stream = 0u;
        } else {
            stream = 3u;
        }
    } else if (sector >= sec.x && sector < sec_w) {
        stream = 1u;
    } else if (sector >= sec_w && sector < sec_e) {
        stream = 2u;
    } else if (sector >= sec_e) {
        stream = 3u;
    }
    if (P.iu.y != 24u) {
        return vec2<u32>(stream, k);
    }
    // Vision: a stream restarts at its section's first sector (ggml's
    // else-if chain: the first matching stream only).
    var last = vec4<u32>(0u, 0u, 0u, 0u);
    for (var j = 0u; j <= k; j = j + 1u) {
        let sj = j % sect;
        if (sj == 0u) {
            last.x = j;
        } else if (sj == sec.x) {
            last.y = j;
        } else if (sj == sec_w) {
            last.z = j;
        } else if (sj == sec_e) {
            last.w = j;
        }
    }
    return vec2<u32>(stream, k - last[stream]);
}

// Element i0 of a result row at byte `row`: a query's (s4, F32, the
// queries' dispatch only) or d's.
fn rope_st(query: bool, row: u32, i0: u32, v: f32) {
    if (query && P.ne_1.x == 1u) {
        // The expression of unary.wgsl's SCALE (the same bits).
        s4_st(row + 4u * i0, v * bitcast<f32>(P.ne_2.z) + bitcast<f32>(P.ne_2.w));
    } else if (query) {
        s4_st(row + 4u * i0, v);
    } else {
        d_st(row + i0 * P.nb_d.x, v);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    var t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    // Queries first (off2.w items), then keys, then values (see the
    // header): single-section modes only (the others use iu2 for sections).
    let single = P.iu.y < 8u;
    let q_items = select(0u, P.off2.w, single);
    let query = t < q_items;
    if (!query) {
        t = t - q_items;
    }
    if (single && !query && P.iu2.z == 1u && t >= P.ne_3.x) {
        let v = t - P.ne_3.x;
        let i2 = v / P.ne_3.w;
        let e = v % P.ne_3.w;
        let to = u32(clamp(s3_ldi(P.off2.x + i2 * P.nb_3.x), 0, i32(max(P.iu2.y, 1u)) - 1));
        d_st(P.ne_2.x + to * P.ne_2.y + e * P.nb_d.x, s0_ld(P.ne_3.y + i2 * P.ne_3.z + 4u * e));
        return;
    }
    let n_dims = P.iu.x;
    let half_dims = P.iu.w;
    let rot_dims = 2u * half_dims;
    let per_row = half_dims + (P.ne_0.x - rot_dims);
    let slot = t % per_row;
    let row = t / per_row;
    var heads = P.ne_0.y;
    if (query) {
        heads = P.ne_1.y;
    }
    let i1 = row % heads;
    let i2 = (row / heads) % P.ne_0.z;
    let i3 = row / (heads * P.ne_0.z);
    var src = P.off.y + i1 * P.nb_0.y + i2 * P.nb_0.z + i3 * P.nb_0.w;
    var dst = P.off.x + i1 * P.nb_d.y + i2 * P.nb_d.z + i3 * P.nb_d.w;
    if (query) {
        src = P.ne_1.z + i1 * P.nb_1.y + i2 * P.nb_1.z;
        dst = P.ne_1.w + i1 * P.nb_1.w + i2 * P.nb_2.y;
    } else if (P.iu.y < 8u && P.iu2.x == 1u) {
        let to = u32(clamp(s3_ldi(P.off2.x + i2 * P.nb_3.x), 0, i32(max(P.iu2.y, 1u)) - 1));
        dst = P.off.x + i1 * P.nb_d.y + to * P.nb_d.z;
    }
    if (slot >= half_dims) {
        let i0 = rot_dims + (slot - half_dims);
        rope_st(query, dst, i0, s0_ld(src + i0 * P.nb_0.x));
        return;
    }
    let k = slot;
    var j0 = 2u * k;
    var j1 = 2u * k + 1u;
    if (P.iu.y != 0u) {
        // NeoX and the multi-section modes: (x[k], x[k + n_dims/2]); vision:
        // (x[k], x[k + n_dims]) with n_dims = ne0 / 2 pairs.
        j0 = k;
        j1 = k + half_dims;
    }
    var stream = vec2<u32>(0u, k);
    if (P.iu.y >= 8u) {
        stream = rope_stream(k);
    }
    let pos = f32(s1_ldi(P.off.z + (i2 + stream.x * P.ne_0.z) * P.nb_1.x));
    var theta_extrap = pos * pow(P.fp.x, f32(stream.y));
    if (P.iu.z == 1u) {
        theta_extrap = theta_extrap / s2_ld(P.off.w + k * P.nb_2.x);
    }
    let theta_interp = P.fp.y * theta_extrap;
    var theta = theta_interp;
    var mscale = P.fp.w;
    if (P.fp.z != 0.0) {
        let y = (f32(k) - P.fp2.x) / max(0.001, P.fp2.y - P.fp2.x);
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * P.fp.z;
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale = P.fp2.z;
    }
    let a = reduce_angle(theta);
    let c = cos(a) * mscale;
    let s = sin(a) * mscale;
    let x0 = s0_ld(src + j0 * P.nb_0.x);
    let x1 = s0_ld(src + j1 * P.nb_0.x);
    rope_st(query, dst, j0, x0 * c - x1 * s);
    rope_st(query, dst, j1, x0 * s + x1 * c);
}
