//! `--fit` on two devices (the CPU, and the CPU presented as a device with
//! its own memory by the test kit's decorator, so weights are uploaded and
//! ops split as on a GPU): the measured plan is what loading and the
//! session then allocate, byte for byte; the fit is tight (one byte less
//! of budget moves a layer off the device); a model that fits nowhere is an
//! out-of-memory error naming the device; results equal the CPU's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::tiny::vocab;

use std::sync::Arc;

use tessera::{Device, Error, Registry, Stream, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::fit::{fit, measure};
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::{Arch, LayerMap, Model, Session, SessionOptions};
use tessera_testkit::decorate::Refusing;

fn model_bytes() -> Vec<u8> {
    let spec = SyntheticSpec {
        n_layer: 6,
        ..SyntheticSpec::small(Arch::Llama, tessera::DType::F32)
    };
    write(&spec, &vocab()).unwrap().to_bytes().unwrap()
}

fn streams() -> Vec<Arc<dyn Stream>> {
    tessera_cpu::register();
    let cpu: Arc<dyn Device> = Registry::global().device_by_name("cpu").unwrap();
    let acc: Arc<dyn Device> = Refusing::new(cpu.clone(), "acc", |_, _| false);
    let o = StreamOptions::new().threads(2);
    vec![acc.new_stream(&o).unwrap(), cpu.new_stream(&o).unwrap()]
}

const OPTIONS: SessionOptions = SessionOptions {
    n_ctx: 256,
    kv_type: tessera::DType::F16,
    n_batch: 64,
    swa_full: false,
};

#[test]
fn the_plan_is_what_is_allocated_and_the_fit_is_tight() {
    let bytes = model_bytes();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let s = streams();
    let acc = s[0].device().buffer_type();
    let cpu = s[1].device().buffer_type();
    // The budget that holds exactly the last 3 layers.
    let three = LayerMap::last_layers(cpu.clone(), acc.clone(), 6, 3);
    let want = measure(&file, &three, &s, &OPTIONS).unwrap();
    assert_eq!((want[0].layers, want[1].layers), (3, 3));
    assert!(
        want[0].weights > 0 && want[0].kv > 0 && want[0].compute > 0,
        "{want:?}"
    );
    let budget = want[0].total();

    let plan = fit(&file, &s, &[Some(budget), None], &OPTIONS).unwrap();
    assert_eq!(plan.devices[0].layers, 3, "{plan}");
    assert_eq!(plan.devices[0].total(), budget);
    assert!(!plan.devices[0].output);
    let tighter = fit(&file, &s, &[Some(budget - 1), None], &OPTIONS).unwrap();
    assert_eq!(tighter.devices[0].layers, 2, "{tighter}");
    let all = fit(&file, &s, &[None, None], &OPTIONS).unwrap();
    assert_eq!((all.devices[0].layers, all.devices[0].output), (6, true));

    // Load with the plan: what is allocated is what was measured.
    let model = Arc::new(
        Model::load(
            GgufFile::from_bytes(bytes.clone()).unwrap(),
            &plan.map,
            &mut |_, _| {},
        )
        .unwrap(),
    );
    let by = model.weights().bytes_by_buffer_type();
    let weights_in =
        |name: &str| -> usize { by.iter().filter(|(n, _)| n == name).map(|(_, b)| b).sum() };
    let mut session = Session::new(model, s.clone(), OPTIONS).unwrap();
    let compute = session.reserve().unwrap();
    for (i, (d, buft)) in plan.devices.iter().zip([&acc, &cpu]).enumerate() {
        assert_eq!(weights_in(buft.name()), d.weights, "{} weights", d.device);
        assert_eq!(
            session.cache().bytes_in(buft.name()),
            d.kv,
            "{} cache",
            d.device
        );
        assert_eq!(compute[i], d.compute, "{} compute", d.device);
    }

    // It runs, with the CPU's results, within the reserved buffers.
    let prompt: Vec<u32> = (1..50).collect();
    let mut got = session.decode(&prompt).unwrap();
    for t in [5, 6, 7] {
        got.extend(session.decode(&[t]).unwrap());
    }
    for (i, d) in plan.devices.iter().enumerate() {
        assert_eq!(
            session.scheduler().buffer_size(i).unwrap(),
            d.compute,
            "{}: compute buffers grew after the reserve",
            d.device
        );
    }
    let cpu_only = Arc::new(
        Model::load(
            GgufFile::from_bytes(bytes).unwrap(),
            &LayerMap::uniform(cpu.clone(), 6),
            &mut |_, _| {},
        )
        .unwrap(),
    );
    let mut reference = Session::new(cpu_only, vec![s[1].clone()], OPTIONS).unwrap();
    let mut want = reference.decode(&prompt).unwrap();
    for t in [5, 6, 7] {
        want.extend(reference.decode(&[t]).unwrap());
    }
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-4 * scale, "{a} vs {b}");
    }
}

#[test]
fn a_model_that_fits_nowhere_is_an_error_naming_the_device() {
    let file = GgufFile::from_bytes(model_bytes()).unwrap();
    let s = streams();
    match fit(&file, &s, &[Some(1000), Some(1000)], &OPTIONS) {
        Err(Error::OutOfMemory { device, detail, .. }) => {
            // The first device over its budget: even with no layers, the
            // accelerator plans compute buffers (the scheduler runs the
            // ops it can there), larger than 1000 bytes.
            assert_eq!(device, "acc", "{detail}");
            assert!(detail.contains("does not fit"), "{detail}");
            assert!(detail.contains("CPU: 6 layers + output"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
}
