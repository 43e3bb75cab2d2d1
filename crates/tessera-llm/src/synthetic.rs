//! Small models with deterministic random weights, for tests and
//! cross-checks: every architecture of [`Arch`], any weight type, with the
//! tokenizer of a real vocabulary file copied in (every `tokenizer.*` key),
//! written as GGUF so that llama.cpp can run the same file.

use tessera::{DType, Result, quant};
use tessera_gguf::{GgufFile, GgufWriter};

use crate::params::Arch;

/// Shape and types of a synthetic model.
#[derive(Clone, Copy, Debug)]
pub struct SyntheticSpec {
    /// Architecture.
    pub arch: Arch,
    /// Embedding width.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Feed-forward width.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head size.
    pub head_dim: usize,
    /// Training context.
    pub n_ctx: usize,
    /// Type of the projection matrices and embeddings.
    pub wtype: DType,
    /// Seed of the weights.
    pub seed: u64,
    /// Experts per layer (mixture-of-experts architectures; 0 otherwise).
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Feed-forward width of one expert.
    pub n_ff_exp: usize,
}

impl SyntheticSpec {
    /// A small model of `arch` (128 wide, 2 layers, 4 heads of 32 over 2
    /// KV heads; for qwen3moe 8 experts of width 64, 2 used per token).
    pub fn small(arch: Arch, wtype: DType) -> Self {
        let moe = arch == Arch::Qwen3Moe;
        SyntheticSpec {
            n_expert: if moe { 8 } else { 0 },
            n_expert_used: if moe { 2 } else { 0 },
            n_ff_exp: if moe { 64 } else { 0 },
            arch,
            n_embd: 128,
            n_layer: 2,
            n_ff: 128,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            n_ctx: 1024,
            wtype,
            seed: 42,
        }
    }
}

impl SyntheticSpec {
    /// Llama 3.2 1B's shape (2048 wide, 16 layers, 32 heads of 64 over 8 KV
    /// heads, feed-forward 8192; with llama.cpp's `llama-bpe` vocabulary,
    /// 128,256 tokens): the benchmark files (`tessera bench model`).
    pub fn llama_3_2_1b(wtype: DType) -> Self {
        SyntheticSpec {
            arch: Arch::Llama,
            n_embd: 2048,
            n_layer: 16,
            n_ff: 8192,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 64,
            n_ctx: 8192,
            wtype,
            seed: 42,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_exp: 0,
        }
    }
}

/// Deterministic values (splitmix64 → uniform in [-1, 1)).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Write the model: the vocabulary (and its size) comes from `vocab`.
pub fn write(spec: &SyntheticSpec, vocab: &GgufFile) -> Result<GgufWriter> {
    let tokens: Vec<&str> = vocab.get("tokenizer.ggml.tokens")?;
    let n_vocab = tokens.len();
    let arch = spec.arch.name();
    let mut w = GgufWriter::new();
    w.add("general.architecture", arch);
    w.add("general.name", format!("tessera synthetic {arch}"));
    let k = |s: &str| format!("{arch}.{s}");
    w.add(&k("context_length"), spec.n_ctx as u32);
    w.add(&k("embedding_length"), spec.n_embd as u32);
    w.add(&k("block_count"), spec.n_layer as u32);
    w.add(&k("feed_forward_length"), spec.n_ff as u32);
    w.add(&k("attention.head_count"), spec.n_head as u32);
    w.add(&k("attention.head_count_kv"), spec.n_head_kv as u32);
    w.add(&k("attention.key_length"), spec.head_dim as u32);
    w.add(&k("attention.value_length"), spec.head_dim as u32);
    w.add(&k("attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add(&k("rope.freq_base"), 10000.0f32);
    if spec.arch == Arch::Llama {
        w.add(&k("rope.dimension_count"), spec.head_dim as u32);
    }
    if spec.arch == Arch::Qwen3Moe {
        w.add(&k("expert_count"), spec.n_expert as u32);
        w.add(&k("expert_used_count"), spec.n_expert_used as u32);
        w.add(&k("expert_feed_forward_length"), spec.n_ff_exp as u32);
    }
    if spec.arch == Arch::Gemma3 {
        // A short window, so that short tests cross it.
        w.add(&k("attention.sliding_window"), 16u32);
    }
    for (key, value) in vocab.metadata() {
        if key.starts_with("tokenizer.") {
            w.add(key, value.clone());
        }
    }
    let mut rng = Rng(spec.seed);
    let (e, hd) = (spec.n_embd, spec.head_dim);
    let mut tensor =
        |w: &mut GgufWriter, name: &str, ne: &[usize], scale: f32, bias: f32, t: DType| {
            let n: usize = ne.iter().product();
            let v: Vec<f32> = (0..n).map(|_| bias + scale * rng.next()).collect();
            let layout = tessera::Layout::contiguous(t, ne)?;
            let mut bytes = vec![0u8; layout.checked_nbytes()?];
            let row = ne[0];
            for (src, dst) in v.chunks(row).zip(bytes.chunks_mut(layout.row_bytes())) {
                quant::from_f32(t, src, dst)?;
            }
            w.add_tensor(name, t, ne, &bytes)
        };
    let wt = spec.wtype;
    let f32_ = DType::F32;
    // Gemma scales embeddings by sqrt(n_embd) and ties the output to them:
    // small embeddings keep the blocks' contribution visible.
    let embd_scale = if spec.arch == Arch::Gemma3 { 0.05 } else { 1.0 };
    tensor(
        &mut w,
        "token_embd.weight",
        &[e, n_vocab],
        embd_scale,
        0.0,
        wt,
    )?;
    tensor(&mut w, "output_norm.weight", &[e], 0.1, 1.0, f32_)?;
    if spec.arch != Arch::Gemma3 {
        tensor(&mut w, "output.weight", &[e, n_vocab], 0.5, 0.0, wt)?;
    }
    let s_in = 1.0 / (e as f32).sqrt();
    for il in 0..spec.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (q, kv) = (hd * spec.n_head, hd * spec.n_head_kv);
        tensor(&mut w, &n("attn_norm.weight"), &[e], 0.1, 1.0, f32_)?;
        tensor(&mut w, &n("attn_q.weight"), &[e, q], 2.0 * s_in, 0.0, wt)?;
        tensor(&mut w, &n("attn_k.weight"), &[e, kv], 2.0 * s_in, 0.0, wt)?;
        tensor(&mut w, &n("attn_v.weight"), &[e, kv], s_in, 0.0, wt)?;
        if spec.arch == Arch::Qwen2 {
            tensor(&mut w, &n("attn_q.bias"), &[q], 0.1, 0.0, f32_)?;
            tensor(&mut w, &n("attn_k.bias"), &[kv], 0.1, 0.0, f32_)?;
            tensor(&mut w, &n("attn_v.bias"), &[kv], 0.1, 0.0, f32_)?;
        }
        if spec.arch.has_qk_norm() {
            tensor(&mut w, &n("attn_q_norm.weight"), &[hd], 0.1, 1.0, f32_)?;
            tensor(&mut w, &n("attn_k_norm.weight"), &[hd], 0.1, 1.0, f32_)?;
        }
        tensor(
            &mut w,
            &n("attn_output.weight"),
            &[q, e],
            1.0 / (q as f32).sqrt(),
            0.0,
            wt,
        )?;
        tensor(&mut w, &n("ffn_norm.weight"), &[e], 0.1, 1.0, f32_)?;
        if spec.arch == Arch::Qwen3Moe {
            let (x, f) = (spec.n_expert, spec.n_ff_exp);
            // The router stays F32, as llama.cpp's quantizer keeps it.
            tensor(
                &mut w,
                &n("ffn_gate_inp.weight"),
                &[e, x],
                2.0 * s_in,
                0.0,
                f32_,
            )?;
            tensor(
                &mut w,
                &n("ffn_gate_exps.weight"),
                &[e, f, x],
                s_in,
                0.0,
                wt,
            )?;
            tensor(&mut w, &n("ffn_up_exps.weight"), &[e, f, x], s_in, 0.0, wt)?;
            let s_ff = 1.0 / (f as f32).sqrt();
            tensor(
                &mut w,
                &n("ffn_down_exps.weight"),
                &[f, e, x],
                s_ff,
                0.0,
                wt,
            )?;
        } else {
            tensor(
                &mut w,
                &n("ffn_gate.weight"),
                &[e, spec.n_ff],
                s_in,
                0.0,
                wt,
            )?;
            tensor(&mut w, &n("ffn_up.weight"), &[e, spec.n_ff], s_in, 0.0, wt)?;
            let s_ff = 1.0 / (spec.n_ff as f32).sqrt();
            tensor(
                &mut w,
                &n("ffn_down.weight"),
                &[spec.n_ff, e],
                s_ff,
                0.0,
                wt,
            )?;
        }
        if spec.arch == Arch::Gemma3 {
            tensor(
                &mut w,
                &n("post_attention_norm.weight"),
                &[e],
                0.1,
                1.0,
                f32_,
            )?;
            tensor(&mut w, &n("post_ffw_norm.weight"), &[e], 0.1, 1.0, f32_)?;
        }
    }
    Ok(w)
}
