//! Language models on Tessera: the decoder graphs of llama.cpp's common
//! architectures built from a GGUF file's metadata and tensors, the
//! tokenizers of its vocabulary (matching llama.cpp id for id), sampling, and
//! generation with a KV cache in device memory.
//!
//! No concrete device is known here: the caller hands in streams (and the
//! scheduler splits the graph over them).
#![forbid(unsafe_code)]

pub mod chat;
pub mod conversation;
pub mod decoder;
pub mod fetch;
pub mod fit;
pub mod fit_split;
pub mod generate;
pub mod kv_cache;
pub mod layers;
pub mod params;
pub mod sampling;
pub mod session;
pub mod synthetic;
pub mod tensor_split;
pub mod tokenizer;
pub mod weights;

pub use chat::{ChatTemplate, Message};
pub use conversation::Conversation;
pub use fit::{DevicePlan, FitPlan};
pub use fit_split::SplitFit;
pub use generate::{GenerationStats, generate};
pub use layers::LayerMap;
pub use params::{Arch, Moe, Params};
pub use sampling::{Sampler, SamplingOptions};
pub use session::{Model, Session, SessionOptions};
pub use weights::Repacked;
