// matmul_q8.wgsl: MUL_MAT of quantized weights (the types of
// mq_unit.wgsl, whose mq_unit and mq_dot this kernel shares with
// matvec_q8.wgsl: the host prepends it) with many columns, which
// quant_act.wgsl (or the node that computed them) quantized to bytes per
// 32 values: a tiled product by integer dot products, each workgroup a
// QT x QT tile of dst (the host prepends QT, 64 or 128, QR = QT / 16, and
// matmul_q8_tile.wgsl, which computes it).
// P.iu: x, y as matmul_q8_tile.wgsl reads them, z = columns.

// The first column of this workgroup's tile.
var<private> tile_c0: u32;

fn q8_col(i: u32) -> u32 {
    let col = tile_c0 + i;
    return select(Q8_NONE, col, col < P.iu.z);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let n = P.iu.z;
    let tile = mm_tile(g, QT, QT);
    let r0 = tile.x * QT;
    let c0 = tile.y * QT;
    tile_c0 = c0;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    let acc = q8_tile(r0, P.off.y, t);
    for (var r = 0u; r < QR; r = r + 1u) {
        let row = r0 + ty + 16u * r;
        for (var c = 0u; c < QR; c = c + 1u) {
            let col = c0 + tx + 16u * c;
            if (row < m && col < n) {
                d_st(P.off.x + row * P.nb_d.x + col * P.nb_d.y, acc[r][c]);
            }
        }
    }
}
