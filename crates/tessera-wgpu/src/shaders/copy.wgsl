// copy.wgsl: DUP, CONT and CPY. Elements are matched in logical row-major
// order (item t is element t of src0 and of dst, each unravelled with its own
// extents). iu.x: 0 convert through f32, 1 copy element bits, 2 dequantize
// (src0 quantized, block size iu.y), 3 copy whole blocks (extents and
// strides given in blocks), 4 quantize a block of iu.y f32 values.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    let is = unravel(t, P.ne_0);
    let id = unravel(t, P.ne_d);
    let dst = P.off.x + offset_of(id, P.nb_d);
    switch P.iu.x {
        case 0u: {
            d_st(dst, s0_ld(P.off.y + offset_of(is, P.nb_0)));
        }
        case 1u: {
            d_straw(dst, s0_raw(P.off.y + offset_of(is, P.nb_0)));
        }
        case 2u: {
            let bs = P.iu.y;
            let blk = P.off.y + (is.x / bs) * P.nb_0.x + is.y * P.nb_0.y + is.z * P.nb_0.z + is.w * P.nb_0.w;
            d_st(dst, s0_dq(blk, is.x % bs));
        }
        case 3u: {
            let src = P.off.y + offset_of(is, P.nb_0);
            for (var k = 0u; k < d_TS; k = k + 1u) {
                d_sb(dst + k, s0_b(src + k));
            }
        }
        default: {
            // is/id are block coordinates; src0 elements are iu.z bytes apart.
            let src = P.off.y + offset_of(is, P.nb_0);
            for (var k = 0u; k < P.iu.y; k = k + 1u) {
                qbuf[k] = s0_ld(src + k * P.iu.z);
            }
            store_block(dst);
        }
    }
}
