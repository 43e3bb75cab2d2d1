//! Reading a vocabulary from GGUF metadata, as llama.cpp's
//! `llama_vocab::impl::load`: tokens, scores, types, merges, special ids and
//! flags, then the fix-ups it makes by token text (end-of-generation set,
//! control-looking tokens, per-model strip attributes).

use std::collections::{HashMap, HashSet};

use tessera::{Error, Result};
use tessera_gguf::{GgufFile, Value};

use super::index::TokenIndex;
use super::{Bpe, Kind, Token, TokenAttr, Vocab, pretok, unicode};

const TOKENS: &str = "tokenizer.ggml.tokens";
const SCORES: &str = "tokenizer.ggml.scores";
const TYPES: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";

/// A key that may be absent; present with another type is an error.
fn opt<'a, T: tessera_gguf::FromValue<'a>>(f: &'a GgufFile, key: &str) -> Result<Option<T>> {
    match f.value(key) {
        None => Ok(None),
        Some(_) => f.get::<T>(key).map(Some),
    }
}

/// An optional token id: any integer type; out of `0..n` it is an error
/// when `strict`, else ignored (as llama.cpp does).
fn opt_id(f: &GgufFile, key: &str, n: usize, strict: bool) -> Result<Option<u32>> {
    let Some(v) = f.value(key) else {
        return Ok(None);
    };
    let x: Option<i128> = match *v {
        Value::U8(x) => Some(x.into()),
        Value::I8(x) => Some(x.into()),
        Value::U16(x) => Some(x.into()),
        Value::I16(x) => Some(x.into()),
        Value::U32(x) => Some(x.into()),
        Value::I32(x) => Some(x.into()),
        Value::U64(x) => Some(x.into()),
        Value::I64(x) => Some(x.into()),
        _ => None,
    };
    let Some(x) = x else {
        return Err(Error::Malformed(format!(
            "metadata key '{key}': expected an integer token id, found {}",
            v.type_description()
        )));
    };
    match u32::try_from(x) {
        Ok(id) if (id as usize) < n => Ok(Some(id)),
        _ if !strict => Ok(None),
        _ => Err(Error::Malformed(format!(
            "metadata key '{key}': token id {x} is out of range (the vocabulary has {n} tokens)"
        ))),
    }
}

fn attr_of_type(t: i32) -> TokenAttr {
    match t {
        1 => TokenAttr::NORMAL,
        2 => TokenAttr::UNKNOWN,
        3 => TokenAttr::CONTROL,
        4 => TokenAttr::USER_DEFINED,
        5 => TokenAttr::UNUSED,
        6 => TokenAttr::BYTE,
        _ => TokenAttr::UNDEFINED,
    }
}

const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const FIM_PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP: &[&str] = &["<|file_sep|>", "<fim-sep>", "<fim_sep>", "<SEP>"];

impl Vocab {
    /// Read the vocabulary of a GGUF file (`tokenizer.ggml.*`): errors name
    /// the key that is missing, of the wrong type, of the wrong length or out
    /// of range. BOS, EOS, unknown, end-of-turn and end-of-message ids out of
    /// range are errors; the others (padding, separator, mask, FIM) are
    /// dropped, as llama.cpp does (some converted files have them wrong).
    pub fn from_gguf(f: &GgufFile) -> Result<Vocab> {
        let model: &str = f.get("tokenizer.ggml.model")?;
        let pre: &str = opt(f, "tokenizer.ggml.pre")?.unwrap_or("");
        let texts: Vec<&str> = f.get(TOKENS)?;
        let n = texts.len();
        if n == 0 || i32::try_from(n).is_err() {
            return Err(Error::Malformed(format!(
                "metadata key '{TOKENS}': {n} tokens"
            )));
        }
        let scores: Option<Vec<f32>> = match f.value(SCORES) {
            None => None,
            Some(_) => Some(match f.get::<Vec<f32>>(SCORES) {
                Ok(s) => s,
                Err(_) => f
                    .get::<Vec<i32>>(SCORES)
                    .map_err(|_| {
                        Error::Malformed(format!(
                            "metadata key '{SCORES}': expected array<f32> or array<i32>, found {}",
                            f.value(SCORES)
                                .map(Value::type_description)
                                .unwrap_or_default()
                        ))
                    })?
                    .into_iter()
                    .map(|x| x as f32)
                    .collect(),
            }),
        };
        let types: Option<Vec<i32>> = opt(f, TYPES)?;
        for (key, len) in [
            (SCORES, scores.as_ref().map(Vec::len)),
            (TYPES, types.as_ref().map(Vec::len)),
        ] {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(Error::Malformed(format!(
                    "metadata key '{key}': {len} entries for {n} tokens in '{TOKENS}'"
                )));
            }
        }

        // Gemma 4 files name their own model; llama.cpp then forces the pre-tokenizer
        let pre = if model == "gemma4" { "gemma4" } else { pre };
        let (kind, mut v) = match model {
            "llama" => (Kind::Spm, Defaults::spm()),
            "bert" => (Kind::Wpm, Defaults::wpm()),
            "gpt2" | "gemma4" => {
                let steps = pretok::steps(pre).ok_or_else(|| Error::Unsupported {
                    device: "tessera-llm tokenizer".into(),
                    what: format!("pre-tokenizer 'tokenizer.ggml.pre' = '{pre}'"),
                })?;
                let gemma4 = matches!(pre, "gemma4" | "granite-embed-multi-311m");
                let bpe = Bpe {
                    steps,
                    raw: gemma4 || pre == "sarvam-moe",
                    newline_words: gemma4,
                };
                let mut d = Defaults::bpe(pre);
                if model == "gemma4" {
                    (d.bos, d.eos) = (None, None);
                }
                (Kind::Bpe(bpe), d)
            }
            other => {
                return Err(Error::Unsupported {
                    device: "tessera-llm tokenizer".into(),
                    what: format!(
                        "tokenizer 'tokenizer.ggml.model' = '{other}' (supported: llama, gpt2, gemma4, bert)"
                    ),
                });
            }
        };
        if let Some(b) = opt::<bool>(f, "tokenizer.ggml.add_space_prefix")? {
            v.add_space_prefix = b;
        }

        let mut tokens = Vec::with_capacity(n);
        for (i, &t) in texts.iter().enumerate() {
            let text = if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_string()
            };
            let score = scores
                .as_ref()
                .and_then(|s| s.get(i))
                .copied()
                .unwrap_or(0.0);
            let attr = match &types {
                Some(ty) => attr_of_type(ty.get(i).copied().unwrap_or(0)),
                None => TokenAttr::NORMAL,
            };
            // NaN would leave the merge order undefined
            let score = if score.is_nan() {
                f32::NEG_INFINITY
            } else {
                score
            };
            tokens.push(Token { text, score, attr });
        }
        let token_to_id = TokenIndex::new(&tokens).map_err(|i| {
            Error::Malformed(format!(
                "metadata key '{TOKENS}': token {i} {:?} appears twice",
                tokens[i].text
            ))
        })?;
        let id_of = |tokens: &[Token], t: &str| token_to_id.get(tokens, t);

        let mut bpe_ranks: HashMap<String, HashMap<String, u32>> = HashMap::new();
        if let Kind::Bpe(_) = kind {
            let merges: Vec<&str> = f.get(MERGES)?;
            for (i, m) in merges.iter().enumerate() {
                // the first space at byte 1 or later (a space token may lead)
                let space = m.bytes().enumerate().skip(1).find(|&(_, c)| c == b' ');
                let (a, b) = match space {
                    Some((p, _)) => (m.get(..p).unwrap_or(""), m.get(p + 1..).unwrap_or("")),
                    None => ("", ""),
                };
                bpe_ranks
                    .entry(a.to_string())
                    .or_default()
                    .entry(b.to_string())
                    .or_insert(i as u32);
            }
        }

        // special ids: defaults out of range are dropped, keys must be in range
        let fix = |d: Option<u32>| d.filter(|&id| (id as usize) < n);
        let key = |k: &str| format!("tokenizer.ggml.{k}");
        let bos = opt_id(f, &key("bos_token_id"), n, true)?.or(fix(v.bos));
        let eos = opt_id(f, &key("eos_token_id"), n, true)?.or(fix(v.eos));
        let unk = opt_id(f, &key("unknown_token_id"), n, true)?.or(fix(v.unk));
        let mut eot = opt_id(f, &key("eot_token_id"), n, true)?;
        let mut eom = opt_id(f, &key("eom_token_id"), n, true)?;
        let sep = opt_id(f, &key("seperator_token_id"), n, false)?.or(fix(v.sep));
        for k in ["padding_token_id", "mask_token_id", "cls_token_id"] {
            opt_id(f, &key(k), n, false)?;
        }
        let mut fim: [Option<u32>; 6] = [None; 6];
        for (slot, names) in fim.iter_mut().zip([
            &["fim_pre_token_id", "prefix_token_id"][..],
            &["fim_suf_token_id", "suffix_token_id"],
            &["fim_mid_token_id", "middle_token_id"],
            &["fim_pad_token_id"],
            &["fim_rep_token_id"],
            &["fim_sep_token_id"],
        ]) {
            for name in names {
                if let Some(id) = opt_id(f, &key(name), n, false)? {
                    *slot = Some(id);
                }
            }
        }
        if let Some(b) = opt::<bool>(f, "tokenizer.ggml.add_bos_token")? {
            v.add_bos = b;
        }
        if let Some(b) = opt::<bool>(f, "tokenizer.ggml.add_eos_token")? {
            v.add_eos = b;
        }
        let lowercase = opt::<bool>(f, "tokenizer.ggml.normalizer.lowercase")?.unwrap_or(true);
        let strip_accents =
            opt::<bool>(f, "tokenizer.ggml.normalizer.strip_accents")?.unwrap_or(lowercase);
        if matches!(pre, "gemma4" | "granite-embed-multi-311m") {
            v.add_bos = true; // llama.cpp's Gemma 4 workaround
        }

        // auto-detected by text (lowest id first); they become control tokens
        let control = TokenAttr::CONTROL;
        let find = |slot: &mut Option<u32>, names: &[&str], tokens: &mut [Token]| {
            if slot.is_some() {
                return;
            }
            if let Some(id) = names.iter().filter_map(|t| id_of(tokens, t)).min() {
                *slot = Some(id);
                let a = &mut tokens[id as usize].attr;
                *a = *a | control;
            }
        };
        find(&mut eot, EOT_TEXTS, &mut tokens);
        find(&mut eom, &["<|eom_id|>"], &mut tokens);
        for (slot, names) in fim
            .iter_mut()
            .zip([FIM_PRE, FIM_SUF, FIM_MID, FIM_PAD, FIM_REP, FIM_SEP])
        {
            find(slot, names, &mut tokens);
        }
        for t in tokens.iter_mut() {
            if t.attr.any(control) && t.text.contains("unused") {
                t.attr = t.attr | TokenAttr::UNUSED;
            }
        }
        let mut eog: HashSet<u32> = fim[3..].iter().flatten().copied().collect();
        for name in EOG_TEXTS {
            if let Some(id) = id_of(&tokens, name) {
                eog.insert(id);
                let a = &mut tokens[id as usize].attr;
                *a = *a | control;
            }
        }
        for name in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = id_of(&tokens, name) {
                tokens[id as usize].attr = TokenAttr::USER_DEFINED;
            }
        }
        eog.extend([eos, eot, eom].into_iter().flatten());
        let has = |eog: &HashSet<u32>, tokens: &[Token], t: &str| {
            id_of(tokens, t).is_some_and(|id| eog.contains(&id))
        };
        if let Some(end) = id_of(&tokens, "<|end|>").filter(|id| eog.contains(id))
            && has(&eog, &tokens, "<|call|>") | has(&eog, &tokens, "<|calls|>")
            && (has(&eog, &tokens, "<|return|>") || has(&eog, &tokens, "<|flush|>"))
        {
            eog.remove(&end);
            tokens[end as usize].attr = TokenAttr::USER_DEFINED;
        }
        if let Some(s) = id_of(&tokens, "</s>").filter(|id| eog.contains(id))
            && (has(&eog, &tokens, "<|tool_response>") || has(&eog, &tokens, "<|plamo:eos|>"))
        {
            eog.remove(&s);
            tokens[s as usize].attr = TokenAttr::NORMAL;
        }

        let mut special: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                tokens[id as usize]
                    .attr
                    .any(TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN)
            })
            .collect();
        special.sort_by_key(|&id| std::cmp::Reverse(tokens[id as usize].text.len()));

        strip_attrs(f, pre, &special, &token_to_id, &mut tokens)?;

        let max_token_len = tokens.iter().map(|t| t.text.len()).max().unwrap_or(0);
        Ok(Vocab {
            kind,
            tokens,
            token_to_id,
            bpe_ranks,
            byte_chars: unicode::byte_chars(),
            bos: if v.no_bos {
                opt_id(f, &key("bos_token_id"), n, true)?
            } else {
                bos
            },
            eos,
            unk,
            add_bos: v.add_bos,
            add_eos: v.add_eos,
            add_space_prefix: v.add_space_prefix,
            ignore_merges: v.ignore_merges,
            clean_spaces: v.clean_spaces,
            sep,
            max_token_len,
            wpm_lowercase: lowercase,
            wpm_strip_accents: strip_accents,
            eog,
            special,
        })
    }
}

/// llama.cpp's per-model strip attributes (by `general.name` and the
/// pre-tokenizer name).
fn strip_attrs(
    f: &GgufFile,
    pre: &str,
    special: &[u32],
    ids: &TokenIndex,
    tokens: &mut [Token],
) -> Result<()> {
    let name = opt::<&str>(f, "general.name")?
        .unwrap_or("")
        .to_ascii_lowercase();
    let arch = opt::<&str>(f, "general.architecture")?.unwrap_or("");
    let set = |tokens: &mut [Token], text: &str, attr: TokenAttr, on: bool| {
        if let Some(id) = ids.get(tokens, text) {
            let a = &mut tokens[id as usize].attr;
            a.0 = if on { a.0 | attr.0 } else { a.0 & !attr.0 };
        }
    };
    if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
        .iter()
        .any(|s| pre.contains(s))
        || ["nomic-bert-moe", "jina-bert-v3"]
            .iter()
            .any(|s| arch.contains(s))
    {
        set(tokens, "<mask>", TokenAttr::LSTRIP, true);
    } else if name.contains("phi-3") || name.contains("phi3") {
        for &id in special {
            let a = &mut tokens[id as usize].attr;
            *a = *a | TokenAttr::RSTRIP;
        }
        set(tokens, "</s>", TokenAttr::RSTRIP, true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set(tokens, t, TokenAttr::RSTRIP, false);
        }
    } else if name.contains("modern-bert") {
        set(tokens, "[MASK]", TokenAttr::LSTRIP, true);
    }
    Ok(())
}

/// Per-model defaults before the file's keys.
struct Defaults {
    bos: Option<u32>,
    sep: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    ignore_merges: bool,
    /// Detokenization drops spaces before punctuation and contractions.
    clean_spaces: bool,
    /// BOS only from the key (ChatGLM, GLM-4).
    no_bos: bool,
}

impl Defaults {
    fn spm() -> Defaults {
        Defaults {
            bos: Some(1),
            sep: None,
            eos: Some(2),
            unk: Some(0),
            add_bos: true,
            add_eos: false,
            add_space_prefix: true,
            ignore_merges: false,
            clean_spaces: false,
            no_bos: false,
        }
    }
    fn wpm() -> Defaults {
        Defaults {
            bos: Some(101),
            sep: Some(102),
            eos: None,
            unk: Some(100),
            add_bos: true,
            add_eos: false,
            add_space_prefix: false,
            ignore_merges: false,
            clean_spaces: true,
            no_bos: false,
        }
    }
    fn bpe(pre: &str) -> Defaults {
        let llama3 = matches!(
            pre,
            "llama3"
                | "llama-v3"
                | "llama-bpe"
                | "falcon3"
                | "falcon-h1"
                | "pixtral"
                | "midm-2.0"
                | "lfm2"
                | "jina-v5-nano"
        );
        Defaults {
            bos: Some(11),
            sep: None,
            eos: Some(11),
            unk: None,
            add_bos: llama3,
            add_eos: false,
            add_space_prefix: false,
            ignore_merges: llama3 || matches!(pre, "glm4" | "glm5"),
            clean_spaces: !matches!(
                pre,
                "command-r"
                    | "qwen2"
                    | "deepseek-r1-qwen"
                    | "kormo"
                    | "f2llmv2"
                    | "qwen35"
                    | "smollm"
                    | "trillion"
                    | "granite-docling"
                    | "hunyuan"
                    | "grok-2"
                    | "solar-open"
                    | "sarvam-moe"
                    | "deepseek-llm"
                    | "deepseek-coder"
            ),
            no_bos: matches!(pre, "chatglm-bpe" | "glm4" | "glm5"),
        }
    }
}
