//! `tessera bench ops`: op throughput in ggml's test-backend-ops perf format.
//!
//! Method (as test-backend-ops): the op node is duplicated `n_runs` times in
//! one graph (enough for 8 GFLOP, or 8 GiB moved, per graph), all duplicates
//! reading the same inputs and writing the same output memory; after a warm-up the
//! graph is computed repeatedly for at least `--seconds`, and the time per
//! op is printed with GFLOPS (ops with a flop count) or GB/s (GiB moved per
//! second, as ggml prints it). ggml's figure on this kind of machine and the
//! ratio follow on each line.

mod anchors;
mod cases;
mod cold;
mod fill;
mod ggml_live;
mod machine;

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
    /// to measure live, interleaved op by op with Tessera, instead of
    /// printing ggml's recorded figures.
    #[arg(long)]
    ggml: Option<std::path::PathBuf>,
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
    // ggml's figures are CPU figures: shown only beside the CPU device.
    let with_ggml = device.name() == "CPU";
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
    let ggml_note = match (&args.ggml, with_ggml) {
        (Some(bin), _) => format!(
            "; ggml live = {} perf, same threads, interleaved op by op",
            bin.display()
        ),
        (None, true) => {
            "; ggml = upstream test-backend-ops on the same kind of machine (perf-anchors.md)"
                .to_string()
        }
        (None, false) => String::new(),
    };
    println!(
        "Device {} ({}){threads_note}{ggml_note}",
        device.name(),
        device.description(),
    );
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
        with_ggml,
        limits,
    };
    // Op by op: ggml live (if given), then Tessera's cases of that op.
    let mut i = 0;
    while i < cases.len() {
        let op = ggml_live::op_of(&cases[i].ggml).to_string();
        let group: Vec<&PerfCase> = cases[i..]
            .iter()
            .take_while(|c| ggml_live::op_of(&c.ggml) == op)
            .collect();
        i += group.len();
        let live = match &args.ggml {
            Some(bin) => match ggml_live::measure(bin, &op, threads) {
                Ok(v) => Some(v),
                Err(e) => {
                    println!("  ggml {op}: {e}");
                    None
                }
            },
            None => None,
        };
        for case in group {
            if !case_supported(&device, case)? {
                println!("  {}: not supported on {}", case.name, device.name());
                continue;
            }
            let ggml_us = live
                .as_deref()
                .and_then(|v| ggml_live::find(v, &case.ggml))
                .map(|c| c.us_per_run);
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
    }
    for nth in [1usize, 2] {
        let name = format!("GRAPH_OVERHEAD(op=ADD,ne=16,nodes=1000,threads={nth})");
        if matches(&name) {
            println!("{}", graph_overhead(&device, nth, &name, with_ggml)?);
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
    with_ggml: bool,
    limits: Option<machine::Limits>,
}

fn run_case(
    device: &Arc<dyn Device>,
    stream: &dyn Stream,
    case: &PerfCase,
    opts: &RunOpts,
    ggml_us: Option<f64>,
) -> Result<String> {
    let (seconds, with_ggml) = (opts.seconds, opts.with_ggml);
    let cost = case.flops.unwrap_or(case.bytes).max(1.0);
    let target = if case.flops.is_some() {
        8e9
    } else {
        8.0 * (1u64 << 30) as f64
    };
    let n_runs = ((target / cost) as usize).min(8192 - case.leaves.len()) + 1;
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
    // As test-backend-ops (which adds the same node n_runs times), every
    // duplicate writes the same output memory; ops that write into a source
    // (CPY) are views of it already.
    let outs: Vec<TensorId> = graph
        .op_ids()
        .filter(|&id| !graph.nodes()[id.index()].is_view())
        .collect();
    let out_mem = match outs.first() {
        Some(&first) => {
            let set = alloc_tensors(
                &device.buffer_type(),
                &[graph.nodes()[first.index()].layout],
                BufferUsage::Compute,
            )?;
            for &id in &outs {
                placement.bind(&graph, id, &set.tensors[0])?;
            }
            Some(set)
        }
        None => None,
    };
    placement.place_views(&graph)?;
    let (secs, iters) = time_graph(stream, &graph, &placement, seconds)?;
    let us = secs * 1e6 / (iters * n_runs) as f64;
    drop(out_mem);
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
    Ok(format!(
        "  {}: {:>6} runs - {:>10.2} us/run - {} - {:>8.2} {unit}{share}{}",
        case.name,
        n_runs * iters,
        us,
        per_run,
        figure,
        match ggml_us {
            // Live: same op, same shape, measured minutes apart: time ratio.
            Some(g) => format!("  | ggml live {g:.2} us/run ({:.2}x)", g / us),
            None if case.by_time => compare(&case.name, us, false, with_ggml),
            None => compare(&case.name, figure, true, with_ggml),
        }
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

/// `  | ggml X (ratio)` when ggml's figure is known. `higher_is_better`
/// false for times.
fn compare(name: &str, figure: f64, higher_is_better: bool, with_ggml: bool) -> String {
    if !with_ggml {
        return String::new();
    }
    match anchors::ggml_figure(name) {
        Some(g) if g > 0.0 => {
            let ratio = if higher_is_better {
                figure / g
            } else {
                g / figure
            };
            let unit = if higher_is_better { "" } else { " us" };
            format!("  | ggml {g:.2}{unit} ({ratio:.2}x)")
        }
        _ => String::new(),
    }
}

/// Per-node cost of a chain of 1000 tiny ADDs (16 floats), min of 50 runs.
fn graph_overhead(
    device: &Arc<dyn Device>,
    nth: usize,
    name: &str,
    with_ggml: bool,
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
        compare(name, best, false, with_ggml)
    ))
}
