// matmul_q8_id.wgsl: MUL_MAT_ID of quantized weights (the types of
// mq_unit.wgsl) with many tokens (prompts, batches) by activations
// quantized by quant_act.wgsl: each expert's pairs gathered
// (gather_ids.wgsl), then tiled integer products by matmul_q8_tile.wgsl
// (the host prepends both, with QT = 64, QR = 4, GT = 256, GMAX = QT,
// matmul_common.wgsl and mq_unit.wgsl), so a prompt's tokens that share an
// expert read its rows once a tile of QT of them instead of once each.
// dst[i, e, t] = sum_k src0[k, i, ids[e, t]] * src1[k, e % ne11, t]; ids
// clamped into 0..experts as matvec_q8_id.wgsl clamps them.
// Workgroup g takes rows QT (g % P.iu2.y).. of expert x = g / P.iu2.y, QT
// of its pairs at a time. An expert that no token picked costs one scan
// of the ids.
// P.iu: x, y as matmul_q8_tile.wgsl reads them, z = ne11. P.iu2.y = row
// tiles.

fn q8_col(i: u32) -> u32 {
    return ids_col(i);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let r0 = (g % P.iu2.y) * QT;
    let x = g / P.iu2.y;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    let total = ids_count(x, t);
    for (var q0 = 0u; q0 < total; q0 = q0 + QT) {
        ids_gather(x, q0, total);
        let acc = q8_tile(r0, P.off.y + x * P.nb_0.z, t);
        for (var c = 0u; c < QR; c = c + 1u) {
            let out = ids_dst(tx + 16u * c);
            if (out != Q8_NONE) {
                for (var r = 0u; r < QR; r = r + 1u) {
                    let row = r0 + ty + 16u * r;
                    if (row < m) {
                        d_st(out + row * P.nb_d.x, acc[r][c]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
}
