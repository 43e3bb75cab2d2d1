//! The machine's tuning reaches the kernels (an installed setting changes
//! the path a product takes, on the same stream and graph: plans made under
//! another tuning are not reused), and per-node profiling counts what ran.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, place, stream};
use tessera::{DType, Graph, Stream, quant};
use tessera_cpu::CpuStream;
use tessera_cpu::tuning::{self, Tuning};

fn nmse(got: &[f64], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

/// `Q4_0 [k, m] x f32 [k, n]` placed and filled, with its f64 reference.
fn product(k: usize, m: usize, n: usize) -> (cpu_util::Placed, tessera::TensorId, Vec<f64>) {
    let mut rng = Rng::new(11);
    let mut g = Graph::new();
    let a = g.new_tensor(DType::Q4_0, &[k, m]).unwrap();
    let b = g.new_tensor(DType::F32, &[k, n]).unwrap();
    let out = g.mul_mat(a, b).unwrap();
    let p = place(g);
    let row_bytes = DType::Q4_0.row_size(k).unwrap();
    let mut bytes = vec![0u8; m * row_bytes];
    let mut a_vals = Vec::new();
    for row in bytes.chunks_mut(row_bytes) {
        let v: Vec<f32> = rng.vec(k, -1.0, 1.0).iter().map(|&x| x as f32).collect();
        quant::from_f32(DType::Q4_0, &v, row).unwrap();
        let mut d = vec![0f32; k];
        quant::to_f32(DType::Q4_0, row, &mut d).unwrap();
        a_vals.extend(d.into_iter().map(f64::from));
    }
    p.set_raw(a, &bytes);
    let b_vals: Vec<f64> = rng
        .vec(k * n, -1.0, 1.0)
        .iter()
        .map(|&x| f64::from(x as f32))
        .collect();
    p.set(b, &b_vals);
    let mut want = Vec::new();
    for j in 0..n {
        for i in 0..m {
            let (ar, br) = (&a_vals[i * k..][..k], &b_vals[j * k..][..k]);
            want.push(ar.iter().zip(br).map(|(x, y)| x * y).sum());
        }
    }
    (p, out, want)
}

#[test]
fn an_installed_tuning_changes_the_path_at_the_next_compute() {
    let (p, out, want) = product(512, 48, 16);
    let s = stream(2);
    // The GEMM from one column, integer path (8-bit activations, ggml's
    // error class) — where the machine has an integer kernel for Q4_0.
    let int = Tuning::parse("q4_0.gemm_from=1,q4_0.gemm_int=on").unwrap();
    let before = tuning::install(int, "test: integer");
    let g0 = tuning::generation();
    s.compute(&p.graph, &p.placement).unwrap();
    let e_int = nmse(&p.get(out), &want);
    // Same stream, same graph: the float path (f32 activations) must run
    // now, which only re-planning can give.
    tuning::install(
        Tuning::parse("q4_0.gemm_from=1,q4_0.gemm_int=off").unwrap(),
        "test: float",
    );
    assert!(tuning::generation() > g0);
    s.compute(&p.graph, &p.placement).unwrap();
    let e_float = nmse(&p.get(out), &want);
    // And the dot products (no GEMM at all), capped to portable code.
    tuning::install(
        Tuning::parse("q4_0.gemm_from=1000,q4_0.dot=scalar").unwrap(),
        "test: dot",
    );
    s.compute(&p.graph, &p.placement).unwrap();
    let e_dot = nmse(&p.get(out), &want);
    tuning::restore(&before);
    assert_eq!(tuning::active().sources, before.sources);

    assert!(e_float < 1e-10, "float path NMSE {e_float:e}");
    // The dot products quantize activations (ggml's bound).
    assert!(e_dot < 5e-4 && e_dot > 1e-9, "dot path NMSE {e_dot:e}");
    if tessera_cpu::isa::Isa::best() >= tessera_cpu::isa::Isa::Avx2 {
        // An integer kernel exists: its error is that of 8-bit activations.
        assert!(e_int < 5e-4 && e_int > 1e-9, "integer path NMSE {e_int:e}");
    }
}

#[test]
fn profiling_counts_every_node_by_kind() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[64, 8]).unwrap();
    let b = g.new_tensor(DType::F32, &[64, 1]).unwrap();
    let mm = g.mul_mat(a, b).unwrap();
    let x = g.add(mm, mm).unwrap();
    let y = g.add(x, mm).unwrap();
    let _ = g.scale(y, 2.0).unwrap();
    let p = place(g);
    p.set(a, &vec![0.5; 512]);
    p.set(b, &[1.0; 64]);
    let s = CpuStream::new(tessera_cpu::device(), 2, tessera_cpu::isa::Isa::from_env()).unwrap();
    // Off: nothing is recorded.
    s.compute(&p.graph, &p.placement).unwrap();
    assert!(s.take_profile().is_empty());
    s.set_profiling(true);
    for _ in 0..3 {
        s.compute(&p.graph, &p.placement).unwrap();
    }
    let prof = s.take_profile();
    let calls = |what: &str| prof.iter().find(|t| t.what == what).map(|t| t.calls);
    assert_eq!(calls("MUL_MAT f32 n=1"), Some(3), "{prof:?}");
    assert_eq!(calls("ADD"), Some(6), "{prof:?}");
    assert_eq!(calls("SCALE"), Some(3), "{prof:?}");
    assert_eq!(prof.len(), 3, "{prof:?}");
    for t in &prof {
        assert!(t.nanos > 0 && t.wait_nanos <= t.nanos, "{t:?}");
    }
    // Largest first.
    assert!(prof.windows(2).all(|w| w[0].nanos >= w[1].nanos));
    // Taken: starts over.
    s.compute(&p.graph, &p.placement).unwrap();
    assert_eq!(s.take_profile().iter().map(|t| t.calls).sum::<u64>(), 4);
    s.set_profiling(false);
    s.compute(&p.graph, &p.placement).unwrap();
    assert!(s.take_profile().is_empty());
}
