//! `tessera bench ops`: op throughput in ggml's test-backend-ops perf format.
//!
//! Method (as test-backend-ops): the op node is duplicated `n_runs` times in
//! one graph (enough for 8 GFLOP, or 8 GiB moved, per graph), all duplicates
//! reading the same inputs and writing the same output memory; after a warm-up the
//! graph is computed repeatedly for at least `--seconds`, and the time per
//! op is printed with GFLOPS (ops with a flop count) or GB/s (GiB moved per
//! second, as ggml prints it).
//!
//! A ratio to ggml is printed only against ggml measured live on the same
//! machine, interleaved case by case (`--ggml`, see `ggml_live`). Without it,
//! CPU lines carry ggml's figure recorded on another machine (`anchors`),
//! marked `*` and explained in a footnote under the header, with no ratio:
//! these shared machines differ and drift by 10-30 %, so a ratio to a
//! constant from elsewhere says little. Estimated figures say so.

mod anchors;
mod cases;
mod cold;
mod fill;
mod ggml_live;
mod machine;
pub mod model;
mod profile;
pub mod tune;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{
    BufferUsage, DType, Device, Graph, Layout, Placement, Registry, Result, Stream, TensorId,
};

use cases::{PerfCase, all_cases};

/// Arguments of `tessera bench ops`.
#[derive(clap::Args, Debug)]
pub struct OpsArgs {
    /// Device to measure (case-insensitive name); default: CPU.
    #[arg(long)]
    pub device: Option<String>,
    /// Worker threads (devices with threads); default: all cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Only cases whose name contains this text (e.g. `MUL_MAT`, `q4_0`).
    #[arg(long)]
    op: Option<String>,
    /// Minimum measuring time per case, in seconds.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
    /// Measure the machine's read bandwidth and FMA peak first, print
    /// MUL_MAT figures as a share of them, and measure one-column MUL_MAT
    /// again with its weights streamed from memory (distinct copies, 2 GiB).
    #[arg(long)]
    limits: bool,
    /// A ggml `test-backend-ops` binary (see `scripts/ggml-bench/build.sh`)
    /// to measure live, interleaved case by case with Tessera: the only
    /// comparison printed as a ratio (without it, ggml's figures recorded on
    /// another machine are shown for reference, labelled, with no ratio).
    #[arg(long)]
    ggml: Option<std::path::PathBuf>,
    /// The ggml backend `--ggml` measures (test-backend-ops' `-b`), e.g.
    /// `Vulkan0` beside `--device wgpu0` on a ggml built with Vulkan.
    #[arg(long, default_value = "CPU", requires = "ggml")]
    ggml_backend: String,
}

/// `tessera bench machine`.
pub fn run_machine() -> Result<ExitCode> {
    let all = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    for t in [1, all] {
        let l = machine::measure(t);
        println!(
            "  {} thread{}: read bandwidth {:.1} GB/s, f32 FMA peak {:.1} GFLOPS",
            l.threads,
            if l.threads == 1 { "" } else { "s" },
            l.read_gbs,
            l.fma_gflops
        );
        if t == all {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_ops(args: &OpsArgs) -> Result<ExitCode> {
    let device = Registry::global().device_by_name(args.device.as_deref().unwrap_or("CPU"))?;
    let stream = device.new_stream(&tessera::StreamOptions::new())?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let threaded = stream.set_n_threads(threads).is_ok();
    // ggml's recorded figures are CPU figures: shown only beside the CPU.
    let recorded = device.name() == "CPU";
    let matches = |name: &str| args.op.as_deref().is_none_or(|f| name.contains(f));
    let cases: Vec<PerfCase> = all_cases()
        .into_iter()
        .filter(|c| matches(&c.name))
        .collect();
    if args.list {
        cases.iter().for_each(|c| println!("{}", c.name));
        return Ok(ExitCode::SUCCESS);
    }
    let threads_note = if threaded {
        format!(", {threads} thread{}", if threads == 1 { "" } else { "s" })
    } else {
        String::new()
    };
    let ggml_note = match &args.ggml {
        Some(bin) => format!(
            "; ggml live = {} perf -b {} on this machine, same threads, interleaved case by \
             case, ratio = ggml time / Tessera time",
            bin.display(),
            args.ggml_backend
        ),
        None => String::new(),
    };
    println!(
        "Device {} ({}){threads_note}{ggml_note}",
        device.name(),
        device.description(),
    );
    if recorded {
        println!("{}", recorded_footnote(args.ggml.is_some()));
    }
    let limits = args.limits.then(|| {
        let l = machine::measure(threads);
        println!(
            "  machine, {} threads: read bandwidth {:.1} GB/s, f32 FMA peak {:.1} GFLOPS",
            l.threads, l.read_gbs, l.fma_gflops
        );
        l
    });
    let opts = RunOpts {
        seconds: args.seconds,
        recorded,
        limits,
    };
    // Case by case: ggml live (if given), then Tessera on the same case
    // right after it, so both see the same machine state (these shared
    // machines drift within minutes).
    for case in &cases {
        if !case_supported(&device, case)? {
            println!("  {}: not supported on {}", case.name, device.name());
            continue;
        }
        let ggml_us = match &args.ggml {
            Some(bin) => {
                let op = ggml_live::op_of(&case.ggml);
                match ggml_live::measure(
                    bin,
                    &args.ggml_backend,
                    op,
                    threads,
                    &[case.ggml.as_str()],
                ) {
                    Ok(v) => {
                        let found = ggml_live::find(&v, &case.ggml).map(|c| c.us_per_run);
                        if found.is_none() {
                            println!(
                                "  ggml: {} is not among {}'s cases (no ratio; \
                                 scripts/ggml-bench/build.sh builds one with all of them)",
                                case.name,
                                bin.display()
                            );
                        }
                        found
                    }
                    Err(e) => {
                        println!("  ggml {op}: {e}");
                        None
                    }
                }
            }
            None => None,
        };
        match run_case(&device, stream.as_ref(), case, &opts, ggml_us) {
            Ok(line) => println!("{line}"),
            Err(e) => println!("  {}: failed: {e}", case.name),
        }
        if let Some(l) = &opts.limits
            && cold::applies(case)
        {
            match cold::measure(&device, stream.as_ref(), case, opts.seconds, l) {
                Ok(line) if !line.is_empty() => println!("{line}"),
                Ok(_) => {}
                Err(e) => println!("    weights from memory: failed: {e}"),
            }
        }
    }
    for nth in [1usize, 2] {
        let name = format!("GRAPH_OVERHEAD(op=ADD,ne=16,nodes=1000,threads={nth})");
        if matches(&name) {
            println!("{}", graph_overhead(&device, nth, &name, recorded)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn build(case: &PerfCase, n_runs: usize) -> Result<(Graph, Vec<tessera::TensorId>)> {
    let mut g = Graph::new();
    let mut leaves = Vec::new();
    for l in &case.leaves {
        leaves.push(g.new_tensor(l.dtype, &l.ne)?);
    }
    for _ in 0..n_runs {
        let out = (case.build)(&mut g, &leaves)?;
        g.set_output(out)?;
    }
    Ok((g, leaves))
}

fn case_supported(device: &Arc<dyn Device>, case: &PerfCase) -> Result<bool> {
    let (g, _) = build(case, 1)?;
    Ok(tessera::supports_graph(device.as_ref(), &g))
}

/// How cases are run and printed.
struct RunOpts {
    seconds: f64,
    /// Show ggml's figures recorded on another machine (no ratio).
    recorded: bool,
    limits: Option<machine::Limits>,
}

/// A case's graph (its op `n_runs` times) with the inputs filled and every
/// node placed: ready to compute.
struct Prepared {
    graph: Graph,
    placement: Placement,
    _inputs: tessera::TensorSet,
    _out: Option<tessera::TensorSet>,
}

impl Prepared {
    fn new(device: &Arc<dyn Device>, case: &PerfCase, n_runs: usize) -> Result<Prepared> {
        let (graph, leaves) = build(case, n_runs)?;
        let mut placement = Placement::new(&graph);
        let layouts: Vec<Layout> = leaves
            .iter()
            .map(|&id| graph.nodes()[id.index()].layout)
            .collect();
        let inputs = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Weights)?;
        for ((&id, t), l) in leaves.iter().zip(&inputs.tensors).zip(&case.leaves) {
            fill::fill(t, l.fill)?;
            placement.bind(&graph, id, t)?;
        }
        let out = bind_shared_output(device, &graph, &mut placement)?;
        placement.place_views(&graph)?;
        Ok(Prepared {
            graph,
            placement,
            _inputs: inputs,
            _out: out,
        })
    }
}

/// As test-backend-ops (which adds the same node n_runs times): every op
/// node of `graph` writes the same output memory, allocated here (`None`:
/// no op node); ops that write into a source (CPY) are views of it already.
fn bind_shared_output(
    device: &Arc<dyn Device>,
    graph: &Graph,
    placement: &mut Placement,
) -> Result<Option<tessera::TensorSet>> {
    let outs: Vec<TensorId> = graph
        .op_ids()
        .filter(|&id| !graph.nodes()[id.index()].is_view())
        .collect();
    let Some(&first) = outs.first() else {
        return Ok(None);
    };
    let set = alloc_tensors(
        &device.buffer_type(),
        &[graph.nodes()[first.index()].layout],
        BufferUsage::Compute,
    )?;
    for &id in &outs {
        placement.bind(graph, id, &set.tensors[0])?;
    }
    Ok(Some(set))
}

fn run_case(
    device: &Arc<dyn Device>,
    stream: &dyn Stream,
    case: &PerfCase,
    opts: &RunOpts,
    ggml_us: Option<f64>,
) -> Result<String> {
    let seconds = opts.seconds;
    let cost = case.flops.unwrap_or(case.bytes).max(1.0);
    let target = if case.flops.is_some() {
        8e9
    } else {
        8.0 * (1u64 << 30) as f64
    };
    let n_runs = ((target / cost) as usize).min(8192 - case.leaves.len()) + 1;
    let p = Prepared::new(device, case, n_runs)?;
    let (secs, iters) = time_graph(stream, &p.graph, &p.placement, seconds)?;
    let us = secs * 1e6 / (iters * n_runs) as f64;
    let kernel = gpu_kernel_us(stream, &p, n_runs)?;
    drop(p);
    let (figure, unit, per_run) = match case.flops {
        Some(f) => (f / us / 1e3, "GFLOPS", format!("{:.2} GFLOP/run", f / 1e9)),
        None => (
            case.bytes / (us * 1e-6) / (1u64 << 30) as f64,
            "GB/s",
            format!("{:.0} kB/run", case.bytes / 1024.0),
        ),
    };
    let mut share = String::new();
    if let Some(wb) = case.weight_bytes {
        let gbs = wb / (us * 1e-6) / 1e9;
        share = format!(" = {gbs:.1} GB/s of weights");
        if let Some(l) = &opts.limits {
            share += &format!(
                " ({:.0}% of read bw, {:.0}% of FMA peak)",
                100.0 * gbs / l.read_gbs,
                100.0 * figure / l.fma_gflops
            );
        }
    }
    if let Some(k) = kernel {
        share += &format!(" [GPU kernels {k:.2} us/run]");
    }
    let unit_ggml = if case.by_time { "us" } else { unit };
    Ok(format!(
        "  {}: {:>6} runs - {:>10.2} us/run - {} - {:>8.2} {unit}{share}{}",
        case.name,
        n_runs * iters,
        us,
        per_run,
        figure,
        ggml_column(&case.name, us, ggml_us, opts.recorded, unit_ggml)
    ))
}

/// Compute `graph` once (warm-up), then repeatedly for at least `seconds`:
/// the elapsed seconds and the number of computes timed.
fn time_graph(
    stream: &dyn Stream,
    graph: &Graph,
    placement: &Placement,
    seconds: f64,
) -> Result<(f64, usize)> {
    stream.compute(graph, placement)?;
    let start = Instant::now();
    let mut iters = 0usize;
    while iters == 0 || start.elapsed().as_secs_f64() < seconds {
        stream.compute(graph, placement)?;
        iters += 1;
    }
    Ok((start.elapsed().as_secs_f64(), iters))
}

/// On a GPU stream with timestamps: the GPU time of one run's dispatches
/// alone (one more compute with every dispatch timed), which says how much
/// of the measured time per run is the kernels and how much the gaps between
/// them (barriers, the host's encoding). `None` elsewhere.
fn gpu_kernel_us(stream: &dyn Stream, p: &Prepared, n_runs: usize) -> Result<Option<f64>> {
    let Some(gpu) = stream
        .as_any()
        .downcast_ref::<tessera_wgpu::WgpuStream>()
        .filter(|g| g.can_profile())
    else {
        return Ok(None);
    };
    gpu.set_profiling(true);
    let done = stream.compute(&p.graph, &p.placement);
    let totals = gpu.take_profile();
    gpu.set_profiling(false);
    done?;
    let gpu_rows = || {
        totals
            .iter()
            .filter(|t| t.what != tessera_wgpu::HOST_PROFILE_LABEL)
    };
    let nanos: u64 = gpu_rows().map(|t| t.nanos).sum();
    let calls: u64 = gpu_rows().map(|t| t.calls).sum();
    // A timed batch times its first 2048 dispatches only: per run, then, the
    // mean of those times the dispatches a run has (one per op node here).
    let timed_runs = (calls as usize).min(n_runs).max(1);
    Ok((calls > 0).then(|| nanos as f64 / 1e3 / timed_runs as f64))
}

/// The footnote that explains the `*` figures.
fn recorded_footnote(live: bool) -> String {
    let ratios = if live {
        "ratios only where ggml ran live"
    } else {
        "for ratios, measure ggml live here with --ggml <test-backend-ops> \
         (scripts/ggml-bench/build.sh)"
    };
    format!(
        "  * ggml recorded on {} (shared/reference/perf-anchors.md), not this machine: \
         for reference, no ratio; ~ marks an estimate; {ratios}",
        anchors::RECORDED_ON
    )
}

/// What follows a case's figures: ggml measured live on this machine
/// (`live_us`) and the time ratio; else, if `recorded`, ggml's figure
/// recorded on another machine, marked `*`, in `unit`, with no ratio.
fn ggml_column(name: &str, us: f64, live_us: Option<f64>, recorded: bool, unit: &str) -> String {
    match live_us {
        // Live: same op, same shape, measured minutes apart: time ratio.
        Some(g) if us > 0.0 => format!("  | ggml live {g:.2} us/run ({:.2}x)", g / us),
        Some(g) => format!("  | ggml live {g:.2} us/run"),
        None if recorded => match anchors::ggml_figure(name) {
            Some(a) => {
                let (mark, how) = match a.estimate {
                    Some(how) => ("~", format!(" (estimate: {how})")),
                    None => ("", String::new()),
                };
                format!("  | ggml* {mark}{:.2} {unit}{how}", a.value)
            }
            None => String::new(),
        },
        None => String::new(),
    }
}

/// Per-node cost of a chain of 1000 tiny ADDs (16 floats), min of 50 runs.
fn graph_overhead(
    device: &Arc<dyn Device>,
    nth: usize,
    name: &str,
    recorded: bool,
) -> Result<String> {
    let stream = device.new_stream(&tessera::StreamOptions::new())?;
    let _ = stream.set_n_threads(nth);
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[16])?;
    let b = g.new_tensor(DType::F32, &[16])?;
    let mut x = a;
    for _ in 0..1000 {
        x = g.add(x, b)?;
    }
    g.set_output(x)?;
    let mut placement = Placement::new(&g);
    let layouts = [g.nodes()[a.index()].layout, g.nodes()[b.index()].layout];
    let inputs = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Any)?;
    placement.bind(&g, a, &inputs.tensors[0])?;
    placement.bind(&g, b, &inputs.tensors[1])?;
    let mut galloc = GraphAllocator::new(device.buffer_type());
    galloc.alloc_graph(&g, &mut placement)?;
    let mut best = f64::INFINITY;
    for _ in 0..50 {
        let t = Instant::now();
        stream.compute(&g, &placement)?;
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
    }
    Ok(format!(
        "  {name}: {best:.3} us/node{}",
        ggml_column(name, best, None, recorded, "us")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32_MV: &str = "MUL_MAT(type_a=f32,type_b=f32,m=4096,n=1,k=14336)";

    #[test]
    fn a_ratio_appears_only_against_a_live_ggml_measurement() {
        // Recorded elsewhere: the figure, marked, and no ratio.
        let rec = ggml_column(F32_MV, 100.0, None, true, "GFLOPS");
        assert_eq!(rec, "  | ggml* 12.64 GFLOPS");
        assert!(!rec.contains('x') && !rec.contains('('), "{rec}");
        // Live: the time ratio, ggml time / Tessera time.
        let live = ggml_column(F32_MV, 100.0, Some(250.0), true, "GFLOPS");
        assert_eq!(live, "  | ggml live 250.00 us/run (2.50x)");
        // Neither (not the CPU, or no figure): nothing.
        assert_eq!(ggml_column(F32_MV, 100.0, None, false, "GFLOPS"), "");
        assert_eq!(ggml_column("ADD(type=f16)", 1.0, None, true, "GB/s"), "");
        // By time, and the graph overhead: still no ratio.
        let t = ggml_column(
            "GRAPH_OVERHEAD(op=ADD,ne=16,nodes=1000,threads=2)",
            0.04,
            None,
            true,
            "us",
        );
        assert_eq!(t, "  | ggml* 0.41 us");
    }

    #[test]
    fn estimated_figures_say_so_and_the_footnote_names_the_machine() {
        let name = "ROPE(type=f32,ne=[64,8,512,1],n_dims=64,mode=2)";
        let e = ggml_column(name, 1.0, None, true, "GB/s");
        assert!(e.starts_with("  | ggml* ~10.00 GB/s (estimate: "), "{e}");
        for live in [false, true] {
            let f = recorded_footnote(live);
            assert!(f.contains("AMD EPYC (Zen 3)"), "{f}");
            assert!(
                f.contains("not this machine") && f.contains("no ratio"),
                "{f}"
            );
        }
        assert!(recorded_footnote(false).contains("--ggml"));
    }

    #[test]
    fn every_recorded_figure_names_a_bench_case() {
        let names: Vec<String> = all_cases().into_iter().map(|c| c.name).collect();
        let mut missing = Vec::new();
        for name in anchors::names() {
            let overhead = name.starts_with("GRAPH_OVERHEAD(");
            if !overhead && !names.iter().any(|n| n == name) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "anchors for no case: {missing:?}");
    }
}
