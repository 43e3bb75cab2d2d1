// sort.wgsl: ARGSORT (ascending, or descending when iu.x = 1) and TOP_K
// (descending, the first ne_d.x ranks) of F32 rows into I32 indices. One
// work item per source element: its rank in the row is the number of
// elements ordered before it (by value, then by index, so equal values keep
// index order), and it writes its index at that rank when the rank is below
// ne_d.x. Values are compared through integer keys (sort_key.wgsl,
// prepended): -0 equals +0 and every NaN ranks above every number, as on
// the CPU. O(n) per element.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let i = unravel(t, P.ne_0);
    let n = P.ne_0.x;
    let row = P.off.y + i.y * P.nb_0.y + i.z * P.nb_0.z + i.w * P.nb_0.w;
    let desc = P.iu.x == 1u;
    let kj = sort_key(s0_ld(row + i.x * P.nb_0.x));
    var rank = 0u;
    for (var m = 0u; m < n; m = m + 1u) {
        let km = sort_key(s0_ld(row + m * P.nb_0.x));
        rank = rank + select(0u, 1u, sort_before(km, kj, m, i.x, desc));
    }
    if (rank < P.ne_d.x) {
        let dst = P.off.x + rank * P.nb_d.x + i.y * P.nb_d.y + i.z * P.nb_d.z + i.w * P.nb_d.w;
        d_sti(dst, i32(i.x));
    }
}
