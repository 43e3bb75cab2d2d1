//! The linked list of symbols both merge tokenizers (SentencePiece-style
//! and BPE) start from: one symbol per character, merged pairwise.

/// A run of bytes of the text, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sym {
    pub start: usize,
    pub len: usize,
    pub prev: Option<usize>,
    pub next: Option<usize>,
}

/// One symbol per character of `text`, linked in order.
pub(super) fn char_symbols(text: &str) -> Vec<Sym> {
    let mut syms = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        syms.push(Sym {
            start,
            len,
            prev: i.checked_sub(1),
            next: (start + len < text.len()).then_some(i + 1),
        });
    }
    syms
}
