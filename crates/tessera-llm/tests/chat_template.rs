//! Chat templates rendered by Tessera (minijinja) against Python's jinja2
//! configured as Hugging Face's `apply_chat_template` (the references in
//! `tests/data/chat`, written by `scripts/chat-template-refs/make-refs.py`),
//! on real models' templates (llama.cpp's `models/templates`, fetched with
//! the vocabulary files): the texts must be equal byte for byte, and a
//! template that refuses a conversation (`raise_exception`) must refuse it
//! here too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera_llm::{ChatTemplate, Message};

/// Keep in step with CONVERSATIONS in make-refs.py.
fn conversations() -> Vec<Vec<Message>> {
    let m = Message::new;
    vec![
        vec![m("user", "Hello!")],
        vec![m("system", "You are terse."), m("user", "What is 2+2?")],
        vec![
            m("user", "Name a colour."),
            m("assistant", "Blue."),
            m("user", "Another, in  two words?\nThanks ✓"),
        ],
    ]
}

/// Templates and their BOS/EOS texts (as in make-refs.py).
const TEMPLATES: [(&str, &str, &str); 10] = [
    ("Qwen-Qwen2.5-7B-Instruct", "", "<|im_end|>"),
    ("Qwen-Qwen3-0.6B", "", "<|im_end|>"),
    ("google-gemma-2-2b-it", "<bos>", "<eos>"),
    ("HuggingFaceTB-SmolLM3-3B", "", "<|im_end|>"),
    (
        "meta-llama-Llama-3.2-3B-Instruct",
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
    (
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
    ),
    ("microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>"),
    ("ibm-granite-granite-3.3-2B-Instruct", "", "<|end_of_text|>"),
    ("LFM2-8B-A1B", "<|startoftext|>", "<|im_end|>"),
];

/// The clock of the references: 2026-11-25 12:34:56 UTC.
const NOW: u64 = 1_795_610_096;

#[test]
fn real_templates_render_as_jinja2_does() {
    let dir = common::llama_models_dir().join("templates");
    let refs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat");
    let mut checked = 0;
    for (stem, bos, eos) in TEMPLATES {
        let source = std::fs::read_to_string(dir.join(format!("{stem}.jinja"))).unwrap();
        let t = ChatTemplate::new(&source, bos, eos).unwrap();
        t.set_clock(NOW);
        for (i, conv) in conversations().iter().enumerate() {
            for add_gen in [true, false] {
                let name = format!("{stem}.{i}.{}.txt", if add_gen { "gen" } else { "nogen" });
                let want = std::fs::read_to_string(refs.join(&name)).unwrap();
                match (t.render(conv, add_gen), want.strip_prefix("ERROR: ")) {
                    (Ok(got), None) => assert_eq!(got, want, "{name}"),
                    (Err(e), Some(msg)) => {
                        assert!(e.to_string().contains(msg), "{name}: {e} vs {msg}")
                    }
                    (Ok(got), Some(msg)) => panic!("{name}: rendered {got:?}, jinja2: {msg}"),
                    (Err(e), None) => panic!("{name}: {e}"),
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 60);
}
