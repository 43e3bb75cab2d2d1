//! Tokens per second of a synthetic Llama on the local CPU against the
//! same model with every layer (and the output layer) on a remote CPU over
//! loopback ggml-rpc, prompt processing and decoding, with the bytes on the
//! wire per token.
//!
//! ```text
//! cargo run --release -p tessera-rpc --example bench_loopback -- \
//!     [--embd 1024] [--layers 8] [--ff 4096] [--vocab 32000] [--wtype q8_0] \
//!     [--prompt 128] [--tokens 64] [--threads 2] [--reps 3] [--endpoint HOST:PORT]
//! ```
//!
//! Without `--endpoint` the server runs in this process on 127.0.0.1 (any
//! free port) over the CPU with `--threads` threads, so local and remote
//! compute with the same kernels and threads: the difference is the
//! protocol (serialisation, copies, round trips). With `--endpoint` it
//! measures any ggml-rpc server (e.g. llama.cpp's `ggml-rpc-server`).
//! The embeddings stay local (llama.cpp's input layer), as with `-ngl`.
//! Local and remote runs alternate; each figure is the best of `--reps`.
//! With the layers remote, the client's CPU stream (embeddings only) has
//! one thread: on a small machine shared by client and server, idle pool
//! workers spinning in the client would take cores from the server's.

use std::sync::Arc;
use std::time::Instant;

use tessera::{DType, Device, Result, Stream, StreamOptions};
use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::{Arch, LayerMap, Model, Session, SessionOptions};
use tessera_rpc::{ConnStats, RpcDevice, Server, ServerConfig};

struct Args {
    embd: usize,
    layers: usize,
    ff: usize,
    vocab: usize,
    wtype: DType,
    prompt: usize,
    tokens: usize,
    threads: usize,
    reps: usize,
    endpoint: Option<String>,
}

fn parse() -> std::result::Result<Args, String> {
    let mut a = Args {
        embd: 1024,
        layers: 8,
        ff: 4096,
        vocab: 32000,
        wtype: DType::Q8_0,
        prompt: 128,
        tokens: 64,
        threads: 2,
        reps: 3,
        endpoint: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let n = || v.parse::<usize>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--embd" => a.embd = n()?,
            "--layers" => a.layers = n()?,
            "--ff" => a.ff = n()?,
            "--vocab" => a.vocab = n()?,
            "--prompt" => a.prompt = n()?,
            "--tokens" => a.tokens = n()?,
            "--threads" => a.threads = n()?,
            "--reps" => a.reps = n()?.max(1),
            "--wtype" => {
                a.wtype = match v.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "q8_0" => DType::Q8_0,
                    "q4_0" => DType::Q4_0,
                    _ => return Err(format!("--wtype {v}: f32, f16, q8_0 or q4_0")),
                }
            }
            "--endpoint" => a.endpoint = Some(v),
            _ => return Err(format!("unknown option {k}")),
        }
    }
    Ok(a)
}

/// A vocabulary of `n` plain tokens (all the synthetic writer needs).
fn vocab(n: usize) -> Result<GgufFile> {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", "llama");
    w.add(
        "tokenizer.ggml.tokens",
        Value::array(ValueType::String, (0..n).map(|i| format!("<t{i}>"))),
    );
    GgufFile::from_bytes(w.to_bytes()?)
}

/// Timings of one run: (prompt tokens/s, decode tokens/s, traffic of the
/// decoding steps, traffic of the prompt, load seconds).
struct Run {
    prompt_tps: f64,
    decode_tps: f64,
    decode: ConnStats,
    prompt: ConnStats,
    load_s: f64,
}

fn stats(d: Option<&Arc<dyn Device>>) -> ConnStats {
    d.and_then(|d| d.as_any().downcast_ref::<RpcDevice>())
        .map(RpcDevice::stats)
        .unwrap_or_default()
}

fn run_once(
    a: &Args,
    bytes: &[u8],
    cpu: &Arc<dyn Device>,
    far: Option<&Arc<dyn Device>>,
) -> Result<Run> {
    let t0 = Instant::now();
    let file = GgufFile::from_bytes(bytes.to_vec())?;
    let mut map = LayerMap::uniform(cpu.buffer_type(), a.layers);
    let mut streams: Vec<Arc<dyn Stream>> = Vec::new();
    if let Some(far) = far {
        map = LayerMap::uniform(far.buffer_type(), a.layers);
        map.set_output(far.buffer_type());
        map.set_input(cpu.buffer_type());
        streams.push(far.new_stream(&StreamOptions::new())?);
    }
    // With every layer remote the local CPU only gathers the embeddings:
    // one thread, so that no idle worker of its pool spins on a core the
    // server's workers need (client and server share this machine).
    let local_threads = if far.is_some() { 1 } else { a.threads };
    streams.push(cpu.new_stream(&StreamOptions::new().threads(local_threads))?);
    let model = Arc::new(Model::load(file, &map, &mut |_, _| {})?);
    let load_s = t0.elapsed().as_secs_f64();
    let opts = SessionOptions {
        n_ctx: (a.prompt + a.tokens + 1).next_power_of_two().max(256),
        ..SessionOptions::default()
    };
    let mut s = Session::new(model, streams, opts)?;
    let prompt: Vec<u32> = (0..a.prompt)
        .map(|i| ((i * 7919 + 1) % a.vocab) as u32)
        .collect();
    let before = stats(far);
    let t = Instant::now();
    let mut logits = s.decode(&prompt)?;
    let prompt_s = t.elapsed().as_secs_f64();
    let after_prompt = stats(far);
    // One step untimed: the decoding graph is built and sent once.
    let argmax = |l: &[f32]| {
        l.iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
            .0 as u32
    };
    logits = s.decode(&[argmax(&logits)])?;
    let start = stats(far);
    let t = Instant::now();
    for _ in 0..a.tokens {
        logits = s.decode(&[argmax(&logits)])?;
    }
    let decode_s = t.elapsed().as_secs_f64();
    Ok(Run {
        prompt_tps: a.prompt as f64 / prompt_s,
        decode_tps: a.tokens as f64 / decode_s,
        decode: stats(far).since(&start),
        prompt: after_prompt.since(&before),
        load_s,
    })
}

/// The better of two runs, figure by figure.
fn better(b: Option<Run>, r: Run) -> Run {
    match b {
        None => r,
        Some(b) => Run {
            prompt_tps: b.prompt_tps.max(r.prompt_tps),
            decode_tps: b.decode_tps.max(r.decode_tps),
            load_s: b.load_s.min(r.load_s),
            ..r
        },
    }
}

fn main() -> Result<()> {
    let a = parse().map_err(tessera::Error::Malformed)?;
    let spec = SyntheticSpec {
        n_embd: a.embd,
        n_layer: a.layers,
        n_ff: a.ff,
        n_head: a.embd / 64,
        n_head_kv: (a.embd / 64 / 4).max(1),
        head_dim: 64,
        n_ctx: 4096,
        ..SyntheticSpec::small(Arch::Llama, a.wtype)
    };
    let bytes = write(&spec, &vocab(a.vocab)?)?.to_bytes()?;
    println!(
        "synthetic llama: n_embd {}, {} layers, n_ff {}, {} heads ({} KV), vocab {}, {} weights, {:.1} MiB",
        spec.n_embd,
        spec.n_layer,
        spec.n_ff,
        spec.n_head,
        spec.n_head_kv,
        a.vocab,
        a.wtype,
        bytes.len() as f64 / (1 << 20) as f64
    );
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let _server;
    let endpoint = match &a.endpoint {
        Some(e) => e.clone(),
        None => {
            let config = ServerConfig {
                threads: Some(a.threads),
                ..ServerConfig::default()
            };
            let h = Server::bind("127.0.0.1:0", vec![cpu.clone()], config)?.spawn()?;
            let addr = h.addr().to_string();
            _server = h;
            addr
        }
    };
    let far = tessera_rpc::connect(&endpoint)?
        .into_iter()
        .next()
        .ok_or_else(|| tessera::Error::Malformed(format!("{endpoint}: no device")))?;
    println!(
        "prompt {} tokens, {} decoded tokens, {} threads, best of {}",
        a.prompt, a.tokens, a.threads, a.reps
    );
    // Local and remote runs alternate, so that a change in the machine's
    // load weighs on both.
    let (mut local, mut remote) = (None, None);
    for _ in 0..a.reps {
        local = Some(better(local, run_once(&a, &bytes, &cpu, None)?));
        remote = Some(better(remote, run_once(&a, &bytes, &cpu, Some(&far))?));
    }
    let no_run = || tessera::Error::Malformed("no run".into());
    let (local, remote) = (local.ok_or_else(no_run)?, remote.ok_or_else(no_run)?);
    println!("| | prompt tok/s | decode tok/s | load s |");
    println!("|---|---:|---:|---:|");
    for (name, r) in [
        ("local CPU", &local),
        (&*format!("RPC {endpoint}"), &remote),
    ] {
        println!(
            "| {name} | {:.1} | {:.2} | {:.2} |",
            r.prompt_tps, r.decode_tps, r.load_s
        );
    }
    println!(
        "remote / local: prompt {:.1} %, decode {:.1} %",
        100.0 * remote.prompt_tps / local.prompt_tps,
        100.0 * remote.decode_tps / local.decode_tps
    );
    let d = &remote.decode;
    let n = a.tokens.max(1) as u64;
    println!(
        "wire per decoded token: {} B sent, {} B received, {:.1} requests; graphs: {} sent whole, {} recomputed over {} tokens",
        d.bytes_sent / n,
        d.bytes_received / n,
        d.requests as f64 / n as f64,
        d.graph_computes,
        d.graph_recomputes,
        a.tokens
    );
    let p = &remote.prompt;
    let np = a.prompt.max(1) as u64;
    println!(
        "wire per prompt token: {} B sent, {} B received ({} B for the whole prompt)",
        p.bytes_sent / np,
        p.bytes_received / np,
        p.bytes()
    );
    Ok(())
}
