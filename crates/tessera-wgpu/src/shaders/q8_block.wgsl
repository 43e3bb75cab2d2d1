// q8_block.wgsl: 32 f32 values quantized for the integer products
// (matvec_q8.wgsl, matmul_q8.wgsl), ggml's Q8_1: 32 signed bytes q = round(x / d)
// with d = max |x| / 127, packed four to a word, and the pair (d, d * sum q).
// Part of every kernel (wgsl.rs's COMMON), so that quant_act.wgsl and the
// kernels that quantize their result as they write it (rows.wgsl,
// glu.wgsl, the attention kernels) give the same bytes; each writable
// binding X has X_q8(word, pair word, block) to store one.

struct Q8Block {
    words: array<u32, 8>,
    d: f32,
    ds: f32,
}

fn q8_block(x: array<f32, 32>) -> Q8Block {
    var amax = 0.0;
    for (var i = 0u; i < 32u; i = i + 1u) {
        amax = max(amax, abs(x[i]));
    }
    let dd = amax / 127.0;
    let id = select(0.0, 1.0 / dd, dd > 0.0);
    var out: Q8Block;
    var sum = 0;
    for (var w = 0u; w < 8u; w = w + 1u) {
        var word = 0u;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let q = clamp(i32(round(x[4u * w + j] * id)), -127, 127);
            sum = sum + q;
            word = word | ((bitcast<u32>(q) & 0xffu) << (8u * j));
        }
        out.words[w] = word;
    }
    out.d = dd;
    out.ds = dd * f32(sum);
    return out;
}
