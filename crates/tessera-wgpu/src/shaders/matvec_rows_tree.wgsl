// matvec_rows_tree.wgsl: the row-group kernel's main (matvec_rows.wgsl)
// for devices without subgroup operations: groups of MV_LANES invocations
// on MV_R rows each, their partial sums added up by a tree in workgroup
// memory.

const MV_WG: u32 = 128u;
/// Groups of rows a workgroup, rows a workgroup.
const MV_GROUPS: u32 = MV_WG / MV_LANES;
const MV_ROWS: u32 = MV_GROUPS * MV_R;
var<workgroup> mv_part: array<f32, 2048>; // MV_R * MV_COLS * MV_WG, at most 16 * 128

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let blocks = (P.ne_d.x + MV_ROWS - 1u) / MV_ROWS;
    // The group's first row; rows past the matrix compute nothing but still
    // meet the workgroup at its barriers.
    let i0 = (g % blocks) * MV_ROWS + (lid.x / MV_LANES) * MV_R;
    let r = g / blocks;
    let i2 = r % P.ne_d.z;
    let i3 = r / P.ne_d.z;
    let t = lid.x % MV_LANES;
    let acc = mv_partials(i0, i2, i3, t, MV_LANES);
    // Partial (row rr, column c) of invocation lid.x at
    // mv_part[(rr * MV_COLS + c) * MV_WG + lid.x]; each group sums its lanes.
    for (var j = 0u; j < MV_R * MV_COLS; j = j + 1u) {
        mv_part[j * MV_WG + lid.x] = acc[j];
    }
    workgroupBarrier();
    for (var s = MV_LANES / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            for (var j = 0u; j < MV_R * MV_COLS; j = j + 1u) {
                mv_part[j * MV_WG + lid.x] = mv_part[j * MV_WG + lid.x]
                    + mv_part[j * MV_WG + lid.x + s];
            }
        }
        workgroupBarrier();
    }
    // Lane j < MV_R * MV_COLS of the group writes sum j.
    if (t < MV_R * MV_COLS) {
        mv_store(i0, i2, i3, t, mv_part[t * MV_WG + lid.x - t]);
    }
}
