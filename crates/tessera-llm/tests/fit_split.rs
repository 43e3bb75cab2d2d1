//! `--fit` for a tensor split: on a meta device over the CPU and the CPU
//! presented as a device with memory of its own (the test kit's decorator:
//! weights are uploaded to it as to a GPU), the bytes measured on the
//! planning twin are what loading and the session then take on every
//! device, byte for byte, before and after running; a budget moves split
//! rows off the device it limits (and no more than it must); one device
//! named twice shares one budget; a model that fits nowhere is an
//! out-of-memory error.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::tiny::vocab;

use std::sync::Arc;

use tessera::{Device, Error, Registry, Stream, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::fit_split::{fit_split, measure_split, split_usage};
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::{Arch, LayerMap, Model, Session, SessionOptions, SplitFit};
use tessera_meta::{MetaDevice, MetaOptions, SplitPolicy};
use tessera_testkit::decorate::Refusing;

fn model_bytes() -> Vec<u8> {
    model_with_layers(4)
}

fn model_with_layers(n_layer: usize) -> Vec<u8> {
    let spec = SyntheticSpec {
        n_layer,
        ..SyntheticSpec::small(Arch::Llama, tessera::DType::Q8_0)
    };
    write(&spec, &vocab()).unwrap().to_bytes().unwrap()
}

const OPTIONS: SessionOptions = SessionOptions {
    n_ctx: 256,
    kv_type: tessera::DType::F16,
    n_batch: 64,
    swa_full: false,
};

fn cpu() -> Arc<dyn Device> {
    tessera_cpu::register();
    Registry::global().device_by_name("cpu").unwrap()
}

fn cpu_stream() -> Arc<dyn Stream> {
    cpu().new_stream(&StreamOptions::new().threads(1)).unwrap()
}

/// The CPU, and the CPU as a device with memory of its own named "acc".
fn parts() -> Vec<Arc<dyn Device>> {
    let cpu = cpu();
    let acc: Arc<dyn Device> = Refusing::new(cpu.clone(), "acc", |_, _| false);
    vec![cpu, acc]
}

fn meta(parts: Vec<Arc<dyn Device>>, ratios: &[f64]) -> Arc<MetaDevice> {
    MetaDevice::new(
        parts,
        SplitPolicy::new(ratios.to_vec()).unwrap(),
        MetaOptions::default(),
    )
    .unwrap()
}

/// Load the model split as `meta` says, reserve, check the usage is `want`,
/// run a full batch and a few steps, check again; the logits.
fn load_and_check(bytes: &[u8], meta: &Arc<MetaDevice>, want: &SplitFit) -> Vec<f32> {
    // Compare bytes, not the budgets the fit records.
    let mut want = want.clone();
    for d in want
        .parts
        .iter_mut()
        .chain(std::iter::once(&mut want.input))
    {
        d.budget = None;
    }
    let want = &want;
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let n_layer = tessera_llm::Params::from_gguf(&file).unwrap().n_layer;
    let mut map = LayerMap::uniform(meta.buffer_type(), n_layer);
    map.set_input(cpu().buffer_type());
    let model = Arc::new(Model::load(file, &map, &mut |_, _| {}).unwrap());
    let streams = vec![
        meta.new_stream(&StreamOptions::new().threads(1)).unwrap(),
        cpu_stream(),
    ];
    let mut s = Session::new(model, streams, OPTIONS).unwrap();
    s.reserve().unwrap();
    let got = split_usage(&s).unwrap();
    assert_eq!(
        got.parts, want.parts,
        "after the reserve:\n{got}\nplanned:\n{want}"
    );
    assert_eq!(
        got.input, want.input,
        "after the reserve:\n{got}\nplanned:\n{want}"
    );
    let prompt: Vec<u32> = (1..=64).collect();
    let mut logits = s.decode(&prompt).unwrap();
    for t in [5, 6, 7] {
        logits.extend(s.decode(&[t]).unwrap());
    }
    let after = split_usage(&s).unwrap();
    assert_eq!(
        after.parts, want.parts,
        "memory grew while running:\n{after}"
    );
    assert_eq!(
        after.input, want.input,
        "memory grew while running:\n{after}"
    );
    logits
}

#[test]
fn the_split_plan_is_what_is_allocated() {
    let bytes = model_bytes();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let input = cpu_stream();
    for ratios in [vec![1.0, 2.0], vec![1.0, 0.0]] {
        let m = meta(parts(), &ratios);
        let want = measure_split(&file, &m, &input, &ratios, &OPTIONS).unwrap();
        assert!(
            want.parts.iter().all(|p| p.compute > 0) && want.parts[1].weights > 0,
            "{want}"
        );
        if ratios[1] > ratios[0] {
            assert!(want.parts[1].kv > want.parts[0].kv, "{want}");
            assert!(want.parts[1].weights > want.parts[0].weights, "{want}");
        }
        load_and_check(&bytes, &m, &want);
    }
}

#[test]
fn a_budget_moves_split_rows_off_the_device_it_limits() {
    let bytes = model_bytes();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let input = cpu_stream();
    let m = meta(parts(), &[1.0, 1.0]);
    // No budget: the preferred (even) shares.
    let free = fit_split(&file, &m, &input, &[], &[1.0, 1.0], &OPTIONS).unwrap();
    assert_eq!(free.ratios, vec![0.5, 0.5]);
    // "acc" may hold what it holds with a quarter of the split rows.
    let quarter = measure_split(&file, &m, &input, &[0.75, 0.25], &OPTIONS).unwrap();
    let half = measure_split(&file, &m, &input, &[0.5, 0.5], &OPTIONS).unwrap();
    let budget = quarter.parts[1].total();
    assert!(half.parts[1].total() > budget, "{half}\n{quarter}");
    let fit = fit_split(
        &file,
        &m,
        &input,
        &[("acc".into(), budget)],
        &[1.0, 1.0],
        &OPTIONS,
    )
    .unwrap();
    assert!(fit.parts[1].total() <= budget, "{fit}");
    assert_eq!(fit.parts[1].budget, Some(budget));
    // Not less than it must: at least the quarter that fits, below half.
    assert!(
        fit.ratios[1] >= 0.25 && fit.ratios[1] < 0.5,
        "{fit} (budget {budget})"
    );
    assert!((fit.ratios.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{fit}");
    // One byte less than the fit took moves rows off the device.
    let tighter = fit_split(
        &file,
        &m,
        &input,
        &[("acc".into(), fit.parts[1].total() - 1)],
        &[1.0, 1.0],
        &OPTIONS,
    )
    .unwrap();
    assert!(tighter.ratios[1] < fit.ratios[1], "{tighter}\n{fit}");
    assert!(
        tighter.parts[1].total() < fit.parts[1].total(),
        "{tighter}\n{fit}"
    );
    // What loading takes is the plan, and the results are the even
    // split's up to rounding: the row-parallel products (FFN down, cut on
    // `k` at 96/32 instead of 64/64) sum their partials in another order,
    // and this random 4-layer model amplifies rounding about 10^4-fold
    // (the integer GEMM's change from `f32(sum u q) (w dy) + o (dy sum q)`
    // to one exact integer sum moved its logits by 5e-3 of their scale;
    // the two splits then differed by 2.2e-3: before, the two large,
    // cancelling terms left every result on a grid ~128x coarser than its
    // own ulp, where partials add exactly whatever the cut). A wrong split
    // (rows or partials mixed up) moves them by the order of the scale.
    let fitted = meta(parts(), &fit.ratios);
    let got = load_and_check(&bytes, &fitted, &fit);
    let even = load_and_check(&bytes, &m, &free);
    let scale = even.iter().fold(0f32, |a, v| a.max(v.abs()));
    for (a, b) in got.iter().zip(&even) {
        assert!((a - b).abs() <= 1e-2 * scale, "{a} vs {b}");
    }
}

#[test]
fn one_device_named_twice_shares_one_budget() {
    let file = GgufFile::from_bytes(model_bytes()).unwrap();
    let input = cpu_stream();
    let cpu = cpu();
    let acc: Arc<dyn Device> = Refusing::new(cpu.clone(), "acc", |_, _| false);
    let three = vec![acc.clone(), acc, cpu];
    let m = meta(three, &[1.0, 1.0, 1.0]);
    let even = measure_split(&file, &m, &input, &[1.0, 1.0, 1.0], &OPTIONS).unwrap();
    // The two "acc" parts together get what one would hold at even shares.
    let budget = even.parts[0].total() + even.parts[1].total() * 3 / 5;
    let fit = fit_split(
        &file,
        &m,
        &input,
        &[("acc".into(), budget)],
        &[1.0, 1.0, 1.0],
        &OPTIONS,
    )
    .unwrap();
    assert!(
        fit.parts[0].total() + fit.parts[1].total() <= budget,
        "{fit} (budget {budget})"
    );
    assert!(
        (fit.ratios[0] - fit.ratios[1]).abs() < 1e-9,
        "the two parts keep their preferred 1:1: {fit}"
    );
    assert!(fit.ratios[2] > fit.ratios[0], "{fit}");
}

#[test]
fn a_model_that_fits_nowhere_is_an_out_of_memory_error() {
    let file = GgufFile::from_bytes(model_bytes()).unwrap();
    let input = cpu_stream();
    let m = meta(parts(), &[1.0, 1.0]);
    let err = fit_split(
        &file,
        &m,
        &input,
        &[("acc".into(), 4096), ("cpu".into(), 4096)],
        &[1.0, 1.0],
        &OPTIONS,
    )
    .unwrap_err();
    match err {
        Error::OutOfMemory { detail, .. } => {
            assert!(detail.contains("does not fit"), "{detail}")
        }
        e => panic!("expected an out-of-memory error, got {e}"),
    }
    // Preferred shares that leave out every device with room: an error too.
    let err = fit_split(&file, &m, &input, &[], &[0.0, 0.0], &OPTIONS).unwrap_err();
    assert!(matches!(err, Error::InvalidLayout(_)), "{err}");
}

/// What the devices move between them (partial sums sent and received)
/// lives only around each copy: the compute memory of a split does not
/// grow with the depth of the model.
#[test]
fn compute_memory_does_not_grow_with_the_layers() {
    let input = cpu_stream();
    let m = meta(parts(), &[1.0, 1.0]);
    let compute = |n_layer: usize| -> Vec<usize> {
        let file = GgufFile::from_bytes(model_with_layers(n_layer)).unwrap();
        let fit = measure_split(&file, &m, &input, &[1.0, 1.0], &OPTIONS).unwrap();
        fit.parts.iter().map(|p| p.compute).collect()
    };
    let (shallow, deep) = (compute(2), compute(16));
    assert_eq!(shallow, deep, "2 layers vs 16 layers");
}
