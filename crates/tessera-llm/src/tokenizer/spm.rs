//! SentencePiece-style tokenization (`tokenizer.ggml.model = "llama"`),
//! llama.cpp's `llm_tokenizer_spm`: start from single characters, merge the
//! adjacent pair whose joined text is the best-scoring token until none is
//! left, then write each piece as its token or, failing that, as the pieces
//! it was merged from, down to byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::Vocab;
use super::symbols::{Sym, char_symbols};

#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl Ord for Bigram {
    // highest score first, then the leftmost
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .partial_cmp(&o.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| o.left.cmp(&self.left))
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

/// Append the tokens of `text` (already whitespace-escaped) to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let mut syms = char_symbols(text);
    if syms.is_empty() {
        return;
    }
    let mut queue = BinaryHeap::new();
    let mut rev_merge: HashMap<&str, (usize, usize)> = HashMap::new();
    for i in 1..syms.len() {
        try_add(
            vocab,
            text,
            &syms,
            &mut queue,
            &mut rev_merge,
            Some(i - 1),
            Some(i),
        );
    }
    while let Some(b) = queue.pop() {
        let (l, r) = (syms[b.left], syms[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        syms[b.left].len += r.len;
        syms[b.right].len = 0;
        syms[b.left].next = r.next;
        if let Some(n) = r.next {
            syms[n].prev = Some(b.left);
        }
        let prev = syms[b.left].prev;
        let next = syms[b.left].next;
        try_add(
            vocab,
            text,
            &syms,
            &mut queue,
            &mut rev_merge,
            prev,
            Some(b.left),
        );
        try_add(
            vocab,
            text,
            &syms,
            &mut queue,
            &mut rev_merge,
            Some(b.left),
            next,
        );
    }
    let mut i = Some(0);
    while let Some(k) = i {
        resegment(vocab, text, &syms, &rev_merge, k, out);
        i = syms[k].next;
    }
}

/// Queue the merge of symbols `left` and `right` when their joined text is a
/// token, and remember which two symbols made that text.
fn try_add<'t>(
    vocab: &Vocab,
    text: &'t str,
    syms: &[Sym],
    queue: &mut BinaryHeap<Bigram>,
    rev: &mut HashMap<&'t str, (usize, usize)>,
    left: Option<usize>,
    right: Option<usize>,
) {
    let (Some(l), Some(r)) = (left, right) else {
        return;
    };
    let s = syms[l].start;
    let Some(piece) = text.get(s..s + syms[l].len + syms[r].len) else {
        return;
    };
    let Some(id) = vocab.text_to_token(piece) else {
        return;
    };
    queue.push(Bigram {
        left: l,
        right: r,
        score: vocab.score(id),
        size: piece.len(),
    });
    rev.insert(piece, (l, r));
}

/// Write symbol `k` as a token, or as the two symbols it was merged from,
/// or as byte tokens (an explicit stack: a long piece must not recurse deep).
fn resegment(
    vocab: &Vocab,
    text: &str,
    syms: &[Sym],
    rev_merge: &HashMap<&str, (usize, usize)>,
    k: usize,
    out: &mut Vec<u32>,
) {
    let mut stack = vec![(syms[k].start, syms[k].len)];
    while let Some((start, len)) = stack.pop() {
        let Some(piece) = text.get(start..start + len) else {
            continue;
        };
        if let Some(id) = vocab.text_to_token(piece) {
            out.push(id);
            continue;
        }
        match rev_merge.get(piece) {
            Some(&(l, r)) => {
                // right pushed first: the left comes out first
                stack.push((syms[r].start, syms[r].len));
                stack.push((syms[l].start, syms[l].len));
            }
            None => {
                for &b in piece.as_bytes() {
                    if let Some(id) = vocab.byte_to_token(b) {
                        out.push(id);
                    }
                }
            }
        }
    }
}
