//! Code point classes as llama.cpp's `unicode.cpp` sees them (its category
//! table, so splits match it exactly), and GPT-2's byte-to-character map.

use super::unicode_data::{RANGES, WHITESPACE};

/// llama.cpp's category bits (`unicode_cpt_flags`).
pub(super) const UNDEFINED: u8 = 0x01;
pub(super) const NUMBER: u8 = 0x02;
pub(super) const LETTER: u8 = 0x04;
pub(super) const ACCENT_MARK: u8 = 0x10;
pub(super) const PUNCTUATION: u8 = 0x20;
pub(super) const SYMBOL: u8 = 0x40;
pub(super) const CONTROL: u8 = 0x80;

/// The classes of one code point; `Flags::default()` (all clear) stands for
/// "outside the text", as llama.cpp's splitters use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Flags {
    /// Category bits.
    pub cat: u8,
    /// Member of llama.cpp's whitespace set (`\s`).
    pub ws: bool,
}

impl Flags {
    pub fn of(c: char) -> Flags {
        let cp = c as u32;
        // the last range starting at or before cp
        let i = RANGES.partition_point(|&(start, _)| start <= cp);
        let cat = match i.checked_sub(1).and_then(|i| RANGES.get(i)) {
            Some(&(_, f)) => f,
            None => UNDEFINED,
        };
        Flags {
            cat,
            ws: WHITESPACE.binary_search(&cp).is_ok(),
        }
    }
    pub fn letter(self) -> bool {
        self.cat & LETTER != 0
    }
    pub fn number(self) -> bool {
        self.cat & NUMBER != 0
    }
    pub fn mark(self) -> bool {
        self.cat & ACCENT_MARK != 0
    }
    pub fn punct(self) -> bool {
        self.cat & PUNCTUATION != 0
    }
    pub fn symbol(self) -> bool {
        self.cat & SYMBOL != 0
    }
    pub fn control(self) -> bool {
        self.cat & CONTROL != 0
    }
    /// Any bit set (llama.cpp's `as_uint() != 0`): inside the text.
    pub fn any(self) -> bool {
        self.cat != 0 || self.ws
    }
}

/// The character GPT-2's byte-level BPE writes for byte `b`.
pub(super) fn byte_to_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    // the n-th non-printable byte maps to U+0100 + n
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The table of [`byte_to_char`] for all 256 bytes.
pub(super) fn byte_chars() -> [char; 256] {
    let mut t = ['\0'; 256];
    for (b, slot) in t.iter_mut().enumerate() {
        *slot = byte_to_char(b as u8);
    }
    t
}

/// The byte GPT-2's map writes as `c`, if any.
pub(super) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cp as u8),
        0x100..=0x143 => {
            let n = (cp - 0x100) as usize;
            (0..=255u8)
                .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                .nth(n)
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
    }

    #[test]
    fn flags() {
        assert!(Flags::of('a').letter());
        assert!(Flags::of('7').number());
        assert!(Flags::of(' ').ws);
        assert!(Flags::of('\u{3000}').ws);
        assert!(Flags::of('!').punct());
        assert_eq!(Flags::of('$').cat, 0x40); // symbol
        assert!(Flags::of('\u{301}').mark());
        assert!(Flags::of('\u{10FFFF}').any());
    }
}
