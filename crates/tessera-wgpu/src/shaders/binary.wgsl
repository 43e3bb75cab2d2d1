// binary.wgsl: ADD, MUL, DIV, SUB (iu.x = 0, 1, 2, 3) with src1 broadcast by
// repetition along every dimension; computed in f32, stored in dst's type.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let i = unravel(t, P.ne_d);
    let a = s0_ld(P.off.y + offset_of(i, P.nb_0));
    let b = s1_ld(P.off.z + offset_of(i % P.ne_1, P.nb_1));
    var r: f32;
    switch P.iu.x {
        case 0u: { r = a + b; }
        case 1u: { r = a * b; }
        case 3u: { r = a - b; }
        default: { r = a / b; }
    }
    d_st(P.off.x + offset_of(i, P.nb_d), r);
}
