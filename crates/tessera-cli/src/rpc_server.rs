//! `tessera rpc-server`: serve local devices to ggml-rpc clients (llama.cpp's
//! `--rpc HOST:PORT`, or Tessera's `tessera_rpc::connect`), protocol 7.0.0.

use std::process::ExitCode;
use std::sync::Arc;

use tessera::{Device, Registry, Result};

#[derive(clap::Args, Debug)]
pub struct RpcServerArgs {
    /// Address to bind. The protocol has no authentication: keep loopback
    /// unless the network is trusted.
    #[arg(long, short = 'H', default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind.
    #[arg(long, short = 'p', default_value_t = 50052)]
    pub port: u16,
    /// Devices to serve, comma-separated names (see `tessera devices`).
    #[arg(long, short = 'd', default_value = "cpu", value_delimiter = ',')]
    pub device: Vec<String>,
    /// Compute threads per client stream (default: the device's).
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Clients served at once.
    #[arg(long, default_value_t = 8)]
    pub max_connections: usize,
    /// Memory one client may allocate, in MiB.
    #[arg(long, default_value_t = 32 << 10)]
    pub max_client_mib: u64,
    /// Print why connections were closed.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

impl RpcServerArgs {
    /// Might the devices named be GPUs?
    pub fn uses_gpu(&self) -> bool {
        self.device.iter().any(|d| !d.eq_ignore_ascii_case("cpu"))
    }
}

pub fn run(args: &RpcServerArgs) -> Result<ExitCode> {
    let reg = Registry::global();
    let devices: Vec<Arc<dyn Device>> = args
        .device
        .iter()
        .map(|d| reg.device_by_name(d))
        .collect::<Result<_>>()?;
    let config = tessera_rpc::ServerConfig {
        max_connections: args.max_connections,
        max_client_bytes: args.max_client_mib.saturating_mul(1 << 20),
        threads: args.threads,
        verbose: args.verbose,
        ..tessera_rpc::ServerConfig::default()
    };
    let server =
        tessera_rpc::Server::bind((args.host.as_str(), args.port), devices.clone(), config)?;
    println!(
        "Tessera ggml-rpc server {}.{}.{} on {}",
        tessera_rpc::proto::PROTO_MAJOR,
        tessera_rpc::proto::PROTO_MINOR,
        tessera_rpc::proto::PROTO_PATCH,
        server.local_addr()?
    );
    for (i, d) in devices.iter().enumerate() {
        println!("  device {i}: {} ({})", d.name(), d.description());
    }
    server.run()?;
    Ok(ExitCode::SUCCESS)
}
