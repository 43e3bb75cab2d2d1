//! The meta device (tensor parallelism) over a remote device and the local
//! CPU: `meta(remote CPU on loopback, local CPU)` with even shares runs
//! conformance cases of the ops a transformer needs with their inputs cut
//! into pseudo-random shares (every split rule, the gathers and the
//! all-reduces go through the wire, ARGSORT included), and
//! the synthetic Llama with its
//! layers split tensor-wise over both devices decodes the CPU's greedy
//! tokens, the logits within 1e-4 of the largest (a row-parallel product
//! sums its halves in another order), with the meta stream's statistics
//! proving the split ran.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::model::{assert_close, greedy, model_bytes, small};
use common::{THREADS, cpu, remote, server};
use tessera::{DType, Device, StreamOptions};
use tessera_llm::LayerMap;
use tessera_meta::{MetaDevice, MetaOptions, MetaStream, SplitPolicy};
use tessera_testkit::{Outcome, RunOptions, run_all_with};

const OPS: [&str; 9] = [
    "MUL_MAT",
    "RMS_NORM",
    "ADD",
    "MUL",
    "SOFT_MAX",
    "ROPE",
    "GET_ROWS",
    "FLASH_ATTN_EXT",
    "GLU",
];

#[test]
fn conformance_cases_on_a_meta_device_over_remote_and_local() {
    let h = server();
    let meta = MetaDevice::new(
        vec![remote(&h), cpu()],
        SplitPolicy::even(2).unwrap(),
        MetaOptions {
            split_inputs: Some(5),
            ..MetaOptions::default()
        },
    )
    .unwrap();
    let mut passed = 0;
    let mut bad = Vec::new();
    for op in OPS {
        let options = RunOptions {
            filter: Some(op),
            n_threads: Some(1),
            stream_params: "",
        };
        let report = run_all_with(meta.as_ref(), &options).unwrap();
        assert!(!report.cases.is_empty(), "no {op} case");
        for c in &report.cases {
            match &c.outcome {
                Outcome::Passed { .. } => passed += 1,
                other => bad.push(format!("  {}: {other:?}", c.name)),
            }
        }
    }
    println!("meta(remote, cpu), inputs split: {passed} cases passed");
    assert!(passed >= 100, "only {passed} cases passed");
    assert!(
        bad.is_empty(),
        "{} cases failed:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn a_model_split_tensor_wise_over_remote_and_local_decodes_like_the_cpu() {
    const N_LAYER: usize = 2;
    const STEPS: usize = 16;
    let h = server();
    let far = remote(&h);
    let local = cpu();
    let meta = MetaDevice::new(
        vec![far.clone(), local.clone()],
        SplitPolicy::even(2).unwrap(),
        MetaOptions::default(),
    )
    .unwrap();
    let cpu_stream = || {
        local
            .new_stream(&StreamOptions::new().threads(THREADS))
            .unwrap()
    };
    for wtype in [DType::F32, DType::Q8_0] {
        let bytes = model_bytes(&small(N_LAYER, wtype));
        let cpu_map = LayerMap::uniform(local.buffer_type(), N_LAYER);
        let (want, want_logits, _) = greedy(&bytes, &cpu_map, vec![cpu_stream()], STEPS, |_| {});

        let mut map = LayerMap::uniform(meta.buffer_type(), N_LAYER);
        map.set_input(local.buffer_type());
        let ms = meta.new_stream(&StreamOptions::new().threads(1)).unwrap();
        let (got, logits, _) = greedy(&bytes, &map, vec![ms.clone(), cpu_stream()], STEPS, |_| {});
        let label = format!("{wtype} on {}", meta.name());
        let stats = ms.as_any().downcast_ref::<MetaStream>().unwrap().stats();
        println!("{label}: {stats:?}");
        assert_eq!(got, want, "{label}: greedy tokens");
        assert_close(&logits, &want_logits, 1e-4, &label);
        // Two all-reduces per layer per evaluation (attention, FFN).
        let evals = STEPS as u64 + 1;
        assert!(
            stats.reduces >= 2 * N_LAYER as u64 * evals,
            "{label}: {stats:?}"
        );
        assert_eq!(stats.gathers, 0, "{label}: {stats:?}");
        // The prompt and the first decoding step lower their graphs; the
        // other steps reuse the plan.
        assert_eq!(stats.lowerings, 2, "{label}: {stats:?}");
    }
}
