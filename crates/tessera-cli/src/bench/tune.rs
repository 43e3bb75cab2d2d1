//! `tessera bench tune`: measure which MUL_MAT kernels are fastest on this
//! machine, per weight type, and print them as tuning settings
//! (`tessera_cpu::tuning`); `--save` writes them where every later run on
//! this CPU type reads them.
//!
//! For each weight type, on weights of `m` rows of `k` values:
//! 1. the dot-product path's instruction family (AVX2 or AVX-512): the sum
//!    of its times at 1 and 8 columns;
//! 2. the packed GEMM's family, and its integer path on or off: at 128
//!    columns;
//! 3. the crossover: both paths at 2 to 64 columns; the GEMM is used from
//!    the first count at which it is faster there and at every larger count.
//!
//! A choice other than the default is kept only when it is faster by more
//! than [`MARGIN`] (these machines are noisy); times are the fastest of the
//! computes in `--seconds` (the least disturbed).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use tessera::{DType, Device, Error, MUL_MAT_WEIGHT_TYPES, Registry, Result};
use tessera_cpu::isa::Isa;
use tessera_cpu::machine::Machine;
use tessera_cpu::tuning::{self, Tuning, TypeTuning};

use super::Prepared;
use super::cases::mul_mat;

/// How much faster than the default a choice must be to be kept.
const MARGIN: f64 = 0.03;
/// Column counts of the crossover search.
const COLS: [usize; 10] = [2, 4, 6, 8, 12, 16, 24, 32, 48, 64];
/// "The dot products at every column count".
const NEVER: usize = 1 << 20;

/// Arguments of `tessera bench tune`.
#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Worker threads; default: all cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Only these weight types (ggml names, comma-separated); default: every
    /// MUL_MAT weight type.
    #[arg(long, value_delimiter = ',')]
    types: Vec<String>,
    /// Measuring time per candidate, in seconds.
    #[arg(long, default_value_t = 0.2)]
    seconds: f64,
    /// Rows of the weight matrices measured.
    #[arg(long, default_value_t = 4096)]
    m: usize,
    /// Row length of the weight matrices measured (a multiple of 256). The
    /// default, as `bench ops`'s cases, makes the weights larger than a
    /// server CPU's L3 (32 MiB on Zen 4), so they are read from memory as a
    /// model's are: at 4096 they fit there, and the dot products' choices
    /// measured in cache were wrong from memory.
    #[arg(long, default_value_t = 14336)]
    k: usize,
    /// Write the settings found to this CPU type's tuning file (read by
    /// every later run; `TESSERA_CPU_TUNE=builtin` ignores it).
    #[arg(long)]
    save: bool,
}

pub fn run(args: &TuneArgs) -> Result<ExitCode> {
    if args.k == 0 || args.m == 0 || !args.k.is_multiple_of(256) {
        return Err(Error::Malformed(format!(
            "arguments --m {} --k {}: both above 0, k a multiple of 256",
            args.m, args.k
        )));
    }
    let types = if args.types.is_empty() {
        MUL_MAT_WEIGHT_TYPES.to_vec()
    } else {
        args.types
            .iter()
            .map(|n| DType::from_name(n))
            .collect::<Result<Vec<_>>>()?
    };
    let device = Registry::global().device_by_name("CPU")?;
    let stream = device.new_stream(&tessera::StreamOptions::new())?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    stream.set_n_threads(threads)?;
    let machine = Machine::detect();
    let start = tuning::active();
    for w in &start.warnings {
        println!("warning: {w}");
    }
    println!(
        "Tuning MUL_MAT on CPU: {} — {}, {threads} thread{}, weights {} x {}",
        device.description(),
        machine.describe(),
        if threads == 1 { "" } else { "s" },
        args.m,
        args.k
    );
    // Families worth trying: AVX2 and up (the portable kernels never win
    // where these exist).
    let families: Vec<Isa> = Isa::all_available()
        .into_iter()
        .filter(|&i| i >= Isa::Avx2)
        .collect();
    let mut t = Tuner {
        device,
        stream,
        base: start.tuning.clone(),
        seconds: args.seconds,
        m: args.m,
        k: args.k,
    };
    let mut found = Tuning::default();
    found.machine = Some(machine.key());
    let result = tune_all(&mut t, &types, &families, &mut found);
    tuning::restore(&start);
    result?;
    let text = found.to_text();
    println!(
        "\nSettings found ({} beyond the defaults):\n{text}",
        found.len()
    );
    if args.save {
        let path = tuning::saved_path(&machine)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_err(e, "creating", dir))?;
        }
        let header = format!(
            "# `tessera bench tune` on {} ({}), {threads} threads, weights {} x {}\n",
            t.device.description(),
            machine.describe(),
            args.m,
            args.k
        );
        std::fs::write(&path, header + &text).map_err(|e| io_err(e, "writing", &path))?;
        println!(
            "saved to {} (read by every later run on this CPU type)",
            path.display()
        );
    } else {
        println!("not saved: --save writes them for every later run on this CPU type");
    }
    Ok(ExitCode::SUCCESS)
}

/// An I/O error that names what was done to which path.
fn io_err(e: std::io::Error, what: &str, path: &std::path::Path) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{what} {}: {e}", path.display()),
    ))
}

fn tune_all(t: &mut Tuner, types: &[DType], families: &[Isa], found: &mut Tuning) -> Result<()> {
    for &ty in types {
        let v = tune_type(t, ty, families)?;
        found.set(ty, v);
        // Later types are measured with the earlier ones' findings (they do
        // not interact, but the trials start from what will be in force).
        t.base.set(ty, v);
    }
    Ok(())
}

/// The measuring state.
struct Tuner {
    device: Arc<dyn Device>,
    stream: Arc<dyn tessera::Stream>,
    /// The tuning the trials start from.
    base: Tuning,
    seconds: f64,
    m: usize,
    k: usize,
}

impl Tuner {
    /// Fastest compute, in milliseconds, of MUL_MAT with weights `ty` and
    /// `n` columns under `v` (over the base tuning).
    fn time(&self, ty: DType, n: usize, v: TypeTuning) -> Result<f64> {
        let mut trial = self.base.clone();
        trial.set(ty, v);
        tuning::install(trial, "bench tune (trial)");
        let p = Prepared::new(&self.device, &mul_mat(ty, self.m, n, self.k), 1)?;
        self.stream.compute(&p.graph, &p.placement)?;
        let start = Instant::now();
        let mut best = f64::INFINITY;
        let mut runs = 0;
        while runs < 3 || start.elapsed().as_secs_f64() < self.seconds {
            let t0 = Instant::now();
            self.stream.compute(&p.graph, &p.placement)?;
            best = best.min(t0.elapsed().as_secs_f64() * 1e3);
            runs += 1;
        }
        Ok(best)
    }
}

/// The fastest candidate, unless the first (the default) is within the
/// margin of it.
fn pick<T: Copy>(cands: &[(T, f64)]) -> T {
    let (default, d) = cands[0];
    let (best, b) = cands
        .iter()
        .copied()
        .fold(cands[0], |acc, c| if c.1 < acc.1 { c } else { acc });
    if b < d * (1.0 - MARGIN) {
        best
    } else {
        default
    }
}

fn tune_type(t: &Tuner, ty: DType, families: &[Isa]) -> Result<TypeTuning> {
    let mut v = TypeTuning::default();
    let mut line = format!("  {:>6}:", ty.name());
    // 1. The dot products' family (default: the best, tried first).
    if families.len() > 1 {
        let mut c = Vec::new();
        for &f in families.iter().rev() {
            let dv = TypeTuning {
                dot: Some(f),
                gemm_from: Some(NEVER),
                ..v
            };
            c.push((Some(f), t.time(ty, 1, dv)? + t.time(ty, 8, dv)?));
        }
        c[0].0 = None;
        v.dot = pick(&c);
        line += &format!(
            " dot {} ({}),",
            v.dot.unwrap_or(families[families.len() - 1]).name(),
            times(&c, families)
        );
    }
    // 2. The GEMM's family and integer path (default: best family, integer
    // path where there is one).
    // (`gemm_int`, `gemm_sb`): the integer path with its activations per
    // 256 values where the kernels have that, per 32, or the f32 path.
    let ints: &[(Option<bool>, Option<bool>)] = match ty {
        _ if ty.is_float() => &[(None, None)],
        DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::IQ4XS => {
            &[(None, None), (None, Some(false)), (Some(false), None)]
        }
        _ => &[(None, None), (Some(false), None)],
    };
    let mut c = Vec::new();
    for &f in families.iter().rev() {
        for &(int, sb) in ints {
            let gv = TypeTuning {
                gemm: Some(f),
                gemm_int: int,
                gemm_sb: sb,
                gemm_from: Some(1),
                ..v
            };
            c.push(((Some(f), int, sb), t.time(ty, 128, gv)?));
        }
    }
    if let Some(first) = c.first_mut() {
        first.0.0 = None;
    }
    if !c.is_empty() {
        (v.gemm, v.gemm_int, v.gemm_sb) = pick(&c);
        // The best family is the default: no setting for it.
        if v.gemm == families.last().copied() {
            v.gemm = None;
        }
        line += &format!(
            " gemm {}{} ({:.2} ms),",
            v.gemm.unwrap_or(families[families.len() - 1]).name(),
            match (v.gemm_int, v.gemm_sb) {
                (Some(false), _) => " float",
                (_, Some(false)) => " int per 32",
                _ => "",
            },
            c.iter().map(|x| x.1).fold(f64::INFINITY, f64::min)
        );
    }
    // 3. The crossover under the choices above.
    let mut wins = Vec::new();
    for n in COLS {
        let dot = t.time(
            ty,
            n,
            TypeTuning {
                gemm_from: Some(NEVER),
                ..v
            },
        )?;
        let gemm = t.time(
            ty,
            n,
            TypeTuning {
                gemm_from: Some(1),
                ..v
            },
        )?;
        wins.push((n, gemm < dot));
    }
    let measured = crossover(&wins);
    let default = {
        let mut trial = t.base.clone();
        trial.set(
            ty,
            TypeTuning {
                gemm_from: None,
                ..v
            },
        );
        tuning::install(trial, "bench tune (trial)");
        tessera_cpu::tuning::gemm_min_cols(ty)
    };
    if !consistent(&wins, default) {
        v.gemm_from = Some(measured);
    }
    line += &format!(
        " gemm from {} columns (default {default}; faster at {})",
        v.gemm_from.unwrap_or(default),
        wins.iter()
            .map(|&(n, g)| format!("{n}:{}", if g { "gemm" } else { "dot" }))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{line}");
    Ok(v)
}

/// "avx512 1.20 ms, avx2 1.31 ms" for candidates in `families` order
/// reversed (as tried).
fn times(c: &[(Option<Isa>, f64)], families: &[Isa]) -> String {
    c.iter()
        .zip(families.iter().rev())
        .map(|(x, f)| format!("{} {:.2} ms", f.name(), x.1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first column count from which the GEMM won at every count measured
/// (`wins`: ascending counts, did the GEMM win); past the last count if it
/// did not win at the last one.
fn crossover(wins: &[(usize, bool)]) -> usize {
    let mut from = wins.last().map_or(1, |&(n, _)| n + 1);
    for &(n, gemm) in wins.iter().rev() {
        if !gemm {
            break;
        }
        from = n;
    }
    from
}

/// Does a crossover at `from` agree with the measurements: dot products
/// below it, the GEMM from it on (counts between two measured ones agree
/// with either side)?
fn consistent(wins: &[(usize, bool)], from: usize) -> bool {
    let c = crossover(wins);
    let below = wins
        .iter()
        .rev()
        .find(|&&(n, _)| n < c)
        .map_or(0, |&(n, _)| n);
    from > below && from <= c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossover_is_where_the_gemm_wins_from_on() {
        let w = |v: &[(usize, bool)]| v.to_vec();
        let a = w(&[
            (2, false),
            (4, false),
            (8, true),
            (16, false),
            (32, true),
            (64, true),
        ]);
        // A win at 8 followed by a loss at 16 does not count.
        assert_eq!(crossover(&a), 32);
        assert!(consistent(&a, 32) && consistent(&a, 20));
        assert!(!consistent(&a, 16) && !consistent(&a, 8) && !consistent(&a, 33));
        // The GEMM never wins: past the last count.
        assert_eq!(crossover(&w(&[(2, false), (64, false)])), 65);
        // Always: from the first count; a default below it agrees.
        let all = w(&[(2, true), (4, true)]);
        assert_eq!(crossover(&all), 2);
        assert!(consistent(&all, 1) && consistent(&all, 2) && !consistent(&all, 3));
    }

    #[test]
    fn the_default_stays_unless_beaten_by_the_margin() {
        assert_eq!(pick(&[("default", 1.00), ("other", 0.98)]), "default");
        assert_eq!(pick(&[("default", 1.00), ("other", 0.90)]), "other");
        assert_eq!(pick(&[("default", 1.00), ("a", 0.95), ("b", 0.80)]), "b");
        assert_eq!(pick(&[("default", 0.50), ("other", 0.90)]), "default");
    }
}
