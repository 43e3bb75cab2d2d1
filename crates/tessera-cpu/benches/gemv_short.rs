//! One-column MUL_MAT over many short weight rows streamed from memory: the
//! shape of Gemma 3's tied output matrix (262,144 rows of 640 values, Q8_0,
//! 178 MB), which is most of a decoding step of the default model. The
//! matrix is larger than any cache, so this measures how close the short-row
//! path comes to the machine's read bandwidth (`tessera bench machine`);
//! bytes/s of weights are printed.
//!
//! Run: `cargo bench -p tessera-cpu --bench gemv_short` (the instruction set
//! is `TESSERA_CPU_ISA`'s; `TESSERA_BENCH_K` and `TESSERA_BENCH_ROWS` change
//! the shape, e.g. 2048 and 81920 for the K-quants).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tessera::{DType, Device, Graph, Place, Placement};

/// Rows (`TESSERA_BENCH_ROWS` to change: fewer rows stay in cache and
/// measure the kernels alone).
fn m_rows() -> usize {
    std::env::var("TESSERA_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(262_144)
}
/// Values per row (`TESSERA_BENCH_K`).
fn k_len() -> usize {
    std::env::var("TESSERA_BENCH_K")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(640)
}
const THREADS: usize = 2;

fn main() {
    divan::main();
}

#[divan::bench(args = [DType::Q8_0, DType::Q5_0, DType::Q4_0, DType::F16, DType::Q4K, DType::Q6K, DType::Q2K, DType::Q3K, DType::Q5K], sample_count = 10, sample_size = 1)]
fn gemma_output(bencher: divan::Bencher, t: DType) {
    // The K-quants need rows of whole 256-value blocks (TESSERA_BENCH_K=2048).
    if !k_len().is_multiple_of(t.block_size()) {
        eprintln!(
            "{t}: {} values a row are not whole blocks; skipped",
            k_len()
        );
        return;
    }
    let row = t.row_size(k_len()).unwrap();
    let mut seed = 0x9e37_79b9_u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    // 256 distinct rows, repeated: the bytes differ row to row in cache
    // lines, which is all the memory system sees.
    let pool: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            let v: Vec<f32> = (0..k_len()).map(|_| next()).collect();
            let mut out = vec![0u8; row];
            tessera::quant::from_f32(t, &v, &mut out).unwrap();
            out
        })
        .collect();
    let weights = tessera_cpu::device()
        .buffer_type()
        .alloc_buffer(row * m_rows())
        .unwrap();
    for i in 0..m_rows() {
        weights.write(i * row, &pool[i % pool.len()]).unwrap();
    }
    let mut g = Graph::new();
    let a = g.new_tensor(t, &[k_len(), m_rows()]).unwrap();
    let b = g.new_tensor(DType::F32, &[k_len(), 1]).unwrap();
    let d = g.mul_mat(a, b).unwrap();
    let io = tessera_cpu::device()
        .buffer_type()
        .alloc_buffer((k_len() + m_rows()) * 4 + 64)
        .unwrap();
    let values: Vec<u8> = (0..k_len()).flat_map(|_| next().to_le_bytes()).collect();
    io.write(0, &values).unwrap();
    let mut p = Placement::new(&g);
    let d_offset = (k_len() * 4).div_ceil(64) * 64;
    let weights: Arc<dyn tessera::Buffer> = weights;
    for (id, buffer, offset) in [(a, weights, 0), (b, io.clone(), 0), (d, io, d_offset)] {
        p.set(&g, id, Place { buffer, offset }).unwrap();
    }
    let s = tessera_cpu::device()
        .new_stream(&tessera::StreamOptions::new().threads(THREADS))
        .unwrap();
    bencher
        .counter(divan::counter::BytesCount::new(row * m_rows()))
        .bench_local(|| s.compute(&g, &p).unwrap());
}
