//! Streaming detokenization: ids in, text out, a UTF-8 sequence split
//! across tokens (byte tokens of an emoji, say) held back until it
//! completes.

use super::Vocab;

/// Turns ids into text as they come. The text returned by all calls to
/// [`Detokenizer::push`] and then [`Detokenizer::finish`] is exactly the
/// concatenation of the tokens' pieces ([`Vocab::token_to_piece`]) when those
/// bytes are valid UTF-8; a byte sequence that can never be valid is written
/// as U+FFFD, as soon as it is known to be invalid.
#[derive(Debug)]
pub struct Detokenizer<'v> {
    vocab: &'v Vocab,
    special: bool,
    pending: Vec<u8>,
}

impl<'v> Detokenizer<'v> {
    /// A detokenizer over `vocab`; control tokens are written as their text
    /// when `special`, else dropped.
    pub fn new(vocab: &'v Vocab, special: bool) -> Self {
        Detokenizer {
            vocab,
            special,
            pending: Vec::new(),
        }
    }

    /// The text that token `id` completes (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.vocab.token_to_piece(id, self.special);
        self.push_bytes(&piece)
    }

    /// Like [`Detokenizer::push`], for raw bytes.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&rest[..good]));
                    match e.error_len() {
                        // an incomplete sequence at the end: wait for more
                        None => {
                            start += good;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += good + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Bytes held back (an incomplete UTF-8 sequence).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The text of the bytes still held back (U+FFFD for an incomplete
    /// sequence), leaving nothing pending.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

impl Vocab {
    /// The text of `ids` as llama.cpp's `llama_detokenize`: with
    /// `remove_special`, a leading BOS and a trailing EOS the vocabulary adds
    /// are dropped; control tokens are written only with `unparse_special`;
    /// the space SentencePiece prefixes is removed from the first piece; BPE
    /// vocabularies that ask for it have spaces before `?!.,` and some
    /// contractions removed.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && self.bos.is_some() && ids.first() == self.bos.as_ref()
        {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && self.eos.is_some() && ids.last() == self.eos.as_ref() {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let piece = self.token_to_piece(id, unparse_special);
            let skip = usize::from(remove_space && piece.first() == Some(&b' '));
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut text);
        }
        text
    }
}

/// llama.cpp's three clean-up passes over detokenized BPE text.
fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ,": drop the space
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // " ' ": drop both spaces around a lone apostrophe
    // (llama.cpp zeroes the dropped space in place: it is no space for the
    // next test)
    let src = std::mem::take(&mut out);
    let mut i = 0;
    let mut zeroed = None;
    while i < src.len() {
        let x = src[i];
        let prev_space = i > 0 && src[i - 1] == b' ' && zeroed != Some(i - 1);
        if i > 0 && x == b'\'' && i + 1 < src.len() && prev_space && src[i + 1] == b' ' {
            out.pop();
            out.push(x);
            zeroed = Some(i + 1);
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    // " 's", " 'm", " 're", " 've": drop the space
    let src = std::mem::take(&mut out);
    for (i, &x) in src.iter().enumerate() {
        if i > 0 && src[i - 1] == b' ' && x == b'\'' && i + 1 < src.len() {
            let x1 = src[i + 1];
            let x2 = src.get(i + 2).copied();
            let drop = matches!(x1, b's' | b'm')
                || (!matches!(x1, b't' | b'd')
                    && matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))));
            if drop {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}
