//! Write a synthetic model: `synth ARCH WTYPE VOCAB.gguf OUT.gguf` (the
//! cross-check script runs it through llama.cpp and Tessera).

use tessera::DType;
use tessera_llm::Arch;
use tessera_llm::synthetic::{SyntheticSpec, write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        return Err("usage: synth ARCH WTYPE VOCAB.gguf OUT.gguf".into());
    }
    let arch = Arch::from_name(&a[1])?;
    let wtype = DType::from_name(&a[2])?;
    let vocab = tessera_gguf::GgufFile::open(&a[3])?;
    write(&SyntheticSpec::small(arch, wtype), &vocab)?.write_file(&a[4])?;
    Ok(())
}
