//! The bad-input suite over tessera-core, tessera and the CPU device (issue
//! 9): every case runs in a child process (see
//! `tessera_testkit::badinput::runner`), so a panic, abort, segfault, hang
//! or leaked thread is counted, and each test asserts there were none. The
//! cases are drawn with fixed seeds: the same on every run.
//!
//! Besides the shared groups, `cpu-specific` covers what only the CPU has:
//! `CpuStream::new` with bad thread counts, `isa=` settings, the thread pool,
//! the tuning knob and the support oracle on hand-made layouts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::{DType, Device, Graph, StreamOptions, TensorId};
use tessera_cpu::isa::Isa;
use tessera_cpu::{CpuStream, support, tuning};
use tessera_testkit::badinput::strategies::{option_string, raw_layout, sample, threads};
use tessera_testkit::badinput::{
    Case, DeviceProvider, Group, GroupSummary, Options, Stop, core_groups, device_groups, ensure,
    object_groups, run_suite,
};

fn cpu() -> DeviceProvider {
    Arc::new(|| Ok(tessera_cpu::device() as Arc<dyn Device>))
}

fn assert_clean(summaries: &[GroupSummary]) {
    let bad: Vec<String> = summaries
        .iter()
        .flat_map(|s| {
            s.failures()
                .map(move |(n, o)| format!("{}: {n}: {o}", s.group))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} failing cases:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(summaries.iter().all(|s| !s.cases.is_empty()));
}

#[test]
fn bad_input_core() {
    let s = run_suite("bad_input_core", &core_groups(), &Options::default());
    assert_clean(&s);
}

#[test]
fn bad_input_object_model() {
    let s = run_suite(
        "bad_input_object_model",
        &object_groups(),
        &Options::default(),
    );
    assert_clean(&s);
}

#[test]
fn bad_input_cpu_device() {
    let mut groups = device_groups("cpu", cpu());
    groups.push(Group::new("cpu-specific", cpu_cases));
    let s = run_suite("bad_input_cpu_device", &groups, &Options::default());
    assert_clean(&s);
}

fn cpu_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n, name) in sample((threads(), option_string()), 16, 200) {
        cases.push(Case::new(
            format!("CpuStream::new with {n} threads, isa from {name:?}"),
            move || -> Result<(), Stop> {
                let isa = Isa::from_name(&name).unwrap_or(Isa::Scalar);
                let s = CpuStream::new(tessera_cpu::device(), n, isa)?;
                ensure(n <= tessera::stream_options::MAX_THREADS, || {
                    format!("{n} threads accepted")
                })?;
                let _ = (s.n_threads(), s.isa());
                Ok(())
            },
        ));
    }
    let isas = [
        "scalar",
        "avx2",
        "avx512",
        "AVX2",
        "",
        "neon",
        "avx512,threads=0",
        "é",
    ];
    for isa in isas {
        cases.push(Case::new(format!("new_stream(isa={isa:?})"), move || {
            let o = StreamOptions::new().set("isa", isa);
            tessera_cpu::device().new_stream(&o).map(drop)
        }));
    }
    // (The thread pool is private to the crate; its own tests, in
    // `src/pool/tests.rs`, cover counts above the cap and failed spawns.)
    for cols in [Some(0usize), Some(1), Some(usize::MAX)] {
        cases.push(Case::new(
            format!("set_gemm_min_cols({cols:?}) then MUL_MAT"),
            move || {
                tuning::set_gemm_min_cols(cols);
                let r = matmul_once();
                tuning::set_gemm_min_cols(None);
                r
            },
        ));
    }
    for (l, k) in sample((raw_layout(), 0u32..8), 60, 202) {
        cases.push(Case::new(
            format!("supports_op / span_bytes of {l:?}, id {k}"),
            move || {
                let _ = support::span_bytes(&l);
                let mut g = Graph::new();
                let id = g.new_leaf(l)?;
                let y = g.dup(id).or_else(|_| g.new_tensor(DType::F32, &[1]))?;
                for id in [
                    id,
                    y,
                    TensorId::from_index(k),
                    TensorId::from_index(u32::MAX),
                ] {
                    let _ = support::supports_op(&g, id);
                    let _ = tessera_cpu::device().supports_op(&g, id);
                }
                Ok::<_, tessera::Error>(())
            },
        ));
    }
    cases
}

fn matmul_once() -> Result<(), Stop> {
    let dev = tessera_cpu::device();
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[32, 8])?;
    let b = g.new_tensor(DType::F32, &[32, 5])?;
    let y = g.mul_mat(a, b)?;
    g.set_output(y)?;
    let mut p = tessera::Placement::new(&g);
    tessera::GraphAllocator::new(dev.buffer_type()).alloc_graph(&g, &mut p)?;
    p.tensor(&g, a)?.write_f32(&[1.0; 256])?;
    p.tensor(&g, b)?.write_f32(&[0.5; 160])?;
    dev.new_stream(&StreamOptions::new())?.compute(&g, &p)?;
    let out = p.tensor(&g, y)?.read_f32()?;
    ensure(out.iter().all(|&v| v == 16.0), || {
        format!("MUL_MAT gave {out:?}")
    })
}
