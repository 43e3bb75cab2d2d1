//! `tessera tokenize`: a prompt's tokens, as llama.cpp's `llama-tokenize`
//! prints them (`--ids`: `[1, 2, 3]` on one line; otherwise one token per
//! line with its piece).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tessera::Result;
use tessera_llm::fetch::{self, DEFAULT_MODEL};
use tessera_llm::tokenizer::Vocab;

use crate::llm;

/// Arguments of `tessera tokenize`.
#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// GGUF model file (only its vocabulary is read); default: the default model.
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// The text.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Print the ids only, as `[1, 2, 3]`.
    #[arg(long)]
    pub ids: bool,
    /// Do not add BOS/EOS.
    #[arg(long)]
    pub no_bos: bool,
    /// Do not parse special tokens in the text.
    #[arg(long)]
    pub no_parse_special: bool,
}

/// Run `tessera tokenize`.
pub fn run(args: &TokenizeArgs) -> Result<ExitCode> {
    let path = match &args.model {
        Some(p) => p.clone(),
        None => fetch::ensure(&DEFAULT_MODEL, &mut |l| eprintln!("{l}"))?,
    };
    let file = llm::open(&path)?;
    let vocab = Vocab::from_gguf(&file)?;
    let ids = vocab.tokenize(&args.prompt, !args.no_bos, !args.no_parse_special);
    if args.ids {
        let s: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("[{}]", s.join(", "));
    } else {
        for id in ids {
            let piece = vocab.token_to_piece(id, true);
            println!("{id:>6} -> '{}'", String::from_utf8_lossy(&piece));
        }
    }
    Ok(ExitCode::SUCCESS)
}
