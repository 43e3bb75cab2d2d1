// matvec_q8_glu.wgsl: two products of one input by weights of one type
// (matvec_q8.wgsl's mq_row, on the same quantized activations) and the
// split GLU that reads them, as one dispatch: y = act(A x) * (B x), never
// storing A x and B x (glu_products.rs). Devices with subgroup operations
// only: each subgroup takes whole rows, both products of a row summed by
// subgroupAdd as the subgroup kernel (matvec_q8_subgroup.wgsl) sums them,
// then act and the product as glu.wgsl computes them: the same bits as
// the three dispatches.
// 32 rows a workgroup (MG_ROWS), subgroup s taking rows s, s + the number
// of subgroups, ... P: dst = y ([m, n], contiguous F32); src0 = A's
// weights at P.off.y, B's at byte P.iu2.w, row stride P.nb_0.y; P.iu:
// x, y, z = the quantized activations' bytes, their pairs, n (columns);
// P.off2.w = the activation (unary_fn's code). iu2.z = 1: the workgroup
// also quantizes the blocks it wrote (its 32 rows of each column) for the
// integer products that read y, as quant_act.wgsl would, into s2 (the
// scratch, also bound as s1): block j's bytes at byte iu2.x + 32 j, its
// pair at iu2.y + 8 j.

const MG_ROWS: u32 = 32u;
var<workgroup> mg_y: array<f32, 256>; // MG_ROWS * MQ_COLS, at most 32 * 8

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) n_sg: u32,
        @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    // Whole workgroups leave together (the barrier below needs them all).
    if (g >= P.off2.y) {
        return;
    }
    // The subgroup's active invocations, counted and ranked (a device may
    // leave some inactive, and need not number them 0, 1, ...).
    let lanes = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    let n = P.iu.z;
    let m = P.ne_d.x;
    // Every condition in this loop is the same for the lanes of a
    // subgroup, so each subgroupAdd has the whole subgroup.
    for (var r = sg; r < MG_ROWS; r = r + n_sg) {
        let row = MG_ROWS * g + r;
        if (row < m) {
            let ax = mq_row(P.off.y + row * P.nb_0.y, lane, lanes, 0u, n);
            let bx = mq_row(P.iu2.w + row * P.nb_0.y, lane, lanes, 0u, n);
            var y: array<f32, MQ_COLS>;
            for (var c = 0u; c < MQ_COLS; c = c + 1u) {
                if (MQ_COLS == 1u || c < n) {
                    let x = subgroupAdd(ax[c]);
                    let gate = subgroupAdd(bx[c]);
                    y[c] = unary_fn(P.off2.w, x) * gate;
                }
            }
            // Lane c writes column c.
            for (var c = lane; c < min(n, MQ_COLS); c = c + lanes) {
                d_st(P.off.x + row * P.nb_d.x + c * P.nb_d.y, y[c]);
                mg_y[c * MG_ROWS + r] = y[c];
            }
        }
    }
    if (P.iu2.z == 1u) {
        workgroupBarrier();
        // Invocation c quantizes column c's block (the host asks for this
        // only where m is a multiple of 32: whole blocks).
        if (li < min(n, MQ_COLS)) {
            var x: array<f32, 32>;
            for (var e = 0u; e < 32u; e = e + 1u) {
                x[e] = mg_y[li * MG_ROWS + e];
            }
            let j = li * (m / 32u) + g;
            s2_q8((P.iu2.x >> 2u) + 8u * j, (P.iu2.y >> 2u) + 2u * j, q8_block(x));
        }
    }
}
