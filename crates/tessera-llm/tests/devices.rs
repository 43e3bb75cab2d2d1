//! The decoders on the wgpu device (Mesa's lavapipe in CI) and split across
//! the GPU and the CPU (layer 0 on the CPU, the rest on the GPU, the
//! scheduler copying between them), against llama.cpp's references on the
//! same synthetic files (`tests/data/synthetic.ref` and the mixture of
//! experts' `synthetic-moe.ref`, F32 weights): the same
//! greedy tokens and logits within 1e-3 of the largest. Without a GPU
//! adapter the test says so and passes, unless `TESSERA_REQUIRE_GPU=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{BufferType, DType, Device, Registry, StreamOptions};
use tessera_gguf::GgufFile;
use tessera_llm::synthetic::{SyntheticSpec, write};
use tessera_llm::weights::{WeightPlacement, layer_of};
use tessera_llm::{Arch, Model, Session, SessionOptions};

/// Layers from `first_gpu` on on the GPU, and the tensors of no layer
/// (embeddings, output) there too when `rest_on_gpu`, but the token
/// embeddings on the CPU when `embd_on_cpu` (llama.cpp's placement).
struct Split {
    gpu: Arc<dyn BufferType>,
    cpu: Arc<dyn BufferType>,
    first_gpu: usize,
    rest_on_gpu: bool,
    embd_on_cpu: bool,
}

impl WeightPlacement for Split {
    fn buffer_type(&self, name: &str) -> Arc<dyn BufferType> {
        match layer_of(name) {
            Some(l) if l < self.first_gpu => self.cpu.clone(),
            None if !self.rest_on_gpu => self.cpu.clone(),
            None if self.embd_on_cpu && name.starts_with("token_embd") => self.cpu.clone(),
            _ => self.gpu.clone(),
        }
    }
}

fn gpu() -> Option<Arc<dyn Device>> {
    tessera_cpu::register();
    tessera_wgpu::register();
    let d = Registry::global()
        .devices()
        .into_iter()
        .find(|d| d.family_name() != "CPU");
    if d.is_none() {
        assert!(
            std::env::var("TESSERA_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "TESSERA_REQUIRE_GPU=1 but no GPU adapter"
        );
        eprintln!("skipped: no GPU adapter");
    }
    d
}

#[test]
fn synthetic_models_on_the_gpu_and_split_match_llama_cpp() {
    let Some(gpu) = gpu() else { return };
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let models = common::llama_models_dir();
    let text = concat!(
        include_str!("data/synthetic.ref"),
        "\n",
        include_str!("data/synthetic-moe.ref")
    );
    // (arch, vocab, prompt, greedy, logits) of the F32 models.
    let mut refs = Vec::new();
    let mut lines = text.lines().filter(|l| !l.starts_with('#')).peekable();
    while let Some(l) = lines.next() {
        let Some(m) = l.strip_prefix("model: ") else {
            continue;
        };
        let w: Vec<&str> = m.split_whitespace().collect();
        let mut get = |key: &str| {
            let l = lines.next().unwrap();
            assert!(l.starts_with(key), "{l}");
            l[key.len()..]
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let (prompt, logits, greedy) = (get("prompt:"), get("logits:"), get("greedy:"));
        if w[1] == "f32" {
            refs.push((w[0].to_string(), w[2].to_string(), prompt, greedy, logits));
        }
    }
    assert_eq!(refs.len(), 5, "llama, qwen2, qwen3, gemma3, qwen3moe");
    for (arch, vocab, prompt, greedy, logits) in refs {
        let prompt: Vec<u32> = prompt.iter().map(|x| x.parse().unwrap()).collect();
        let greedy: Vec<u32> = greedy.iter().take(8).map(|x| x.parse().unwrap()).collect();
        let logits: Vec<f32> = logits.iter().map(|x| x.parse().unwrap()).collect();
        let vocab = GgufFile::open(models.join(format!("ggml-vocab-{vocab}.gguf"))).unwrap();
        let spec = SyntheticSpec::small(Arch::from_name(&arch).unwrap(), DType::F32);
        let bytes = write(&spec, &vocab).unwrap().to_bytes().unwrap();
        // The first GPU layer, and whether the token embeddings stay on
        // the CPU (the output layer on the GPU: a tied output matrix gets
        // a copy of them there).
        for (first_gpu, embd_on_cpu) in [(0, false), (1, false), (0, true)] {
            let place = Split {
                gpu: gpu.buffer_type(),
                cpu: cpu.buffer_type(),
                first_gpu,
                rest_on_gpu: true,
                embd_on_cpu,
            };
            let file = GgufFile::from_bytes(bytes.clone()).unwrap();
            let tied = file.tensor_info("output.weight").is_err();
            let model = Arc::new(Model::load(file, &place, &mut |_, _| {}).unwrap());
            if tied && embd_on_cpu {
                // The copy: on the GPU, the embeddings' bytes.
                let w = model.weights();
                let (out, embd) = (
                    w.find("output.weight").expect("a copy of the tied output"),
                    w.find("token_embd.weight").unwrap(),
                );
                assert_eq!(out.buffer().buffer_type().name(), gpu.buffer_type().name());
                assert_eq!(embd.buffer().buffer_type().name(), cpu.buffer_type().name());
                let bytes_of = |t: &tessera::Tensor| {
                    let mut v = vec![0u8; t.layout().checked_nbytes().unwrap()];
                    t.read(0, &mut v).unwrap();
                    v
                };
                assert!(bytes_of(out) == bytes_of(embd), "{arch}: the copy's bytes");
            }
            let streams = vec![
                gpu.new_stream(&StreamOptions::new()).unwrap(),
                cpu.new_stream(&StreamOptions::new().threads(2)).unwrap(),
            ];
            let opts = SessionOptions {
                n_ctx: prompt.len() + greedy.len(),
                ..SessionOptions::default()
            };
            let mut s = Session::new(model, streams, opts).unwrap();
            let mut l = s.decode(&prompt).unwrap();
            if embd_on_cpu {
                // GET_ROWS on the CPU, everything after it on the GPU (the
                // output product too, tied or not).
                assert_eq!(s.scheduler().n_splits(), 2, "{arch}: embeddings on the CPU");
            }
            let scale = logits.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (a, b)) in l.iter().zip(&logits).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-3 * scale,
                    "{arch} (first GPU layer {first_gpu}): logit {i}: {a} vs {b}"
                );
            }
            let mut got = Vec::new();
            for _ in 0..greedy.len() {
                let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
                got.push(best);
                l = s.decode(&[best]).unwrap();
            }
            assert_eq!(got, greedy, "{arch} (first GPU layer {first_gpu})");
            if first_gpu == 1 {
                assert!(
                    s.scheduler().n_splits() >= 2,
                    "{arch}: the split graph has a CPU and a GPU part"
                );
            }
        }
    }
}

/// The real Gemma 3 270M Q4_K_M with every layer on the GPU, and split
/// over GPU and CPU (its first 9 layers on the CPU), against llama.cpp's references
/// (`tests/data/gemma3-270m.ref`, as `crosscheck.rs` on the CPU): the 16
/// largest logits after the prompt within llama.cpp's own noise (its two
/// attention paths differ by that much), and 16 greedy tokens equal to
/// llama.cpp's until, at most, a tie at that precision. The first case
/// ("The capital of France is", 6 tokens) both ways; the fourth (9
/// tokens: its prompt's products take the integer tiles) all on the GPU.
#[test]
fn gemma3_270m_on_the_gpu_and_split_continues_like_llama_cpp() {
    let Some(gpu) = gpu() else { return };
    let refs = include_str!("data/gemma3-270m.ref");
    for (case, placements) in [(0, &[0, 9][..]), (3, &[0][..])] {
        gemma3_case(&gpu, refs, case, placements);
    }
}

/// Case `case` of `refs` (0-based) with its first layer on the GPU at
/// each of `placements`.
fn gemma3_case(gpu: &Arc<dyn Device>, refs: &str, case: usize, placements: &[usize]) {
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let field = |key: &str| {
        refs.lines()
            .filter_map(|l| l.strip_prefix(key))
            .nth(case)
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let prompt: Vec<u32> = field("prompt:")
        .iter()
        .map(|x| x.parse().unwrap())
        .collect();
    let greedy: Vec<u32> = field("greedy:")
        .iter()
        .take(16)
        .map(|x| x.parse().unwrap())
        .collect();
    let top: Vec<(usize, f32)> = field("top:")
        .iter()
        .map(|x| {
            let (i, v) = x.split_once(':').unwrap();
            (i.parse().unwrap(), v.parse().unwrap())
        })
        .collect();
    let noise: f32 = field("noise:")[0].parse().unwrap();
    assert!(top.len() == 16 && noise > 0.0 && greedy.len() == 16);
    for &first_gpu in placements {
        // The 262,144 x 640 embedding matrix (178 MB, also the output
        // projection) stays on the CPU: it is larger than one buffer may be
        // on lavapipe (128 MiB), as `--fit` would decide.
        let place = Split {
            gpu: gpu.buffer_type(),
            cpu: cpu.buffer_type(),
            first_gpu,
            rest_on_gpu: false,
            embd_on_cpu: false,
        };
        let file = GgufFile::open(common::gemma_gguf()).unwrap();
        let model = Arc::new(Model::load(file, &place, &mut |_, _| {}).unwrap());
        let streams = vec![
            gpu.new_stream(&StreamOptions::new()).unwrap(),
            cpu.new_stream(&StreamOptions::new().threads(2)).unwrap(),
        ];
        let opts = SessionOptions {
            n_ctx: prompt.len() + greedy.len(),
            ..SessionOptions::default()
        };
        let mut s = Session::new(model, streams, opts).unwrap();
        let mut l = s.decode(&prompt).unwrap();
        for &(id, v) in &top {
            assert!(
                (l[id] - v).abs() <= noise,
                "case {case}, first GPU layer {first_gpu}: logit of {id}: {} vs llama.cpp {v} (noise {noise})",
                l[id]
            );
        }
        for (step, &theirs) in greedy.iter().enumerate() {
            let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b });
            if best as u32 != theirs {
                let (a, b) = (l[best], l[theirs as usize]);
                assert!(
                    a - b <= noise,
                    "case {case}, first GPU layer {first_gpu}: step {step}: {best} ({a}) vs llama.cpp's {theirs} ({b})"
                );
                eprintln!(
                    "case {case}, first GPU layer {first_gpu}: parted at a tie at step {step}"
                );
                break;
            }
            l = s.decode(&[theirs]).unwrap();
        }
        if first_gpu == 9 {
            assert!(s.scheduler().n_splits() >= 2, "a CPU and a GPU part");
        }
    }
}
