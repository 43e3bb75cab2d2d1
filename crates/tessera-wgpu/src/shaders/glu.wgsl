// glu.wgsl: gated linear units act(x) * g. iu.x: the activation (unary_fn
// code); iu.y: 0 fused (src0 rows hold [x, g], or [g, x] when iu.z = 1),
// 1 split (x = src0, g = src1); iu.w = 1: SWIGLU_OAI (split, fp.x alpha,
// fp.y limit).

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let i = unravel(t, P.ne_d);
    var x: f32;
    var g: f32;
    if (P.iu.y == 1u) {
        x = s0_ld(P.off.y + offset_of(i, P.nb_0));
        g = s1_ld(P.off.z + offset_of(i, P.nb_1));
    } else {
        let nc = P.ne_d.x;
        let xi = select(i.x, i.x + nc, P.iu.z == 1u);
        let gi = select(i.x + nc, i.x, P.iu.z == 1u);
        let row = P.off.y + i.y * P.nb_0.y + i.z * P.nb_0.z + i.w * P.nb_0.w;
        x = s0_ld(row + xi * P.nb_0.x);
        g = s0_ld(row + gi * P.nb_0.x);
    }
    if (P.iu.w == 1u) {
        // SWIGLU_OAI: alpha fp.x, limit fp.y, with ggml's comparisons.
        let limit = P.fp.y;
        let xc = select(x, limit, limit < x);
        var gc = g;
        if (g < -limit) {
            gc = -limit;
        } else if (limit < g) {
            gc = limit;
        }
        d_st(P.off.x + offset_of(i, P.nb_d), xc / (1.0 + exp(P.fp.x * -xc)) * (gc + 1.0));
        return;
    }
    d_st(P.off.x + offset_of(i, P.nb_d), unary_fn(P.iu.x, x) * g);
}
