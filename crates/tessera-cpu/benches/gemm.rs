//! MUL_MAT with many columns (prompt processing): the packed GEMM against
//! the dot-product path on the same shapes, for the crossover in
//! `kernels/gemm.rs` (`min_cols`), at test-backend-ops' perf shape
//! (m = 4096, k = 14336) and 2 threads. Throughput is printed as items/s,
//! one item per FLOP (so `Gitem/s` reads as GFLOPS).
//!
//! Run: `cargo bench -p tessera-cpu --bench gemm -- <filter>`, e.g.
//! `-- q4_0` (the instruction set is `TESSERA_CPU_ISA`'s).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tessera::{DType, Layout, MAX_SRC, Op};
use tessera_cpu::isa::Isa;
use tessera_cpu::kernels::gemm::set_min_cols_override;
use tessera_cpu::kernels::matmul::{mul_mat, mul_mat_scratch_size};
use tessera_cpu::kernels::{NodeCtx, Scratch, TensorRef};
use tessera_cpu::pool::ThreadPool;

const M: usize = 4096;
const K: usize = 14336;
const THREADS: usize = 2;
const NS: [usize; 7] = [2, 4, 8, 16, 32, 64, 512];

fn main() {
    divan::main();
}

/// 64-byte aligned bytes.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

fn aligned(bytes: usize) -> Vec<Line> {
    vec![Line([0; 64]); bytes.div_ceil(64).max(1)]
}

/// Weights of type `t` [K, M]: 64 random rows (quantized with the reference
/// quantizer) repeated, built once per type.
fn weights(t: DType) -> &'static [Line] {
    static CACHE: OnceLock<Mutex<HashMap<DType, &'static [Line]>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(t).or_insert_with(|| {
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
        let mut mem = aligned(row * M);
        // SAFETY: `Line` is 64 plain bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast::<u8>(), row * M) };
        for (i, r) in bytes.chunks_exact_mut(row).enumerate() {
            r.copy_from_slice(&pool[i % 64]);
        }
        Vec::leak(mem)
    })
}

fn pool() -> &'static ThreadPool {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| ThreadPool::new(THREADS).unwrap())
}

/// One MUL_MAT of `t` weights by `n` columns; `gemm` picks the path.
fn run(bencher: divan::Bencher, t: DType, n: usize, gemm: bool) {
    set_min_cols_override(Some(if gemm { 1 } else { usize::MAX }));
    let la = Layout::contiguous(t, &[K, M]).unwrap();
    let lb = Layout::contiguous(DType::F32, &[K, n]).unwrap();
    let ld = Layout::contiguous(DType::F32, &[M, n]).unwrap();
    let a = weights(t);
    let mut b = aligned(lb.nbytes());
    for (i, l) in b.iter_mut().enumerate() {
        for (j, v) in l.0.chunks_exact_mut(4).enumerate() {
            v.copy_from_slice(&((((i * 16 + j) % 97) as f32 - 48.0) / 97.0).to_le_bytes());
        }
    }
    let mut d = aligned(ld.nbytes());
    let size = mul_mat_scratch_size(&la, &lb, THREADS);
    let mut s = aligned(size);
    let mut src = [None; MAX_SRC];
    src[0] = Some(TensorRef {
        ptr: a.as_ptr().cast::<u8>().cast_mut(),
        layout: la,
    });
    src[1] = Some(TensorRef {
        ptr: b.as_mut_ptr().cast(),
        layout: lb,
    });
    let dst = TensorRef {
        ptr: d.as_mut_ptr().cast(),
        layout: ld,
    };
    let scratch = Scratch {
        ptr: s.as_mut_ptr().cast(),
        len: size,
    };
    let isa = Isa::from_env();
    bencher
        .counter(divan::counter::ItemsCount::new(2 * M * K * n))
        .bench_local(|| {
            pool().run(THREADS, &|w| {
                let ctx = NodeCtx {
                    op: Op::MulMat,
                    dst,
                    src,
                    ith: w.ith,
                    nth: w.nth,
                    scratch,
                    barrier: w.barrier,
                    isa,
                };
                mul_mat(&ctx).unwrap();
            })
        });
    set_min_cols_override(None);
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
