//! Chat turns on a synthetic Qwen2 model with llama.cpp's Qwen2 vocabulary
//! and Qwen2.5's real template: each turn evaluates only what the session
//! does not hold yet, and the logits after a turn equal those of a fresh
//! session that evaluates the whole rendered conversation at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{BufferType, DType, Device, Registry, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::tokenizer::Vocab;
use tessera_llm::{
    Arch, ChatTemplate, Conversation, Message, Model, Sampler, SamplingOptions, Session,
    SessionOptions, generate,
};

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn turns_reuse_the_cache_and_match_a_fresh_evaluation() {
    let models = common::llama_models_dir();
    let vocab_file = GgufFile::open(models.join("ggml-vocab-qwen2.gguf")).unwrap();
    let source =
        std::fs::read_to_string(models.join("templates/Qwen-Qwen2.5-7B-Instruct.jinja")).unwrap();
    let bytes = write(&SyntheticSpec::small(Arch::Qwen2, DType::F32), &vocab_file)
        .unwrap()
        .to_bytes()
        .unwrap();
    tessera_cpu::register();
    let cpu: Arc<dyn Device> = Registry::global().device_by_name("cpu").unwrap();
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let file = GgufFile::from_bytes(bytes).unwrap();
    let vocab = Vocab::from_gguf(&file).unwrap();
    let model = Arc::new(Model::load(file, &buft, &mut |_, _| {}).unwrap());
    let stream = cpu.new_stream(&StreamOptions::new().threads(2)).unwrap();
    let opts = SessionOptions {
        n_ctx: 512,
        ..SessionOptions::default()
    };
    let new_session = || Session::new(model.clone(), vec![stream.clone()], opts).unwrap();
    let mut session = new_session();
    let mut sampler = Sampler::new(SamplingOptions {
        temperature: 0.0,
        ..SamplingOptions::default()
    })
    .unwrap();

    let template = ChatTemplate::new(&source, "", "<|im_end|>").unwrap();
    let mut chat = Conversation::new(template);
    chat.push(Message::new("system", "You are terse."));
    for (turn, user) in ["Hello there!", "And again, in two words?"]
        .iter()
        .enumerate()
    {
        chat.push(Message::new("user", user));
        let full = chat.render_tokens(&vocab).unwrap();
        let held = session.n_past();
        let prompt = chat.next_prompt(&vocab, &mut session).unwrap();
        // Only the new part is evaluated, after the prefix the session keeps.
        assert_eq!(session.n_past() + prompt.len(), full.len(), "turn {turn}");
        assert_eq!(&full[session.n_past()..], prompt.as_slice());
        if turn == 0 {
            assert_eq!(held, 0);
            assert_eq!(prompt, full);
            // The template's special tokens are single tokens.
            let im_start = vocab.text_to_token("<|im_start|>").unwrap();
            assert_eq!(full[0], im_start);
        } else {
            assert!(
                session.n_past() > full.len() / 2,
                "turn {turn}: kept only {} of {} tokens",
                session.n_past(),
                full.len()
            );
        }
        // The session's logits after the prompt equal a fresh evaluation
        // of the whole conversation.
        let mut fresh = new_session();
        let want = fresh.decode(&full).unwrap();
        let got = session.decode(&prompt).unwrap();
        let d = max_rel_diff(&got, &want);
        assert!(d < 1e-4, "turn {turn}: logits differ by {d}");
        // Let the model reply (greedy), continuing from the logits above.
        session.truncate(full.len() - 1);
        let mut generated = Vec::new();
        generate(
            &mut session,
            &mut sampler,
            &full[full.len() - 1..],
            8,
            &|t| vocab.is_eog(t),
            &mut |t| {
                generated.push(t);
                Ok(true)
            },
        )
        .unwrap();
        let text = String::from_utf8_lossy(&vocab.detokenize(&generated, true, false)).into_owned();
        chat.record_reply(&session, &prompt, &generated, &text);
    }
    assert_eq!(chat.messages().len(), 5);
}
