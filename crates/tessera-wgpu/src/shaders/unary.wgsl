// unary.wgsl: UNARY functions (iu.x = 0..6, see unary_fn) and SCALE
// (iu.x = 7: x * fp.x + fp.y), element-wise in f32.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let i = unravel(t, P.ne_d);
    let x = s0_ld(P.off.y + offset_of(i, P.nb_0));
    var r: f32;
    if (P.iu.x == 7u) {
        r = x * P.fp.x + P.fp.y;
    } else {
        r = unary_fn(P.iu.x, x);
    }
    d_st(P.off.x + offset_of(i, P.nb_d), r);
}
