//! `tessera devices`: what the registry sees.

use std::process::ExitCode;

use tessera::{Registry, Result};

pub fn run() -> Result<ExitCode> {
    let reg = Registry::global();
    for fam in reg.families() {
        let devs = fam.devices();
        println!(
            "family {} ({} device{})",
            fam.name(),
            devs.len(),
            if devs.len() == 1 { "" } else { "s" }
        );
        let feats: Vec<String> = fam
            .features()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !feats.is_empty() {
            println!("  features: {}", feats.join(" "));
        }
        if fam.name() == "CPU" {
            cpu_kernels();
        }
        for d in devs {
            let p = d.props();
            println!("  {}: {}", p.name, p.description);
            println!(
                "    type {}, memory {:.1} GiB free of {:.1} GiB{}",
                p.device_type.name(),
                p.memory.free as f64 / (1u64 << 30) as f64,
                p.memory.total as f64 / (1u64 << 30) as f64,
                if p.memory.estimated {
                    " (estimated)"
                } else {
                    ""
                }
            );
            println!(
                "    caps: async={} events={} buffer_from_host_memory={}",
                p.caps.async_ops, p.caps.events, p.caps.buffer_from_host_memory
            );
            let buft = d.buffer_type();
            println!(
                "    buffer type {}: alignment {}, max size {}",
                buft.name(),
                buft.alignment(),
                if buft.max_size() == usize::MAX {
                    "unlimited".to_string()
                } else {
                    buft.max_size().to_string()
                }
            );
            for extra in d.extra_buffer_types() {
                println!(
                    "    extra buffer type {}: weights stored repacked for the device's matrix kernels (models use it by default; --no-repack)",
                    extra.name()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The CPU's kernel choice: instruction family, machine, tuning in force.
fn cpu_kernels() {
    use tessera_cpu::isa::Isa;
    let isa = Isa::from_env();
    let forced = match std::env::var("TESSERA_CPU_ISA") {
        Ok(v) => format!("TESSERA_CPU_ISA={v}"),
        Err(_) => "the best here; TESSERA_CPU_ISA=scalar|avx2|avx512 forces one".into(),
    };
    println!("  kernels: {} ({forced})", isa.name());
    let machine = tessera_cpu::machine::Machine::detect();
    println!("  machine: {} [key {}]", machine.describe(), machine.key());
    let active = tessera_cpu::tuning::active();
    let settings = active.tuning.to_text();
    let settings: Vec<&str> = settings
        .lines()
        .filter(|l| !l.starts_with("machine="))
        .collect();
    println!(
        "  tuning: {}; {}",
        active.sources.join(" + "),
        if settings.is_empty() {
            "no settings beyond the kernels' defaults".to_string()
        } else {
            settings.join(" ")
        }
    );
    match tessera_cpu::tuning::saved_path(&machine) {
        Ok(p) if p.exists() => println!("  tuning file: {}", p.display()),
        Ok(p) => println!(
            "  tuning file: none yet ({}: `tessera bench tune --save` measures this machine)",
            p.display()
        ),
        Err(e) => println!("  tuning file: {e}"),
    }
    for w in &active.warnings {
        println!("  tuning warning: {w}");
    }
}
