//! Fuzz target: `GgufFile::from_bytes` on arbitrary bytes and, when the
//! file parses, everything a user of a parsed file can touch — every
//! metadata value through several typed `get`s, every tensor info and its
//! data, the zero-copy binding over a host buffer (bytes and dequantized
//! values) and the `tessera gguf info` text and JSON dumps.
//!
//! Any panic, abort, out-of-memory or timeout is a finding.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera::{BufferType, HostBufferType};
use tessera_gguf::{GgufFile, Value};

// The CLI's dump functions, compiled in from its source.
#[allow(dead_code, unused_imports)]
#[path = "../../../tessera-cli/src/gguf.rs"]
mod cli_gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data) else {
        return;
    };
    let _ = (
        f.version(),
        f.alignment(),
        f.data_offset(),
        format!("{f:?}"),
    );

    for (k, v) in f.metadata() {
        let _ = f.get::<u8>(k);
        let _ = f.get::<i8>(k);
        let _ = f.get::<u16>(k);
        let _ = f.get::<i16>(k);
        let _ = f.get::<u32>(k);
        let _ = f.get::<i32>(k);
        let _ = f.get::<f32>(k);
        let _ = f.get::<bool>(k);
        let _ = f.get::<u64>(k);
        let _ = f.get::<i64>(k);
        let _ = f.get::<f64>(k);
        let _ = f.get::<String>(k);
        let _ = f.get::<&str>(k);
        let _ = f.get::<&Value>(k);
        let _ = f.get::<Vec<u32>>(k);
        let _ = f.get::<Vec<i32>>(k);
        let _ = f.get::<Vec<f32>>(k);
        let _ = f.get::<Vec<&str>>(k);
        let _ = f.get::<Vec<Vec<u8>>>(k);
        let _ = (v.value_type().name(), v.type_description(), f.value(k));
    }
    let _ = f.get::<u32>("general.alignment");
    let _ = f.get::<&str>("general.architecture");

    let buft: std::sync::Arc<dyn BufferType> = HostBufferType::new("CPU", usize::MAX, None);
    let buffer = f.data_buffer(buft.clone());
    for t in f.tensors() {
        let _ = (t.type_name(), t.dtype());
        let info = f.tensor_info(&t.name);
        let bytes = f.tensor_data(&t.name);
        if let (Ok(info), Ok(bytes)) = (&info, &bytes) {
            assert_eq!(Some(bytes.len()), info.nbytes, "tensor_data length");
        }
        if let Ok(x) = f.tensor_in(&buffer, &t.name) {
            if let (Ok(b), Ok(d)) = (x.to_bytes(), &bytes) {
                assert_eq!(&b[..], *d, "bound bytes differ from tensor_data");
            }
            let _ = x.read_f32();
        }
    }
    let _ = f.tensor_info("");
    let _ = f.tensor_data("no such tensor");
    if let Ok(bound) = f.bind_all(buft) {
        for (name, t) in &bound.tensors {
            let _ = bound.get(name);
            let _ = t.to_bytes();
        }
    }

    let _ = cli_gguf::text(&f);
    let _ = cli_gguf::json(&f);
});
