//! Pre-tokenizers of byte-level BPE (`tokenizer.ggml.pre`): the text is cut
//! into words before merges, as llama.cpp's `unicode_regex_split` does.
//!
//! llama.cpp hand-codes its GPT-2 and Llama-3 style regexes (lookaheads that
//! `std::regex` lacks); they are hand-coded here the same way. The simple
//! class regexes it hands to `std::regex` (`\p{N}`, `[\p{P}...]+`,
//! `[0-9][0-9][0-9]`) are matched by small scanners with the same results.
//! Each step cuts every piece the previous steps made.

use super::unicode::Flags;

/// One splitting step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// and its variants: `digits3` false is `\p{N}` (Qwen2), `marks` adds
    /// `\p{M}` to letters (Qwen3.5).
    Llama3 { digits3: bool, marks: bool },
    /// `[\p{P}\$\+<=>\^~\|]+`, with `` ` `` too when `backtick`.
    PunctRun { backtick: bool },
    /// `\p{N}+`
    NumberRun,
    /// `\p{N}`
    Number,
    /// `[0-9][0-9][0-9]`
    AsciiDigits3,
    /// `[^\n]+|[\n]+`
    Newlines,
    /// `\s?C+` (with `ws_prefix`) or `C` / `C+` for one character class.
    Class {
        class: Class,
        ws_prefix: bool,
        plus: bool,
    },
    /// `\s+$`
    TrailingSpace,
}

/// A character class as llama.cpp's `std::regex` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `\p{..}` categories (these bits) on the collapsed text.
    Cats(u8),
    /// `[a-b...]`: characters and ranges, written as in the regex.
    Set(&'static str),
}

impl Class {
    /// Whether `c` is in the class; non-ASCII whitespace reads as `\v`, as
    /// llama.cpp rewrites it before matching.
    fn has(self, c: char) -> bool {
        let c = if (c as u32) >= 128 && Flags::of(c).ws {
            '\u{b}'
        } else {
            c
        };
        match self {
            Class::Cats(bits) => collapsed(c).cat & bits != 0,
            Class::Set(set) => {
                let mut chars = set.chars();
                while let Some(a) = chars.next() {
                    let mut look = chars.clone();
                    if let (Some('-'), Some(b)) = (look.next(), look.next()) {
                        if (a..=b).contains(&c) {
                            return true;
                        }
                        chars = look;
                    } else if a == c {
                        return true;
                    }
                }
                false
            }
        }
    }
}

/// `\s` of `std::regex` after llama.cpp's rewrite (non-ASCII whitespace is
/// `\v`).
fn regex_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
        || ((c as u32) >= 128 && Flags::of(c).ws)
}

/// The steps of the pre-tokenizer named `pre`, or `None` when unsupported.
pub(crate) fn steps(pre: &str) -> Option<&'static [Step]> {
    use Step::*;
    const DEFAULT: &[Step] = &[PunctRun { backtick: false }, Gpt2, NumberRun, AsciiDigits3];
    const LLAMA3: &[Step] = &[Llama3 {
        digits3: true,
        marks: false,
    }];
    const QWEN2: &[Step] = &[Llama3 {
        digits3: false,
        marks: false,
    }];
    const QWEN35: &[Step] = &[Llama3 {
        digits3: false,
        marks: true,
    }];
    const FALCON: &[Step] = &[PunctRun { backtick: true }, Gpt2, AsciiDigits3];
    const STARCODER: &[Step] = &[Number, Gpt2];
    const GPT2: &[Step] = &[Gpt2];
    Some(match pre {
        "" | "default" => DEFAULT,
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" | "glm5" => {
            LLAMA3
        }
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "megrez" | "hunyuan"
        | "solar-open" | "grok-2" => QWEN2,
        "qwen35" => QWEN35,
        "falcon" => FALCON,
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => STARCODER,
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
        | "mpt" | "olmo" | "jais" | "exaone4" | "trillion" | "granite-docling" => GPT2,
        "gemma4" | "granite-embed-multi-311m" | "sarvam-moe" => &[Newlines],
        "deepseek-coder" => DEEPSEEK_CODER,
        "deepseek-llm" => DEEPSEEK_LLM,
        _ => return None,
    })
}

const NEWLINE: Step = Step::Class {
    class: Class::Set("\r\n"),
    ws_prefix: false,
    plus: false,
};
const CJK: Step = Step::Class {
    class: Class::Set("一-龥ࠀ-一가-퟿"),
    ws_prefix: false,
    plus: true,
};
const DEEPSEEK_CODER: &[Step] = &[
    NEWLINE,
    Step::Class {
        class: Class::Cats(super::unicode::LETTER),
        ws_prefix: true,
        plus: true,
    },
    Step::Class {
        class: Class::Cats(super::unicode::PUNCTUATION),
        ws_prefix: true,
        plus: true,
    },
    CJK,
    Step::Number,
];
const DEEPSEEK_LLM: &[Step] = &[
    NEWLINE,
    Step::Class {
        class: Class::Set(
            "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃",
        ),
        ws_prefix: true,
        plus: true,
    },
    Step::Class {
        class: Class::Set("!-/:-~！-／：-～‘-‟　-。"),
        ws_prefix: true,
        plus: true,
    },
    Step::TrailingSpace,
    CJK,
    Step::NumberRun,
];

/// Cut `text` into words with `steps`.
pub(crate) fn split(text: &str, steps: &[Step]) -> Vec<String> {
    let cpts: Vec<char> = text.chars().collect();
    let mut lens = vec![cpts.len()];
    for &step in steps {
        let mut out = Vec::with_capacity(lens.len());
        let mut start = 0;
        for &len in &lens {
            let piece = cpts.get(start..start + len).unwrap_or(&[]);
            match step {
                Step::Gpt2 => gpt2(piece, &mut out),
                Step::Llama3 { digits3, marks } => llama3(piece, digits3, marks, &mut out),
                Step::PunctRun { backtick } => {
                    let cls = |c: char| {
                        let f = collapsed(c);
                        f.punct()
                            || matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                            || (backtick && c == '`')
                    };
                    runs(piece, cls, false, &mut out)
                }
                Step::NumberRun => runs(piece, |c| collapsed(c).number(), false, &mut out),
                Step::Number => runs(piece, |c| collapsed(c).number(), true, &mut out),
                Step::AsciiDigits3 => digits3(piece, &mut out),
                Step::Newlines => newlines(piece, &mut out),
                Step::Class {
                    class,
                    ws_prefix,
                    plus,
                } => class_matches(piece, class, ws_prefix, plus, &mut out),
                Step::TrailingSpace => {
                    let run = piece.iter().rev().take_while(|&&c| regex_space(c)).count();
                    out.extend([piece.len() - run, run].into_iter().filter(|&n| n > 0));
                }
            }
            start += len;
        }
        lens = out;
    }
    let mut words = Vec::with_capacity(lens.len());
    let mut start = 0;
    for len in lens {
        words.push(cpts.get(start..start + len).unwrap_or(&[]).iter().collect());
        start += len;
    }
    words
}

/// The classes `std::regex` sees on llama.cpp's collapsed text: non-ASCII
/// whitespace stands as `\v`, so it is in no `\p{..}` class.
fn collapsed(c: char) -> Flags {
    let f = Flags::of(c);
    if (c as u32) >= 128 && f.ws {
        Flags { cat: 0, ws: true }
    } else {
        f
    }
}

/// Matches of `[cls]+` (or single `cls` characters when `single`), with the
/// text between matches as pieces of its own.
fn runs(piece: &[char], cls: impl Fn(char) -> bool, single: bool, out: &mut Vec<usize>) {
    let mut gap = 0;
    let mut i = 0;
    while i < piece.len() {
        if cls(piece[i]) {
            if gap > 0 {
                out.push(gap);
                gap = 0;
            }
            let mut j = i + 1;
            if !single {
                while j < piece.len() && cls(piece[j]) {
                    j += 1;
                }
            }
            out.push(j - i);
            i = j;
        } else {
            gap += 1;
            i += 1;
        }
    }
    if gap > 0 {
        out.push(gap);
    }
}

/// Matches of `\s?C+` / `C+` / `C`, with the text between as pieces.
fn class_matches(piece: &[char], class: Class, ws_prefix: bool, plus: bool, out: &mut Vec<usize>) {
    let has = |i: usize| piece.get(i).is_some_and(|&c| class.has(c));
    let mut gap = 0;
    let mut i = 0;
    while i < piece.len() {
        let start = if has(i) {
            Some(i + 1)
        } else if ws_prefix && regex_space(piece[i]) && has(i + 1) {
            Some(i + 2)
        } else {
            None
        };
        let Some(mut j) = start else {
            gap += 1;
            i += 1;
            continue;
        };
        if plus {
            while has(j) {
                j += 1;
            }
        }
        if gap > 0 {
            out.push(gap);
            gap = 0;
        }
        out.push(j - i);
        i = j;
    }
    if gap > 0 {
        out.push(gap);
    }
}

/// Runs of newlines and runs of anything else.
fn newlines(piece: &[char], out: &mut Vec<usize>) {
    let mut i = 0;
    while i < piece.len() {
        let nl = piece[i] == '\n';
        let start = i;
        while i < piece.len() && (piece[i] == '\n') == nl {
            i += 1;
        }
        out.push(i - start);
    }
}

/// Matches of `[0-9][0-9][0-9]`, with the text between as pieces.
fn digits3(piece: &[char], out: &mut Vec<usize>) {
    let d = |i: usize| piece.get(i).is_some_and(|c| c.is_ascii_digit());
    let mut gap = 0;
    let mut i = 0;
    while i < piece.len() {
        if d(i) && d(i + 1) && d(i + 2) {
            if gap > 0 {
                out.push(gap);
                gap = 0;
            }
            out.push(3);
            i += 3;
        } else {
            gap += 1;
            i += 1;
        }
    }
    if gap > 0 {
        out.push(gap);
    }
}

/// Cursor over one piece: characters and flags, blank past either end.
struct Cur<'a> {
    p: &'a [char],
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Cur<'_> {
    fn cpt(&self, i: usize) -> Option<char> {
        self.p.get(i).copied()
    }
    fn flags(&self, i: usize) -> Flags {
        self.p.get(i).map(|&c| Flags::of(c)).unwrap_or_default()
    }
    /// Cut at `end`; the length of the piece cut.
    fn add(&mut self, end: usize) -> usize {
        let len = end.saturating_sub(self.prev_end);
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
    /// `'s|'t|'re|'ve|'m|'ll|'d` at `pos` (ASCII case-folded when `fold`):
    /// the length matched.
    fn contraction(&self, pos: usize, fold: bool) -> usize {
        if self.cpt(pos) != Some('\'') {
            return 0;
        }
        let low = |c: Option<char>| c.map(|c| if fold { c.to_ascii_lowercase() } else { c });
        let (a, b) = (low(self.cpt(pos + 1)), low(self.cpt(pos + 2)));
        match (a, b) {
            (Some('s' | 't' | 'm' | 'd'), _) => 2,
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
            _ => 0,
        }
    }
    /// Whitespace run at `pos`: its length, and the end of its last `\r`/`\n`.
    fn spaces(&self, pos: usize) -> (usize, usize) {
        let (mut n, mut last_nl) = (0, 0);
        while self.flags(pos + n).ws {
            if matches!(self.cpt(pos + n), Some('\r' | '\n')) {
                last_nl = pos + n + 1;
            }
            n += 1;
        }
        (n, last_nl)
    }
}

fn gpt2(piece: &[char], out: &mut Vec<usize>) {
    let mut c = Cur {
        p: piece,
        out,
        prev_end: 0,
    };
    let end = piece.len();
    let mut pos = 0;
    while pos < end {
        let cpt = c.cpt(pos);
        let flags = c.flags(pos);
        let n = c.contraction(pos, false);
        if n > 0 {
            pos += c.add(pos + n);
            continue;
        }
        let sp = cpt == Some(' ');
        let mut f2 = if sp { c.flags(pos + 1) } else { flags };
        let other = |f: Flags| !(f.ws || f.letter() || f.number()) && f.any();
        let class: Option<fn(Flags) -> bool> = if f2.letter() {
            Some(Flags::letter)
        } else if f2.number() {
            Some(Flags::number)
        } else if other(f2) {
            Some(other)
        } else {
            None
        };
        if let Some(class) = class {
            pos += usize::from(sp);
            while class(f2) {
                pos += 1;
                f2 = c.flags(pos);
            }
            c.add(pos);
            continue;
        }
        let (nws, _) = c.spaces(pos);
        if nws > 1 && c.cpt(pos + nws).is_some() {
            pos += nws - 1;
            c.add(pos);
            continue;
        }
        if nws > 0 {
            pos += nws;
            c.add(pos);
            continue;
        }
        pos += 1;
        c.add(pos);
    }
}

fn llama3(piece: &[char], digits3: bool, marks: bool, out: &mut Vec<usize>) {
    let mut c = Cur {
        p: piece,
        out,
        prev_end: 0,
    };
    let end = piece.len();
    let is_l = |f: Flags| f.letter() || (marks && f.mark());
    let mut pos = 0;
    while pos < end {
        let cpt = c.cpt(pos);
        let flags = c.flags(pos);
        let n = c.contraction(pos, true);
        if n > 0 {
            pos += c.add(pos + n);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(matches!(cpt, Some('\r' | '\n')) || flags.number())
            && (is_l(flags) || is_l(c.flags(pos + 1)))
        {
            pos += 1;
            while is_l(c.flags(pos)) {
                pos += 1;
            }
            c.add(pos);
            continue;
        }
        // \p{N}{1,3} or \p{N}
        if flags.number() {
            if digits3 {
                let mut ini = pos;
                while c.flags(pos).number() {
                    pos += 1;
                    if pos - ini >= 3 {
                        c.add(pos);
                        ini = pos;
                    }
                }
            } else {
                pos += 1;
            }
            c.add(pos);
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (the first test reads the flags at pos)
        let mut f2 = if cpt == Some(' ') {
            c.flags(pos + 1)
        } else {
            flags
        };
        let other = |f: Flags| !(f.ws || f.letter() || f.number() || (marks && f.mark()));
        if other(f2) && flags.any() {
            pos += usize::from(cpt == Some(' '));
            while other(f2) && f2.any() {
                pos += 1;
                f2 = c.flags(pos);
            }
            while matches!(c.cpt(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            c.add(pos);
            continue;
        }
        let (nws, last_nl) = c.spaces(pos);
        if last_nl > 0 {
            pos = last_nl;
            c.add(pos);
            continue;
        }
        if nws > 1 && c.cpt(pos + nws).is_some() {
            pos += nws - 1;
            c.add(pos);
            continue;
        }
        if nws > 0 {
            pos += nws;
            c.add(pos);
            continue;
        }
        pos += 1;
        c.add(pos);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn words(text: &str, pre: &str) -> Vec<String> {
        split(text, steps(pre).unwrap_or(&[]))
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words("Hello world's  x\n", "gpt-2"),
            ["Hello", " world", "'s", " ", " x", "\n"]
        );
    }

    #[test]
    fn llama3_digits() {
        assert_eq!(words("1234567", "llama-bpe"), ["123", "456", "7"]);
        assert_eq!(words("12", "qwen2"), ["1", "2"]);
        assert_eq!(words("a\n\n b", "llama3"), ["a", "\n\n", " b"]);
    }

    #[test]
    fn default_steps() {
        assert_eq!(words("a!!12345", "default"), ["a", "!!", "123", "45"]);
    }
}
