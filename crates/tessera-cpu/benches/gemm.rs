//! MUL_MAT with many columns (prompt processing): the packed GEMM against
//! the dot-product path on the same shapes, for the crossover in
//! `kernels/gemm.rs` (`min_cols`), at test-backend-ops' perf shape
//! (m = 4096, k = 14336) and 2 threads. Throughput is printed as items/s,
//! one item per FLOP (so `Gitem/s` reads as GFLOPS). Each product runs as a
//! one-node graph on a CPU stream (the kernels are private to the crate);
//! [`tessera_cpu::tuning::set_gemm_min_cols`] picks the path.
//!
//! Run: `cargo bench -p tessera-cpu --bench gemm -- <filter>`, e.g.
//! `-- q4_0` (the instruction set is `TESSERA_CPU_ISA`'s).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tessera::{Buffer, DType, Device, Graph, Place, Placement, Stream};

const M: usize = 4096;
const K: usize = 14336;
const THREADS: usize = 2;
const NS: [usize; 7] = [2, 4, 8, 16, 32, 64, 512];
/// Columns for repacked weights (every product takes the GEMM).
const NS_REPACK: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 512];

fn main() {
    divan::main();
}

/// Weights of type `t` [K, M] in a host buffer: 64 random rows (quantized
/// with the reference quantizer) repeated, built once per type.
fn weights(t: DType, repack: bool) -> Arc<dyn Buffer> {
    type Cache = Mutex<HashMap<(DType, bool), Arc<dyn Buffer>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache
        .entry((t, repack))
        .or_insert_with(|| {
            let row = t.row_size(K).unwrap();
            let mut seed = 0x1234_5678_u64;
            let pool: Vec<Vec<u8>> = (0..64)
                .map(|_| {
                    let v: Vec<f32> = (0..K)
                        .map(|_| {
                            seed = seed
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                        })
                        .collect();
                    let mut out = vec![0u8; row];
                    tessera::quant::from_f32(t, &v, &mut out).unwrap();
                    out
                })
                .collect();
            let device = tessera_cpu::device();
            let buft = if repack {
                device.extra_buffer_types().remove(0)
            } else {
                device.buffer_type()
            };
            let buffer = buft.alloc_buffer(row * M).unwrap();
            let layout = tessera::Layout::contiguous(t, &[K, M]).unwrap();
            buffer.init_tensor(&layout, 0).unwrap();
            for i in 0..M {
                buffer.write(i * row, &pool[i % 64]).unwrap();
            }
            buffer
        })
        .clone()
}

fn stream() -> &'static Arc<dyn Stream> {
    static STREAM: OnceLock<Arc<dyn Stream>> = OnceLock::new();
    STREAM.get_or_init(|| {
        tessera_cpu::device()
            .new_stream(&tessera::StreamOptions::new().threads(THREADS))
            .unwrap()
    })
}

/// One MUL_MAT of `t` weights by `n` columns; `gemm` picks the path.
fn run(bencher: divan::Bencher, t: DType, n: usize, gemm: bool) {
    run_on(bencher, t, n, gemm, false)
}

fn run_on(bencher: divan::Bencher, t: DType, n: usize, gemm: bool, repack: bool) {
    tessera_cpu::tuning::set_gemm_min_cols(Some(if gemm { 1 } else { usize::MAX }));
    let mut g = Graph::new();
    let a = g.new_tensor(t, &[K, M]).unwrap();
    let b = g.new_tensor(DType::F32, &[K, n]).unwrap();
    let d = g.mul_mat(a, b).unwrap();
    let io = tessera_cpu::device()
        .buffer_type()
        .alloc_buffer((K + M) * n * 4 + 64)
        .unwrap();
    let values: Vec<u8> = (0..K * n)
        .flat_map(|i| ((((i % 97) as f32) - 48.0) / 97.0).to_le_bytes())
        .collect();
    io.write(0, &values).unwrap();
    let mut p = Placement::new(&g);
    let d_offset = (K * n * 4).div_ceil(64) * 64;
    for (id, buffer, offset) in [
        (a, weights(t, repack), 0),
        (b, io.clone(), 0),
        (d, io, d_offset),
    ] {
        p.set(&g, id, Place { buffer, offset }).unwrap();
    }
    let s = stream();
    bencher
        .counter(divan::counter::ItemsCount::new(2 * M * K * n))
        .bench_local(|| s.compute(&g, &p).unwrap());
    tessera_cpu::tuning::set_gemm_min_cols(None);
}

macro_rules! type_benches {
    ($name:ident, $t:expr) => {
        mod $name {
            use super::*;

            #[divan::bench(args = NS, sample_count = 3, sample_size = 1)]
            fn gemm(bencher: divan::Bencher, n: usize) {
                run(bencher, $t, n, true);
            }

            #[divan::bench(args = NS, sample_count = 3, sample_size = 1)]
            fn dot(bencher: divan::Bencher, n: usize) {
                run(bencher, $t, n, false);
            }
        }
    };
}

type_benches!(f32, DType::F32);
type_benches!(f16, DType::F16);
type_benches!(bf16, DType::BF16);
type_benches!(q8_0, DType::Q8_0);
type_benches!(q4_0, DType::Q4_0);
type_benches!(q4_k, DType::Q4K);
type_benches!(q6_k, DType::Q6K);

/// Q4_0 weights in the CPU_REPACK buffer type (`tessera_cpu::repack`):
/// every column count takes the GEMM, reading the weights where they lie.
mod q4_0_repacked {
    use super::*;

    #[divan::bench(args = NS_REPACK, sample_count = 3, sample_size = 1)]
    fn gemm(bencher: divan::Bencher, n: usize) {
        run_on(bencher, DType::Q4_0, n, true, true);
    }
}
