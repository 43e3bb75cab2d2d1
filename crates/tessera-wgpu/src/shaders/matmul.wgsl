// matmul.wgsl: MUL_MAT with short rows (k below 256) and few columns, one
// invocation per output element: dst[i, j] = sum_k src0[k, i] * src1[k, j],
// src0 broadcast over dims 2-3 (a workgroup per row would leave most of its
// invocations idle there: attention's K x Q while decoding, many tiny rows).
// Quantized src0 (block size iu.x > 1) is dequantized block by block from
// its ggml bytes.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let o = unravel(t, P.ne_d);
    let i02 = o.z / (P.ne_1.z / P.ne_0.z);
    let i03 = o.w / (P.ne_1.w / P.ne_0.w);
    let a = P.off.y + o.x * P.nb_0.y + i02 * P.nb_0.z + i03 * P.nb_0.w;
    let b = P.off.z + o.y * P.nb_1.y + o.z * P.nb_1.z + o.w * P.nb_1.w;
    let k = P.ne_0.x;
    let bs = P.iu.x;
    var acc = 0.0;
    if (bs > 1u) {
        for (var kb = 0u; kb < k / bs; kb = kb + 1u) {
            let blk = a + kb * P.nb_0.x;
            var part = 0.0;
            for (var j = 0u; j < bs; j = j + 1u) {
                part = part + s0_dq(blk, j) * s1_ld(b + (kb * bs + j) * P.nb_1.x);
            }
            acc = acc + part;
        }
    } else {
        for (var kk = 0u; kk < k; kk = kk + 1u) {
            acc = acc + s0_ld(a + kk * P.nb_0.x) * s1_ld(b + kk * P.nb_1.x);
        }
    }
    d_st(P.off.x + offset_of(o, P.nb_d), acc);
}
