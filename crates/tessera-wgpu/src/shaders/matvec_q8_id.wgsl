// matvec_q8_id.wgsl: MUL_MAT_ID of quantized weights (the types of
// mq_unit.wgsl) by activations quantized by quant_act.wgsl, on devices
// with subgroup operations: the matrix-vector integer kernel
// (matvec_q8.wgsl's mq_row, one column) with each output column's expert
// picked by id. dst[i, e, t] = sum_k src0[k, i, ids[e, t]] *
// src1[k, e % ne11, t]: workgroup g takes rows P.iu2.x (g % row groups)..
// of the pair (e, t) = (p % n_used, p / n_used), p = g / row groups; its
// subgroups take rows as the matrix-vector kernel's do. Expert ids are
// clamped into 0..experts (as matmul_id.wgsl does: a bad id cannot reach
// memory outside the weights; the CPU reports it).
// P.iu: x = byte of the columns' bytes (column c = e % ne11 + ne11 t, at
// x + c k), y = byte of their (d, d * sum) pairs, z = ne11. P.iu2: x =
// rows a workgroup, y = row groups. ids (I32, src2) at P.off.w, strides
// P.nb_2.xy. The host prepends MQ_COLS = 1, matmul_common.wgsl,
// mq_unit.wgsl and matvec_q8.wgsl.

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) n_sg: u32) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let lanes = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    let rows = P.iu2.x;
    let group = g % P.iu2.y;
    let pair = g / P.iu2.y;
    let e = pair % P.ne_d.y;
    let t = pair / P.ne_d.y;
    let id = s2_ldi(P.off.w + e * P.nb_2.x + t * P.nb_2.y);
    let x = u32(clamp(id, 0, i32(max(P.ne_0.z, 1u)) - 1));
    let a = P.off.y + x * P.nb_0.z;
    let c = e % P.iu.z + P.iu.z * t;
    let m = P.ne_d.x;
    for (var r = sg; r < rows; r = r + n_sg) {
        let row = rows * group + r;
        if (row >= m) {
            break;
        }
        let acc = mq_row(a + row * P.nb_0.y, lane, lanes, c, 1u);
        let sum = subgroupAdd(acc[0]);
        if (lane == 0u) {
            d_st(P.off.x + row * P.nb_d.x + e * P.nb_d.y + t * P.nb_d.z, sum);
        }
    }
}
