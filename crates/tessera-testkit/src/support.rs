//! The support mode: which cases each device can run (test-backend-ops
//! `support`), one line per case and device. It builds the graphs and asks
//! `supports_op`; nothing is computed.

use std::sync::Arc;

use tessera::Device;

use crate::cases::catalogue;
use crate::harness::unsupported_ops;

/// Support of one case on one device.
#[derive(Clone, Debug, PartialEq)]
pub enum Support {
    /// Every op node is supported.
    Supported,
    /// These ops are not.
    NotSupported(Vec<String>),
    /// The case's graph could not be built (a catalogue bug).
    BuildError(String),
}

/// The support of every case of the catalogue on `device`, in order.
pub fn support_of(device: &dyn Device) -> Vec<(String, Support)> {
    catalogue()
        .into_iter()
        .map(|c| {
            let s = match c.build() {
                Ok(b) => {
                    let missing = unsupported_ops(device, &b.graph);
                    if missing.is_empty() {
                        Support::Supported
                    } else {
                        Support::NotSupported(missing)
                    }
                }
                Err(e) => Support::BuildError(e.to_string()),
            };
            (c.name, s)
        })
        .collect()
}

/// One line per case and device:
/// `MUL_MAT(...): SUPPORTED [CPU - AMD EPYC 7B13]`, then a count per device.
pub fn support_listing(devices: &[Arc<dyn Device>]) -> String {
    let mut out = String::new();
    for d in devices {
        let label = format!("[{} - {}]", d.name(), d.description());
        let rows = support_of(d.as_ref());
        let mut n = 0;
        for (name, s) in &rows {
            let status = match s {
                Support::Supported => {
                    n += 1;
                    "SUPPORTED".to_string()
                }
                Support::NotSupported(ops) => format!("NOT SUPPORTED ({})", ops.join(", ")),
                Support::BuildError(e) => format!("NOT SUPPORTED (graph build failed: {e})"),
            };
            out.push_str(&format!("{name}: {status} {label}\n"));
        }
        out.push_str(&format!("{label}: {n}/{} cases supported\n", rows.len()));
    }
    out
}
