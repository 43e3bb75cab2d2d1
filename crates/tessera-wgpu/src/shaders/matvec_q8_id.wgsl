// matvec_q8_id.wgsl: MUL_MAT_ID of quantized weights (the types of
// mq_unit.wgsl) by activations quantized by quant_act.wgsl, on devices
// with subgroup operations: the matrix-vector integer kernel
// (matvec_q8.wgsl's mq_row, one column) with each output column's expert
// picked by id. dst[i, e, t] = sum_k src0[k, i, ids[e, t]] *
// src1[k, e % ne11, t]. Expert ids are clamped into 0..experts (as
// matmul_id.wgsl does: a bad id cannot reach memory outside the weights;
// the CPU reports it).
// P.iu.w = 0: workgroup g takes rows P.iu2.x (g % P.iu2.y).. of the pair
// (e, t) = (p % used, p / used), p = g / P.iu2.y. P.iu.w = 1 (fuse_moe.rs):
// the expert outputs weighted and summed as a layer's MUL and chain of
// ADDs compute them, dst[i, t] = ((y0 w0 + y1 w1) + y2 w2) + ..., y_e =
// the product of slot e, w_e its weight (src3 [1, used, t]): workgroup g
// takes those rows of token t = g / P.iu2.y, slot by slot. P.iu.w = 2
// (fuse_moe.rs): a layer's gate and up products and their GLU, as P.iu.w
// = 0 with a second product by the weights at byte P.iu2.w of src0 (same
// strides): dst[i, e, t] = act(A x) * (B x), act = unary_fn(P.off2.w), as
// glu.wgsl computes it.
// Subgroups take rows as the matrix-vector kernel's do.
// P.iu: x = byte of the columns' bytes (column c = e % ne11 + ne11 t, at
// x + c k), y = byte of their (d, d * sum) pairs, z = ne11, w = the mode.
// P.iu2: x = rows a workgroup, y = row groups, w = B's weights (mode 2). ids (I32, src2 [used, t])
// at P.off.w. The host prepends MQ_COLS = 1, matmul_common.wgsl,
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
    let rest = g / P.iu2.y;
    let used = P.ne_2.x;
    let summed = P.iu.w == 1u;
    let glu = P.iu.w == 2u;
    // The slots this workgroup takes, and its token.
    var first = rest % used;
    var t = rest / used;
    var last = first + 1u;
    if (summed) {
        first = 0u;
        t = rest;
        last = used;
    }
    let m = P.ne_d.x;
    for (var r = sg; r < rows; r = r + n_sg) {
        let row = rows * group + r;
        if (row >= m) {
            break;
        }
        var out = 0.0;
        for (var e = first; e < last; e = e + 1u) {
            let id = s2_ldi(P.off.w + e * P.nb_2.x + t * P.nb_2.y);
            let x = u32(clamp(id, 0, i32(max(P.ne_0.z, 1u)) - 1));
            let c = e % P.iu.z + P.iu.z * t;
            let acc = mq_row(P.off.y + x * P.nb_0.z + row * P.nb_0.y, lane, lanes, c, 1u);
            let y = subgroupAdd(acc[0]);
            if (glu) {
                let bcc = mq_row(P.iu2.w + x * P.nb_0.z + row * P.nb_0.y, lane, lanes, c, 1u);
                out = unary_fn(P.off2.w, y) * subgroupAdd(bcc[0]);
            } else if (summed) {
                let p = y * s3_ld(P.off2.x + e * P.nb_3.y + t * P.nb_3.z);
                out = select(out + p, p, e == 0u);
            } else {
                out = y;
            }
        }
        if (lane == 0u) {
            if (summed) {
                d_st(P.off.x + row * P.nb_d.x + t * P.nb_d.y, out);
            } else {
                d_st(P.off.x + row * P.nb_d.x + first * P.nb_d.y + t * P.nb_d.z, out);
            }
        }
    }
}
