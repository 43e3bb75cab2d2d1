// matmul_coop_tile.wgsl: the tile of the products of quantized weights
// (the types of mq_unit.wgsl) by many columns on cooperative matrices
// (tensor cores), f16 products summed in f32, for matmul_coop.wgsl and
// matmul_coop_id.wgsl (which the host appends, each with its coop_col,
// the quantized column of the tile's column i, and coop_dst, the byte of
// dst where it goes; Q8_NONE: none). The host prepends `enable` directives (moved
// to the module's start) and the shape: CS (the matrices' side, 8 or 16),
// BT (the workgroup's tile: BT x BT of dst), NSG subgroups computing a
// part of PR rows x PC columns each (TR = PR / CS by TC = PC / CS
// matrices), WG (NSG x the adapter's largest subgroup: at least NSG
// subgroups however the device groups the invocations; subgroup s
// computes part s % NSG, all of them stage).
//
// Each workgroup computes its tile one unit (32 values of k) a step:
// rows' units decoded by mq_unit (codes and factors, value = f * code +
// offset) and columns' quantized units (quant_act.wgsl's bytes and
// scales, value = d * q) staged as f16 in workgroup memory, then each
// subgroup multiplies and adds its matrices. A column whose values could
// pass f16's range (127 x its largest scale above 2^14) is staged times a
// power of two that brings it below, and its results are stored divided
// by it (exact: the same bits as without the range check wherever no
// scaling is needed). The results go through workgroup memory (one matrix
// per part at a time) to dst, rows past m and absent columns dropped;
// rows past m and absent columns stage zeros.
// P.iu: x = byte of the columns' bytes (column c's at x + c k), y = byte
// of their (d, d * sum) pairs (block b of column c at y + 8 (c k / 32 + b)).

// Row stride of the staged units, in vectors of 4 halves: 32 values and 8
// of padding (80 bytes: every matrix starts at a multiple of 16 bytes).
// The cooperative loads take their offsets and strides in these vectors
// (SPIR-V counts both in elements of the pointer's type). Every matrix
// starts a multiple of 16 bytes into its array, and each array's size is
// a multiple of 16 bytes (sa is declared first).
const LDV: u32 = 10u;
// [row * LDV + kk / 4]: the A matrices, row-major.
var<workgroup> sa: array<vec4<f16>, BT * LDV>;
// [column * LDV + kk / 4]: the B matrices (k x columns), column-major.
var<workgroup> sb: array<vec4<f16>, BT * LDV>;
// One result matrix per part, column-major.
var<workgroup> sc: array<f32, NSG * CS * CS>;
// Each column's scale (a power of two, 1 unless its range needs it).
var<workgroup> cs: array<f32, BT>;

// The tile of rows r0.. (weights' row `row` at byte wbase + row *
// P.nb_0.y) by the columns of coop_col, stored where coop_dst says. All
// WG invocations call it, in uniform control flow (cooperative operations
// need it, and it has barriers); `sid` is the invocation's subgroup.
fn coop_tile(r0: u32, wbase: u32, t: u32, sid: u32) {
    let m = P.ne_d.x;
    let k = P.ne_0.x;
    let nb = k / 32u;
    let pairs = P.iu.y >> 2u;
    for (var i = t; i < BT; i = i + WG) {
        let col = coop_col(i);
        var most = 0.0;
        if (col != Q8_NONE) {
            for (var b = 0u; b < nb; b = b + 1u) {
                most = max(most, abs(bitcast<f32>(s1_w(pairs + 2u * (col * nb + b)))));
            }
        }
        let amax = 127.0 * most;
        var scale = 1.0;
        if (amax > 16384.0) {
            scale = exp2(14.0 - ceil(log2(amax)));
        }
        cs[i] = scale;
    }
    // Part s: rows PR (s % (BT / PR)), columns PC (s / (BT / PR)) of the
    // tile. Every subgroup computes (cooperative operations need uniform
    // control flow): where the device made more than NSG, the others
    // repeat the first NSG's parts, and store the same values.
    let slot = sid % NSG;
    let qr = PR * (slot % (BT / PR));
    let qc = PC * (slot / (BT / PR));
    var acc: array<coop_mat_CSxCS<f32, C>, TR * TC>;
    for (var b = 0u; b < nb; b = b + 1u) {
        workgroupBarrier();
        for (var i = t; i < 2u * BT; i = i + WG) {
            if (i < BT) {
                let row = r0 + i;
                var w0 = vec4<u32>(0u);
                var w1 = vec4<u32>(0u);
                var f = vec4<f32>(0.0);
                if (row < m) {
                    let un = mq_unit(wbase + row * P.nb_0.y, b);
                    w0 = un.w0;
                    w1 = un.w1;
                    f = vec4<f32>(un.f.xy, un.f.z, un.f.z);
                    if (s0_T == T_Q2_K) {
                        f = vec4<f32>(un.f.xy, un.g);
                    }
                }
                let o = i * LDV;
                // Byte j of word c: value 4 c + j (of each half).
                for (var c = 0u; c < 4u; c = c + 1u) {
                    let q0 = vec4<f32>(unpack4xI8(w0[c]));
                    let q1 = vec4<f32>(unpack4xI8(w1[c]));
                    sa[o + c] = vec4<f16>(f.x * q0 + f.z);
                    sa[o + 4u + c] = vec4<f16>(f.y * q1 + f.w);
                }
            } else {
                let ci = i - BT;
                let col = coop_col(ci);
                let o = ci * LDV;
                if (col != Q8_NONE) {
                    let yq = P.iu.x + col * k + 32u * b;
                    let d = bitcast<f32>(s1_w(pairs + 2u * (col * nb + b))) * cs[ci];
                    for (var h = 0u; h < 2u; h = h + 1u) {
                        let y = s1_v4(yq + 16u * h);
                        for (var c = 0u; c < 4u; c = c + 1u) {
                            sb[o + 4u * h + c] = vec4<f16>(d * vec4<f32>(unpack4xI8(y[c])));
                        }
                    }
                } else {
                    for (var c = 0u; c < 8u; c = c + 1u) {
                        sb[o + c] = vec4<f16>(0.0);
                    }
                }
            }
        }
        workgroupBarrier();
        {
            for (var kk = 0u; kk < 32u; kk = kk + CS) {
                for (var bi = 0u; bi < TC; bi = bi + 1u) {
                    let bm = coopLoad<coop_mat_CSxCS<f16, B>>(&sb[(qc + CS * bi) * LDV + kk / 4u], LDV);
                    for (var ai = 0u; ai < TR; ai = ai + 1u) {
                        let am = coopLoadT<coop_mat_CSxCS<f16, A>>(&sa[(qr + CS * ai) * LDV + kk / 4u], LDV);
                        acc[ai * TC + bi] = coopMultiplyAdd(am, bm, acc[ai * TC + bi]);
                    }
                }
            }
        }
    }
    // Out: matrix by matrix, each part's through sc.
    for (var e = 0u; e < TR * TC; e = e + 1u) {
        workgroupBarrier();
        coopStore(acc[e], &sc[slot * CS * CS], CS);
        workgroupBarrier();
        for (var i = t; i < NSG * CS * CS; i = i + WG) {
            let s = i / (CS * CS);
            let rr = i % CS;
            let cc = (i / CS) % CS;
            let row = r0 + PR * (s % (BT / PR)) + CS * (e / TC) + rr;
            let ci = PC * (s / (BT / PR)) + CS * (e % TC) + cc;
            let out = coop_dst(ci);
            if (row < m && out != Q8_NONE) {
                d_st(out + row * P.nb_d.x, sc[i] / cs[ci]);
            }
        }
    }
}
