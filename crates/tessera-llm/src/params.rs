//! Hyperparameters of a decoder, read from a GGUF file's metadata
//! (`{arch}.block_count`, `{arch}.attention.head_count`, ...), with
//! llama.cpp's defaults where a key is optional and a clear error naming the
//! key where it is missing, has the wrong type or an impossible value.

use tessera::{Error, Result};
use tessera_gguf::{GgufFile, Value};

/// The architectures Tessera builds (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, Mistral, SmolLM, TinyLlama.
    Llama,
    /// Qwen 2 / 2.5 (biases on Q, K, V).
    Qwen2,
    /// Qwen 3 (per-head Q/K RMS norm).
    Qwen3,
    /// Gemma 3 (text).
    Gemma3,
    /// Qwen 3 mixture of experts (Qwen3-30B-A3B): Qwen 3's attention, a
    /// routed feed-forward of `expert_count` experts, `expert_used_count`
    /// per token, their weights renormalised to sum to 1.
    Qwen3Moe,
}

impl Arch {
    /// The architecture named `name` in a GGUF file.
    pub fn from_name(name: &str) -> Result<Arch> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "qwen3moe" => Arch::Qwen3Moe,
            other => {
                return Err(Error::unsupported(
                    "tessera-llm",
                    format!(
                        "architecture '{other}' (general.architecture); Tessera builds llama, qwen2, qwen3, qwen3moe and gemma3"
                    ),
                ));
            }
        })
    }

    /// The GGUF name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen3Moe => "qwen3moe",
        }
    }

    /// Per-head RMS norm of Q and K (`attn_q_norm`, `attn_k_norm`).
    pub fn has_qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3)
    }
}

/// A decoder's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Architecture.
    pub arch: Arch,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Feed-forward width.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention).
    pub n_head_kv: usize,
    /// Size of a key head.
    pub head_dim_k: usize,
    /// Size of a value head.
    pub head_dim_v: usize,
    /// RMS norm epsilon.
    pub eps: f32,
    /// Dimensions rotated by RoPE.
    pub n_rot: usize,
    /// RoPE base of the global layers.
    pub rope_base: f32,
    /// RoPE position scale of the global layers (1 / linear scaling factor).
    pub rope_scale: f32,
    /// RoPE base of the sliding-window layers.
    pub rope_base_swa: f32,
    /// Sliding window (0: none).
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global, the others slide (0: none).
    pub swa_pattern: usize,
    /// The mixture of experts, for architectures with one.
    pub moe: Option<Moe>,
}

/// A routed feed-forward's hyperparameters (`{arch}.expert_*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moe {
    /// Experts per layer (`expert_count`).
    pub n_expert: usize,
    /// Experts used per token (`expert_used_count`).
    pub n_expert_used: usize,
    /// Feed-forward width of one expert (`expert_feed_forward_length`;
    /// llama.cpp's default `feed_forward_length / expert_used_count`).
    pub n_ff_exp: usize,
    /// The chosen experts' weights are divided by their sum (llama.cpp's
    /// `norm_w`: true for qwen3moe).
    pub norm_weights: bool,
    /// The weights are then multiplied by this (`expert_weights_scale`; 0
    /// and 1 mean none, as in llama.cpp).
    pub weights_scale: f32,
}

/// A metadata integer of any integer type, as usize.
fn uint(file: &GgufFile, key: &str) -> Result<Option<usize>> {
    let Some(v) = file.value(key) else {
        return Ok(None);
    };
    let n: Option<u64> = match v {
        Value::U8(x) => Some(u64::from(*x)),
        Value::U16(x) => Some(u64::from(*x)),
        Value::U32(x) => Some(u64::from(*x)),
        Value::U64(x) => Some(*x),
        Value::I8(x) => u64::try_from(*x).ok(),
        Value::I16(x) => u64::try_from(*x).ok(),
        Value::I32(x) => u64::try_from(*x).ok(),
        Value::I64(x) => u64::try_from(*x).ok(),
        // Some converters write one value per layer: all equal is accepted.
        Value::Array(_, items) if !items.is_empty() && items.iter().all(|i| i == &items[0]) => {
            return uint_of(&items[0], key).map(Some);
        }
        _ => None,
    };
    let n = n.ok_or_else(|| {
        Error::Malformed(format!(
            "metadata '{key}': expected a non-negative integer, found {}",
            v.type_description()
        ))
    })?;
    usize::try_from(n)
        .map(Some)
        .map_err(|_| Error::Malformed(format!("metadata '{key}' = {n} is too large")))
}

fn uint_of(v: &Value, key: &str) -> Result<usize> {
    match v {
        Value::U32(x) => Ok(*x as usize),
        Value::I32(x) if *x >= 0 => Ok(*x as usize),
        _ => Err(Error::Malformed(format!(
            "metadata '{key}': expected integers, found {}",
            v.type_description()
        ))),
    }
}

fn float(file: &GgufFile, key: &str) -> Result<Option<f32>> {
    match file.value(key) {
        None => Ok(None),
        Some(Value::F32(x)) if x.is_finite() => Ok(Some(*x)),
        Some(Value::F64(x)) if x.is_finite() => Ok(Some(*x as f32)),
        Some(v) => Err(Error::Malformed(format!(
            "metadata '{key}': expected a finite float, found {} {v:?}",
            v.type_description()
        ))),
    }
}

fn required(file: &GgufFile, key: &str) -> Result<usize> {
    uint(file, key)?.ok_or_else(|| Error::NotFound(format!("metadata key '{key}' (required)")))
}

/// Largest value any size may take (keeps products far from overflow).
const MAX_DIM: usize = 1 << 20;

impl Params {
    /// Read the hyperparameters of `file`.
    pub fn from_gguf(file: &GgufFile) -> Result<Params> {
        let arch_name: &str = file.get("general.architecture")?;
        let arch = Arch::from_name(arch_name)?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let n_embd = required(file, &k("embedding_length"))?;
        let n_layer = required(file, &k("block_count"))?;
        let n_ff = required(file, &k("feed_forward_length"))?;
        let n_head = required(file, &k("attention.head_count"))?;
        let n_head_kv = uint(file, &k("attention.head_count_kv"))?.unwrap_or(n_head);
        let n_ctx_train = uint(file, &k("context_length"))?.unwrap_or(2048);
        let head_dim_k = match uint(file, &k("attention.key_length"))? {
            Some(d) => d,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        let head_dim_v = uint(file, &k("attention.value_length"))?.unwrap_or(head_dim_k);
        let n_rot = uint(file, &k("rope.dimension_count"))?.unwrap_or(head_dim_k);
        let eps = float(file, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5);
        let rope_base = float(file, &k("rope.freq_base"))?.unwrap_or(10000.0);
        let rope_scale = match file.value(&k("rope.scaling.type")) {
            Some(Value::String(t)) if t == "linear" => {
                let f = float(file, &k("rope.scaling.factor"))?.unwrap_or(1.0);
                if f <= 0.0 {
                    return Err(Error::Malformed(format!(
                        "metadata '{}' = {f} must be positive",
                        k("rope.scaling.factor")
                    )));
                }
                1.0 / f
            }
            Some(Value::String(t)) if t == "none" => 1.0,
            Some(Value::String(t)) => {
                return Err(Error::unsupported(
                    "tessera-llm",
                    format!("RoPE scaling '{t}' ({})", k("rope.scaling.type")),
                ));
            }
            Some(v) => {
                return Err(Error::Malformed(format!(
                    "metadata '{}': expected a string, found {}",
                    k("rope.scaling.type"),
                    v.type_description()
                )));
            }
            None => 1.0,
        };
        let (sliding_window, swa_pattern, rope_base_swa) = match arch {
            // llama.cpp: 5 sliding layers for each global one, local base 10000.
            Arch::Gemma3 => (
                uint(file, &k("attention.sliding_window"))?.unwrap_or(0),
                6,
                10000.0,
            ),
            _ => (0, 0, rope_base),
        };
        let moe = match arch {
            Arch::Qwen3Moe => {
                let n_expert = required(file, &k("expert_count"))?;
                let n_expert_used = required(file, &k("expert_used_count"))?;
                if n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert {
                    return Err(Error::Malformed(format!(
                        "{arch_name}: expert_used_count {n_expert_used} must be in 1..=expert_count {n_expert}"
                    )));
                }
                let n_ff_exp = match uint(file, &k("expert_feed_forward_length"))? {
                    Some(n) if n > 0 => n,
                    _ => n_ff / n_expert_used,
                };
                Some(Moe {
                    n_expert,
                    n_expert_used,
                    n_ff_exp,
                    norm_weights: true,
                    weights_scale: float(file, &k("expert_weights_scale"))?.unwrap_or(0.0),
                })
            }
            _ => None,
        };
        let p = Params {
            arch,
            n_ctx_train,
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            eps,
            n_rot,
            rope_base,
            rope_scale,
            rope_base_swa,
            sliding_window,
            swa_pattern,
            moe,
        };
        p.validate()?;
        Ok(p)
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Malformed(format!("{}: {what}", self.arch.name())));
        for (name, v) in [
            ("embedding_length", self.n_embd),
            ("block_count", self.n_layer),
            ("feed_forward_length", self.n_ff),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim_k),
            ("attention.value_length", self.head_dim_v),
        ] {
            if v == 0 || v > MAX_DIM {
                return bad(format!("{name} = {v} must be in 1..={MAX_DIM}"));
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "head_count {} is not a multiple of head_count_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.n_rot == 0 || !self.n_rot.is_multiple_of(2) || self.n_rot > self.head_dim_k {
            return bad(format!(
                "rope.dimension_count {} must be even, > 0 and <= the key head size {}",
                self.n_rot, self.head_dim_k
            ));
        }
        if let Some(m) = self.moe {
            for (name, v) in [
                ("expert_count", m.n_expert),
                ("expert_feed_forward_length", m.n_ff_exp),
            ] {
                if v == 0 || v > MAX_DIM {
                    return bad(format!("{name} = {v} must be in 1..={MAX_DIM}"));
                }
            }
            if i32::try_from(m.n_expert).is_err() || m.n_expert > 4096 {
                return bad(format!("expert_count {} is too large", m.n_expert));
            }
        }
        if self.eps <= 0.0 || self.rope_base <= 0.0 {
            return bad("epsilon and rope.freq_base must be positive".into());
        }
        Ok(())
    }

    /// Does layer `il` use the sliding window?
    pub fn is_swa(&self, il: usize) -> bool {
        self.sliding_window > 0
            && self.swa_pattern > 0
            && il % self.swa_pattern < self.swa_pattern - 1
    }

    /// Keys (or values) per token per layer: `head_dim * n_head_kv`.
    pub fn n_embd_k(&self) -> usize {
        self.head_dim_k * self.n_head_kv
    }

    /// Values per token per layer.
    pub fn n_embd_v(&self) -> usize {
        self.head_dim_v * self.n_head_kv
    }
}
