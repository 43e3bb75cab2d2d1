//! BPE (`tokenizer.ggml.model = "gpt2"` or `"gemma4"`), llama.cpp's
//! `llm_tokenizer_bpe`: pre-tokenize into words, write each word's bytes as
//! GPT-2's byte characters (not for Gemma 4, whose text is UTF-8 with `▁`
//! for spaces), then apply the lowest-ranked merge of adjacent pieces until
//! none applies; a piece with no token goes out as byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::symbols::{Sym, char_symbols};
use super::{Bpe, Vocab, pretok};

#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    text: String,
    rank: u32,
}

impl Ord for Bigram {
    // lowest rank first, then the leftmost (BinaryHeap pops the greatest)
    fn cmp(&self, o: &Self) -> Ordering {
        o.rank.cmp(&self.rank).then_with(|| o.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}

/// Append the tokens of `text` to `out`.
pub(super) fn tokenize(vocab: &Vocab, bpe: Bpe, text: &str, out: &mut Vec<u32>) {
    for word in pretok::split(text, bpe.steps) {
        if bpe.raw {
            tokenize_word(vocab, bpe, &word, out);
        } else {
            let word: String = word
                .bytes()
                .map(|b| vocab.byte_chars[usize::from(b)])
                .collect();
            tokenize_word(vocab, bpe, &word, out);
        }
    }
}

fn tokenize_word(vocab: &Vocab, bpe: Bpe, word: &str, out: &mut Vec<u32>) {
    let whole = vocab.ignore_merges || (bpe.newline_words && word.bytes().all(|b| b == b'\n'));
    if whole && let Some(id) = vocab.text_to_token(word) {
        out.push(id);
        return;
    }
    let mut syms = char_symbols(word);
    let piece = |s: &Sym| word.get(s.start..s.start + s.len).unwrap_or("");
    let mut queue = BinaryHeap::new();
    let add = |syms: &[Sym], queue: &mut BinaryHeap<Bigram>, l: Option<usize>, r: Option<usize>| {
        let (Some(l), Some(r)) = (l, r) else {
            return;
        };
        let (a, b) = (piece(&syms[l]), piece(&syms[r]));
        if let Some(rank) = vocab.bpe_rank(a, b) {
            queue.push(Bigram {
                left: l,
                right: r,
                text: format!("{a}{b}"),
                rank,
            });
        }
    };
    for i in 1..syms.len() {
        add(&syms, &mut queue, Some(i - 1), Some(i));
    }
    while let Some(b) = queue.pop() {
        let (l, r) = (syms[b.left], syms[b.right]);
        if l.len == 0 || r.len == 0 {
            continue;
        }
        let (pl, pr) = (piece(&l), piece(&r));
        if pl.len() + pr.len() != b.text.len() || !b.text.starts_with(pl) || !b.text.ends_with(pr) {
            continue; // outdated
        }
        syms[b.left].len += r.len;
        syms[b.right].len = 0;
        syms[b.left].next = r.next;
        if let Some(n) = r.next {
            syms[n].prev = Some(b.left);
        }
        let (prev, next) = (syms[b.left].prev, syms[b.left].next);
        add(&syms, &mut queue, prev, Some(b.left));
        add(&syms, &mut queue, Some(b.left), next);
    }
    for s in syms.iter().filter(|s| s.len > 0) {
        let text = piece(s);
        match vocab.text_to_token(text) {
            Some(id) => out.push(id),
            None if bpe.raw => {
                for b in text.bytes() {
                    out.extend(vocab.text_to_token(&format!("<0x{b:02X}>")));
                }
            }
            None => {
                // llama.cpp looks each byte up as a one-byte token
                for c in text.chars().filter(char::is_ascii) {
                    if let Some(id) = vocab.text_to_token(c.encode_utf8(&mut [0; 4])) {
                        out.push(id);
                    }
                }
            }
        }
    }
}
