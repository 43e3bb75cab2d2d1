//! WGSL assembly: the common helpers, the bindings of one kernel with their
//! typed accessors, and the kernel body.
//!
//! Storage buffers are `array<u32>` (or `array<atomic<u32>>` for outputs
//! written at a granularity below 4 bytes: F16/BF16 elements, quantized
//! blocks, unaligned byte copies), so every element type is read and written
//! through generated functions named after the binding:
//!
//! | function | what it does |
//! |---|---|
//! | `X_w(word)`, `X_b(byte)`, `X_h(byte)` | raw 32-, 8- and 16-bit loads |
//! | `X_v4(byte)` | 16 bytes at a multiple of 16 (one load where the binding is `vec4`) |
//! | `X_ld(byte) -> f32`, `X_ldi(byte) -> i32` | an element as f32 / i32 |
//! | `X_raw(byte) -> u32` | an element's bits (4- and 2-byte types) |
//! | `X_dq(block, j) -> f32` | element `j` of the quantized block at `block` |
//! | `X_T`, `X_TS`, `X_BS` | constants: ggml type id, bytes and values per block |
//! | `X_sw`, `X_sh`, `X_sb` | 32-, 16- and 8-bit stores (atomic merges below 32 bits) |
//! | `X_st(byte, f32)`, `X_sti(byte, i32)`, `X_straw(byte, bits)` | typed stores |
//!
//! Every binding gets the whole set, with harmless fallbacks where a type has
//! no meaning (a `X_dq` of a float binding returns 0), so a kernel body can
//! branch on the `X_T` type constants without referring to a missing
//! function. Kernel bodies live in `shaders/*.wgsl`.

use std::fmt::Write as _;

use tessera::DType;

/// The helpers shared by every kernel.
pub(crate) const COMMON: &str = concat!(
    include_str!("shaders/common.wgsl"),
    include_str!("shaders/q8_block.wgsl")
);

/// One storage binding of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Binding {
    /// Name used in the kernel body (`d`, `s0`, `s1`, ...).
    pub name: &'static str,
    /// Element type of the tensor bound there.
    pub dtype: DType,
    /// Declared `array<atomic<u32>>` so sub-word stores can merge safely.
    pub atomic: bool,
    /// Declared `var<storage, read>` (no store functions): a source in a
    /// buffer the dispatch does not write, which lets the GPU's compiler
    /// use its read-only load path and wgpu skip barriers between
    /// dispatches that only read it.
    pub read_only: bool,
    /// Declared `array<vec4<u32>>`, with `X_v4(byte)` loading 16 bytes at a
    /// multiple of 16 (the buffer's size is a multiple of 16: see
    /// `WgpuBufferType`). Sources only: no store functions, and `X_w`
    /// loads the whole vector and selects its word (on an NVIDIA H100, a
    /// kernel whose loads indexed the components of such a binding of the
    /// destination's buffer wrote past its output; lavapipe did not).
    pub vec4: bool,
}

impl Binding {
    /// A binding that is only read, or written in whole 32-bit words.
    pub(crate) const fn plain(name: &'static str, dtype: DType) -> Self {
        Binding {
            name,
            dtype,
            atomic: false,
            read_only: false,
            vec4: false,
        }
    }

    /// A source bound read-only: its buffer is not written by the dispatch
    /// (wgpu forbids read-only and read-write uses of one buffer together).
    pub(crate) const fn source(name: &'static str, dtype: DType) -> Self {
        Binding {
            name,
            dtype,
            atomic: false,
            read_only: true,
            vec4: false,
        }
    }

    /// This binding, declared as an array of 16-byte vectors (not for
    /// atomic outputs).
    pub(crate) const fn as_vec4(self) -> Self {
        Binding { vec4: true, ..self }
    }

    /// An output binding: atomic when its elements are narrower than a word
    /// or quantized.
    pub(crate) fn output(name: &'static str, dtype: DType) -> Self {
        Binding {
            name,
            dtype,
            atomic: dtype.type_size() < 4 || dtype.is_quantized(),
            read_only: false,
            vec4: false,
        }
    }
}

/// The complete source of a kernel: helpers, bindings (binding 0 is the
/// uniform `P`, storage bindings start at 1) and the body.
/// A body's leading `enable` directives go first: WGSL takes them only
/// before any declaration.
pub(crate) fn assemble(bindings: &[Binding], body: &str) -> String {
    let mut s = String::with_capacity(COMMON.len() + body.len() + 4096 * bindings.len());
    let mut body = body;
    while let Some(rest) = body.strip_prefix("enable ") {
        let end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        s.push_str("enable ");
        s.push_str(&rest[..end]);
        body = &rest[end..];
    }
    s.push_str(COMMON);
    for (i, b) in bindings.iter().enumerate() {
        accessors(&mut s, i + 1, b);
    }
    s.push_str(body);
    s
}

fn accessors(s: &mut String, slot: usize, b: &Binding) {
    let x = b.name;
    let ty = if b.atomic {
        "array<atomic<u32>>"
    } else if b.vec4 {
        "array<vec4<u32>>"
    } else {
        "array<u32>"
    };
    let access = if b.read_only { "read" } else { "read_write" };
    let _ = writeln!(
        s,
        "\n@group(0) @binding({slot}) var<storage, {access}> {x}: {ty};"
    );
    let _ = writeln!(s, "const {x}_T: u32 = {}u;", b.dtype.ggml_id());
    let _ = writeln!(s, "const {x}_TS: u32 = {}u;", b.dtype.type_size());
    let _ = writeln!(s, "const {x}_BS: u32 = {}u;", b.dtype.block_size().max(1));
    if b.vec4 {
        // Loads only: whole vectors, a word picked from one by selects.
        let _ = writeln!(
            s,
            "fn {x}_v4(b: u32) -> vec4<u32> {{ return {x}[b >> 4u]; }}\n\
             fn {x}_w(w: u32) -> u32 {{ let v = {x}[w >> 2u]; let i = w & 3u; \
             return select(select(v.x, v.y, i == 1u), select(v.z, v.w, i == 3u), i >= 2u); }}"
        );
    } else {
        let _ = writeln!(
            s,
            "fn {x}_v4(b: u32) -> vec4<u32> {{ let w = b >> 2u; \
             return vec4<u32>({x}_w(w), {x}_w(w + 1u), {x}_w(w + 2u), {x}_w(w + 3u)); }}"
        );
    }
    if b.vec4 {
        // (above)
    } else if b.read_only {
        let _ = writeln!(s, "fn {x}_w(w: u32) -> u32 {{ return {x}[w]; }}");
    } else if b.atomic {
        let _ = writeln!(
            s,
            "fn {x}_w(w: u32) -> u32 {{ return atomicLoad(&{x}[w]); }}\n\
             fn {x}_sw(w: u32, v: u32) {{ atomicStore(&{x}[w], v); }}\n\
             fn {x}_sh(b: u32, v: u32) {{ let sh = (b & 2u) << 3u; \
             atomicAnd(&{x}[b >> 2u], ~(0xffffu << sh)); atomicOr(&{x}[b >> 2u], (v & 0xffffu) << sh); }}\n\
             fn {x}_sb(b: u32, v: u32) {{ let sh = (b & 3u) << 3u; \
             atomicAnd(&{x}[b >> 2u], ~(0xffu << sh)); atomicOr(&{x}[b >> 2u], (v & 0xffu) << sh); }}"
        );
    } else {
        // Sub-word stores on a plain binding are only used when a whole word
        // belongs to one invocation (they are not atomic).
        let _ = writeln!(
            s,
            "fn {x}_w(w: u32) -> u32 {{ return {x}[w]; }}\n\
             fn {x}_sw(w: u32, v: u32) {{ {x}[w] = v; }}\n\
             fn {x}_sh(b: u32, v: u32) {{ let sh = (b & 2u) << 3u; let w = b >> 2u; \
             {x}[w] = ({x}[w] & ~(0xffffu << sh)) | ((v & 0xffffu) << sh); }}\n\
             fn {x}_sb(b: u32, v: u32) {{ let sh = (b & 3u) << 3u; let w = b >> 2u; \
             {x}[w] = ({x}[w] & ~(0xffu << sh)) | ((v & 0xffu) << sh); }}"
        );
    }
    if !b.vec4 && !b.read_only && !b.atomic {
        // A Q8Block (q8_block.wgsl) stored: its words from word `w`, its
        // pair at word `p`.
        let _ = writeln!(
            s,
            "fn {x}_q8(w: u32, p: u32, q: Q8Block) {{ for (var i = 0u; i < 8u; i = i + 1u) {{ \
             {x}_sw(w + i, q.words[i]); }} {x}_sw(p, bitcast<u32>(q.d)); \
             {x}_sw(p + 1u, bitcast<u32>(q.ds)); }}"
        );
    }
    let _ = writeln!(
        s,
        "fn {x}_b(b: u32) -> u32 {{ return ({x}_w(b >> 2u) >> ((b & 3u) << 3u)) & 0xffu; }}\n\
         fn {x}_h(b: u32) -> u32 {{ return ({x}_w(b >> 2u) >> ((b & 2u) << 3u)) & 0xffffu; }}"
    );
    let (ld, ldi, raw, st, sti, straw) = match b.dtype {
        DType::F32 => (
            format!("return bitcast<f32>({x}_w(b >> 2u));"),
            format!("return i32({x}_ld(b));"),
            format!("return {x}_w(b >> 2u);"),
            format!("{x}_sw(b >> 2u, bitcast<u32>(v));"),
            format!("{x}_st(b, f32(v));"),
            format!("{x}_sw(b >> 2u, v);"),
        ),
        DType::F16 => (
            format!("return f16_to_f32({x}_h(b));"),
            format!("return i32({x}_ld(b));"),
            format!("return {x}_h(b);"),
            format!("{x}_sh(b, f32_to_f16(v));"),
            format!("{x}_st(b, f32(v));"),
            format!("{x}_sh(b, v);"),
        ),
        DType::BF16 => (
            format!("return bf16_to_f32({x}_h(b));"),
            format!("return i32({x}_ld(b));"),
            format!("return {x}_h(b);"),
            format!("{x}_sh(b, f32_to_bf16(v));"),
            format!("{x}_st(b, f32(v));"),
            format!("{x}_sh(b, v);"),
        ),
        DType::I32 => (
            format!("return f32(bitcast<i32>({x}_w(b >> 2u)));"),
            format!("return bitcast<i32>({x}_w(b >> 2u));"),
            format!("return {x}_w(b >> 2u);"),
            format!("{x}_sw(b >> 2u, bitcast<u32>(i32(v)));"),
            format!("{x}_sw(b >> 2u, bitcast<u32>(v));"),
            format!("{x}_sw(b >> 2u, v);"),
        ),
        // I64 values are indices: the low word, read as i32 (checked on the host
        // side to be the only use).
        DType::I64 => (
            format!("return f32(bitcast<i32>({x}_w(b >> 2u)));"),
            format!("return bitcast<i32>({x}_w(b >> 2u));"),
            format!("return {x}_w(b >> 2u);"),
            format!("{x}_sw(b >> 2u, bitcast<u32>(i32(v)));"),
            format!("{x}_sw(b >> 2u, bitcast<u32>(v));"),
            format!("{x}_sw(b >> 2u, v);"),
        ),
        _ => (
            "return 0.0;".to_string(),
            "return 0;".to_string(),
            format!("return {x}_w(b >> 2u);"),
            "".to_string(),
            "".to_string(),
            format!("{x}_sw(b >> 2u, v);"),
        ),
    };
    let _ = writeln!(
        s,
        "fn {x}_ld(b: u32) -> f32 {{ {ld} }}\n\
         fn {x}_ldi(b: u32) -> i32 {{ {ldi} }}\n\
         fn {x}_raw(b: u32) -> u32 {{ {raw} }}"
    );
    if !b.read_only && !b.vec4 {
        let _ = writeln!(
            s,
            "fn {x}_st(b: u32, v: f32) {{ {st} }}\n\
             fn {x}_sti(b: u32, v: i32) {{ {sti} }}\n\
             fn {x}_straw(b: u32, v: u32) {{ {straw} }}"
        );
    }
    let dq = dequant_body(x, b.dtype);
    let _ = writeln!(s, "fn {x}_dq(blk: u32, j: u32) -> f32 {{\n{dq}\n}}");
}

/// Element `j` of the quantized block at byte `blk`, in the operation order of
/// the host dequantizers (so the results are bitwise equal).
fn dequant_body(x: &str, dtype: DType) -> String {
    match dtype {
        DType::Q8_0 => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   return f32(sext8({x}_b(blk + 2u + j))) * d;"
        ),
        DType::Q4_0 => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let q = {x}_b(blk + 2u + (j & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, j >= 16u);\n\
             \x20   return f32(i32(n) - 8) * d;"
        ),
        DType::Q4_1 => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let m = f16_to_f32({x}_h(blk + 2u));\n\
             \x20   let q = {x}_b(blk + 4u + (j & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, j >= 16u);\n\
             \x20   return nofma(f32(n) * d) + m;"
        ),
        DType::Q5_0 => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let qh = {x}_h(blk + 2u) | ({x}_h(blk + 4u) << 16u);\n\
             \x20   let q = {x}_b(blk + 6u + (j & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, j >= 16u) | (((qh >> j) & 1u) << 4u);\n\
             \x20   return f32(i32(n) - 16) * d;"
        ),
        DType::Q5_1 => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let m = f16_to_f32({x}_h(blk + 2u));\n\
             \x20   let qh = {x}_h(blk + 4u) | ({x}_h(blk + 6u) << 16u);\n\
             \x20   let q = {x}_b(blk + 8u + (j & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, j >= 16u) | (((qh >> j) & 1u) << 4u);\n\
             \x20   return nofma(f32(n) * d) + m;"
        ),
        DType::Q4K => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let dmin = f16_to_f32({x}_h(blk + 2u));\n\
             \x20   let i = j / 64u;\n\
             \x20   let w = j % 64u;\n\
             \x20   let sub = 2u * i + select(0u, 1u, w >= 32u);\n\
             \x20   let sc = blk + 4u;\n\
             \x20   var s: u32;\n\
             \x20   var m: u32;\n\
             \x20   if (sub < 4u) {{\n\
             \x20       s = {x}_b(sc + sub) & 63u;\n\
             \x20       m = {x}_b(sc + sub + 4u) & 63u;\n\
             \x20   }} else {{\n\
             \x20       s = ({x}_b(sc + sub + 4u) & 15u) | (({x}_b(sc + sub - 4u) >> 6u) << 4u);\n\
             \x20       m = ({x}_b(sc + sub + 4u) >> 4u) | (({x}_b(sc + sub) >> 6u) << 4u);\n\
             \x20   }}\n\
             \x20   let byte = {x}_b(blk + 16u + i * 32u + (w & 31u));\n\
             \x20   let q = select(byte & 15u, byte >> 4u, w >= 32u);\n\
             \x20   let d1 = d * f32(s);\n\
             \x20   let m1 = dmin * f32(m);\n\
             \x20   return nofma(d1 * f32(q)) - m1;"
        ),
        DType::Q2K => format!(
            "    let sc = {x}_b(blk + j / 16u);\n\
             \x20   let byte = {x}_b(blk + 16u + (j / 128u) * 32u + (j % 32u));\n\
             \x20   let q = (byte >> (2u * ((j % 128u) / 32u))) & 3u;\n\
             \x20   let dl = f16_to_f32({x}_h(blk + 80u)) * f32(sc & 15u);\n\
             \x20   let ml = f16_to_f32({x}_h(blk + 82u)) * f32(sc >> 4u);\n\
             \x20   return nofma(dl * f32(q)) - ml;"
        ),
        DType::Q3K => format!(
            "    let s = j / 16u;\n\
             \x20   let sb = {x}_b(blk + 96u + (s & 7u));\n\
             \x20   let lo = select(sb >> 4u, sb & 15u, s < 8u);\n\
             \x20   let hi = ({x}_b(blk + 104u + (s % 4u)) >> (2u * (s / 4u))) & 3u;\n\
             \x20   let sc = i32(lo | (hi << 4u)) - 32;\n\
             \x20   let byte = {x}_b(blk + 32u + (j / 128u) * 32u + (j % 32u));\n\
             \x20   let low = i32((byte >> (2u * ((j % 128u) / 32u))) & 3u);\n\
             \x20   let hbit = ({x}_b(blk + (j % 32u)) >> (j / 32u)) & 1u;\n\
             \x20   let q = low - select(4, 0, hbit == 1u);\n\
             \x20   let dl = f16_to_f32({x}_h(blk + 108u)) * f32(sc);\n\
             \x20   return dl * f32(q);"
        ),
        DType::Q5K => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let dmin = f16_to_f32({x}_h(blk + 2u));\n\
             \x20   let i = j / 64u;\n\
             \x20   let w = j % 64u;\n\
             \x20   let sub = 2u * i + select(0u, 1u, w >= 32u);\n\
             \x20   let sc = blk + 4u;\n\
             \x20   var s: u32;\n\
             \x20   var m: u32;\n\
             \x20   if (sub < 4u) {{\n\
             \x20       s = {x}_b(sc + sub) & 63u;\n\
             \x20       m = {x}_b(sc + sub + 4u) & 63u;\n\
             \x20   }} else {{\n\
             \x20       s = ({x}_b(sc + sub + 4u) & 15u) | (({x}_b(sc + sub - 4u) >> 6u) << 4u);\n\
             \x20       m = ({x}_b(sc + sub + 4u) >> 4u) | (({x}_b(sc + sub) >> 6u) << 4u);\n\
             \x20   }}\n\
             \x20   let byte = {x}_b(blk + 48u + i * 32u + (w & 31u));\n\
             \x20   let hb = ({x}_b(blk + 16u + (j % 32u)) >> (j / 32u)) & 1u;\n\
             \x20   let q = select(byte & 15u, byte >> 4u, w >= 32u) | (hb << 4u);\n\
             \x20   let d1 = d * f32(s);\n\
             \x20   let m1 = dmin * f32(m);\n\
             \x20   return nofma(d1 * f32(q)) - m1;"
        ),
        DType::Q6K => format!(
            "    let h = j / 128u;\n\
             \x20   let l = j % 128u;\n\
             \x20   let r = l / 32u;\n\
             \x20   let i = l % 32u;\n\
             \x20   let qlb = {x}_b(blk + 64u * h + i + 32u * (r & 1u));\n\
             \x20   let lo = select(qlb & 15u, qlb >> 4u, r >= 2u);\n\
             \x20   let hi = ({x}_b(blk + 128u + 32u * h + i) >> (2u * r)) & 3u;\n\
             \x20   let q = i32(lo | (hi << 4u)) - 32;\n\
             \x20   let sc = sext8({x}_b(blk + 192u + 8u * h + i / 16u + 2u * r));\n\
             \x20   let d = f16_to_f32({x}_h(blk + 208u));\n\
             \x20   return d * f32(sc) * f32(q);"
        ),
        DType::IQ4NL => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let q = {x}_b(blk + 2u + (j & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, j >= 16u);\n\
             \x20   return d * kvalue_iq4nl(n);"
        ),
        DType::IQ4XS => format!(
            "    let d = f16_to_f32({x}_h(blk));\n\
             \x20   let ib = j / 32u;\n\
             \x20   let w = j % 32u;\n\
             \x20   let lo = ({x}_b(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;\n\
             \x20   let hi = ({x}_h(blk + 2u) >> (2u * ib)) & 3u;\n\
             \x20   let dl = d * f32(i32(lo | (hi << 4u)) - 32);\n\
             \x20   let q = {x}_b(blk + 8u + 16u * ib + (w & 15u));\n\
             \x20   let n = select(q & 15u, q >> 4u, w >= 16u);\n\
             \x20   return dl * kvalue_iq4nl(n);"
        ),
        _ => "    return 0.0;".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body's leading `enable` directives open the module (WGSL rejects
    /// them after a declaration); the rest of the body follows the
    /// bindings.
    #[test]
    fn enable_directives_go_first() {
        let b = [Binding::plain("d", DType::F32)];
        let src = assemble(
            &b,
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst X: u32 = 1u;\n",
        );
        assert!(
            src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"),
            "{}",
            &src[..80]
        );
        assert_eq!(src.matches("enable ").count(), 2);
        let (common, body) = (src.find(COMMON).unwrap(), src.find("const X: u32").unwrap());
        assert!(common > 0 && body > common + COMMON.len());
    }

    #[test]
    fn outputs_below_a_word_are_atomic() {
        assert!(Binding::output("d", DType::F16).atomic);
        assert!(Binding::output("d", DType::Q8_0).atomic);
        assert!(!Binding::output("d", DType::F32).atomic);
        let src = assemble(
            &[
                Binding::output("d", DType::BF16),
                Binding::plain("s0", DType::Q4K),
            ],
            "",
        );
        assert!(src.contains("var<storage, read_write> d: array<atomic<u32>>;"));
        assert!(src.contains("fn s0_dq(blk: u32, j: u32) -> f32"));
        assert!(src.contains("const s0_T: u32 = 12u;"));
    }

    #[test]
    fn sources_read_only_or_by_vectors_have_loads_only() {
        let src = assemble(
            &[
                Binding::output("d", DType::F32),
                Binding::source("s0", DType::Q4_0),
                Binding::plain("s1", DType::F32).as_vec4(),
            ],
            "",
        );
        assert!(src.contains("var<storage, read> s0: array<u32>;"));
        assert!(src.contains("var<storage, read_write> s1: array<vec4<u32>>;"));
        for x in ["s0", "s1"] {
            for f in ["_w(", "_v4(", "_ld(", "_dq("] {
                assert!(src.contains(&format!("fn {x}{f}")), "{x}{f}");
            }
            for f in ["_sw(", "_sh(", "_sb(", "_st(", "_sti(", "_straw("] {
                assert!(!src.contains(&format!("fn {x}{f}")), "{x}{f}");
            }
        }
        // A word of a vector binding: the whole vector loaded, no indexing
        // of its components.
        assert!(!src.contains("s1[w >> 2u][w & 3u]"));
        assert!(src.contains("fn s1_w(w: u32) -> u32 { let v = s1[w >> 2u];"));
        assert!(src.contains("fn d_sw("));
    }
}
