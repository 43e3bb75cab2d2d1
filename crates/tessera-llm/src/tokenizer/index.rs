//! Text -> token id lookups without a second copy of the vocabulary.
//!
//! A `HashMap<String, u32>` of a 262,144-token vocabulary (Gemma 3) holds
//! every text twice and costs about 23 MiB; this table holds only ids (4
//! bytes per slot, at most half full: 2 MiB there) and compares against the
//! texts in the token list itself. Open addressing with linear probing;
//! std's randomly keyed hasher, so a hostile vocabulary cannot make loading
//! quadratic.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::Token;

/// Slot value of an empty slot.
const EMPTY: u32 = u32::MAX;

/// The ids of a token list, by text.
#[derive(Clone, Debug)]
pub(crate) struct TokenIndex {
    slots: Vec<u32>,
    hasher: RandomState,
}

impl TokenIndex {
    /// An index of `tokens`; `Err(i)` names the first token whose text an
    /// earlier one has (ids are `u32`: callers check the count).
    pub(crate) fn new(tokens: &[Token]) -> Result<TokenIndex, usize> {
        let size = tokens.len().max(1).saturating_mul(2).next_power_of_two();
        let mut index = TokenIndex {
            slots: vec![EMPTY; size],
            hasher: RandomState::new(),
        };
        for (i, t) in tokens.iter().enumerate() {
            let mut s = index.home(&t.text);
            loop {
                match index.slots[s] {
                    EMPTY => {
                        index.slots[s] = i as u32;
                        break;
                    }
                    id if tokens[id as usize].text == t.text => return Err(i),
                    _ => s = (s + 1) & (size - 1),
                }
            }
        }
        Ok(index)
    }

    /// The id of the token of `tokens` (the list the index was built from,
    /// texts unchanged) whose text is `text`.
    pub(crate) fn get(&self, tokens: &[Token], text: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut s = self.home(text);
        loop {
            let id = *self.slots.get(s)?;
            if id == EMPTY {
                return None;
            }
            if tokens.get(id as usize)?.text == text {
                return Some(id);
            }
            s = (s + 1) & mask;
        }
    }

    /// The first slot to look at for `text`.
    fn home(&self, text: &str) -> usize {
        (self.hasher.hash_one(text) as usize) & (self.slots.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::TokenAttr;

    fn toks(texts: &[&str]) -> Vec<Token> {
        texts
            .iter()
            .map(|t| Token {
                text: t.to_string(),
                score: 0.0,
                attr: TokenAttr::NORMAL,
            })
            .collect()
    }

    #[test]
    fn finds_every_token_and_nothing_else() {
        let texts: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let tokens = toks(&refs);
        let index = TokenIndex::new(&tokens).unwrap();
        for (i, t) in refs.iter().enumerate() {
            assert_eq!(index.get(&tokens, t), Some(i as u32));
        }
        for t in ["", "t5000", "t-1", "x"] {
            assert_eq!(index.get(&tokens, t), None);
        }
    }

    #[test]
    fn duplicates_are_named() {
        assert_eq!(TokenIndex::new(&toks(&["a", "b", "a"])).err(), Some(2));
        assert!(TokenIndex::new(&toks(&[])).is_ok());
    }
}
