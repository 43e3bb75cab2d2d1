//! Per-machine kernel choices for MUL_MAT, and the knobs benchmarks use.
//!
//! Which kernels are fastest depends on the machine, not only on the
//! instructions it has ([`crate::machine`]: Zen 4 runs 512-bit operations
//! as two halves, Intel's server cores do not). For each weight type a
//! tuning may cap the instruction family of the dot-product path (gemv and
//! tiles: few columns) and of the packed GEMM, keep the GEMM off its integer
//! path, and move the column count from which the GEMM replaces the dot
//! products. What it leaves unset takes the kernels' defaults, measured on
//! an Intel Xeon (AVX-512) and an AMD EPYC Zen 3 (AVX2).
//!
//! Layers, later ones win:
//! 1. built-in choices for the machine's class ([`Tuning::builtin`]);
//! 2. what `tessera bench tune --save` measured on this CPU type, saved as
//!    `<cache>/cpu-tuning/<machine key>.txt` ([`saved_path`]) — skipped
//!    with `TESSERA_CPU_TUNE=builtin`;
//! 3. `TESSERA_CPU_TUNE`: settings separated by commas;
//! 4. [`install`], by a program (the tuner does this for each trial).
//!
//! Settings: `TYPE.dot=scalar|avx2|avx512`, `TYPE.gemm=scalar|avx2|avx512`,
//! `TYPE.gemm_int=on|off`, `TYPE.gemm_sb=on|off` (the K-quants' and
//! IQ4_XS's integer GEMM with activations quantized per 256 values, as
//! ggml's Q8_K, where the kernel set has it; off: per 32),
//! `TYPE.gemm_from=N` (`TYPE` as ggml names it:
//! `f32`, `q4_K`, ...); in files one per line, `#` starts a comment, and
//! `machine=KEY` says which CPU type the file was measured on; and one
//! setting for all types, `prefetch=BYTES`: how far ahead of the bytes
//! they read the one-column kernels prefetch each weight row (default
//! [`DEFAULT_PREFETCH`]). A capped
//! family is still only used where the stream's family allows it.
//!
//! Changing the tuning while graphs are computed is safe: a compute plans
//! again after a change (the plan cache compares [`generation`]), and
//! kernels check at run time that the scratch planned for them suffices.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};

use tessera::{DType, Error, Result};

use crate::isa::Isa;
use crate::machine::Machine;

/// The choices for one weight type (`None`: the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeTuning {
    /// Most capable family for the dot-product path (gemv, tiles).
    pub dot: Option<Isa>,
    /// Most capable family for the packed GEMM.
    pub gemm: Option<Isa>,
    /// May the GEMM use its integer (8-bit activation) path?
    pub gemm_int: Option<bool>,
    /// May the integer GEMM quantize activations per 256 values (Q8_K
    /// super-blocks) where it has kernels for that?
    pub gemm_sb: Option<bool>,
    /// Columns per weight matrix from which the GEMM is used.
    pub gemm_from: Option<usize>,
}

impl TypeTuning {
    fn is_empty(&self) -> bool {
        *self == TypeTuning::default()
    }

    /// `other`'s settings over these.
    fn overlay(&mut self, other: &TypeTuning) {
        self.dot = other.dot.or(self.dot);
        self.gemm = other.gemm.or(self.gemm);
        self.gemm_int = other.gemm_int.or(self.gemm_int);
        self.gemm_sb = other.gemm_sb.or(self.gemm_sb);
        self.gemm_from = other.gemm_from.or(self.gemm_from);
    }
}

/// A set of choices, per weight type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// By ggml type id.
    types: BTreeMap<u32, TypeTuning>,
    /// The machine key a file names (`machine=...`), if any.
    pub machine: Option<String>,
    /// How far ahead the one-column kernels prefetch weight rows, in bytes.
    pub prefetch: Option<usize>,
}

/// Zen 4 (AMD EPYC family 25 model 17, 2 vCPUs, 2026-11-27): the column
/// counts from which the GEMM beats the dot products, as `tessera bench
/// tune` found them in every run (three at weights of 4096 x 4096, one at
/// 4096 x 14336, which do not fit its 32 MiB L3). The same runs picked the
/// AVX2 dot products for Q3_K and Q5_K at 4096 x 4096 (in L3), which live
/// runs from memory refuted (k = 14336, one column: AVX-512 980-1035 us
/// against AVX2 1131-1343 us for Q3_K): not taken. Q8_0 took the GEMM from
/// 8 columns then; on 2026-11-28 (same machine type, the GEMM and its
/// neighbours changed since) three tuner runs at 4096 x 14336, 2 threads,
/// kept its dot products at 8 columns (the default, GEMM from 9), and live
/// `n = 8` pairs agreed: 4.82-4.90 ms against the GEMM's 4.96-5.64 ms.
pub const ZEN4: &str = "q6_K.gemm_from=12\n\
                        iq4_xs.gemm_from=12\n";

/// Zen 5 (AMD EPYC family 26 model 2, full-width AVX-512, 2 vCPUs,
/// 2026-11-29): IQ4_XS at 8 columns (4096 x 14336, 2 threads, `tessera
/// bench ops`) took 3.14-3.20 ms through the GEMM (ggml 2.98-3.37 live:
/// 0.86x-0.95x) and 2.63 ms through the dot products, as on Zen 4.
pub const ZEN5: &str = "iq4_xs.gemm_from=12\n";

/// Zen 4's prefetch distance, for every kernel family (a property of its
/// memory system): 512 bytes ahead of each weight row instead of 1536 made
/// decoding the 1B-shaped files faster in every alternated pair (2 threads,
/// `bench model -p 0 -n 32`, t/s, 1536 -> 512: Q8_0 median 23.7 -> 25.0 of
/// five pairs, and with `TESSERA_CPU_ISA=avx2` four of four pairs; F16
/// 12.6 -> 13.4 of six; Q4_K_M 38.3 -> 40.0 of four).
pub const ZEN4_ANY_ISA: &str = "prefetch=512\n";

/// The prefetch distance of the one-column kernels where no tuning sets
/// one (measured on an Intel Xeon with AVX-512).
pub const DEFAULT_PREFETCH: usize = 1536;
/// Longest `prefetch` setting.
const MAX_PREFETCH: usize = 64 << 10;

/// Longest tuning file read (a few hundred settings at most).
const MAX_FILE_BYTES: u64 = 64 << 10;
/// Largest `gemm_from` (fits the packed table word).
const MAX_GEMM_FROM: usize = (1 << 24) - 2;

impl Tuning {
    /// The built-in choices for `machine`'s class. The kernels' defaults
    /// were measured on Intel AVX-512 and Zen 3 AVX2 machines; a class gets
    /// entries here once they are measured on it (`tessera bench tune`
    /// prints what it found, in this file's syntax): today Zen 4
    /// ([`ZEN4`]) and Zen 5 ([`ZEN5`]), for the kernels the process runs
    /// ([`Isa::from_env`]).
    pub fn builtin(machine: &Machine) -> Tuning {
        Tuning::builtin_for(machine, Isa::from_env())
    }

    /// The built-in choices for `machine`'s class when its kernels are
    /// `isa`'s: they were measured with the AVX-512 kernels, and do not hold
    /// for the AVX2 ones (`TESSERA_CPU_ISA=avx2` on Zen 4: Q8_0 from 8
    /// columns took 11.5 ms at 8 columns against 7.3 ms by the default).
    pub fn builtin_for(machine: &Machine, isa: Isa) -> Tuning {
        let mut t = Tuning::default();
        if machine.microarch == "Zen 4" && machine.width512 == crate::machine::Width512::Split {
            t = Tuning::parse(ZEN4_ANY_ISA).unwrap_or_default();
            if isa.has_avx512() {
                t.overlay(&Tuning::parse(ZEN4).unwrap_or_default());
            }
        }
        // Both widths: the same choice was measured on Zen 4's halves.
        if machine.microarch == "Zen 5" && isa.has_avx512() {
            t.overlay(&Tuning::parse(ZEN5).unwrap_or_default());
        }
        t
    }

    /// The choices for `t`.
    pub fn get(&self, t: DType) -> TypeTuning {
        self.types.get(&t.ggml_id()).copied().unwrap_or_default()
    }

    /// Set the choices for `t` (all of them: unset fields become defaults).
    pub fn set(&mut self, t: DType, v: TypeTuning) {
        if v.is_empty() {
            self.types.remove(&t.ggml_id());
        } else {
            self.types.insert(t.ggml_id(), v);
        }
    }

    /// Types with at least one setting, and their choices.
    pub fn entries(&self) -> Vec<(DType, TypeTuning)> {
        self.types
            .iter()
            .filter_map(|(&id, &v)| Some((DType::from_ggml_id(id).ok()?, v)))
            .collect()
    }

    /// Number of settings.
    pub fn len(&self) -> usize {
        self.types
            .values()
            .map(|v| {
                usize::from(v.dot.is_some())
                    + usize::from(v.gemm.is_some())
                    + usize::from(v.gemm_int.is_some())
                    + usize::from(v.gemm_sb.is_some())
                    + usize::from(v.gemm_from.is_some())
            })
            .sum::<usize>()
            + usize::from(self.prefetch.is_some())
    }

    /// No settings at all.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty() && self.prefetch.is_none()
    }

    /// `other`'s settings over these.
    pub fn overlay(&mut self, other: &Tuning) {
        for (&id, v) in &other.types {
            self.types.entry(id).or_default().overlay(v);
        }
        if other.machine.is_some() {
            self.machine.clone_from(&other.machine);
        }
        self.prefetch = other.prefetch.or(self.prefetch);
    }

    /// Parse settings (lines or commas; see the module's documentation).
    /// Errors name the setting.
    pub fn parse(text: &str) -> Result<Tuning> {
        let mut out = Tuning::default();
        let items = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty());
        for item in items {
            let bad = |why: &str| Error::Malformed(format!("tuning setting '{item}': {why}"));
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad("expected KEY=VALUE"))?;
            if key == "machine" {
                out.machine = Some(value.to_owned());
                continue;
            }
            if key == "prefetch" {
                let n: usize = value.parse().map_err(|_| bad("expected bytes"))?;
                if n > MAX_PREFETCH {
                    return Err(bad(&format!("expected 0..={MAX_PREFETCH}")));
                }
                out.prefetch = Some(n);
                continue;
            }
            let (ty, knob) = key
                .split_once('.')
                .ok_or_else(|| bad("expected TYPE.KNOB=VALUE"))?;
            let t = DType::from_name(ty).map_err(|_| bad("unknown weight type"))?;
            let isa = || {
                Isa::from_name(value)
                    .ok_or_else(|| bad("expected scalar, avx2 or avx512"))
                    .map(Some)
            };
            let mut v = out.get(t);
            match knob {
                "dot" => v.dot = isa()?,
                "gemm" => v.gemm = isa()?,
                "gemm_int" | "gemm_sb" => {
                    let on = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("expected on or off")),
                    };
                    if knob == "gemm_int" {
                        v.gemm_int = Some(on);
                    } else {
                        v.gemm_sb = Some(on);
                    }
                }
                "gemm_from" => {
                    let n: usize = value.parse().map_err(|_| bad("expected a count"))?;
                    if n == 0 || n > MAX_GEMM_FROM {
                        return Err(bad(&format!("expected 1..={MAX_GEMM_FROM}")));
                    }
                    v.gemm_from = Some(n);
                }
                _ => return Err(bad("knobs are dot, gemm, gemm_int, gemm_sb and gemm_from")),
            }
            out.set(t, v);
        }
        Ok(out)
    }

    /// The settings as text [`Tuning::parse`] reads back, one per line.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(m) = &self.machine {
            s += &format!("machine={m}\n");
        }
        if let Some(p) = self.prefetch {
            s += &format!("prefetch={p}\n");
        }
        for (t, v) in self.entries() {
            let n = t.name();
            if let Some(i) = v.dot {
                s += &format!("{n}.dot={}\n", i.name());
            }
            if let Some(i) = v.gemm {
                s += &format!("{n}.gemm={}\n", i.name());
            }
            if let Some(b) = v.gemm_int {
                s += &format!("{n}.gemm_int={}\n", if b { "on" } else { "off" });
            }
            if let Some(b) = v.gemm_sb {
                s += &format!("{n}.gemm_sb={}\n", if b { "on" } else { "off" });
            }
            if let Some(c) = v.gemm_from {
                s += &format!("{n}.gemm_from={c}\n");
            }
        }
        s
    }
}

/// The tuning in force, where it came from, and what was skipped.
#[derive(Clone, Debug, Default)]
pub struct Active {
    pub tuning: Tuning,
    /// The layers applied, in order ("built-in (Zen 4)", a file, ...).
    pub sources: Vec<String>,
    /// Settings or files that were not applied, and why.
    pub warnings: Vec<String>,
}

/// Where `tessera bench tune --save` keeps the measured tuning of this CPU
/// type.
pub fn saved_path(machine: &Machine) -> Result<PathBuf> {
    Ok(tessera::cache_dir()?
        .join("cpu-tuning")
        .join(format!("{}.txt", machine.key())))
}

/// The layers of the module's documentation, without [`install`]ed ones.
pub fn from_environment() -> Active {
    let machine = Machine::detect();
    let mut active = Active {
        tuning: Tuning::builtin(&machine),
        sources: vec![format!("built-in ({})", machine.microarch)],
        warnings: Vec::new(),
    };
    let env = std::env::var("TESSERA_CPU_TUNE").ok();
    if env.as_deref().map(str::trim) != Some("builtin") {
        match read_saved(&machine) {
            Ok(Some((path, t))) => {
                active.tuning.overlay(&t);
                active.sources.push(path.display().to_string());
            }
            Ok(None) => {}
            Err(e) => active.warnings.push(format!("saved tuning ignored: {e}")),
        }
    }
    if let Some(spec) = env.filter(|s| s.trim() != "builtin") {
        match Tuning::parse(&spec) {
            Ok(t) => {
                active.tuning.overlay(&t);
                active.sources.push("TESSERA_CPU_TUNE".into());
            }
            Err(e) => active
                .warnings
                .push(format!("TESSERA_CPU_TUNE ignored: {e}")),
        }
    }
    active
}

/// The saved tuning of this CPU type, if a file exists.
fn read_saved(machine: &Machine) -> Result<Option<(PathBuf, Tuning)>> {
    let Ok(path) = saved_path(machine) else {
        return Ok(None);
    };
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(None);
    };
    let err = |why: String| Error::Malformed(format!("{}: {why}", path.display()));
    if meta.len() > MAX_FILE_BYTES {
        return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
    let t = Tuning::parse(&text).map_err(|e| err(e.to_string()))?;
    match &t.machine {
        Some(k) if *k != machine.key() => Err(err(format!(
            "measured on {k}, this CPU is {}",
            machine.key()
        ))),
        _ => Ok(Some((path, t))),
    }
}

/// Packed per-type choices, by ggml type id: bits 0-1 `dot`, 2-3 `gemm`
/// (0 unset, else 1 + family), 4-5 `gemm_int` (0 unset, 1 on, 2 off),
/// 6-7 `gemm_sb` (likewise), 8-31 `gemm_from` + 1 (0 unset).
static TABLE: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The prefetch distance in force (set with the table).
static PREFETCH: AtomicUsize = AtomicUsize::new(DEFAULT_PREFETCH);
static INIT: Once = Once::new();
static ACTIVE: Mutex<Option<Arc<Active>>> = Mutex::new(None);

fn isa_code(i: Option<Isa>) -> u32 {
    match i {
        None => 0,
        Some(Isa::Scalar) => 1,
        Some(Isa::Avx2) => 2,
        Some(Isa::Avx512) => 3,
    }
}

fn isa_of(code: u32) -> Option<Isa> {
    [None, Some(Isa::Scalar), Some(Isa::Avx2), Some(Isa::Avx512)][(code & 3) as usize]
}

fn pack(v: &TypeTuning) -> u32 {
    let int = match v.gemm_int {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    let sb = match v.gemm_sb {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    let from = v.gemm_from.map_or(0, |c| c.min(MAX_GEMM_FROM) as u32 + 1);
    isa_code(v.dot) | (isa_code(v.gemm) << 2) | (int << 4) | (sb << 6) | (from << 8)
}

fn store(active: Active) {
    let pf = active.tuning.prefetch.unwrap_or(DEFAULT_PREFETCH);
    PREFETCH.store(pf, Ordering::Relaxed);
    for (id, slot) in TABLE.iter().enumerate() {
        let v = active.tuning.types.get(&(id as u32)).copied();
        slot.store(v.as_ref().map_or(0, pack), Ordering::Relaxed);
    }
    *ACTIVE.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(active));
    GENERATION.fetch_add(1, Ordering::Release);
}

fn ensure_init() {
    INIT.call_once(|| store(from_environment()));
}

/// Make `tuning` the one in force (its source named `source`), replacing
/// every layer; returns the one it replaces. Takes effect at each stream's
/// next compute.
pub fn install(tuning: Tuning, source: &str) -> Arc<Active> {
    let old = active();
    store(Active {
        tuning,
        sources: vec![source.to_owned()],
        warnings: Vec::new(),
    });
    old
}

/// Put back a tuning [`install`] returned (or [`active`] gave).
pub fn restore(previous: &Active) {
    ensure_init();
    store(previous.clone());
}

/// The tuning in force.
pub fn active() -> Arc<Active> {
    ensure_init();
    ACTIVE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// Changes with every change of tuning (plans made before are stale).
pub fn generation() -> u64 {
    ensure_init();
    GENERATION.load(Ordering::Acquire)
}

fn word(t: DType) -> u32 {
    ensure_init();
    TABLE
        .get(t.ggml_id() as usize)
        .map_or(0, |w| w.load(Ordering::Relaxed))
}

/// The family the dot-product path uses for weights `t` on a stream of
/// family `isa`.
pub(crate) fn dot_isa(t: DType, isa: Isa) -> Isa {
    isa_of(word(t)).map_or(isa, |cap| isa.min(cap))
}

/// The family the packed GEMM uses for weights `t` on a stream of `isa`.
pub(crate) fn gemm_isa(t: DType, isa: Isa) -> Isa {
    isa_of(word(t) >> 2).map_or(isa, |cap| isa.min(cap))
}

/// May the GEMM take its integer path for weights `t`?
pub(crate) fn gemm_int(t: DType) -> bool {
    (word(t) >> 4) & 3 != 2
}

/// How far ahead of the bytes they read the one-column kernels prefetch a
/// weight row (a relaxed load: read in the kernels' loops; the tuning is
/// installed before any graph is planned).
#[inline]
pub(crate) fn prefetch_bytes() -> usize {
    PREFETCH.load(Ordering::Relaxed)
}

/// May the integer GEMM take activations per 256 values for weights `t`?
pub(crate) fn gemm_sb(t: DType) -> bool {
    (word(t) >> 6) & 3 != 2
}

/// The tuned `gemm_from` for weights `t`, if set.
pub(crate) fn gemm_from(t: DType) -> Option<usize> {
    (word(t) >> 8).checked_sub(1).map(|c| c as usize)
}

/// Columns per weight matrix from which MUL_MAT of weights `t` uses the
/// packed GEMM now (override, tuning or default) on a stream of the
/// process's kernel family ([`Isa::from_env`]).
pub fn gemm_min_cols(t: DType) -> usize {
    crate::kernels::gemm::min_cols(t, Isa::from_env())
}

/// Use the packed GEMM for MUL_MAT from `cols` columns per weight matrix on,
/// for every type, over the tuning (`None`: the tuning or the measured
/// defaults; `Some(1)`: always; `Some(usize::MAX)`: never, the dot-product
/// tiles only). For benchmarks that compare the two paths on one shape.
pub fn set_gemm_min_cols(cols: Option<usize>) {
    crate::kernels::gemm::set_min_cols_override(cols);
    ensure_init();
    GENERATION.fetch_add(1, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_print_and_read_back() {
        let text = "machine=amd-f25-m17-s1-avx512\n\
                    q4_K.gemm_from = 12  # measured\n\
                    f32.dot=avx2, f32.gemm=avx512\n\
                    q8_0.gemm_int=off\n\
                    q6_K.gemm_sb=off\n\
                    prefetch=768\n";
        let t = Tuning::parse(text).unwrap();
        assert_eq!(t.machine.as_deref(), Some("amd-f25-m17-s1-avx512"));
        assert_eq!(t.get(DType::Q4K).gemm_from, Some(12));
        assert_eq!(t.get(DType::F32).dot, Some(Isa::Avx2));
        assert_eq!(t.get(DType::F32).gemm, Some(Isa::Avx512));
        assert_eq!(t.get(DType::Q8_0).gemm_int, Some(false));
        assert_eq!(t.get(DType::Q6K).gemm_sb, Some(false));
        assert_eq!(t.prefetch, Some(768));
        assert_eq!(t.get(DType::F16), TypeTuning::default());
        assert_eq!(t.len(), 6);
        assert_eq!(Tuning::parse(&t.to_text()).unwrap(), t);
    }

    #[test]
    fn zen4_and_zen5_get_their_measured_choices_and_other_machines_none() {
        let eax = |family: u32, model: u32| {
            let (base, ext) = if family > 15 {
                (15, family - 15)
            } else {
                (family, 0)
            };
            (ext << 20) | ((model >> 4) << 16) | (base << 8) | ((model & 0xF) << 4)
        };
        let zen4 = Machine::from_signature("AuthenticAMD", eax(25, 0x11), true);
        let t = Tuning::builtin_for(&zen4, Isa::Avx512);
        let mut want = Tuning::parse(ZEN4).unwrap();
        want.prefetch = Some(512);
        assert_eq!(t, want);
        // The type settings were measured with the AVX-512 kernels: not for
        // the AVX2 ones; the prefetch distance holds for both.
        let avx2 = Tuning::builtin_for(&zen4, Isa::Avx2);
        assert_eq!((avx2.len(), avx2.prefetch), (1, Some(512)));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(DType::IQ4XS).gemm_from, Some(12));
        assert_eq!(t.get(DType::Q4K), TypeTuning::default());
        // Zen 5 with its AVX-512 kernels: its own; with AVX2 ones: none.
        let zen5 = Machine::from_signature("AuthenticAMD", eax(26, 0x02), true);
        assert_eq!(
            Tuning::builtin_for(&zen5, Isa::Avx512),
            Tuning::parse(ZEN5).unwrap()
        );
        assert_eq!(
            Tuning::builtin_for(&zen5, Isa::Avx512)
                .get(DType::IQ4XS)
                .gemm_from,
            Some(12)
        );
        assert!(Tuning::builtin_for(&zen5, Isa::Avx2).is_empty());
        // The same CPU without AVX-512 in use, an Intel Xeon, Zen 3: none.
        for m in [
            Machine::from_signature("AuthenticAMD", eax(25, 0x11), false),
            Machine::from_signature("GenuineIntel", eax(6, 0xCF), true),
            Machine::from_signature("AuthenticAMD", eax(25, 0x01), false),
        ] {
            assert!(
                Tuning::builtin_for(&m, Isa::Avx512).is_empty(),
                "{}",
                m.describe()
            );
        }
    }

    #[test]
    fn bad_settings_are_errors_naming_the_setting() {
        for (s, why) in [
            ("q4_K", "KEY=VALUE"),
            ("gemm_from=3", "TYPE.KNOB"),
            ("q9_Z.dot=avx2", "unknown weight type"),
            ("f32.dot=sse9", "scalar, avx2 or avx512"),
            ("f32.gemm_int=maybe", "on or off"),
            ("f32.gemm_from=0", "1..="),
            ("f32.gemm_from=-4", "a count"),
            ("f32.tile=4", "knobs are"),
            ("prefetch=lots", "expected bytes"),
            ("prefetch=1000000", "expected 0..="),
        ] {
            let e = Tuning::parse(s).unwrap_err().to_string();
            assert!(e.contains(s) && e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn later_layers_win_setting_by_setting() {
        let mut base = Tuning::parse("f32.dot=avx2,f32.gemm_from=20").unwrap();
        base.overlay(&Tuning::parse("f32.gemm_from=8,q4_0.gemm=avx2").unwrap());
        assert_eq!(base.get(DType::F32).dot, Some(Isa::Avx2));
        assert_eq!(base.get(DType::F32).gemm_from, Some(8));
        assert_eq!(base.get(DType::Q4_0).gemm, Some(Isa::Avx2));
    }

    #[test]
    fn packed_words_keep_every_choice() {
        for v in [
            TypeTuning::default(),
            TypeTuning {
                dot: Some(Isa::Scalar),
                gemm: Some(Isa::Avx512),
                gemm_int: Some(false),
                gemm_sb: Some(true),
                gemm_from: Some(MAX_GEMM_FROM),
            },
            TypeTuning {
                dot: Some(Isa::Avx512),
                gemm: None,
                gemm_int: Some(true),
                gemm_sb: Some(false),
                gemm_from: Some(1),
            },
        ] {
            let w = pack(&v);
            assert_eq!(isa_of(w), v.dot);
            assert_eq!(isa_of(w >> 2), v.gemm);
            assert_eq!((w >> 4) & 3 != 2, v.gemm_int != Some(false));
            assert_eq!((w >> 6) & 3 != 2, v.gemm_sb != Some(false));
            assert_eq!((w >> 8).checked_sub(1).map(|c| c as usize), v.gemm_from);
        }
    }
}
