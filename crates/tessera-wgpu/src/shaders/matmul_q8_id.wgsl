// matmul_q8_id.wgsl: MUL_MAT_ID of quantized weights (the types of
// mq_unit.wgsl) with many tokens (prompts, batches) by activations
// quantized by quant_act.wgsl: each expert's tokens gathered, then tiled
// integer products by matmul_q8_tile.wgsl (which the host prepends, with
// QT = 64, QR = 4, matmul_common.wgsl and mq_unit.wgsl), so a prompt's
// tokens that share an expert read its rows once a tile of QT of them
// instead of once each. dst[i, e, t] = sum_k src0[k, i, ids[e, t]] *
// src1[k, e % ne11, t]; ids clamped into 0..experts as matvec_q8_id.wgsl
// clamps them.
// Workgroup g takes rows QT (g % P.iu2.y).. of expert x = g / P.iu2.y:
// it finds the pairs p = e + used t whose id is x, in that order (each
// invocation counts those of its share of the ids, the counts' prefix
// sums give their places), and computes their products QT pairs at a
// time. An expert that no token picked costs one scan of the ids.
// P.iu: x, y as matmul_q8_tile.wgsl reads them, z = ne11. P.iu2.y = row
// tiles. ids (I32, src2 [used, t]) at P.off.w.

// The pairs of the current QT, and how many there are.
var<workgroup> id_pairs: array<u32, QT>;
var<workgroup> id_prefix: array<u32, 256>;
var<workgroup> id_total: u32;
var<private> id_count: u32;

fn q8_col(i: u32) -> u32 {
    if (i >= id_count) {
        return Q8_NONE;
    }
    let p = id_pairs[i];
    let used = P.ne_2.x;
    return (p % used) % P.iu.z + P.iu.z * (p / used);
}

// The expert of pair p, clamped.
fn id_of(p: u32) -> u32 {
    let used = P.ne_2.x;
    let id = s2_ldi(P.off.w + (p % used) * P.nb_2.x + (p / used) * P.nb_2.y);
    return u32(clamp(id, 0, i32(max(P.ne_0.z, 1u)) - 1));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = group_index(wid, nwg);
    if (g >= P.off2.y) {
        return;
    }
    let m = P.ne_d.x;
    let used = P.ne_2.x;
    let r0 = (g % P.iu2.y) * QT;
    let x = g / P.iu2.y;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    // This invocation's share of the pairs, and its count of expert x.
    let pairs = used * P.ne_2.y;
    let share = (pairs + 255u) / 256u;
    let first = min(t * share, pairs);
    let last = min(first + share, pairs);
    var mine = 0u;
    for (var p = first; p < last; p = p + 1u) {
        mine = mine + u32(id_of(p) == x);
    }
    // Inclusive prefix sums of the counts (Hillis-Steele).
    id_prefix[t] = mine;
    workgroupBarrier();
    for (var d = 1u; d < 256u; d = d * 2u) {
        var v = id_prefix[t];
        if (t >= d) {
            v = v + id_prefix[t - d];
        }
        workgroupBarrier();
        id_prefix[t] = v;
        workgroupBarrier();
    }
    if (t == 255u) {
        id_total = id_prefix[255];
    }
    let before = id_prefix[t] - mine;
    let total = workgroupUniformLoad(&id_total);
    for (var q0 = 0u; q0 < total; q0 = q0 + QT) {
        // The pairs of places q0..q0 + QT.
        var place = before;
        for (var p = first; p < last && place < q0 + QT; p = p + 1u) {
            if (id_of(p) == x) {
                if (place >= q0) {
                    id_pairs[place - q0] = p;
                }
                place = place + 1u;
            }
        }
        id_count = min(QT, total - q0);
        workgroupBarrier();
        let acc = q8_tile(r0, P.off.y + x * P.nb_0.z, t);
        for (var c = 0u; c < QR; c = c + 1u) {
            let i = tx + 16u * c;
            if (i < id_count) {
                let p = id_pairs[i];
                let out = P.off.x + (p % used) * P.nb_d.y + (p / used) * P.nb_d.z;
                for (var r = 0u; r < QR; r = r + 1u) {
                    let row = r0 + ty + 16u * r;
                    if (row < m) {
                        d_st(out + row * P.nb_d.x, acc[r][c]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
}
