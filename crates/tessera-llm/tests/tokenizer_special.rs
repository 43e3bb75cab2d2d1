//! Special tokens written in the text (control tokens with parse_special,
//! user-defined ones always, phi-3's right-strip) and BOS/EOS with
//! add_special, on llama.cpp's vocabulary files, against ids made by
//! llama.cpp's `llama-tokenize` (`tests/data/vocab-special.txt`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests: failing loudly is the point

mod common;

use std::collections::BTreeMap;

use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::Vocab;

#[test]
fn special_tokens_match_llama_tokenize() {
    let models = common::llama_models_dir();
    let mut by_vocab: BTreeMap<String, Vec<common::RefCase>> = BTreeMap::new();
    for c in common::reference_cases(include_str!("data/vocab-special.txt")) {
        by_vocab
            .entry(c.vocab.clone().unwrap())
            .or_default()
            .push(c);
    }
    assert!(by_vocab.len() >= 10, "{} vocabularies", by_vocab.len());
    let mut failed = Vec::new();
    let mut n = 0;
    for (name, cases) in &by_vocab {
        let file = GgufFile::open(models.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let v = Vocab::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        for c in cases {
            n += 1;
            let got = v.tokenize(&c.text, c.add_special, c.parse_special);
            if got != c.ids {
                failed.push(format!(
                    "  {name}: {:?} add_special={} parse_special={}\n    want {:?}\n    got  {:?}",
                    c.text, c.add_special, c.parse_special, c.ids, got
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {n} differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
