// matvec_q8_tree.wgsl: the matrix-vector integer kernel's main
// (matvec_q8.wgsl) for devices without subgroup operations: sixty-four
// invocations per row, two rows a workgroup, the row's partial
// sums added up by a tree in workgroup memory.

const MQ_LANES: u32 = 64u;
const MQ_ROWS: u32 = 2u;
const MQ_WG: u32 = 128u;
var<workgroup> mq_part: array<f32, 1024>; // MQ_COLS * MQ_WG, at most 8 * 128

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    // Uniform per workgroup: the barriers below stay in uniform control flow.
    let p = mq_product(g);
    let n = P.iu.z;
    let row = MQ_ROWS * p.group + lid.x / MQ_LANES;
    let t = lid.x % MQ_LANES;
    var acc: array<f32, MQ_COLS>;
    if (row < p.m) {
        acc = mq_row(p.a_at + row * p.a_nb, t, MQ_LANES, 0u, n);
    }
    for (var c = 0u; c < MQ_COLS; c = c + 1u) {
        mq_part[c * MQ_WG + lid.x] = acc[c];
    }
    workgroupBarrier();
    for (var s = MQ_LANES / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            for (var c = 0u; c < MQ_COLS; c = c + 1u) {
                mq_part[c * MQ_WG + lid.x] = mq_part[c * MQ_WG + lid.x]
                    + mq_part[c * MQ_WG + lid.x + s];
            }
        }
        workgroupBarrier();
    }
    // Lane c of the row's invocations writes column c.
    if (row < p.m && t < min(n, MQ_COLS)) {
        d_st(p.d_at + row * p.d_nb.x + t * p.d_nb.y, mq_part[t * MQ_WG + lid.x - t]);
    }
}
