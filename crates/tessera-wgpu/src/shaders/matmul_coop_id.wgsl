// matmul_coop_id.wgsl: MUL_MAT_ID of quantized weights (the types of
// mq_unit.wgsl) with many tokens by cooperative matrices: each expert's
// pairs gathered (gather_ids.wgsl), BT at a time, then multiplied by
// matmul_coop_tile.wgsl (the host prepends both, with the shape's
// constants, GT = WG, GMAX = BT, matmul_common.wgsl and mq_unit.wgsl), as
// matmul_q8_id.wgsl does with integer tiles.
// Workgroup g takes rows BT (g % P.iu2.y).. of expert x = g / P.iu2.y.
// P.iu: x, y as matmul_coop_tile.wgsl reads them, z = ne11. P.iu2.y = row
// tiles.

fn coop_col(i: u32) -> u32 {
    return ids_col(i);
}

fn coop_dst(i: u32) -> u32 {
    return ids_dst(i);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>, @builtin(subgroup_id) sid: u32) {
    // No early return: cooperative operations need uniform control flow (a
    // workgroup past the last counts no pairs).
    let g = group_index(wid, nwg);
    let x = g / P.iu2.y;
    let r0 = (g % P.iu2.y) * BT;
    let t = lid.x;
    var total = ids_count(x, t);
    if (g >= P.off2.y) {
        total = 0u;
    }
    for (var q0 = 0u; q0 < total; q0 = q0 + BT) {
        ids_gather(x, q0, total);
        coop_tile(r0, P.off.y + x * P.nb_0.z, t, sid);
        workgroupBarrier();
    }
}
