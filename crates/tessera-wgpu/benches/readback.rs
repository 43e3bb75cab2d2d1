//! Reading a tensor back from the GPU, as a decoding step reads its logits
//! (Llama 3's 128,256 values: 513 KB) and as small reads go (4 KB): the
//! host's cost of a read (staging buffer, copy command, submission,
//! mapping, copy out) on whatever adapter is found (lavapipe here; a GPU
//! adds its transfer time).
//!
//! Run: `cargo bench -p tessera-wgpu --bench readback`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tessera::{Device, Registry};

fn main() {
    divan::main();
}

fn gpu() -> Option<std::sync::Arc<dyn Device>> {
    tessera_wgpu::register();
    Registry::global()
        .devices()
        .into_iter()
        .find(|d| d.family_name() != "CPU")
}

#[divan::bench(args = [4096, 513_024], sample_count = 50, sample_size = 10)]
fn read(bencher: divan::Bencher, bytes: usize) {
    let Some(dev) = gpu() else {
        eprintln!("skipped: no GPU adapter");
        return;
    };
    let buf = dev.buffer_type().alloc_buffer(bytes).unwrap();
    buf.write(0, &vec![7u8; bytes]).unwrap();
    let mut out = vec![0u8; bytes];
    bencher.bench_local(|| {
        buf.read(0, &mut out).unwrap();
        divan::black_box(&out);
    });
}
