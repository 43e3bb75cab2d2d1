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
