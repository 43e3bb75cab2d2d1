// transfer.wgsl: byte-exact fills and copies of buffer ranges whose offsets
// or sizes are not multiples of 4 (wgpu's copy commands need 4-byte
// alignment). One invocation per destination word; bytes outside
// [iu.y, iu.z) keep their value. iu.w selects: 0 fill with the byte pattern
// iu2.y, 1 copy from s0 starting at byte iu2.x, 2 apply the (word, mask,
// value) patches listed in s0.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    if (P.iu.w == 2u) {
        let w = s0_w(3u * t);
        let m = s0_w(3u * t + 1u);
        let v = s0_w(3u * t + 2u);
        d_sw(w, (d_w(w) & ~m) | (v & m));
        return;
    }
    let w = P.iu.x + t;
    let lo = max(P.iu.y, w * 4u);
    let hi = min(P.iu.z, w * 4u + 4u);
    if (P.iu.w == 0u) {
        var mask = 0u;
        for (var b = lo; b < hi; b = b + 1u) {
            mask = mask | (0xffu << ((b & 3u) << 3u));
        }
        d_sw(w, (d_w(w) & ~mask) | (P.iu2.y & mask));
        return;
    }
    let src0 = w * 4u - P.iu.y + P.iu2.x;
    if (lo == w * 4u && hi == w * 4u + 4u && (src0 & 3u) == 0u) {
        d_sw(w, s0_w(src0 >> 2u));
        return;
    }
    var v = d_w(w);
    for (var b = lo; b < hi; b = b + 1u) {
        let sh = (b & 3u) << 3u;
        let byte = s0_b(b - P.iu.y + P.iu2.x);
        v = (v & ~(0xffu << sh)) | (byte << sh);
    }
    d_sw(w, v);
}
