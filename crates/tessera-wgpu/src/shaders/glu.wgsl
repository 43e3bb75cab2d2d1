// glu.wgsl: gated linear units act(x) * g. iu.x: the activation (unary_fn
// code); iu.y: 0 fused (src0 rows hold [x, g], or [g, x] when iu.z = 1),
// 1 split (x = src0, g = src1); iu.w = 1: SWIGLU_OAI (split, fp.x alpha,
// fp.y limit).
// iu2.z = 1 (a contiguous destination of rows of whole 32-value blocks):
// each workgroup also quantizes the eight blocks it wrote (kept in
// workgroup memory) for the integer products, as
// quant_act.wgsl would, into s2 (the stream's scratch): block j's bytes at
// byte iu2.x + 32 j, its pair at iu2.y + 8 j.

var<workgroup> glu_q: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    var y = 0.0;
    if (t < P.off2.y) {
        y = glu_item(t);
    }
    if (P.iu2.z == 1u) {
        glu_q[lid.x] = y;
        workgroupBarrier();
        let j = (t - lid.x) / 32u + lid.x;
        if (lid.x < 8u && 32u * j < P.off2.y) {
            var x: array<f32, 32>;
            for (var e = 0u; e < 32u; e = e + 1u) {
                x[e] = glu_q[32u * lid.x + e];
            }
            s2_q8((P.iu2.x >> 2u) + 8u * j, (P.iu2.y >> 2u) + 2u * j, q8_block(x));
        }
    }
}

// Element t of the destination, stored and returned.
fn glu_item(t: u32) -> f32 {
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
        let y = xc / (1.0 + exp(P.fp.x * -xc)) * (gc + 1.0);
        d_st(P.off.x + offset_of(i, P.nb_d), y);
        return y;
    }
    let y = unary_fn(P.iu.x, x) * g;
    d_st(P.off.x + offset_of(i, P.nb_d), y);
    return y;
}
