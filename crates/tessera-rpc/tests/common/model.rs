//! A synthetic language model for the tests over remote devices
//! (tessera-llm's `synthetic` writer, with a made-up vocabulary of plain
//! tokens so that no vocabulary file has to be fetched), and a greedy
//! decoding loop that keeps every step's logits.

use std::sync::Arc;

use tessera::Stream;
use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::{Arch, LayerMap, Model, Session, SessionOptions};

/// Tokens of the made-up vocabulary.
pub const N_VOCAB: usize = 512;

/// A prompt of 8 tokens inside the vocabulary.
pub const PROMPT: [u32; 8] = [1, 17, 42, 99, 250, 311, 7, 480];

/// A vocabulary of `n` tokens (`tokenizer.*` keys only: all the synthetic
/// writer copies, and all loading a model needs).
pub fn vocab(n: usize) -> GgufFile {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", "llama");
    w.add(
        "tokenizer.ggml.tokens",
        Value::array(ValueType::String, (0..n).map(|i| format!("<t{i}>"))),
    );
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// The GGUF bytes of a Llama-shaped synthetic model.
pub fn model_bytes(spec: &SyntheticSpec) -> Vec<u8> {
    write(spec, &vocab(N_VOCAB)).unwrap().to_bytes().unwrap()
}

/// The small Llama of tessera-llm's tests (128 wide, 2 layers) with
/// `n_layer` layers and `wtype` weights.
pub fn small(n_layer: usize, wtype: tessera::DType) -> SyntheticSpec {
    SyntheticSpec {
        n_layer,
        ..SyntheticSpec::small(Arch::Llama, wtype)
    }
}

/// Greedy decoding: the prompt, then `n` steps. Returns the tokens and the
/// logits of every evaluation (the prompt's first), and the session (for
/// its scheduler's statistics).
pub fn greedy(
    bytes: &[u8],
    map: &LayerMap,
    streams: Vec<Arc<dyn Stream>>,
    n: usize,
    mut between: impl FnMut(usize),
) -> (Vec<u32>, Vec<Vec<f32>>, Session) {
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let model = Arc::new(Model::load(file, map, &mut |_, _| {}).unwrap());
    let opts = SessionOptions {
        n_ctx: 64,
        ..SessionOptions::default()
    };
    let mut s = Session::new(model, streams, opts).unwrap();
    let mut logits = s.decode(&PROMPT).unwrap();
    let (mut tokens, mut steps) = (Vec::new(), Vec::new());
    for i in 0..n {
        between(i);
        let t = argmax(&logits);
        tokens.push(t);
        steps.push(logits);
        logits = s.decode(&[t]).unwrap();
    }
    steps.push(logits);
    (tokens, steps, s)
}

/// The logits after the prompt and after each of `tokens` fed in turn
/// (teacher forcing: both sides see the same sequence even where their
/// greedy choices would part on a near tie).
pub fn forced(
    bytes: &[u8],
    map: &LayerMap,
    streams: Vec<Arc<dyn Stream>>,
    tokens: &[u32],
) -> Vec<Vec<f32>> {
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let model = Arc::new(Model::load(file, map, &mut |_, _| {}).unwrap());
    let opts = SessionOptions {
        n_ctx: 64,
        ..SessionOptions::default()
    };
    let mut s = Session::new(model, streams, opts).unwrap();
    let mut steps = vec![s.decode(&PROMPT).unwrap()];
    for &t in tokens {
        steps.push(s.decode(&[t]).unwrap());
    }
    steps
}

/// The gap between the largest and the second largest logit.
pub fn top2_gap(l: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::MIN, f32::MIN);
    for &v in l {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

pub fn argmax(l: &[f32]) -> u32 {
    l.iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
        .0 as u32
}

/// Every step's logits within `rel` of that step's largest magnitude.
pub fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], rel: f32, label: &str) {
    assert_eq!(got.len(), want.len(), "{label}: steps");
    for (step, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{label}: vocabulary at step {step}");
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{label}: all-zero logits at step {step}");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= rel * scale,
                "{label}: step {step}, logit {i}: {a} vs {b}"
            );
        }
    }
}
