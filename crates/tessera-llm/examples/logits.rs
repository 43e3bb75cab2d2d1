//! Print the logits after a prompt of token ids: `logits MODEL.gguf ID...`
//! (a development probe for comparisons with llama.cpp).

use std::sync::Arc;

use tessera::{BufferType, Device, Registry, StreamOptions};
use tessera_llm::{Model, Session, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: logits MODEL IDS...")?;
    let prompt: Vec<u32> = args[2..]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    tessera_cpu::register();
    let cpu: Arc<dyn Device> = Registry::global().device_by_name("cpu")?;
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let model = Arc::new(Model::load(
        tessera_gguf::GgufFile::open(path)?,
        &buft,
        &mut |_, _| {},
    )?);
    let opts = SessionOptions {
        n_ctx: prompt.len(),
        n_batch: std::env::var("NB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(512),
        ..SessionOptions::default()
    };
    let mut s = Session::new(model, vec![cpu.new_stream(&StreamOptions::new())?], opts)?;
    let l = s.decode(&prompt)?;
    let t: Vec<String> = l.iter().map(|v| format!("{v}")).collect();
    println!("{}", t.join(" "));
    Ok(())
}
