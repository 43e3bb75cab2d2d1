// reduce_subgroup.wgsl: sums and maxima over a workgroup of 256
// invocations on devices with subgroup operations (reduce_tree.wgsl's
// functions): each subgroup reduces its values at once (subgroupAdd,
// subgroupMax), its first active invocation puts the result in workgroup
// memory, and every invocation reads the subgroups' results in order: two
// barriers instead of ten, right for any subgroup size and grouping, and
// for subgroups with inactive invocations. Call in uniform control flow
// with every invocation. The kernel's main takes
// `lanes: Lanes` and calls lanes_init(lanes) first.

struct Lanes {
    @builtin(subgroup_id) id: u32,
    @builtin(num_subgroups) count: u32,
}

var<private> LANES: Lanes;
// The invocation's rank among its subgroup's active invocations: the one
// of rank 0 writes the subgroup's result.
var<private> LANE_RANK: u32;

fn lanes_init(x: Lanes) {
    LANES = x;
    LANE_RANK = subgroupExclusiveAdd(1u);
}

var<workgroup> red: array<f32, 256>;

fn reduce_sum(l: u32, v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (LANE_RANK == 0u) {
        red[LANES.id] = s;
    }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < LANES.count; i = i + 1u) {
        r = r + red[i];
    }
    workgroupBarrier();
    return r;
}

fn reduce_max(l: u32, v: f32) -> f32 {
    let s = subgroupMax(v);
    if (LANE_RANK == 0u) {
        red[LANES.id] = s;
    }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < LANES.count; i = i + 1u) {
        r = max(r, red[i]);
    }
    workgroupBarrier();
    return r;
}
