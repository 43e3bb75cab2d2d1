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
        }
    }
    Ok(ExitCode::SUCCESS)
}
