//! `tessera`: the command-line front of Tessera.
//!
//! - `tessera devices` lists device families and devices with their properties;
//! - `tessera bench ops` measures ops in ggml's test-backend-ops perf format;
//!   with `--ggml` it measures ggml live on the same machine and prints the
//!   ratio, otherwise ggml's figures recorded on another machine, labelled,
//!   without a ratio;
//! - `tessera test` runs the conformance harness on a device;
//! - `tessera support` prints which op cases each device supports;
//! - `tessera plan` shows how the scheduler splits a graph over devices;
//! - `tessera gguf info FILE [--json]` lists a GGUF file's metadata and tensors;
//! - `tessera run` continues a prompt with a GGUF model (the default model,
//!   Gemma 3 270M, fetched on first use); `tessera tokenize` shows tokens.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod conformance;
mod devices;
mod gguf;
mod llm;
mod plan;
mod rpc_server;
mod run;
mod tokenize;

#[derive(Parser, Debug)]
#[command(
    name = "tessera",
    version,
    about = "One tensor compute graph, run on any mix of devices"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Continue a prompt with a GGUF model (default: Gemma 3 270M Q4_K_M, fetched once).
    Run(run::RunArgs),
    /// Chat with an instruct model through its chat template.
    Chat(chat::ChatArgs),
    /// Tokenize text with a model's vocabulary (like llama-tokenize).
    Tokenize(tokenize::TokenizeArgs),
    /// List device families and devices.
    Devices,
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Run the conformance harness (every op case against the f64 reference).
    Test {
        /// Device name (case-insensitive); default: every device.
        #[arg(long)]
        device: Option<String>,
        /// Only cases whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Print every case, not only failures.
        #[arg(long)]
        verbose: bool,
    },
    /// Print which op cases each device supports.
    Support,
    /// Show how the scheduler splits a transformer graph over devices.
    Plan(plan::PlanArgs),
    /// Serve local devices over ggml-rpc (llama.cpp's `--rpc HOST:PORT`).
    RpcServer(rpc_server::RpcServerArgs),
    /// Inspect GGUF files.
    Gguf {
        #[command(subcommand)]
        what: GgufWhat,
    },
}

#[derive(Subcommand, Debug)]
enum GgufWhat {
    /// Version, metadata and tensor table of a GGUF file (like gguf-dump).
    Info(gguf::InfoArgs),
}

#[derive(Subcommand, Debug)]
enum BenchWhat {
    /// Op throughput in test-backend-ops perf format (GFLOPS for MUL_MAT, GB/s otherwise).
    Ops(bench::OpsArgs),
    /// The machine's limits: read bandwidth and f32 FMA peak, 1 thread and all threads.
    Machine,
    /// A GGUF model's prompt and generation speed (llama-bench style; `--llama-bench BIN` to compare live).
    Model(Box<bench::model::ModelBenchArgs>),
    /// Measure this machine's fastest MUL_MAT kernels per weight type (`--save` keeps them).
    Tune(bench::tune::TuneArgs),
}

impl Command {
    /// Might this command touch a GPU device?
    fn uses_gpu(&self) -> bool {
        match self {
            Command::Devices | Command::Support => true,
            Command::Plan(args) => {
                args.devices.is_empty()
                    || args.devices.iter().any(|d| !d.eq_ignore_ascii_case("cpu"))
            }
            Command::Test { device, .. } => device
                .as_deref()
                .is_none_or(|d| !d.eq_ignore_ascii_case("cpu")),
            Command::Bench {
                what: BenchWhat::Ops(args),
            } => args
                .device
                .as_deref()
                .is_some_and(|d| !d.eq_ignore_ascii_case("cpu")),
            Command::Bench {
                what: BenchWhat::Machine | BenchWhat::Tune(_),
            } => false,
            Command::Bench {
                what: BenchWhat::Model(args),
            } => args.model.uses_gpu(),
            Command::Gguf { .. } | Command::Tokenize(_) => false,
            Command::Run(args) => args.model.uses_gpu(),
            Command::Chat(args) => args.model.uses_gpu(),
            Command::RpcServer(args) => args.uses_gpu(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // CPU first: it is the fallback device, and a software GPU adapter
    // (llvmpipe) also reports the CPU type. GPU adapters are enumerated only
    // when a command can use them (enumeration costs time and driver noise).
    tessera_cpu::register();
    if cli.command.uses_gpu() {
        tessera_wgpu::register();
    }
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Chat(args) => chat::run(&args),
        Command::Tokenize(args) => tokenize::run(&args),
        Command::Devices => devices::run(),
        Command::Bench {
            what: BenchWhat::Ops(args),
        } => bench::run_ops(&args),
        Command::Bench {
            what: BenchWhat::Machine,
        } => bench::run_machine(),
        Command::Bench {
            what: BenchWhat::Model(args),
        } => bench::model::run(&args),
        Command::Bench {
            what: BenchWhat::Tune(args),
        } => bench::tune::run(&args),
        Command::Test {
            device,
            filter,
            verbose,
        } => conformance::run_test(device.as_deref(), filter.as_deref(), verbose),
        Command::Support => conformance::run_support(),
        Command::Plan(args) => plan::run(&args),
        Command::RpcServer(args) => rpc_server::run(&args),
        Command::Gguf {
            what: GgufWhat::Info(args),
        } => gguf::run_info(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
