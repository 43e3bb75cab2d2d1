//! Weights repacked for the CPU's matrix kernels ([`Repacked`], the CPU's
//! `CPU_REPACK` buffer type where the machine offers it) against the same
//! synthetic Q4_0 model in the file's layout: the layer matrices go to the
//! repacking buffer type, the embeddings and the KV cache do not, and the
//! logits agree within the activation quantization's noise, with the same
//! greedy tokens. On a CPU without AVX-512 VNNI nothing is repacked and the
//! two runs are the same computation (the test says so).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{BufferType, DType, Registry, StreamOptions};
use tessera_gguf::{GgufFile, Value, ValueType};
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::weights::WeightPlacement;
use tessera_llm::{Arch, Model, Repacked, Session, SessionOptions};

/// The logits after `prompt` and `n` greedy tokens, with weights where
/// `place` says.
fn run(
    bytes: &[u8],
    place: &dyn WeightPlacement,
    prompt: &[u32],
    n: usize,
) -> (Vec<f32>, Vec<u32>, Arc<Model>) {
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let model = Arc::new(Model::load(file, place, &mut |_, _| {}).unwrap());
    let streams = vec![cpu.new_stream(&StreamOptions::new().threads(2)).unwrap()];
    let opts = SessionOptions {
        n_ctx: 64,
        ..SessionOptions::default()
    };
    let mut s = Session::new(model.clone(), streams, opts).unwrap();
    let first = s.decode(prompt).unwrap();
    let mut l = first.clone();
    let mut tokens = Vec::new();
    for _ in 0..n {
        let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
        tokens.push(best);
        l = s.decode(&[best]).unwrap();
    }
    (first, tokens, model)
}

#[test]
fn repacked_weights_give_the_file_layouts_logits_and_tokens() {
    tessera_cpu::register();
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let spec = SyntheticSpec::small(Arch::Llama, DType::Q4_0);
    let bytes = write(&spec, &common::tiny::vocab())
        .unwrap()
        .to_bytes()
        .unwrap();
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let prompt: Vec<u32> = (0..20).map(|i| (i * 37 + 5) % 300).collect();
    let (want, want_tokens, _) = run(&bytes, &buft, &prompt, 8);
    let (got, got_tokens, model) = run(&bytes, &Repacked(buft.clone()), &prompt, 8);

    let stored = |name: &str| {
        let t = model.weights().get(model.file(), name).unwrap();
        t.buffer().buffer_type().name().to_string()
    };
    if cpu
        .extra_buffer_types()
        .iter()
        .any(|b| b.name() == "CPU_REPACK")
    {
        for name in ["blk.0.attn_q.weight", "blk.1.ffn_down.weight"] {
            assert_eq!(stored(name), "CPU_REPACK", "{name}");
        }
    } else {
        eprintln!("this CPU offers no CPU_REPACK: both runs use the file's layout");
    }
    assert_eq!(stored("token_embd.weight"), "CPU", "GET_ROWS reads it");
    assert_eq!(
        model.layer_buffer_type(0).unwrap().name(),
        "CPU",
        "the cache"
    );

    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 2e-3 * scale,
            "logit {i}: {a} vs {b} (scale {scale})"
        );
    }
    assert_eq!(got_tokens, want_tokens);
}

/// A tied output matrix (Gemma 3) on the CPU with repacking: no copy of
/// the embeddings (the output layer is on their device; only another
/// device gets one), so the output product reads them as they are.
#[test]
fn a_tied_output_on_the_cpu_gets_no_copy() {
    tessera_cpu::register();
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let spec = SyntheticSpec::small(Arch::Gemma3, DType::Q4_0);
    // 320 tokens: embeddings the repacking type takes (rows by 16).
    let mut v = tessera_gguf::GgufWriter::new();
    v.add("tokenizer.ggml.model", "llama");
    let toks = (0..320).map(|i| Value::String(format!("t{i}"))).collect();
    v.add(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, toks),
    );
    let vocab = GgufFile::from_bytes(v.to_bytes().unwrap()).unwrap();
    let bytes = write(&spec, &vocab).unwrap().to_bytes().unwrap();
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert!(file.tensor_info("output.weight").is_err(), "tied");
    let embd = file.tensor_info("token_embd.weight").unwrap();
    let layout = tessera::Layout::contiguous(embd.dtype().unwrap(), &embd.ne).unwrap();
    if !cpu.extra_buffer_types().iter().any(|b| b.repacks(&layout)) {
        eprintln!("this CPU offers no CPU_REPACK: nothing to check");
        return;
    }
    let w = tessera_llm::weights::Weights::plan(&file, &Repacked(buft)).unwrap();
    assert!(w.find("output.weight").is_none(), "no copy on the CPU");
    assert!(w.find("token_embd.weight").is_some());
}
