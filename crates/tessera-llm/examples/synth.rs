//! Write a synthetic model: `synth ARCH WTYPE VOCAB.gguf OUT.gguf [SHAPE]`
//! (the cross-check script runs it through llama.cpp and Tessera). SHAPE:
//! `small` (default), `llama-3.2-1b` (the benchmark files; ARCH llama),
//! `gemma-3-270m` (ARCH gemma3: Gemma 3 270M's layers, its output tied to
//! the embeddings) or `rows-256` (one layer of 256-wide rows: files for
//! every weight type).

use tessera::DType;
use tessera_llm::Arch;
use tessera_llm::synthetic::{SyntheticSpec, write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 && a.len() != 6 {
        return Err(
            "usage: synth ARCH WTYPE VOCAB.gguf OUT.gguf [small|llama-3.2-1b|gemma-3-270m|rows-256|moe-1024]"
                .into(),
        );
    }
    let arch = Arch::from_name(&a[1])?;
    let wtype = DType::from_name(&a[2])?;
    let vocab = tessera_gguf::GgufFile::open(&a[3])?;
    let spec = match a.get(5).map(String::as_str) {
        None | Some("small") => SyntheticSpec::small(arch, wtype),
        Some("llama-3.2-1b") => SyntheticSpec::llama_3_2_1b(wtype),
        // 640 wide, 18 layers, 4 heads of 256 over one KV head, FFN 2048.
        Some("gemma-3-270m") => SyntheticSpec {
            n_embd: 640,
            n_layer: 18,
            n_ff: 2048,
            n_head: 4,
            n_head_kv: 1,
            head_dim: 256,
            n_ctx: 8192,
            ..SyntheticSpec::small(arch, wtype)
        },
        // Rows of 256 and 512 values: every K- and IQ4 type applies
        // (scripts/gguf-dequant-check/make-quant-files.sh).
        Some("rows-256") => SyntheticSpec {
            n_embd: 256,
            n_layer: 1,
            n_ff: 512,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            ..SyntheticSpec::small(arch, wtype)
        },
        // A Qwen3 MoE layout at a quarter of Qwen3-30B-A3B's widths (1,024
        // wide, 32 experts of 256, 4 used a token, 4 layers): decoding
        // speed of the expert products on small devices.
        Some("moe-1024") => SyntheticSpec {
            n_embd: 1024,
            n_layer: 4,
            n_head: 8,
            n_head_kv: 4,
            head_dim: 128,
            n_expert: 32,
            n_expert_used: 4,
            n_ff_exp: 256,
            n_ctx: 4096,
            ..SyntheticSpec::small(arch, wtype)
        },
        Some(other) => return Err(format!("unknown shape {other}").into()),
    };
    write(&spec, &vocab)?.write_file(&a[4])?;
    Ok(())
}
