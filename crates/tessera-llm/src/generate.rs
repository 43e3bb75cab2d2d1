//! The generation loop: the prompt in batches, then one token at a time
//! (sample, hand it to the caller, evaluate it), until `n` tokens, an
//! end-of-generation token, the caller says stop, or the context is full
//! (the last token handed over is then not evaluated: no position is
//! left for it; [`GenerationStats::context_full`] says so). Timings are kept apart
//! for the prompt and the generation, as llama.cpp reports them.

use std::time::{Duration, Instant};

use tessera::{Error, Result};

use crate::sampling::Sampler;
use crate::session::Session;

/// What a generation did and how fast.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Time evaluating the prompt.
    pub prompt_time: Duration,
    /// Tokens generated (the last one is not evaluated).
    pub generated: usize,
    /// Time generating (sampling and evaluating each new token).
    pub generation_time: Duration,
    /// The generation stopped because the session's context was full.
    pub context_full: bool,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prompt_speed(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second (tokens after the first, whose logits
    /// came from the prompt, over the time spent evaluating them).
    pub fn generation_speed(&self) -> f64 {
        self.generated.saturating_sub(1) as f64 / self.generation_time.as_secs_f64().max(1e-9)
    }
}

/// Generate up to `n` tokens after `prompt`. `on_token` receives each token
/// and returns `false` to stop; `is_eog` ends generation at tokens like
/// end-of-turn (which are not passed on).
pub fn generate(
    session: &mut Session,
    sampler: &mut Sampler,
    prompt: &[u32],
    n: usize,
    is_eog: &dyn Fn(u32) -> bool,
    on_token: &mut dyn FnMut(u32) -> Result<bool>,
) -> Result<GenerationStats> {
    if prompt.is_empty() {
        return Err(Error::InvalidLayout("the prompt has no tokens".into()));
    }
    let mut stats = GenerationStats {
        prompt_tokens: prompt.len(),
        ..GenerationStats::default()
    };
    let t0 = Instant::now();
    let mut logits = session.decode(prompt)?;
    stats.prompt_time = t0.elapsed();
    for &t in prompt {
        sampler.accept(t);
    }
    let t1 = Instant::now();
    for i in 0..n {
        let tok = sampler.sample(&logits)?;
        if is_eog(tok) {
            break;
        }
        sampler.accept(tok);
        stats.generated += 1;
        if !on_token(tok)? || i + 1 == n {
            break;
        }
        if session.n_past() >= session.options().n_ctx {
            stats.context_full = true;
            break;
        }
        logits = session.decode(&[tok])?;
    }
    stats.generation_time = t1.elapsed();
    Ok(stats)
}
