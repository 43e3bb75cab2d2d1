// matmul_q8_tile.wgsl: the tile of the integer tiled products
// (matmul_q8.wgsl, matmul_q8_id.wgsl, which the host appends, each with
// its q8_col): the QT x QT outputs of rows r0.. (weights' row `row` at
// byte wbase + row * P.nb_0.y, m = P.ne_d.x of them) and the tile's
// columns, column i of the tile being the quantized column q8_col(i) of
// the scratch (Q8_NONE: none, staged as zeros). Each workgroup of 256,
// two units (64 values of k) a step: 128 invocations decode rows' units
// (QT / 64 each: their codes packed four to a word and their factors),
// 128 load columns' quantized units, all into workgroup memory; then
// every invocation takes QR rows x QR columns (rows ty + 16 r, columns
// tx + 16 c), each pair of a unit: exact sums isum0 (values 0..16) and
// isum1 (16..32) by dot4I8Packed, scaled once as in matvec_q8.wgsl:
// dy * (fa * isum0 + fb * isum1) + fs * sy (Q2_K: + dy times its halves'
// mins by the halves' sums of activation bytes). Units past the row's
// end, rows past m and absent columns stage zeros. Called in uniform
// control flow (it has barriers) by all 256 invocations.
// P.iu: x = byte of the columns' bytes (column c's at x + c k), y = byte
// of their (d, d * sum) pairs (block b of column c at y + 8 (c k / 32 + b)).

// Staged words: [(u * 2 + half) * QT + row] (a row's unit in two vec4s).
var<workgroup> qa_w: array<vec4<u32>, QT * 4u>;
// A row's unit's (fa, fb, fs, 0), Q2_K's (fa, fb, g.x, g.y): [u * QT + row].
var<workgroup> qa_f: array<vec4<f32>, QT * 2u>;
var<workgroup> qb_w: array<vec4<u32>, QT * 4u>;
// A column's unit's (d, d * sum): [u * QT + column].
var<workgroup> qb_f: array<vec2<f32>, QT * 2u>;

fn q8_tile(r0: u32, wbase: u32, t: u32) -> array<array<f32, QR>, QR> {
    let m = P.ne_d.x;
    let k = P.ne_0.x;
    let nb = k / 32u;
    let tx = t % 16u;
    let ty = t / 16u;
    // Staging: invocation s of each half takes unit s % 2 of row (or
    // column) s / 2, and of s / 2 + 64, ... (neighbours read neighbouring
    // bytes).
    let s = t % 128u;
    var acc: array<array<f32, QR>, QR>;
    for (var b0 = 0u; b0 < nb; b0 = b0 + 2u) {
        for (var i = 0u; i < QT / 64u; i = i + 1u) {
            let su = s % 2u;
            let sr = s / 2u + 64u * i;
            let b = b0 + su;
            if (t < 128u) {
                let row = r0 + sr;
                var w0 = vec4<u32>(0u);
                var w1 = vec4<u32>(0u);
                var f = vec4<f32>(0.0);
                if (row < m && b < nb) {
                    let un = mq_unit(wbase + row * P.nb_0.y, b);
                    w0 = un.w0;
                    w1 = un.w1;
                    f = vec4<f32>(un.f, 0.0);
                    if (s0_T == T_Q2_K) {
                        f = vec4<f32>(un.f.xy, un.g);
                    }
                }
                qa_w[(2u * su) * QT + sr] = w0;
                qa_w[(2u * su + 1u) * QT + sr] = w1;
                qa_f[su * QT + sr] = f;
            } else {
                let col = q8_col(sr);
                var w0 = vec4<u32>(0u);
                var w1 = vec4<u32>(0u);
                var f = vec2<f32>(0.0);
                if (col != Q8_NONE && b < nb) {
                    let yq = P.iu.x + col * k + 32u * b;
                    w0 = s1_v4(yq);
                    w1 = s1_v4(yq + 16u);
                    let pw = (P.iu.y >> 2u) + 2u * (col * nb + b);
                    f = vec2<f32>(bitcast<f32>(s1_w(pw)), bitcast<f32>(s1_w(pw + 1u)));
                }
                qb_w[(2u * su) * QT + sr] = w0;
                qb_w[(2u * su + 1u) * QT + sr] = w1;
                qb_f[su * QT + sr] = f;
            }
        }
        workgroupBarrier();
        for (var u = 0u; u < 2u; u = u + 1u) {
            var y0: array<vec4<u32>, QR>;
            var y1: array<vec4<u32>, QR>;
            var yf: array<vec2<f32>, QR>;
            var hs: array<vec2<f32>, QR>;
            for (var c = 0u; c < QR; c = c + 1u) {
                y0[c] = qb_w[(2u * u) * QT + tx + 16u * c];
                y1[c] = qb_w[(2u * u + 1u) * QT + tx + 16u * c];
                yf[c] = qb_f[u * QT + tx + 16u * c];
                if (s0_T == T_Q2_K) {
                    hs[c] = mq_half_sums(y0[c], y1[c]);
                }
            }
            for (var r = 0u; r < QR; r = r + 1u) {
                let a0 = qa_w[(2u * u) * QT + ty + 16u * r];
                let a1 = qa_w[(2u * u + 1u) * QT + ty + 16u * r];
                let af = qa_f[u * QT + ty + 16u * r];
                for (var c = 0u; c < QR; c = c + 1u) {
                    let i0 = f32(mq_dot(a0, y0[c]));
                    let i1 = f32(mq_dot(a1, y1[c]));
                    if (s0_T == T_Q2_K) {
                        acc[r][c] = acc[r][c] + yf[c].x * (af.x * i0 + af.y * i1)
                            + yf[c].x * (af.z * hs[c].x + af.w * hs[c].y);
                    } else {
                        acc[r][c] = acc[r][c] + yf[c].x * (af.x * i0 + af.y * i1)
                            + af.z * yf[c].y;
                    }
                }
            }
        }
        workgroupBarrier();
    }
    return acc;
}
