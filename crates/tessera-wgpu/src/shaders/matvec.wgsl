// matvec.wgsl: MUL_MAT with few columns (n <= MV_COLS): dst[i, j] =
// sum_k src0[k, i] * src1[k, j], src0 broadcast over dims 2-3. One
// workgroup per output row (and dims 2-3 index) reads the row of src0 once,
// coalesced, for every column of src1; the workgroup then sums its partials
// in shared memory. Decoding (n = 1) is this kernel: the GPU's memory
// bandwidth, not one invocation's loop over k, sets its speed.
//
// Every quantized type and contiguous F16/BF16 rows go by units of 16
// values (matvec_units.wgsl): invocation t takes unit t, then t + MV_WG,
// ... Other rows (F32, strided halves) go element by element: invocation t
// takes MV_VEC consecutive elements at t * MV_VEC, then MV_WG * MV_VEC
// further on, ... The host prepends MV_COLS (1 or 8) and MV_VEC (1, or 8
// when k is a multiple of 8).

const MV_WG: u32 = 128u;
var<workgroup> mv_part: array<f32, 1024>; // MV_COLS * MV_WG, at most 8 * 128

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let n = P.ne_d.y;
    let i = g % m;
    let r = g / m;
    let i2 = r % P.ne_d.z;
    let i3 = r / P.ne_d.z;
    let a = mm_a_base(i2, i3) + i * P.nb_0.y;
    let b = mm_b_base(i2, i3);
    let k = P.ne_0.x;
    let t = lid.x;
    var acc: array<f32, MV_COLS>;
    let q4 = s0_T == T_Q4_0 || s0_T == T_Q4_1 || s0_T == T_Q5_0 || s0_T == T_Q5_1
        || s0_T == T_IQ4_NL;
    let qk = s0_T == T_Q4_K || s0_T == T_Q5_K;
    let half = s0_T == T_F16 || s0_T == T_BF16;
    // F16/BF16 rows by units when contiguous and k is a multiple of 16.
    let half_units = half && k % 16u == 0u && P.nb_0.x == 2u;
    let q23 = s0_T == T_Q2_K || s0_T == T_Q3_K;
    let units = q4 || qk || q23 || half_units || s0_T == T_Q8_0 || s0_T == T_Q6_K
        || s0_T == T_IQ4_XS;
    for (var u = t; units && u < k / 16u; u = u + MV_WG) {
        if (q4) {
            mv_unit_q4(a, u, b, n, &acc);
        } else if (s0_T == T_Q8_0) {
            mv_unit_q8_0(a, u, b, n, &acc);
        } else if (qk) {
            mv_unit_qk(a, u, b, n, &acc);
        } else if (half) {
            mv_unit_half(a, u, b, n, &acc);
        } else if (q23) {
            mv_unit_q23k(a, u, b, n, &acc);
        } else if (s0_T == T_IQ4_XS) {
            mv_unit_iq4_xs(a, u, b, n, &acc);
        } else {
            mv_unit_q6_k(a, u, b, n, &acc);
        }
    }
    for (var base = t * MV_VEC; !units && base < k; base = base + MV_WG * MV_VEC) {
        // The group's block, once (its elements share the block's header).
        let blk = a + (base / s0_BS) * P.nb_0.x;
        let j0 = base % s0_BS;
        for (var e = 0u; e < MV_VEC; e = e + 1u) {
            var w: f32;
            if (s0_BS > 1u) {
                w = s0_dq(blk, j0 + e);
            } else {
                w = s0_ld(a + (base + e) * P.nb_0.x);
            }
            let bk = b + (base + e) * P.nb_1.x;
            for (var c = 0u; c < MV_COLS; c = c + 1u) {
                if (MV_COLS == 1u || c < n) {
                    acc[c] = acc[c] + w * s1_ld(bk + c * P.nb_1.y);
                }
            }
        }
    }
    for (var c = 0u; c < MV_COLS; c = c + 1u) {
        mv_part[c * MV_WG + t] = acc[c];
    }
    workgroupBarrier();
    for (var s = MV_WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            for (var c = 0u; c < MV_COLS; c = c + 1u) {
                mv_part[c * MV_WG + t] = mv_part[c * MV_WG + t] + mv_part[c * MV_WG + t + s];
            }
        }
        workgroupBarrier();
    }
    if (t < min(n, MV_COLS)) {
        d_st(P.off.x + i * P.nb_d.x + t * P.nb_d.y + i2 * P.nb_d.z + i3 * P.nb_d.w,
            mv_part[t * MV_WG]);
    }
}
