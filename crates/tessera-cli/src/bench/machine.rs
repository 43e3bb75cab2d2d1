//! `tessera bench machine`: the machine's limits that the op figures are
//! judged against — read bandwidth (a vector sum over 1 GiB) and the peak
//! f32 FMA rate (independent FMA chains), for 1 thread and for all threads.
//! These are the "read bandwidth" and "FMA peak" of the performance targets.

use std::time::Instant;

/// Bandwidth (GB/s, 1e9 bytes) and FMA peak (GFLOPS) measured with `threads`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub threads: usize,
    pub read_gbs: f64,
    pub fma_gflops: f64,
}

/// Measure with `threads` threads: best of 3 for each figure.
pub fn measure(threads: usize) -> Limits {
    let threads = threads.max(1);
    let bytes = 1usize << 30;
    let per = bytes / 4 / threads;
    let data: Vec<Vec<f32>> = (0..threads).map(|t| vec![1.0 + t as f32; per]).collect();
    let mut best_bw = 0f64;
    for _ in 0..3 {
        let t0 = Instant::now();
        let sums: Vec<f32> = std::thread::scope(|s| {
            let hs: Vec<_> = data.iter().map(|v| s.spawn(move || sum(v))).collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
        });
        let dt = t0.elapsed().as_secs_f64();
        std::hint::black_box(sums);
        best_bw = best_bw.max((per * 4 * threads) as f64 / dt / 1e9);
    }
    let iters = 20_000_000u64;
    let mut best_fma = 0f64;
    for _ in 0..3 {
        let t0 = Instant::now();
        let flops: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| s.spawn(move || fma_flops(iters)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
        });
        let dt = t0.elapsed().as_secs_f64();
        best_fma = best_fma.max(flops.iter().sum::<f64>() / dt / 1e9);
    }
    Limits {
        threads,
        read_gbs: best_bw,
        fma_gflops: best_fma,
    }
}

fn sum(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available (checked on the line above).
        return unsafe { x86::sum_avx2(v) };
    }
    // Eight independent accumulators let the compiler keep loads in flight.
    let mut acc = [0f32; 8];
    for c in v.chunks_exact(8) {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum()
}

/// FLOPs done by `iters` rounds of independent FMA chains.
fn fma_flops(iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA are available (checked on the line above).
        return unsafe { x86::fma_avx2(iters) };
    }
    let mut acc = [1.0f32; 16];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    std::hint::black_box(acc);
    iters as f64 * 16.0 * 2.0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_avx2(v: &[f32]) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 4];
        let chunks = v.chunks_exact(32);
        for c in chunks {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: `c` has 32 floats, so 8 at `8 * k` are in bounds;
                // unaligned loads are allowed.
                let x = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * k)) };
                *a = _mm256_add_ps(*a, x);
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut out = [0f32; 8];
        // SAFETY: `out` holds 8 floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
        out.iter().sum()
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_avx2(iters: u64) -> f64 {
        let m = _mm256_set1_ps(0.999_999);
        let c = _mm256_set1_ps(1e-7);
        let mut acc = [_mm256_set1_ps(1.0); 10];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, m, c);
            }
        }
        std::hint::black_box(acc);
        iters as f64 * 10.0 * 8.0 * 2.0
    }
}
