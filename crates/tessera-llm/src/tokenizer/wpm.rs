//! WordPiece (`tokenizer.ggml.model = "bert"`), llama.cpp's
//! `llm_tokenizer_wpm`: normalize (NFD first code point, lowercase, accents
//! dropped, as the file asks), split at whitespace, punctuation, ASCII
//! symbols and CJK ideographs, then cut each word, prefixed `▁`, into the
//! longest tokens from the left; a word that cannot be cut is the unknown
//! token.

use super::Vocab;
use super::unicode::Flags;
use super::unicode_data_wpm::{LOWERCASE, NFD};

/// Append the tokens of `text` to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    for word in preprocess(text, vocab.wpm_lowercase, vocab.wpm_strip_accents) {
        if word.is_empty() {
            continue;
        }
        let word = format!("\u{2581}{word}");
        let n = word.len();
        let start = out.len();
        let mut i = 0;
        while i < n {
            let longest = (i + 1..=n.min(i + vocab.max_token_len + 1))
                .rev()
                .find_map(|j| Some((j, vocab.text_to_token(word.get(i..j)?)?)));
            match longest {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.extend(vocab.unk);
        }
    }
}

fn lowercase(c: char) -> char {
    match LOWERCASE.binary_search_by_key(&(c as u32), |&(from, _)| from) {
        Ok(i) => LOWERCASE
            .get(i)
            .and_then(|&(_, to)| char::from_u32(to))
            .unwrap_or(c),
        Err(_) => c,
    }
}

/// The first code point of the NFD form of `c`.
fn nfd_first(c: char) -> char {
    let cp = c as u32;
    let i = NFD.partition_point(|&(first, _, _)| first <= cp);
    match i.checked_sub(1).and_then(|i| NFD.get(i)) {
        Some(&(first, last, to)) if first <= cp && cp <= last => char::from_u32(to).unwrap_or(c),
        _ => c,
    }
}

fn is_chinese(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

fn preprocess(text: &str, lowercase_: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if strip_accents { nfd_first(c) } else { c };
        let f = Flags::of(c);
        if f.ws {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || f.control() || (strip_accents && f.mark()) {
            continue;
        }
        let s = if lowercase_ { lowercase(c) } else { c };
        let cp = c as u32;
        if f.punct() || (cp < 0x7F && f.symbol()) || is_chinese(cp) {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            if let Some(w) = words.last_mut() {
                *w = s.to_string();
            }
            words.push(String::new());
        } else if let Some(w) = words.last_mut() {
            w.push(s);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}
