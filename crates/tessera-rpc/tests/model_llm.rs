//! A language model over a remote device: tessera-llm's synthetic Llama
//! (4 layers, F32 and Q8_0 weights) with its layers split between the local
//! CPU and a remote CPU behind Tessera's server on loopback (layers 2.. and
//! the output remote), and with every layer remote, decodes the same 16
//! greedy tokens as the CPU alone, with every step's logits within 1e-5 of
//! the largest. The scheduler cuts the graph once (flash attention runs
//! remotely, so the KV cache stays there), and the connection's counters
//! show that decoding runs the stored graph by reference (GRAPH_RECOMPUTE)
//! and moves a few KiB per token (the hidden state out, the logits back).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::model::{assert_close, greedy, model_bytes, small};
use common::{THREADS, cpu, remote, server};
use tessera::{DType, Device, StreamOptions};
use tessera_llm::LayerMap;
use tessera_rpc::{ConnStats, RpcDevice};

const STEPS: usize = 16;
const N_LAYER: usize = 4;

fn cpu_stream() -> Arc<dyn tessera::Stream> {
    cpu()
        .new_stream(&StreamOptions::new().threads(THREADS))
        .unwrap()
}

fn stats(d: &Arc<dyn Device>) -> ConnStats {
    d.as_any().downcast_ref::<RpcDevice>().unwrap().stats()
}

#[test]
fn a_model_split_over_local_and_remote_decodes_like_the_cpu() {
    let h = server();
    let far = remote(&h);
    let local = cpu();
    for wtype in [DType::F32, DType::Q8_0] {
        let spec = small(N_LAYER, wtype);
        let bytes = model_bytes(&spec);
        let weight_bytes = bytes.len() as u64;
        let cpu_map = LayerMap::uniform(local.buffer_type(), N_LAYER);
        let (want, want_logits, _) = greedy(&bytes, &cpu_map, vec![cpu_stream()], STEPS, |_| {});
        // A model that decodes one token forever would hide a broken split.
        let distinct = want.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 2, "{wtype}: degenerate greedy tokens {want:?}");

        for first_remote in [2, 0] {
            let label = format!("{wtype}, layers {first_remote}.. remote");
            let mut map = LayerMap::uniform(local.buffer_type(), N_LAYER);
            map.set_layers(first_remote..N_LAYER, &far.buffer_type());
            map.set_output(far.buffer_type());
            let streams = vec![far.new_stream(&StreamOptions::new()).unwrap(), cpu_stream()];
            let mut at_step = Vec::new();
            let (got, logits, session) = greedy(&bytes, &map, streams, STEPS, |_| {
                at_step.push(stats(&far));
            });
            assert_eq!(got, want, "{label}: greedy tokens");
            assert_close(&logits, &want_logits, 1e-5, &label);
            // One CPU part (the embeddings' GET_ROWS, layers before
            // `first_remote`) and one remote part: every op of a layer
            // (flash attention included) runs remotely, so the KV cache
            // never crosses the wire.
            let splits = session.scheduler().n_splits();
            assert_eq!(splits, 2, "{label}: {splits} splits");
            // Traffic of the decoding steps after the first (the first one
            // builds the decoding graph and sends it whole).
            let end = stats(&far);
            let decode = end.since(&at_step[1]);
            let per_token = decode.bytes() / (STEPS as u64 - 1);
            println!(
                "{label}: {per_token} bytes on the wire per decoded token \
                 ({} sent, {} received over {} steps; {} graphs sent whole, \
                 {} recomputed; model file {weight_bytes} bytes)",
                decode.bytes_sent,
                decode.bytes_received,
                STEPS - 1,
                decode.graph_computes,
                decode.graph_recomputes,
            );
            // Per token: the hidden state and the small inputs out, the
            // logits (2 KiB) back, and a few frames; never the weights, the
            // cache or the graph.
            assert!(
                per_token < 8192,
                "{label}: {per_token} bytes per token: {decode:?}"
            );
            // The decoding graph is the same from step to step: sent whole
            // once, then run by reference.
            assert_eq!(decode.graph_computes, 0, "{label}: {decode:?}");
            assert_eq!(
                decode.graph_recomputes,
                STEPS as u64 - 1,
                "{label}: {decode:?}"
            );
        }
    }
}
