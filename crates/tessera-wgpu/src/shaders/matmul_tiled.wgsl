// matmul_tiled.wgsl: MUL_MAT with many columns (prompts, batches):
// dst[i, j] = sum_k src0[k, i] * src1[k, j], src0 broadcast over dims 2-3.
// Each workgroup of 256 computes a 64 x 64 tile of dst through slices of 16
// along k staged in workgroup memory: every src0 element of the tile is
// read (and dequantized) once per workgroup instead of once per output, and
// every invocation accumulates 4 x 4 outputs in registers (rows ty + 16 r,
// columns tx + 16 c: neighbouring invocations read neighbouring words of
// the shared tiles). The tiles' rows are padded to 65 words so the stores
// into them do not all fall into one memory bank.

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
const TP: u32 = 65u;
var<workgroup> ta: array<f32, 1040>; // [kk * TP + row]
var<workgroup> tb: array<f32, 1040>; // [kk * TP + col]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let n = P.ne_d.y;
    let tile = mm_tile(g, TM, TN);
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
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var q = 0u; q < 4u; q = q + 1u) {
            let e = t + 256u * q;
            let kk = e % TK;
            let rr = e / TK;
            let kg = k0 + kk;
            let row = tm * TM + rr;
            var w = 0.0;
            if (row < m && kg < k) {
                w = mm_weight(a0 + row * P.nb_0.y, kg);
            }
            ta[kk * TP + rr] = w;
            let col = tn * TN + rr;
            var v = 0.0;
            if (col < n && kg < k) {
                v = s1_ld(b0 + col * P.nb_1.y + kg * P.nb_1.x);
            }
            tb[kk * TP + rr] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let o = kk * TP;
            let bv = vec4<f32>(tb[o + tx], tb[o + tx + 16u], tb[o + tx + 32u], tb[o + tx + 48u]);
            acc0 = acc0 + ta[o + ty] * bv;
            acc1 = acc1 + ta[o + ty + 16u] * bv;
            acc2 = acc2 + ta[o + ty + 32u] * bv;
            acc3 = acc3 + ta[o + ty + 48u] * bv;
        }
        workgroupBarrier();
    }
    let db = P.off.x + i2 * P.nb_d.z + i3 * P.nb_d.w;
    for (var ri = 0u; ri < 4u; ri = ri + 1u) {
        let row = tm * TM + ty + 16u * ri;
        var acc = acc0;
        if (ri == 1u) {
            acc = acc1;
        } else if (ri == 2u) {
            acc = acc2;
        } else if (ri == 3u) {
            acc = acc3;
        }
        for (var c = 0u; c < 4u; c = c + 1u) {
            let col = tn * TN + tx + 16u * c;
            if (row < m && col < n) {
                d_st(db + row * P.nb_d.x + col * P.nb_d.y, acc[c]);
            }
        }
    }
}
