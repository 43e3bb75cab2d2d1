// index.wgsl: GET_ROWS (iu.x = 0), SET_ROWS into float types (1) and into
// quantized types (2, one item per block of iu.z values), CONCAT (3, along dim iu.y),
// REPEAT (4: src0 tiled) and PAD (5: zeros before (iu2) and around src0). Row ids
// are clamped into the indexed tensor, so a bad id cannot reach memory
// outside it. iu.z: block size of src0 (GET_ROWS).

fn row_id(addr: u32, rows: u32) -> u32 {
    let r = s1_ldi(addr);
    return u32(clamp(r, 0, i32(max(rows, 1u)) - 1));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = item_index(wid, nwg, lid);
    if (t >= P.off2.y) {
        return;
    }
    switch P.iu.x {
        case 0u: {
            let i = unravel(t, P.ne_d);
            let r = row_id(P.off.z + i.y * P.nb_1.x + i.z * P.nb_1.y + i.w * P.nb_1.z, P.ne_0.y);
            let dst = P.off.x + offset_of(i, P.nb_d);
            let bs = P.iu.z;
            let base = P.off.y + r * P.nb_0.y + i.z * P.nb_0.z + i.w * P.nb_0.w;
            if (bs > 1u) {
                d_st(dst, s0_dq(base + (i.x / bs) * P.nb_0.x, i.x % bs));
            } else if (s0_T == T_I32) {
                d_straw(dst, s0_raw(base + i.x * P.nb_0.x));
            } else {
                d_st(dst, s0_ld(base + i.x * P.nb_0.x));
            }
        }
        case 1u: {
            let i = unravel(t, P.ne_0);
            let r = row_id(P.off.z + i.y * P.nb_1.x + (i.z % P.ne_1.y) * P.nb_1.y + (i.w % P.ne_1.z) * P.nb_1.z, P.ne_d.y);
            let dst = P.off.x + i.x * P.nb_d.x + r * P.nb_d.y + i.z * P.nb_d.z + i.w * P.nb_d.w;
            d_st(dst, s0_ld(P.off.y + offset_of(i, P.nb_0)));
        }
        case 2u: {
            // ne_0.x counts blocks; src0 elements are nb_0.x / iu.z bytes apart.
            let i = unravel(t, P.ne_0);
            let r = row_id(P.off.z + i.y * P.nb_1.x + (i.z % P.ne_1.y) * P.nb_1.y + (i.w % P.ne_1.z) * P.nb_1.z, P.ne_d.y);
            let dst = P.off.x + i.x * P.nb_d.x + r * P.nb_d.y + i.z * P.nb_d.z + i.w * P.nb_d.w;
            let src = P.off.y + offset_of(i, P.nb_0);
            let es = P.nb_0.x / P.iu.z;
            for (var k = 0u; k < P.iu.z; k = k + 1u) {
                qbuf[k] = s0_ld(src + k * es);
            }
            store_block(dst);
        }
        case 4u: {
            let i = unravel(t, P.ne_d);
            d_straw(P.off.x + offset_of(i, P.nb_d), s0_raw(P.off.y + offset_of(i % P.ne_0, P.nb_0)));
        }
        case 5u: {
            let i = unravel(t, P.ne_d);
            let dst = P.off.x + offset_of(i, P.nb_d);
            // Below the left padding the subtraction wraps to a huge index.
            let j = i - P.iu2;
            if (all(i >= P.iu2) && all(j < P.ne_0)) {
                d_straw(dst, s0_raw(P.off.y + offset_of(j, P.nb_0)));
            } else {
                d_straw(dst, 0u);
            }
        }
        default: {
            let i = unravel(t, P.ne_d);
            let dim = P.iu.y;
            let na = P.ne_0[dim];
            let dst = P.off.x + offset_of(i, P.nb_d);
            if (i[dim] < na) {
                d_straw(dst, s0_raw(P.off.y + offset_of(i, P.nb_0)));
            } else {
                var j = i;
                j[dim] = i[dim] - na;
                d_straw(dst, s1_raw(P.off.z + offset_of(j, P.nb_1)));
            }
        }
    }
}
