//! `tessera bench model`: prompt processing (ppN) and token generation
//! (tgN) speed of a GGUF model, as llama.cpp's `llama-bench` measures them:
//! pp evaluates N random tokens from an empty cache in batches, tg evaluates
//! N tokens one at a time from an empty cache (with `-d D`, both after D
//! tokens already in the cache, untimed: "pp512 @ d4096", as llama-bench's
//! `-d`, for long contexts); each repetition is timed,
//! mean and standard deviation of tokens/s are printed. With
//! `--llama-bench BIN`, llama-bench runs on the same file with the same
//! threads, one repetition of it after each of Tessera's (interleaved, so
//! both see the same machine state), and the ratio is printed.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Args;
use tessera::{Error, Result};
use tessera_llm::{Session, SessionOptions};

use crate::llm::{self, ModelArgs};

/// Arguments of `tessera bench model`.
#[derive(Args, Debug)]
pub struct ModelBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens (pp test; 0: skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens (tg test; 0: skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Tokens already in the cache when each test starts (its prompt,
    /// evaluated untimed first: long-context speed, as llama-bench's `-d`;
    /// `--profile` and `--profile-prompt` too).
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub depth: usize,
    /// Repetitions.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub reps: usize,
    /// llama.cpp's llama-bench binary, to measure live and interleaved.
    #[arg(long)]
    pub llama_bench: Option<PathBuf>,
    /// An argument more for llama-bench (repeatable), e.g.
    /// `--llama-bench-arg=--repack --llama-bench-arg=0` (the AVX-512 build
    /// of llama.cpp 0.3.36's tree crashes in its repacked MoE products).
    #[arg(
        long = "llama-bench-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub llama_bench_args: Vec<String>,
    /// After the tests, time every node of this many decoding steps and
    /// print where a step's time goes, op by op (CPU streams).
    #[arg(long, value_name = "TOKENS", num_args = 0..=1, default_missing_value = "32")]
    pub profile: Option<usize>,
    /// After the tests, time every node of one prompt of this many tokens
    /// and print where its time goes, op by op (CPU streams).
    #[arg(long, value_name = "TOKENS", num_args = 0..=1, default_missing_value = "512")]
    pub profile_prompt: Option<usize>,
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, var.sqrt())
}

/// Deterministic random token ids below `n_vocab`.
pub(super) fn tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % n_vocab as u64) as u32
        })
        .collect()
}

/// Empty the cache, then fill it with `depth` tokens (untimed).
pub(super) fn prefill(session: &mut Session, depth: usize, seed: u64) -> Result<()> {
    session.clear();
    if depth > 0 {
        let t = tokens(depth, session.model().n_vocab(), seed ^ 0x5eed);
        session.decode(&t)?;
    }
    Ok(())
}

fn pp(session: &mut Session, (n, depth): (usize, usize), seed: u64) -> Result<f64> {
    prefill(session, depth, seed)?;
    let t = tokens(n, session.model().n_vocab(), seed);
    let start = Instant::now();
    session.decode(&t)?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn tg(session: &mut Session, (n, depth): (usize, usize), seed: u64) -> Result<f64> {
    prefill(session, depth, seed)?;
    let t = tokens(n, session.model().n_vocab(), seed);
    let start = Instant::now();
    for &tok in &t {
        session.decode(&[tok])?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// One llama-bench repetition: tokens/s (`ngl`: layers llama.cpp offloads
/// to its GPU; 0 when Tessera runs on the CPU alone).
fn llama_bench(
    (bin, extra): (&PathBuf, &[String]),
    model: &PathBuf,
    (p, n, depth): (usize, usize, usize),
    threads: usize,
    ngl: usize,
) -> Result<f64> {
    let out = Command::new(bin)
        .args(["-m"])
        .arg(model)
        .args([
            "-p",
            &p.to_string(),
            "-n",
            &n.to_string(),
            "-r",
            "1",
            "-t",
            &threads.to_string(),
            "-ngl",
            &ngl.to_string(),
        ])
        // Only when asked: builds older than llama-bench's `-d` refuse it.
        .args(if depth > 0 {
            vec!["-d".to_string(), depth.to_string()]
        } else {
            Vec::new()
        })
        .args(["-o", "json"])
        .args(extra)
        .output()
        .map_err(|e| Error::NotFound(format!("running {}: {e}", bin.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text
        .split("\"avg_ts\":")
        .nth(1)
        .and_then(|s| s.split([',', '\n']).next())
        .and_then(|s| s.trim().parse::<f64>().ok());
    v.ok_or_else(|| {
        // A build whose repacked CPU kernels use instructions the machine
        // (or its hypervisor) does not give stops with SIGILL or SIGSEGV.
        let crashed = !out.status.success() && out.status.code().is_none();
        let hint = if crashed && !extra.iter().any(|a| a == "--repack") {
            "; if its repacked CPU kernels crash here, try \
             --llama-bench-arg=--repack --llama-bench-arg=0"
        } else {
            ""
        };
        Error::Malformed(format!(
            "llama-bench printed no avg_ts ({}): {}{hint}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ))
    })
}

/// Run `tessera bench model`.
pub fn run(args: &ModelBenchArgs) -> Result<ExitCode> {
    let path = llm::model_path(&args.model)?;
    let mut margs = args.model.clone();
    margs.model = Some(path.clone());
    let threads = args
        .model
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let n_ctx = args
        .n_prompt
        .max(args.n_gen)
        .max(args.profile.unwrap_or(0))
        .max(args.profile_prompt.unwrap_or(0))
        .saturating_add(args.depth)
        .max(1);
    let options = SessionOptions {
        n_ctx,
        ..SessionOptions::default()
    };
    let (model, devs, _, plan) = llm::load(&margs, &options)?;
    let mut session = Session::new(model.clone(), devs.streams.clone(), options)?;
    if let Some(plan) = &plan {
        llm::report_fit(plan, &mut session)?;
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let name = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let devices: Vec<&str> = devs.devices.iter().map(|d| d.name()).collect();
    println!(
        "| model | size | devices | threads | test | tessera t/s |{}",
        if args.llama_bench.is_some() {
            " llama.cpp t/s | ratio |"
        } else {
            ""
        }
    );
    println!(
        "| --- | ---: | --- | ---: | --- | ---: |{}",
        if args.llama_bench.is_some() {
            " ---: | ---: |"
        } else {
            ""
        }
    );
    // llama.cpp offloads what Tessera does: every layer when a GPU device is
    // named (or `--ngl`'s count), none on the CPU alone.
    let on_gpu = args
        .model
        .device
        .iter()
        .any(|d| !d.eq_ignore_ascii_case("cpu"));
    let ngl = if on_gpu {
        args.model.ngl.unwrap_or(99)
    } else {
        0
    };
    let tests: Vec<(&str, usize)> = [("pp", args.n_prompt), ("tg", args.n_gen)]
        .into_iter()
        .filter(|t| t.1 > 0)
        .collect();
    for (kind, n) in tests {
        let run_once = |s: &mut Session, seed| {
            if kind == "pp" {
                pp(s, (n, args.depth), seed)
            } else {
                tg(s, (n, args.depth), seed)
            }
        };
        run_once(&mut session, 0)?; // warm-up
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for r in 0..args.reps.max(1) {
            ours.push(run_once(&mut session, r as u64 + 1)?);
            if let Some(bin) = &args.llama_bench {
                let (p, g) = if kind == "pp" { (n, 0) } else { (0, n) };
                let bin = (bin, args.llama_bench_args.as_slice());
                theirs.push(llama_bench(bin, &path, (p, g, args.depth), threads, ngl)?);
            }
        }
        let (m, sd) = mean_sd(&ours);
        let at = match args.depth {
            0 => String::new(),
            d => format!(" @ d{d}"),
        };
        print!(
            "| {name} | {:.1} MiB | {} | {threads} | {kind}{n}{at} | {m:.2} ± {sd:.2} |",
            size as f64 / (1 << 20) as f64,
            devices.join("+")
        );
        if !theirs.is_empty() {
            let (lm, lsd) = mean_sd(&theirs);
            print!(" {lm:.2} ± {lsd:.2} | {:.2} |", m / lm);
        }
        println!();
    }
    if let Some(n) = args.profile {
        super::profile::run(&mut session, n, super::profile::Steps::Decode, args.depth)?;
    }
    if let Some(n) = args.profile_prompt {
        super::profile::run(&mut session, n, super::profile::Steps::Prompt, args.depth)?;
    }
    if let Some(rss) = llm::peak_rss() {
        eprintln!("peak memory (tessera): {} MiB resident", rss >> 20);
    }
    Ok(ExitCode::SUCCESS)
}
