//! Greedy continuation of token ids: `greedy MODEL.gguf N ID ID ...` prints
//! the generated ids (a development probe for cross-checks).

use std::sync::Arc;

use tessera::{BufferType, Device, Registry, StreamOptions};
use tessera_llm::{Model, Session, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: greedy MODEL N IDS...")?;
    let n: usize = args.get(2).ok_or("N")?.parse()?;
    let prompt: Vec<u32> = args[3..]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    tessera_cpu::register();
    let cpu: Arc<dyn Device> = Registry::global().device_by_name("cpu")?;
    let mut streams = vec![cpu.new_stream(&StreamOptions::new())?];
    let file = tessera_gguf::GgufFile::open(path)?;
    let mut buft: Arc<dyn BufferType> = cpu.buffer_type();
    // DEVICE=wgpu0: every weight there, the CPU as the fallback.
    if let Ok(name) = std::env::var("DEVICE") {
        tessera_wgpu::register();
        let dev = Registry::global().device_by_name(&name)?;
        buft = dev.buffer_type();
        streams.insert(0, dev.new_stream(&StreamOptions::new())?);
    }
    let model = Arc::new(Model::load(file, &buft, &mut |_, _| {})?);
    let opts = SessionOptions {
        n_ctx: prompt.len() + n,
        ..SessionOptions::default()
    };
    let mut s = Session::new(model, streams, opts)?;
    let t0 = std::time::Instant::now();
    let mut logits = s.decode(&prompt)?;
    eprintln!("prompt: {:?}", t0.elapsed());
    let t1 = std::time::Instant::now();
    let mut out = Vec::new();
    for _ in 0..n {
        let (best, _) = logits
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |a, (i, &v)| if v > a.1 { (i, v) } else { a },
            );
        out.push(best as u32);
        print!("{best} ");
        logits = s.decode(&[best as u32])?;
    }
    println!();
    eprintln!("{} tokens: {:?}", n, t1.elapsed());
    Ok(())
}
