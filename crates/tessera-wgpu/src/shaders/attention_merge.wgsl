// attention_merge.wgsl: the end of a FLASH_ATTN_EXT split over workgroups
// (attention_rows.wgsl with iu2.w = 2, attention_split.rs): one workgroup
// per query row merges its iu.x parts from s0 (the stream's scratch, from
// byte iu.y: per part the maximum, the sum and dv = iu.z partial outputs)
// as the online softmax merges rounds, then finishes as attention_rows.wgsl
// does: sinks from s1 at byte iu2.x when iu.w = 1, the row written to d,
// and with iu2.w = 1 quantized into s0 (block j's bytes at byte iu2.y +
// 32 j, its pair at iu2.z + 8 j). P.ne_0: the query's extents.

const AM_NEG: f32 = -3.0e38;

var<workgroup> am_row: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>) {
    let row = group_index(wid, nwg);
    let n_head = P.ne_0.z;
    let n_q = P.ne_0.y;
    if (row >= n_head * n_q * P.ne_0.w) {
        return;
    }
    let t = lidv.x;
    let ih = row % n_head;
    let iq = (row / n_head) % n_q;
    let i3 = row / (n_head * n_q);
    let parts = P.iu.x;
    let dv = P.iu.z;
    let stride = dv + 2u;
    let base = (P.iu.y >> 2u) + row * parts * stride;
    var m = AM_NEG;
    var seen = false;
    for (var p = 0u; p < parts; p = p + 1u) {
        let mp = bitcast<f32>(s0_w(base + p * stride));
        if (mp > AM_NEG) {
            m = select(mp, max(m, mp), seen);
            seen = true;
        }
    }
    var total = 0.0;
    var out = 0.0;
    for (var p = 0u; p < parts; p = p + 1u) {
        let at = base + p * stride;
        let mp = bitcast<f32>(s0_w(at));
        if (mp > AM_NEG) {
            let f = exp(mp - m);
            total = total + bitcast<f32>(s0_w(at + 1u)) * f;
            if (t < dv) {
                out = out + bitcast<f32>(s0_w(at + 2u + t)) * f;
            }
        }
    }
    var scale_o = 1.0;
    if (P.iu.w == 1u) {
        let f = fa_sink(s1_ld(P.iu2.x + ih * 4u), m, seen, total);
        scale_o = f.x;
        total = f.y;
    }
    let inv = select(0.0, 1.0 / total, total != 0.0);
    let o = P.off.x + ih * P.nb_d.y + iq * P.nb_d.z + i3 * P.nb_d.w;
    if (t < dv) {
        let y = out * scale_o * inv;
        d_st(o + t * P.nb_d.x, y);
        am_row[t] = y;
    }
    if (P.iu2.w == 1u) {
        workgroupBarrier();
        if (t < dv / 32u) {
            let j = (o - P.off.x) / 128u + t;
            var x: array<f32, 32>;
            for (var e = 0u; e < 32u; e = e + 1u) {
                x[e] = am_row[32u * t + e];
            }
            s0_q8((P.iu2.y >> 2u) + 8u * j, (P.iu2.z >> 2u) + 2u * j, q8_block(x));
        }
    }
}
