//! `tessera chat`: talk to an instruct model through its chat template
//! (`tokenizer.chat_template`, or `--chat-template FILE`). Each `-p` is one
//! user turn (scripts); without `-p` the turns are read from stdin, a line
//! each. Replies go to stdout, a line after each; statistics to stderr.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use tessera::{DType, Error, Result};
use tessera_llm::tokenizer::{Detokenizer, Vocab};
use tessera_llm::{
    ChatTemplate, Conversation, GenerationStats, Message, Sampler, Session, SessionOptions,
    generate,
};

use crate::llm::{self, ModelArgs, SamplingArgs};

/// Arguments of `tessera chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A user message (repeat for several turns); default: read turns from stdin.
    #[arg(short = 'p', long)]
    pub prompt: Vec<String>,
    /// A system message first.
    #[arg(long)]
    pub system: Option<String>,
    /// A Jinja chat template file to use instead of the model's.
    #[arg(long)]
    pub chat_template: Option<std::path::PathBuf>,
    /// Tokens per reply at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n_predict: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Context size (default: 4096, or the model's when smaller).
    #[arg(short = 'c', long)]
    pub ctx: Option<usize>,
    /// KV cache type: f16, f32 or q8_0.
    #[arg(long, default_value = "f16")]
    pub kv_type: String,
    /// Full-size caches for sliding-window layers (default: rings of the
    /// window plus a batch, as llama.cpp; this is its `--swa-full`).
    #[arg(long)]
    pub swa_full: bool,
}

/// Run `tessera chat`.
pub fn run(args: &ChatArgs) -> Result<ExitCode> {
    let (file, mut devs) = llm::open_model(&args.model)?;
    let vocab = Vocab::from_gguf(&file)?;
    let n_ctx = args.ctx.unwrap_or_else(|| {
        let train = tessera_llm::Params::from_gguf(&file).map_or(4096, |p| p.n_ctx_train);
        4096.min(train.max(256))
    });
    let options = SessionOptions {
        n_ctx,
        kv_type: DType::from_name(&args.kv_type)?,
        swa_full: args.swa_full,
        ..SessionOptions::default()
    };
    let (map, plan) = llm::place(&args.model, &file, &mut devs, &options)?;
    let model = llm::load_model(file, &map, &args.model)?;
    let template = match &args.chat_template {
        Some(path) => {
            let source = std::fs::read_to_string(path)
                .map_err(|e| Error::NotFound(format!("chat template {}: {e}", path.display())))?;
            let text = |id: Option<u32>| {
                id.and_then(|i| vocab.token_text(i))
                    .unwrap_or_default()
                    .to_string()
            };
            ChatTemplate::new(&source, &text(vocab.bos()), &text(vocab.eos()))?
        }
        None => ChatTemplate::from_gguf(model.file())?.ok_or_else(|| {
            Error::NotFound(
                "the model has no chat template (tokenizer.chat_template): give one with \
                 --chat-template FILE, or continue text with `tessera run`"
                    .into(),
            )
        })?,
    };
    let mut session = Session::new(model.clone(), devs.streams.clone(), options)?;
    if let Some(plan) = &plan {
        llm::report_fit(plan, &mut session)?;
    }
    let mut sampler = Sampler::new(args.sampling.options())?;
    let mut chat = Conversation::new(template);
    if let Some(system) = &args.system {
        chat.push(Message::new("system", system));
    }
    let interactive = args.prompt.is_empty();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut turns = args.prompt.iter();
    let mut total = GenerationStats::default();
    loop {
        let user = if interactive {
            if std::io::stderr().is_terminal() && std::io::stdin().is_terminal() {
                eprint!("> ");
            }
            match lines.next() {
                Some(line) => line?,
                None => break,
            }
        } else {
            match turns.next() {
                Some(p) => p.clone(),
                None => break,
            }
        };
        chat.push(Message::new("user", &user));
        let prompt = chat.next_prompt(&vocab, &mut session)?;
        let mut detok = Detokenizer::new(&vocab, false);
        let mut reply = String::new();
        let mut generated = Vec::new();
        let mut out = std::io::stdout().lock();
        let stats = generate(
            &mut session,
            &mut sampler,
            &prompt,
            args.n_predict,
            &|t| vocab.is_eog(t),
            &mut |t| {
                generated.push(t);
                let text = detok.push(t);
                reply.push_str(&text);
                out.write_all(text.as_bytes())?;
                out.flush()?;
                Ok(true)
            },
        )?;
        let tail = detok.finish();
        reply.push_str(&tail);
        out.write_all(tail.as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()?;
        chat.record_reply(&session, &prompt, &generated, &reply);
        total.prompt_tokens += stats.prompt_tokens;
        total.prompt_time += stats.prompt_time;
        total.generated += stats.generated;
        total.generation_time += stats.generation_time;
        if stats.context_full {
            eprintln!(
                "stopped: the context of {n_ctx} positions is full (-c/--ctx for a larger one)"
            );
            break;
        }
    }
    eprintln!(
        "prompt: {} tokens in {:.3} s ({:.1} tokens/s); generation: {} tokens in {:.3} s; \
         context {} of {n_ctx} positions used",
        total.prompt_tokens,
        total.prompt_time.as_secs_f64(),
        total.prompt_speed(),
        total.generated,
        total.generation_time.as_secs_f64(),
        session.n_past(),
    );
    Ok(ExitCode::SUCCESS)
}
