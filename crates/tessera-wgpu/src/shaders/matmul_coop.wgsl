// matmul_coop.wgsl: MUL_MAT of quantized weights (the types of
// mq_unit.wgsl) with many columns by cooperative matrices: a BT x BT tile
// of dst each workgroup, by matmul_coop_tile.wgsl (which the host
// prepends, with the shape's constants, matmul_common.wgsl and
// mq_unit.wgsl).
// P.iu: x, y as matmul_coop_tile.wgsl reads them, z = columns.

// This workgroup's first column, and whether it has a tile (the last
// ones of the grid may not; they compute, and store nothing).
var<private> tile_c0: u32;
var<private> tile_real: bool;

fn coop_col(i: u32) -> u32 {
    let col = tile_c0 + i;
    return select(Q8_NONE, col, col < P.iu.z);
}

fn coop_dst(i: u32) -> u32 {
    let col = tile_c0 + i;
    return select(Q8_NONE, P.off.x + col * P.nb_d.y, tile_real && col < P.iu.z);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>, @builtin(subgroup_id) sid: u32) {
    // No early return: cooperative operations need uniform control flow
    // (a workgroup past the last tile computes, and stores nothing).
    let g = group_index(wid, nwg);
    tile_real = g < P.off2.y;
    let tile = mm_tile(g, BT, BT);
    tile_c0 = tile.y * BT;
    coop_tile(tile.x * BT, P.off.y, lid.x, sid);
}
