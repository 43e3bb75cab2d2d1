//! `tessera run`: continue a prompt with a GGUF model (the default one when
//! none is given). Output contract, as llama.cpp's tools: stdout gets the
//! prompt and then the generated text, exactly those bytes, streamed;
//! statistics, progress and logs go to stderr.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use tessera::{DType, Result};
use tessera_llm::tokenizer::{Detokenizer, Vocab};
use tessera_llm::{Sampler, Session, SessionOptions, generate};

use crate::llm::{self, ModelArgs, SamplingArgs};

/// Arguments of `tessera run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(short = 'p', long, default_value = "The capital of France is")]
    pub prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 64)]
    pub n_predict: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Context size (default: the prompt and the generation, rounded up to 256).
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

/// Run `tessera run`.
pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let (file, mut devs) = llm::open_model(&args.model)?;
    let vocab = Vocab::from_gguf(&file)?;
    let prompt = vocab.tokenize(&args.prompt, true, true);
    let n_ctx = match args.ctx {
        Some(c) => c,
        None => (prompt.len() + args.n_predict).next_multiple_of(256),
    };
    let options = SessionOptions {
        n_ctx,
        kv_type: DType::from_name(&args.kv_type)?,
        swa_full: args.swa_full,
        ..SessionOptions::default()
    };
    let (map, plan) = llm::place(&args.model, &file, &mut devs, &options)?;
    let model = llm::load_model(file, &map, &args.model)?;
    let mut session = Session::new(model.clone(), devs.streams.clone(), options)?;
    if let Some(plan) = &plan {
        llm::report_fit(plan, &mut session)?;
    }
    let mut sampler = Sampler::new(args.sampling.options())?;
    let mut out = std::io::stdout().lock();
    out.write_all(args.prompt.as_bytes())?;
    out.flush()?;
    let mut detok = Detokenizer::new(&vocab, false);
    let stats = generate(
        &mut session,
        &mut sampler,
        &prompt,
        args.n_predict,
        &|t| vocab.is_eog(t),
        &mut |t| {
            let text = detok.push(t);
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(true)
        },
    )?;
    out.write_all(detok.finish().as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    drop(out);

    let p = model.params();
    eprintln!();
    if stats.context_full {
        eprintln!(
            "stopped after {} tokens: the context of {n_ctx} positions is full (-c/--ctx for a larger one)",
            stats.generated
        );
    }
    eprintln!(
        "model: {} ({}, {} layers), context {} (KV cache {} MiB, {})",
        args.model
            .model
            .as_ref()
            .map_or("gemma-3-270m-q4_k_m.gguf (default)".to_string(), |m| m
                .display()
                .to_string()),
        p.arch.name(),
        p.n_layer,
        n_ctx,
        session.cache().bytes() >> 20,
        options.kv_type
    );
    let names: Vec<&str> = devs.devices.iter().map(|d| d.name()).collect();
    let gpu_layers = devs
        .devices
        .first()
        .map_or(0, |d| map.layers_in(d.buffer_type().name()));
    eprint!("devices: {}", names.join(" + "));
    if names.len() > 1 {
        eprint!(" ({gpu_layers} of {} layers on {})", p.n_layer, names[0]);
    }
    eprintln!();
    for (buft, bytes) in model.weights().bytes_by_buffer_type() {
        eprintln!("weights: {} MiB in {buft}", bytes >> 20);
    }
    for (i, d) in devs.devices.iter().enumerate() {
        if let Ok(b) = session.scheduler().buffer_size(i) {
            eprintln!("compute buffer: {} MiB on {}", b >> 20, d.name());
        }
    }
    eprintln!(
        "prompt: {} tokens in {:.3} s ({:.1} tokens/s)",
        stats.prompt_tokens,
        stats.prompt_time.as_secs_f64(),
        stats.prompt_speed()
    );
    eprintln!(
        "generation: {} tokens in {:.3} s ({:.1} tokens/s)",
        stats.generated,
        stats.generation_time.as_secs_f64(),
        stats.generation_speed()
    );
    if let Some(ms) = devs
        .streams
        .first()
        .and_then(|s| s.as_any().downcast_ref::<tessera_meta::MetaStream>())
    {
        let m = ms.stats();
        let evals = m.computes.max(1);
        eprintln!(
            "tensor split: {} all-reduces moving {} KiB, {} all-gathers moving {} KiB ({} evaluations, {} lowered)",
            m.reduces,
            m.reduce_bytes >> 10,
            m.gathers,
            m.gather_bytes >> 10,
            m.computes,
            m.lowerings
        );
        eprintln!(
            "tensor split per evaluation: {:.0} all-reduces, {:.1} KiB moved",
            m.reduces as f64 / evals as f64,
            (m.reduce_bytes + m.gather_bytes) as f64 / 1024.0 / evals as f64
        );
    }
    if let Some(rss) = llm::peak_rss() {
        eprintln!("peak memory: {} MiB resident", rss >> 20);
    }
    Ok(ExitCode::SUCCESS)
}
