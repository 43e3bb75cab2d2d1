// reduce_tree.wgsl: sums and maxima over a workgroup of 256 invocations,
// by trees in workgroup memory (devices without subgroup operations;
// reduce_subgroup.wgsl otherwise, with the same functions). Call in
// uniform control flow with every invocation; `l` is the invocation's
// local index. The kernel's main takes `lanes: Lanes` and calls
// lanes_init(lanes) first.

struct Lanes {
    @builtin(local_invocation_index) index: u32,
}

fn lanes_init(x: Lanes) {}

var<workgroup> red: array<f32, 256>;

fn reduce_sum(l: u32, v: f32) -> f32 {
    red[l] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (l < s) {
            red[l] = red[l] + red[l + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_max(l: u32, v: f32) -> f32 {
    red[l] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (l < s) {
            red[l] = max(red[l], red[l + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
