// matmul_id.wgsl: MUL_MAT_ID (iu.y = 1) and ADD_ID (2), one invocation per
// output element, each summing its dot product on its own, with the expert
// picked by id.
// MUL_MAT_ID: dst[i, e, t] = sum_k src0[k, i, ids[e, t]] * src1[k, e % ne11, t]
// with the I32 ids in src2.
// ADD_ID: dst[i, e, t] = src0[i, e, t] + src1[i, ids[e, t]].
// Expert ids are clamped into 0..n_as (as GET_ROWS clamps its row ids), so a
// bad id cannot reach memory outside the weights; the CPU reports it.
// Quantized src0 (block size iu.x > 1) is dequantized block by block from
// its ggml bytes.

fn expert_id(e: u32, t: u32, n_as: u32) -> u32 {
    let r = s2_ldi(P.off.w + e * P.nb_2.x + t * P.nb_2.y);
    return u32(clamp(r, 0, i32(max(n_as, 1u)) - 1));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let o = unravel(t, P.ne_d);
    if (P.iu.y == 2u) {
        let r = expert_id(o.y, o.z, P.ne_1.y);
        let v = s0_ld(P.off.y + offset_of(o, P.nb_0)) + s1_ld(P.off.z + o.x * P.nb_1.x + r * P.nb_1.y);
        d_st(P.off.x + offset_of(o, P.nb_d), v);
        return;
    }
    let x = expert_id(o.y, o.z, P.ne_0.z);
    let a = P.off.y + o.x * P.nb_0.y + x * P.nb_0.z;
    let b = P.off.z + (o.y % P.ne_1.y) * P.nb_1.y + o.z * P.nb_1.z;
    let k = P.ne_0.x;
    let bs = P.iu.x;
    var acc = 0.0;
    if (bs > 1u) {
        for (var kb = 0u; kb < k / bs; kb = kb + 1u) {
            let blk = a + kb * P.nb_0.x;
            var part = 0.0;
            for (var j = 0u; j < bs; j = j + 1u) {
                part = part + s0_dq(blk, j) * s1_ld(b + (kb * bs + j) * P.nb_1.x);
            }
            acc = acc + part;
        }
    } else {
        for (var kk = 0u; kk < k; kk = kk + 1u) {
            acc = acc + s0_ld(a + kk * P.nb_0.x) * s1_ld(b + kk * P.nb_1.x);
        }
    }
    d_st(P.off.x + offset_of(o, P.nb_d), acc);
}
