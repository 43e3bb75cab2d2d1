//! What the CPU device reports about the machine: its model name, memory
//! and instruction-set features.
//!
//! On Linux the model and memory come from `/proc/cpuinfo` and
//! `/proc/meminfo` (as ggml reads them); elsewhere, or when the files cannot
//! be read, the description is "CPU" and the memory is reported as unknown
//! (zero, `estimated: true`). Features are detected at run time.

use tessera::MemoryInfo;

/// The CPU model, e.g. "AMD EPYC 7B13", or "CPU" when unknown.
pub fn cpu_description() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_from_cpuinfo(&text))
        .unwrap_or_else(|| "CPU".to_owned())
}

/// Free (available) and total system memory.
pub fn memory() -> MemoryInfo {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| memory_from_meminfo(&text))
        .unwrap_or(MemoryInfo {
            free: 0,
            total: 0,
            estimated: true,
        })
}

/// The first model line of a `/proc/cpuinfo` text (`model name` on x86,
/// `Model` or `Hardware` on ARM boards).
pub fn model_from_cpuinfo(text: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            if k.trim() == key && !v.is_empty() {
                return Some(v.to_owned());
            }
        }
    }
    None
}

/// Parse `/proc/meminfo`: `MemAvailable` (or, on kernels before 3.14,
/// `MemFree`, flagged as an estimate) and `MemTotal`, in bytes.
pub fn memory_from_meminfo(text: &str) -> Option<MemoryInfo> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: usize = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            kib.checked_mul(1024)
        })
    };
    let total = field("MemTotal")?;
    match field("MemAvailable") {
        Some(free) => Some(MemoryInfo {
            free,
            total,
            estimated: false,
        }),
        None => Some(MemoryInfo {
            free: field("MemFree").unwrap_or(0),
            total,
            estimated: true,
        }),
    }
}

/// Instruction-set features of the running CPU, as `(name, "1")` pairs
/// (ggml's `ggml_backend_cpu_get_features` names, AVX-512 as `AVX512F`).
pub fn features() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |name: &str, present: bool| {
        if present {
            out.push((name.to_owned(), "1".to_owned()));
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        add("SSE3", has!("sse3"));
        add("SSSE3", has!("ssse3"));
        add("AVX", has!("avx"));
        add("AVX2", has!("avx2"));
        add("F16C", has!("f16c"));
        add("FMA", has!("fma"));
        add("BMI2", has!("bmi2"));
        add("AVX512F", has!("avx512f"));
        add("AVX512_VNNI", has!("avx512vnni"));
        add("AVX512_BF16", has!("avx512bf16"));
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        add("NEON", has!("neon"));
        add("ARM_FMA", has!("neon"));
        add("FP16_VA", has!("fp16"));
        add("DOTPROD", has!("dotprod"));
        add("MATMUL_INT8", has!("i8mm"));
        add("SVE", has!("sve"));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:       16318480 kB\nMemFree:         1000000 kB\nMemAvailable:    8159240 kB\n";
        let m = memory_from_meminfo(text).unwrap();
        assert_eq!(m.total, 16_318_480 * 1024);
        assert_eq!(m.free, 8_159_240 * 1024);
        assert!(!m.estimated);
        let old = "MemTotal: 2048 kB\nMemFree: 1024 kB\n";
        let m = memory_from_meminfo(old).unwrap();
        assert_eq!(
            (m.free, m.total, m.estimated),
            (1024 * 1024, 2048 * 1024, true)
        );
        assert!(memory_from_meminfo("garbage").is_none());
        assert!(memory_from_meminfo("MemTotal: lots kB").is_none());
    }

    #[test]
    fn parses_cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            model_from_cpuinfo(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        let arm = "processor : 0\nBogoMIPS : 108.00\n\nModel : Raspberry Pi 4 Model B Rev 1.4\n";
        assert_eq!(
            model_from_cpuinfo(arm).as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert!(model_from_cpuinfo("processor : 0\n").is_none());
    }
}
