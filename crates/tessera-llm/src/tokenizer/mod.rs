//! Tokenizers built from a GGUF vocabulary (`tokenizer.ggml.*`), matching
//! llama.cpp id for id.
//!
//! [`Vocab::from_gguf`] reads and validates the vocabulary; [`Vocab::tokenize`]
//! has the semantics of llama.cpp's `llama_tokenize` (BOS/EOS per the file's
//! flags, special tokens in the text recognised on request, user-defined
//! tokens always), [`Vocab::token_to_piece`] those of `llama_token_to_piece`,
//! and [`Detokenizer`] streams ids back to text ([`Vocab::detokenize`] is
//! `llama_detokenize`). Supported `tokenizer.ggml.model`s: `llama`
//! (SentencePiece-style, llama.cpp's SPM), `gpt2` (byte-level BPE) with the
//! pre-tokenizers that llama.cpp maps to the default, GPT-2, Llama-3, Qwen2,
//! Qwen3.5, Falcon, StarCoder-family, DeepSeek LLM/Coder and Gemma-4 splits
//! (see `pretok::steps`), `gemma4`, and `bert` (WordPiece). Others (UGM,
//! RWKV, PLaMo-2...) are an `Unsupported` error.

mod bpe;
mod detok;
mod index;
mod load;
mod pretok;
mod spm;
mod symbols;
mod unicode;
mod unicode_data;
mod unicode_data_wpm;
mod wpm;

use std::collections::{HashMap, HashSet};

pub use detok::Detokenizer;

/// Attribute bits of a token (llama.cpp's `llama_token_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TokenAttr(pub u32);

impl TokenAttr {
    /// No type known.
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    /// The unknown token.
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    /// Unused (reserved) token.
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    /// Ordinary text token.
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    /// Control token (BOS, EOS, turn markers...).
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    /// User-defined token, matched in the text before tokenization.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    /// Byte token `<0xXX>`.
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Whitespace before it is dropped when it is matched in the text.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    /// Whitespace after it is dropped when it is matched in the text.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);

    /// Whether any bit of `other` is set.
    pub fn any(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for TokenAttr {
    type Output = TokenAttr;
    fn bitor(self, o: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | o.0)
    }
}

/// Which algorithm turns text into ids.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// SentencePiece-style merges by score (`llama`).
    Spm,
    /// BPE by merge rank (`gpt2`, `gemma4`).
    Bpe(Bpe),
    /// WordPiece, longest match first (`bert`).
    Wpm,
}

/// How a BPE vocabulary sees text.
#[derive(Clone, Copy, Debug)]
struct Bpe {
    /// Pre-tokenizer steps.
    steps: &'static [pretok::Step],
    /// SentencePiece-style BPE (Gemma 4): no GPT-2 byte characters, spaces
    /// written `▁`, `<0xXX>` byte tokens.
    raw: bool,
    /// A word of newlines only is one token when the vocabulary has it
    /// (Gemma 4).
    newline_words: bool,
}

#[derive(Clone, Debug)]
struct Token {
    text: String,
    score: f32,
    attr: TokenAttr,
}

/// A vocabulary and its tokenizer.
#[derive(Clone, Debug)]
pub struct Vocab {
    kind: Kind,
    tokens: Vec<Token>,
    token_to_id: index::TokenIndex,
    /// `left -> right -> rank` (BPE only)
    bpe_ranks: HashMap<String, HashMap<String, u32>>,
    byte_chars: [char; 256],
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    ignore_merges: bool,
    clean_spaces: bool,
    /// Separator token (WordPiece: ends the text with `add_special`).
    sep: Option<u32>,
    /// Longest token text in bytes.
    max_token_len: usize,
    wpm_lowercase: bool,
    wpm_strip_accents: bool,
    eog: HashSet<u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    special: Vec<u32>,
}

/// A piece of the text being tokenized: raw text (a byte range) or a token
/// matched in it.
#[derive(Clone, Copy, Debug)]
enum Frag {
    Text(usize, usize),
    Token(u32),
}

impl Vocab {
    /// Number of tokens.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Whether [`Vocab::tokenize`] with `add_special` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Whether [`Vocab::tokenize`] with `add_special` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos && self.eos.is_some()
    }

    /// Whether `id` ends generation (EOS, end-of-turn and the like).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The text of token `id` as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(|t| t.text.as_str())
    }

    /// The attributes of token `id` (`UNDEFINED` when out of range).
    pub fn token_attr(&self, id: u32) -> TokenAttr {
        self.tokens
            .get(id as usize)
            .map(|t| t.attr)
            .unwrap_or_default()
    }

    /// The id of the token whose text is exactly `text`.
    pub fn text_to_token(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(&self.tokens, text)
    }

    fn score(&self, id: u32) -> f32 {
        self.tokens.get(id as usize).map_or(0.0, |t| t.score)
    }

    fn bpe_rank(&self, left: &str, right: &str) -> Option<u32> {
        self.bpe_ranks.get(left)?.get(right).copied()
    }

    /// The token of byte `b`: `<0xXX>` or, failing that, the byte as text
    /// (SPM); GPT-2's byte character (BPE).
    fn byte_to_token(&self, b: u8) -> Option<u32> {
        match self.kind {
            Kind::Spm => self.text_to_token(&format!("<0x{b:02X}>")).or_else(|| {
                b.is_ascii()
                    .then(|| self.text_to_token(&char::from(b).to_string()))?
            }),
            Kind::Bpe(_) | Kind::Wpm => {
                self.text_to_token(&self.byte_chars[usize::from(b)].to_string())
            }
        }
    }

    /// Token ids of `text`, as llama.cpp's `llama_tokenize`: with
    /// `add_special`, BOS and EOS as the vocabulary asks; with
    /// `parse_special`, control tokens written in the text become their ids
    /// (user-defined tokens always do).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let frags = self.partition(text, parse_special);
        let mut out = Vec::new();
        let (bos, eos) = match self.kind {
            // llama.cpp: BOS and SEP whenever add_special
            Kind::Wpm => (
                self.bos.filter(|_| add_special),
                self.sep.filter(|_| add_special),
            ),
            _ => (
                self.bos.filter(|_| add_special && self.add_bos),
                self.eos.filter(|_| add_special && self.add_eos),
            ),
        };
        out.extend(bos);
        match self.kind {
            Kind::Spm => {
                let mut prev_special = true;
                for f in frags {
                    match f {
                        Frag::Text(a, b) => {
                            let mut s = String::with_capacity(b - a + 1);
                            if self.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(text.get(a..b).unwrap_or(""));
                            let s = s.replace(' ', "\u{2581}");
                            spm::tokenize(self, &s, &mut out);
                            prev_special = false;
                        }
                        Frag::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Kind::Bpe(bpe) => {
                for f in frags {
                    match f {
                        Frag::Text(a, b) => {
                            let t = text.get(a..b).unwrap_or("");
                            if bpe.raw {
                                let t = t.replace(' ', "\u{2581}");
                                bpe::tokenize(self, bpe, &t, &mut out)
                            } else {
                                bpe::tokenize(self, bpe, t, &mut out)
                            }
                        }
                        Frag::Token(id) => out.push(id),
                    }
                }
            }
            Kind::Wpm => {
                for f in frags {
                    match f {
                        Frag::Text(a, b) => {
                            wpm::tokenize(self, text.get(a..b).unwrap_or(""), &mut out)
                        }
                        Frag::Token(id) => out.push(id),
                    }
                }
            }
        }
        out.extend(eos);
        out
    }

    /// Cut `text` at the special tokens written in it (llama.cpp's
    /// `tokenizer_st_partition`): longest tokens first, each cutting the raw
    /// pieces left by the longer ones. Control and unknown tokens only with
    /// `parse_special`.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Frag> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Frag::Text(0, text.len()));
        let bytes = text.as_bytes();
        for &id in &self.special {
            let Some(tok) = self.tokens.get(id as usize) else {
                continue;
            };
            if !parse_special && tok.attr.any(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
                continue;
            }
            let needle = tok.text.as_str();
            if !frags
                .iter()
                .any(|f| matches!(*f, Frag::Text(a, b) if text[a..b].contains(needle)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Frag::Text(mut a, b) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(m) = text[a..b].find(needle).map(|m| m + a) {
                    let mut left_end = m;
                    if tok.attr.any(TokenAttr::LSTRIP) {
                        while left_end > a && bytes[left_end - 1].is_ascii_whitespace_c() {
                            left_end -= 1;
                        }
                    }
                    if left_end > a {
                        next.push(Frag::Text(a, left_end));
                    }
                    next.push(Frag::Token(id));
                    a = m + needle.len();
                    if tok.attr.any(TokenAttr::RSTRIP) {
                        while a < b && bytes[a].is_ascii_whitespace_c() {
                            a += 1;
                        }
                    }
                }
                if a < b {
                    next.push(Frag::Text(a, b));
                }
            }
            frags = next;
        }
        frags
    }

    /// The bytes token `id` stands for, as llama.cpp's `llama_token_to_piece`
    /// (no leading-space strip): control and unknown tokens only with
    /// `special`; byte tokens as their byte; `▁` as space (SPM); GPT-2's
    /// byte characters as bytes (BPE). Empty for an id out of range.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(tok) = self.tokens.get(id as usize) else {
            return Vec::new();
        };
        let attr = tok.attr;
        let specials = TokenAttr::CONTROL | TokenAttr::UNKNOWN;
        if !special && attr.any(specials) {
            return Vec::new();
        }
        if attr.any(specials | TokenAttr::USER_DEFINED) {
            return tok.text.as_bytes().to_vec();
        }
        if attr.any(TokenAttr::NORMAL) {
            return match self.kind {
                Kind::Spm | Kind::Wpm => tok.text.replace('\u{2581}', " ").into_bytes(),
                Kind::Bpe(b) if b.raw => tok.text.replace('\u{2581}', " ").into_bytes(),
                Kind::Bpe(_) => decode_bpe_text(&tok.text),
            };
        }
        if attr.any(TokenAttr::BYTE) {
            return vec![byte_of_token_text(&tok.text)];
        }
        Vec::new()
    }
}

/// C's `isspace` in the "C" locale.
trait CSpace {
    fn is_ascii_whitespace_c(&self) -> bool;
}
impl CSpace for u8 {
    fn is_ascii_whitespace_c(&self) -> bool {
        matches!(*self, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
    }
}

/// GPT-2 byte characters back to bytes; a character outside the map is
/// written as llama.cpp does (`[UNK_BYTE_0x..<text>]`).
fn decode_bpe_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match unicode::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The byte of a byte token `<0xXX>` (llama.cpp: `strtol` of the two
/// characters after `<0x`; 0 when they are not hex).
fn byte_of_token_text(text: &str) -> u8 {
    let digits = text.get(3..).unwrap_or("");
    let mut v: u32 = 0;
    for c in digits.chars().take(2) {
        match c.to_digit(16) {
            Some(d) => v = v * 16 + d,
            None => break,
        }
    }
    v as u8
}
