// unary.wgsl: UNARY functions (iu.x = 0..7, see unary_fn), SCALE
// (iu.x = 64: x * fp.x + fp.y), SQR (65), SQRT (66) and CLAMP (67: ggml's
// MAX(MIN(x, fp.y), fp.x), a NaN becomes the upper bound), element-wise in f32.

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
    switch P.iu.x {
        case 64u: { r = x * P.fp.x + P.fp.y; }
        case 65u: { r = x * x; }
        case 66u: { r = sqrt(x); }
        case 67u: {
            let t = select(P.fp.y, x, x < P.fp.y);
            r = select(P.fp.x, t, t > P.fp.x);
        }
        default: { r = unary_fn(P.iu.x, x); }
    }
    d_st(P.off.x + offset_of(i, P.nb_d), r);
}
