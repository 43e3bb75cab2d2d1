// matvec_q8_subgroup.wgsl: the matrix-vector integer kernel's main
// (matvec_q8.wgsl) on devices with subgroup operations: each subgroup
// takes whole rows, its active invocations (however many) on consecutive
// units, and subgroupAdd sums the row: no workgroup memory, no barrier.
// P.iu2.x rows a workgroup (the host's choice: 128 over the device's
// smallest subgroup), subgroup s taking rows s, s + the number of
// subgroups, ...: right whatever the subgroups' size, however the device
// groups the invocations into subgroups, and with inactive ones.

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
    let p = mq_product(g);
    let n = P.iu.z;
    // Every condition below is the same for the lanes of a subgroup, so
    // each subgroupAdd has the whole subgroup.
    let rows = P.iu2.x;
    for (var r = sg; r < rows; r = r + n_sg) {
        let row = rows * p.group + r;
        if (row >= p.m) {
            break;
        }
        let acc = mq_row(p.a_at + row * p.a_nb, lane, lanes, 0u, n);
        var sum: array<f32, MQ_COLS>;
        for (var c = 0u; c < MQ_COLS; c = c + 1u) {
            if (MQ_COLS == 1u || c < n) {
                sum[c] = subgroupAdd(acc[c]);
            }
        }
        // Lane c writes column c.
        for (var c = lane; c < min(n, MQ_COLS); c = c + lanes) {
            d_st(p.d_at + row * p.d_nb.x + c * p.d_nb.y, sum[c]);
        }
    }
}
