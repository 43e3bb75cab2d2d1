// attention_common.wgsl: what the attention kernels share (prepended to
// attention.wgsl, attention_rows.wgsl, attention_tiles.wgsl and
// attention_merge.wgsl).

// Attention sinks, as ggml's: the sink logit `sk` joins the maximum `m` and
// the sum `total` of a row's keys (`seen`: the row had any). Returns the
// factor the row's outputs take and the sum they are then divided by.
fn fa_sink(sk: f32, m: f32, seen: bool, total: f32) -> vec2<f32> {
    if (!seen) {
        // No key: ggml's M = -inf, S = 0 give S = 1 and a zero row.
        return vec2<f32>(1.0, 1.0);
    }
    if (sk > m) {
        let ms = exp(m - sk);
        return vec2<f32>(ms, total * ms + 1.0);
    }
    return vec2<f32>(1.0, total + exp(sk - m));
}

// Four F16 values of a vector of eight (words x, y: the low half; z, w:
// the high half) as f32, by the hardware's conversion (exact).
fn fa_lo(v: vec4<u32>) -> vec4<f32> {
    let a = unpack2x16float(v.x);
    let b = unpack2x16float(v.y);
    return vec4<f32>(a.x, a.y, b.x, b.y);
}

fn fa_hi(v: vec4<u32>) -> vec4<f32> {
    let a = unpack2x16float(v.z);
    let b = unpack2x16float(v.w);
    return vec4<f32>(a.x, a.y, b.x, b.y);
}
