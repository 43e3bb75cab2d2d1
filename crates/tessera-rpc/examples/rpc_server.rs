//! A ggml-rpc server over the local CPU device.
//!
//! `cargo run -p tessera-rpc --example rpc_server -- [HOST:PORT] [THREADS]`
//! (default `127.0.0.1:50052`). llama.cpp clients reach it with
//! `--rpc HOST:PORT`. Bind loopback unless the network is trusted: the
//! protocol has no authentication.

fn main() -> tessera::Result<()> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .unwrap_or_else(|| tessera_rpc::DEFAULT_ENDPOINT.to_owned());
    let threads = args.next().and_then(|t| t.parse().ok());
    let cpu: std::sync::Arc<dyn tessera::Device> = tessera_cpu::device();
    let config = tessera_rpc::ServerConfig {
        threads,
        verbose: true,
        ..tessera_rpc::ServerConfig::default()
    };
    let server = tessera_rpc::Server::bind(endpoint.as_str(), vec![cpu], config)?;
    println!(
        "Tessera ggml-rpc server {}.{}.{} on {} (CPU)",
        tessera_rpc::proto::PROTO_MAJOR,
        tessera_rpc::proto::PROTO_MINOR,
        tessera_rpc::proto::PROTO_PATCH,
        server.local_addr()?
    );
    server.run()
}
