//! `tessera rpc-server`: serve local devices to ggml-rpc clients (llama.cpp's
//! `--rpc HOST:PORT`, or Tessera's `tessera_rpc::connect`), protocol 7.0.0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tessera::{Device, Registry, Result};

#[derive(clap::Args, Debug)]
pub struct RpcServerArgs {
    /// Address to bind. Plain ggml-rpc has no authentication: keep loopback
    /// unless the network is trusted, or require a key (--psk-file) and TLS.
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
    /// Speak TLS with this PEM certificate chain (Tessera's extension;
    /// llama.cpp clients cannot connect then). Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve only clients that prove the pre-shared key in this file
    /// (at least 16 bytes; Tessera's extension: `tessera run --rpc-psk-file`).
    #[arg(long)]
    pub psk_file: Option<PathBuf>,
    /// Serve the tensors of this GGUF file from the tensor cache: a client
    /// loading the same weights sends their hash instead of their bytes
    /// (repeatable; clients cannot add to the cache).
    #[arg(long)]
    pub cache_gguf: Vec<PathBuf>,
}

/// A mapped GGUF file as the bytes of cache entries.
struct CachedFile(tessera_gguf::GgufFile);

impl AsRef<[u8]> for CachedFile {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// The tensor cache of `files` (every tensor over the hash threshold).
fn tensor_cache(files: &[PathBuf]) -> Result<Option<Arc<tessera_rpc::TensorCache>>> {
    if files.is_empty() {
        return Ok(None);
    }
    let mut cache = tessera_rpc::TensorCache::new();
    for path in files {
        let file = crate::llm::open(path)?;
        let base = file.data_offset();
        let mut ranges = Vec::new();
        for t in file.tensors() {
            let offset = usize::try_from(t.offset)
                .ok()
                .and_then(|o| o.checked_add(base))
                .ok_or_else(|| tessera::Error::Overflow(format!("offset of {}", t.name)))?;
            ranges.push((offset, t.nbytes.unwrap_or(0)));
        }
        let n = cache.add(Arc::new(CachedFile(file)), &ranges)?;
        println!("  cache: {n} tensors of {}", path.display());
    }
    Ok(Some(Arc::new(cache)))
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
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(tessera_rpc::server_tls(c, k)?),
        _ => None,
    };
    let psk = args
        .psk_file
        .as_deref()
        .map(tessera_rpc::Psk::from_file)
        .transpose()?;
    let loopback = args.host == "localhost"
        || args
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback && psk.is_none() {
        eprintln!(
            "warning: serving {} without a key: anyone who reaches this port can use the \
             devices (give --psk-file, and --tls-cert/--tls-key on an open network)",
            args.host
        );
    }
    let secure = match (tls.is_some(), psk.is_some()) {
        (true, true) => "TLS, pre-shared key",
        (true, false) => "TLS",
        (false, true) => "pre-shared key",
        (false, false) => "plain, no authentication",
    };
    let config = tessera_rpc::ServerConfig {
        max_connections: args.max_connections,
        max_client_bytes: args.max_client_mib.saturating_mul(1 << 20),
        threads: args.threads,
        verbose: args.verbose,
        tls,
        psk,
        cache: tensor_cache(&args.cache_gguf)?,
        ..tessera_rpc::ServerConfig::default()
    };
    let server =
        tessera_rpc::Server::bind((args.host.as_str(), args.port), devices.clone(), config)?;
    println!(
        "Tessera ggml-rpc server {}.{}.{} on {} ({secure})",
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
