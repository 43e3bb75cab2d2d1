// matmul_tiled8.wgsl: MUL_MAT with many columns, as matmul_tiled.wgsl but
// with a 128 x 128 tile per workgroup of 256 and 8 x 8 outputs per
// invocation (rows ty + 16 i, columns tx + 16 j): a step of 8 along k
// stages 1,024 weights (each dequantized once) and 1,024 activations in
// workgroup memory, then every invocation does 64 FMAs for 16 loads from
// it, where the 64 x 64 tile does 16 for 8. Rows of the staged tiles are
// padded to 132 words, so that the stores (eight k's of four rows a warp)
// fall into distinct banks. Chosen by TESSERA_WGPU_MM=big (for measuring:
// not yet timed on a GPU).

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;
const BP: u32 = 132u;
var<workgroup> sa: array<f32, 1056>; // [kk * BP + row]
var<workgroup> sb: array<f32, 1056>; // [kk * BP + col]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let n = P.ne_d.y;
    let tile = mm_tile(g, BM, BN);
    let tm = tile.x;
    let tn = tile.y;
    let i2 = tile.z;
    let i3 = tile.w;
    let a0 = mm_a_base(i2, i3);
    let b0 = mm_b_base(i2, i3);
    let k = P.ne_0.x;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    var acc: array<array<f32, 8>, 8>;
    for (var k0 = 0u; k0 < k; k0 = k0 + BK) {
        for (var q = 0u; q < 4u; q = q + 1u) {
            let e = t + 256u * q;
            let kk = e % BK;
            let rr = e / BK;
            let kg = k0 + kk;
            let row = tm * BM + rr;
            var w = 0.0;
            if (row < m && kg < k) {
                w = mm_weight(a0 + row * P.nb_0.y, kg);
            }
            sa[kk * BP + rr] = w;
            let col = tn * BN + rr;
            var v = 0.0;
            if (col < n && kg < k) {
                v = s1_ld(b0 + col * P.nb_1.y + kg * P.nb_1.x);
            }
            sb[kk * BP + rr] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let o = kk * BP;
            var a: array<f32, 8>;
            var b: array<f32, 8>;
            for (var i = 0u; i < 8u; i = i + 1u) {
                a[i] = sa[o + ty + 16u * i];
                b[i] = sb[o + tx + 16u * i];
            }
            for (var i = 0u; i < 8u; i = i + 1u) {
                for (var j = 0u; j < 8u; j = j + 1u) {
                    acc[i][j] = acc[i][j] + a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    let db = P.off.x + i2 * P.nb_d.z + i3 * P.nb_d.w;
    for (var i = 0u; i < 8u; i = i + 1u) {
        let row = tm * BM + ty + 16u * i;
        for (var j = 0u; j < 8u; j = j + 1u) {
            let col = tn * BN + tx + 16u * j;
            if (row < m && col < n) {
                d_st(db + row * P.nb_d.x + col * P.nb_d.y, acc[i][j]);
            }
        }
    }
}
