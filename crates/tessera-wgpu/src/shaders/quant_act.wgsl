// quant_act.wgsl: the activations of a few-column product quantized for
// the integer products (matvec_q8.wgsl, matmul_q8.wgsl). Per 32 values of each
// column of src0 (F32: the product's src1), a Q8Block (q8_block.wgsl). In
// d (the scratch): column c's bytes from byte P.iu.x + c * k, the pair of
// its block b at byte P.iu.y + 8 * (c * k / 32 + b).
// One invocation per block; P.ne_0 = src1's (k, columns), P.off2.y blocks.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let k = P.ne_0.x;
    let nb = k / 32u;
    let c = t / nb;
    let b = t % nb;
    let src = P.off.y + c * P.nb_0.y + 32u * b * P.nb_0.x;
    var x: array<f32, 32>;
    for (var i = 0u; i < 32u; i = i + 1u) {
        x[i] = s0_ld(src + i * P.nb_0.x);
    }
    d_q8((P.iu.x + c * k + 32u * b) >> 2u, (P.iu.y >> 2u) + 2u * (c * nb + b), q8_block(x));
}
