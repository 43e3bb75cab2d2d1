//! `tessera plan`: how the scheduler splits a graph over devices.
//!
//! With `--model F.gguf` the graph is that model's decoder for a batch of
//! `--tokens` (weights placed as `tessera run` places them: `--devices`,
//! `--ngl`). Otherwise it is a stack of transformer blocks
//! (`tessera_testkit::block`) with its weights in the first device's
//! memory. The devices are the ones named by `--devices` (default:
//! every GPU the registry finds, then the CPU). `--refuse OP,...` presents
//! the first device through a decorator that refuses those ops (to see
//! splits on a machine without a GPU), `--pin OP=DEVICE` pins every node of
//! an op. Prints the splits with their copies and the compute bytes per
//! device; `--nodes` adds every node with its device and reason, `--dot
//! FILE` writes a Graphviz picture.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Error, Graph, OpOffload, Placement, Registry, Result, Scheduler,
    SchedulerOptions, StreamOptions, TensorId,
};
use tessera_testkit::block::{Block, BlockShape};
use tessera_testkit::decorate::Refusing;

/// Arguments of `tessera plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A GGUF model: plan its decoder graph (default: a block stack).
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// With `--model`: layers on the first non-CPU device (default: all).
    #[arg(long)]
    pub ngl: Option<usize>,
    /// Devices in priority order, comma-separated (the last is the
    /// fallback); default: every GPU, then the CPU.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    /// Embedding width.
    #[arg(long, default_value_t = 256)]
    pub embd: usize,
    /// Feed-forward width.
    #[arg(long, default_value_t = 512)]
    pub ff: usize,
    /// Tokens in the batch.
    #[arg(long, default_value_t = 8)]
    pub tokens: usize,
    /// Weight type of the projections (f32, f16, q8_0, q4_0, q4_K, q6_K).
    #[arg(long, default_value = "q8_0")]
    pub wtype: String,
    /// Ops the first device refuses (through a test decorator).
    #[arg(long, value_delimiter = ',')]
    pub refuse: Vec<String>,
    /// Pin every node of an op to a device, e.g. `SOFT_MAX=CPU`.
    #[arg(long)]
    pub pin: Vec<String>,
    /// Op offload: `device` (ask the device), `off`, or a minimum batch.
    #[arg(long, default_value = "device")]
    pub offload: String,
    /// Also list every node with its device and the reason.
    #[arg(long)]
    pub nodes: bool,
    /// Write the plan as Graphviz DOT to this file (`-` for stdout).
    #[arg(long)]
    pub dot: Option<String>,
}

fn dtype(name: &str) -> Result<DType> {
    tessera::dtype::ALL_DTYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::NotFound(format!("weight type '{name}'")))
}

fn devices(names: &[String]) -> Result<Vec<Arc<dyn Device>>> {
    let reg = Registry::global();
    if names.is_empty() {
        let mut v: Vec<Arc<dyn Device>> = reg
            .devices()
            .into_iter()
            // By family: a software GPU (lavapipe) reports the CPU type.
            .filter(|d| d.family_name() != "CPU")
            .collect();
        v.push(reg.device_by_name("cpu")?);
        return Ok(v);
    }
    names.iter().map(|n| reg.device_by_name(n)).collect()
}

/// `tessera plan`.
pub fn run(args: &PlanArgs) -> Result<ExitCode> {
    if let Some(model) = &args.model {
        return run_model(args, model);
    }
    let mut devs = devices(&args.devices)?;
    if !args.refuse.is_empty() {
        let refused: Vec<String> = args.refuse.iter().map(|s| s.to_uppercase()).collect();
        let first = devs
            .first()
            .cloned()
            .ok_or_else(|| Error::NotFound("a device".into()))?;
        let name = format!("{}-refusing", first.name());
        devs[0] = Refusing::new(first, &name, move |g: &Graph, id: TensorId| {
            g.node(id)
                .is_ok_and(|n| refused.iter().any(|r| r == n.op.display_name()))
        });
        if devs.len() == 1 {
            devs.push(Registry::global().device_by_name("cpu")?);
        }
    }
    let op_offload = match args.offload.as_str() {
        "device" => OpOffload::Device,
        "off" => OpOffload::Off,
        n => OpOffload::MinBatch(
            n.parse()
                .map_err(|_| Error::NotFound(format!("offload policy '{n}'")))?,
        ),
    };
    let block = Block::build(BlockShape {
        n_embd: args.embd,
        n_ff: args.ff,
        n_tokens: args.tokens,
        n_layers: args.layers,
        wtype: dtype(&args.wtype)?,
    })?;
    let g = &block.graph;
    let streams = devs
        .iter()
        .map(|d| d.new_stream(&StreamOptions::new()))
        .collect::<Result<Vec<_>>>()?;
    let mut sc = Scheduler::new(
        streams,
        SchedulerOptions {
            op_offload,
            ..Default::default()
        },
    )?;
    for p in &args.pin {
        let (op, dev) = p
            .split_once('=')
            .ok_or_else(|| Error::NotFound(format!("pin '{p}' (expected OP=DEVICE)")))?;
        let d = devs
            .iter()
            .position(|x| x.name().eq_ignore_ascii_case(dev))
            .ok_or_else(|| Error::NotFound(format!("device '{dev}' among the plan's devices")))?;
        for id in g.op_ids() {
            if g.node(id)?.op.display_name().eq_ignore_ascii_case(op) {
                sc.pin(id, d)?;
            }
        }
    }
    let mut placement = Placement::new(g);
    let layouts = block
        .weights
        .iter()
        .map(|&w| g.node(w).map(|n| n.layout))
        .collect::<Result<Vec<_>>>()?;
    let weights = alloc_tensors(&devs[0].buffer_type(), &layouts, BufferUsage::Weights)?;
    for (&w, t) in block.weights.iter().zip(&weights.tensors) {
        placement.bind(g, w, t)?;
    }
    let sizes = sc.reserve_size(g, &placement)?;
    let mut text = String::new();
    if args.dot.as_deref() != Some("-") {
        text.push_str(&sc.describe(g, args.nodes));
        text.push_str(&format!(
            "weights: {} bytes on {}\n",
            weights.buffer.size(),
            devs[0].name()
        ));
        for (d, s) in devs.iter().zip(&sizes) {
            text.push_str(&format!("compute buffer on {}: {s} bytes\n", d.name()));
        }
    }
    match args.dot.as_deref() {
        Some("-") => text.push_str(&sc.to_dot(g)),
        Some(path) => std::fs::write(path, sc.to_dot(g))?,
        None => {}
    }
    print_quietly(&text)
}

/// Print, ending quietly on a closed pipe (`| head`), not with a panic.
fn print_quietly(text: &str) -> Result<ExitCode> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `plan --model`: the model's decoder graph for a batch of `--tokens`.
fn run_model(args: &PlanArgs, model: &std::path::Path) -> Result<ExitCode> {
    let margs = crate::llm::ModelArgs {
        model: Some(model.to_path_buf()),
        device: args.devices.clone(),
        ngl: args.ngl,
        threads: None,
        fit: false,
        mem: Vec::new(),
        split: "layer".into(),
        tensor_split: Vec::new(),
        rpc: Vec::new(),
        rpc_ca: None,
        rpc_psk_file: None,
        no_repack: false,
    };
    let options = tessera_llm::SessionOptions {
        n_ctx: args.tokens.max(1),
        ..Default::default()
    };
    let (model, devs, _, _) = crate::llm::load(&margs, &options)?;
    let mut session = tessera_llm::Session::new(model.clone(), devs.streams.clone(), options)?;
    let (sc, dg) = session.plan(args.tokens)?;
    let g = &dg.graph;
    let mut text = String::new();
    if args.dot.as_deref() != Some("-") {
        text.push_str(&sc.describe(g, args.nodes));
        for (buft, bytes) in model.weights().bytes_by_buffer_type() {
            text.push_str(&format!("weights: {bytes} bytes in {buft}\n"));
        }
        for (i, d) in devs.devices.iter().enumerate() {
            text.push_str(&format!(
                "compute buffer on {}: {} bytes\n",
                d.name(),
                sc.buffer_size(i)?
            ));
        }
    }
    match args.dot.as_deref() {
        Some("-") => text.push_str(&sc.to_dot(g)),
        Some(path) => std::fs::write(path, sc.to_dot(g))?,
        None => {}
    }
    print_quietly(&text)
}
