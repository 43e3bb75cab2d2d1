// matvec_rows_subgroup.wgsl: the row-group kernel's main
// (matvec_rows.wgsl) on devices with subgroup operations: each subgroup
// takes groups of MV_R rows, its active invocations (however many) on
// consecutive units, and subgroupAdd sums each (row, column): no
// workgroup memory, no barrier. P.iu2.x rows a workgroup (the host's:
// MV_R times 128 over the device's smallest subgroup), subgroup s taking
// groups s, s + the number of subgroups, ...: right whatever the
// subgroups' size and grouping, and with inactive invocations.

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) n_sg: u32) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    // The subgroup's active invocations, counted and ranked (a device may
    // leave some inactive, and need not number them 0, 1, ...).
    let lanes = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    let rows = P.iu2.x;
    let blocks = (P.ne_d.x + rows - 1u) / rows;
    let r = g / blocks;
    let i2 = r % P.ne_d.z;
    let i3 = r / P.ne_d.z;
    // Every condition below is the same for the lanes of a subgroup, so
    // each subgroupAdd has the whole subgroup.
    for (var grp = sg; grp < rows / MV_R; grp = grp + n_sg) {
        let i0 = (g % blocks) * rows + grp * MV_R;
        if (i0 >= P.ne_d.x) {
            break;
        }
        let acc = mv_partials(i0, i2, i3, lane, lanes);
        var sum: array<f32, MV_R * MV_COLS>;
        for (var j = 0u; j < MV_R * MV_COLS; j = j + 1u) {
            sum[j] = subgroupAdd(acc[j]);
        }
        // Lane j writes sum j.
        for (var j = lane; j < MV_R * MV_COLS; j = j + lanes) {
            mv_store(i0, i2, i3, j, sum[j]);
        }
    }
}
