// common.wgsl: helpers every kernel shares (prepended to each shader).
//
// Why it exists: storage buffers are arrays of u32, so F16/BF16 values and
// quantized blocks are decoded and encoded here with integer arithmetic, the
// same way on every adapter (no dependency on SHADER_F16, exact rounding to
// nearest even, subnormals preserved), matching the host reference bit for bit.

const T_F32: u32 = 0u;
const T_F16: u32 = 1u;
const T_Q4_0: u32 = 2u;
const T_Q4_1: u32 = 3u;
const T_Q5_0: u32 = 6u;
const T_Q5_1: u32 = 7u;
const T_Q8_0: u32 = 8u;
const T_Q2_K: u32 = 10u;
const T_Q3_K: u32 = 11u;
const T_Q4_K: u32 = 12u;
const T_Q5_K: u32 = 13u;
const T_Q6_K: u32 = 14u;
const T_IQ4_NL: u32 = 20u;
const T_IQ4_XS: u32 = 23u;
const T_I32: u32 = 26u;
const T_I64: u32 = 27u;
const T_BF16: u32 = 30u;

const NEG_INF_BITS: u32 = 0xff800000u;

struct Params {
    ne_d: vec4<u32>,
    nb_d: vec4<u32>,
    ne_0: vec4<u32>,
    nb_0: vec4<u32>,
    ne_1: vec4<u32>,
    nb_1: vec4<u32>,
    ne_2: vec4<u32>,
    nb_2: vec4<u32>,
    ne_3: vec4<u32>,
    nb_3: vec4<u32>,
    // Byte offsets of dst, src0, src1, src2 inside their bindings.
    off: vec4<u32>,
    // x: byte offset of src3; y: number of work items; z: always 0 (see nofma); w: kernel int.
    off2: vec4<u32>,
    iu: vec4<u32>,
    iu2: vec4<u32>,
    fp: vec4<f32>,
    fp2: vec4<f32>,
}

@group(0) @binding(0) var<uniform> P: Params;

// The value of `x`, rounded on its own: the XOR with a run-time zero keeps the
// compiler from fusing a following add into an FMA, so results that must be
// bitwise equal to the host's (dequantization) round like the host.
fn nofma(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ P.off2.z);
}

// `a / b` rounded to nearest like the host's IEEE division. An adapter's
// division may be a few ulp off (Vulkan allows 2.5 ulp; NVIDIA's is a
// reciprocal times `a`), and the quantizers' searches compare quotients: one
// ulp can pick another candidate than the host. The adapter's quotient is
// moved to the rounded one by exact integer tests (`quot_above_mid`): float
// residual tricks are not safe here, as a GPU compiler may contract or
// reassociate them. Outside [2^-40, 2^40] (never in the quantizers' data)
// the adapter's quotient is returned.
fn div_rn(a: f32, b: f32) -> f32 {
    return div_fix(a, b, a / b);
}

// `q0`, an approximation of `a / b` within 3 ulp, made the rounded quotient.
fn div_fix(a: f32, b: f32, q0: f32) -> f32 {
    let x = abs(a);
    let y = abs(b);
    var q = abs(q0);
    if (!(q > 9.1e-13 && q < 1.0e12 && y > 9.1e-13 && y < 1.0e12)) {
        return q0;
    }
    for (var i = 0; i < 3; i = i + 1) {
        let dn = bitcast<f32>(bitcast<u32>(q) - 1u);
        if (quot_above_mid(x, y, q)) {
            q = bitcast<f32>(bitcast<u32>(q) + 1u);
        } else if (!quot_above_mid(x, y, dn)) {
            q = dn;
        }
    }
    return select(q, -q, q0 < 0.0);
}

// sqrt(x) rounded to nearest like the host's, by the same integer tests.
fn sqrt_rn(x: f32) -> f32 {
    return sqrt_fix(x, sqrt(x));
}

// `s0`, an approximation of sqrt(x) within 3 ulp, made the rounded root.
fn sqrt_fix(x: f32, s0: f32) -> f32 {
    var s = s0;
    if (!(x > 9.1e-13 && x < 1.0e12)) {
        return s;
    }
    for (var i = 0; i < 3; i = i + 1) {
        let dn = bitcast<f32>(bitcast<u32>(s) - 1u);
        if (root_above_mid(x, s)) {
            s = bitcast<f32>(bitcast<u32>(s) + 1u);
        } else if (!root_above_mid(x, dn)) {
            s = dn;
        }
    }
    return s;
}

// Mantissa (implicit bit included) and exponent of a positive normal float:
// x = mant(x) 2^expo(x).
fn mant(x: f32) -> u32 {
    return (bitcast<u32>(x) & 0x7fffffu) | 0x800000u;
}

fn expo(x: f32) -> i32 {
    return i32(bitcast<u32>(x) >> 23u) - 150;
}

// a b for a, b < 2^26, as a 64-bit integer (low word, high word).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let low = a0 * b0;
    let mid = a1 * b0 + a0 * b1;
    let lo = low + (mid << 16u);
    let carry = select(0u, 1u, lo < low);
    return vec2<u32>(lo, a1 * b1 + (mid >> 16u) + carry);
}

// Whether m 2^s > r, for m < 2^24 and 0 <= s <= 40 (64-bit compare).
fn shifted_gt(m: u32, s: u32, r: vec2<u32>) -> bool {
    var v = vec2<u32>(m, 0u);
    if (s >= 32u) {
        v = vec2<u32>(0u, m << (s - 32u));
    } else if (s > 0u) {
        v = vec2<u32>(m << s, m >> (32u - s));
    }
    return v.y > r.y || (v.y == r.y && v.x > r.x);
}

// Whether x / y (positive normal floats) lies above the midpoint between c
// and the next float up: x / y > (Mc + 1/2) 2^ec, i.e.
// Mx 2^(ex - ey - ec + 1) > (2 Mc + 1) My, in integers.
fn quot_above_mid(x: f32, y: f32, c: f32) -> bool {
    let s = expo(x) - expo(y) - expo(c) + 1;
    if (s < 0) {
        return false;
    }
    if (s > 40) {
        return true;
    }
    return shifted_gt(mant(x), u32(s), mul_wide(2u * mant(c) + 1u, mant(y)));
}

// Whether sqrt(x) lies above the midpoint between c and the next float up:
// x > (Mc + 1/2)^2 2^(2 ec), i.e. Mx 2^(ex - 2 ec + 2) > (2 Mc + 1)^2.
fn root_above_mid(x: f32, c: f32) -> bool {
    let s = expo(x) - 2 * expo(c) + 2;
    if (s < 0) {
        return false;
    }
    if (s > 40) {
        return true;
    }
    let m = 2u * mant(c) + 1u;
    return shifted_gt(mant(x), u32(s), mul_wide(m, m));
}

// ggml's kvalues_iq4nl: the value a 4-bit IQ4_NL / IQ4_XS index stands for.
fn kvalue_iq4nl(i: u32) -> f32 {
    var t = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
        1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
    return t[i & 15u];
}

fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact in f32.
        return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
    }
    if (e == 31u) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// f32 to f16 bits, rounding to nearest even (as the `half` crate and F16C do).
fn f32_to_f16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let s = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        let m = a & 0x7fffffu;
        return s | 0x7c00u | select(0u, 0x200u, m != 0u) | (m >> 13u);
    }
    if (a >= 0x477ff000u) {
        return s | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        let r = a - 0x38000000u;
        return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    if (a < 0x33000000u) {
        return s;
    }
    let e = a >> 23u;
    let m = (a & 0x7fffffu) | 0x800000u;
    let sh = 126u - e;
    let q = m >> sh;
    let rem = m & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    let up = rem > half || (rem == half && (q & 1u) == 1u);
    return s | (q + select(0u, 1u, up));
}

fn bf16_to_f32(h: u32) -> f32 {
    return bitcast<f32>(h << 16u);
}

// f32 to bf16 bits, rounding to nearest even; NaNs stay quiet NaNs (ggml).
fn f32_to_bf16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return ((u >> 16u) | 64u) & 0xffffu;
    }
    return ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) & 0xffffu;
}

fn sext8(b: u32) -> i32 {
    return bitcast<i32>(b << 24u) >> 24u;
}

fn is_neg_inf(x: f32) -> bool {
    return bitcast<u32>(x) == NEG_INF_BITS;
}

fn neg_inf() -> f32 {
    return bitcast<f32>(NEG_INF_BITS);
}

// C's roundf: halves away from zero (WGSL's round() ties to even).
fn round_away(x: f32) -> f32 {
    return sign(x) * floor(abs(x) + 0.5);
}

// The 4-D index of linear item `t` in extents `ne` (dimension 0 fastest).
fn unravel(t: u32, ne: vec4<u32>) -> vec4<u32> {
    let i0 = t % ne.x;
    let r0 = t / ne.x;
    let i1 = r0 % ne.y;
    let r1 = r0 / ne.y;
    let i2 = r1 % ne.z;
    let i3 = r1 / ne.z;
    return vec4<u32>(i0, i1, i2, i3);
}

fn offset_of(i: vec4<u32>, nb: vec4<u32>) -> u32 {
    return i.x * nb.x + i.y * nb.y + i.z * nb.z + i.w * nb.w;
}

// Linear work-item index of an element kernel dispatched as a 2-D grid of
// 256-wide workgroups.
fn item_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * 256u + lid.x;
}

// Index of the workgroup in a 2-D grid (one workgroup per row kernels).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

fn alibi_slope(max_bias: f32, n_head: u32, h: u32) -> f32 {
    if (max_bias <= 0.0) {
        return 1.0;
    }
    let n_log2 = 1u << firstLeadingBit(n_head);
    let l2 = f32(n_log2);
    if (h < n_log2) {
        return pow(exp2(-max_bias / l2), f32(h + 1u));
    }
    return pow(exp2(-(max_bias / 2.0) / l2), f32(2u * (h - n_log2) + 1u));
}

// erf(x) = 1 - erfc(|x|) with sign, erfc from Numerical Recipes' Chebyshev
// fit (fractional error < 1.2e-7 everywhere): ample for GELU_ERF, where erf
// is added to 1.
fn erf_f32(x: f32) -> f32 {
    let ax = abs(x);
    let t = 1.0 / (1.0 + 0.5 * ax);
    let y = t * exp(-ax * ax - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(x) * (1.0 - y);
}

fn act_silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

fn act_gelu(x: f32) -> f32 {
    let z = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    // tanh written with exp of a non-positive argument: no overflow for large |z|.
    let e = exp(-2.0 * abs(z));
    let th = sign(z) * (1.0 - e) / (1.0 + e);
    return 0.5 * x * (1.0 + th);
}

fn act_gelu_erf(x: f32) -> f32 {
    return 0.5 * x * (1.0 + erf_f32(x * 0.7071067811865476));
}

fn act_sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

fn act_tanh(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// x * sigmoid(1.702 x), as ggml's ggml_gelu_quick_f32.
fn act_gelu_quick(x: f32) -> f32 {
    return x * (1.0 / (1.0 + exp(-1.702 * x)));
}

// Unary function `f` (UnaryOp order: silu, gelu, gelu_erf, sigmoid, relu,
// tanh, exp, gelu_quick).
fn unary_fn(f: u32, x: f32) -> f32 {
    switch f {
        case 0u: { return act_silu(x); }
        case 1u: { return act_gelu(x); }
        case 2u: { return act_gelu_erf(x); }
        case 3u: { return act_sigmoid(x); }
        case 4u: { return select(0.0, x, x > 0.0); }
        case 5u: { return act_tanh(x); }
        case 7u: { return act_gelu_quick(x); }
        default: { return exp(x); }
    }
}
