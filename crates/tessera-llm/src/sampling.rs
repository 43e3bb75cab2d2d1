//! Choosing the next token from logits, as llama.cpp's default sampler
//! chain does: repetition penalty over the last tokens, top-k, top-p,
//! min-p, temperature, then a draw from a seeded generator (the same seed
//! gives the same tokens). A temperature of 0 is greedy (argmax, the lowest
//! id among equal logits).

use tessera::{Error, Result};

/// Sampling settings (llama.cpp's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Temperature; `<= 0` is greedy.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1: off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

impl SamplingOptions {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplingOptions {
            temperature: 0.0,
            ..SamplingOptions::default()
        }
    }

    fn validate(&self) -> Result<()> {
        let ok = self.temperature.is_finite()
            && (0.0..=1.0).contains(&self.top_p)
            && (0.0..=1.0).contains(&self.min_p)
            && self.repeat_penalty.is_finite()
            && self.repeat_penalty > 0.0;
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidLayout(format!(
                "sampling settings out of range: {self:?} (temperature finite, top_p and min_p in 0..=1, repeat_penalty > 0)"
            )))
        }
    }
}

/// A sampler: settings, generator state and the recent tokens.
#[derive(Clone, Debug)]
pub struct Sampler {
    options: SamplingOptions,
    state: u64,
    recent: Vec<u32>,
}

impl Sampler {
    /// A sampler with `options` (checked).
    pub fn new(options: SamplingOptions) -> Result<Sampler> {
        options.validate()?;
        Ok(Sampler {
            options,
            state: options.seed,
            recent: Vec::new(),
        })
    }

    /// Remember a token (prompt or generated) for the repetition penalty.
    pub fn accept(&mut self, token: u32) {
        self.recent.push(token);
        let keep = self.options.repeat_last_n;
        if self.recent.len() > keep.max(1) * 2 {
            self.recent.drain(..self.recent.len() - keep);
        }
    }

    /// The next token for `logits` (one per vocabulary entry).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::InvalidLayout("sampling from no logits".into()));
        }
        let o = self.options;
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, if l.is_nan() { f32::NEG_INFINITY } else { l }))
            .collect();
        if o.repeat_penalty != 1.0 && o.repeat_last_n > 0 {
            let from = self.recent.len().saturating_sub(o.repeat_last_n);
            let mut seen = self.recent[from..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(c) = cand.get_mut(t as usize) {
                    c.1 = if c.1 > 0.0 {
                        c.1 / o.repeat_penalty
                    } else {
                        c.1 * o.repeat_penalty
                    };
                }
            }
        }
        if o.temperature <= 0.0 {
            let best = cand
                .iter()
                .fold(cand[0], |b, &c| if c.1 > b.1 { c } else { b });
            return Ok(best.0);
        }
        most_likely(&mut cand, o.top_k);
        let probs = softmax(&cand, 1.0);
        if o.top_p < 1.0 {
            let mut sum = 0.0;
            let mut keep = cand.len();
            for (i, p) in probs.iter().enumerate() {
                sum += p;
                if sum >= o.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if o.min_p > 0.0 {
            let max = cand[0].1;
            let floor = max + (o.min_p as f64).ln() as f32;
            let keep = cand.iter().take_while(|c| c.1 >= floor).count();
            cand.truncate(keep.max(1));
        }
        let probs = softmax(&cand, o.temperature);
        let r = self.next_f64();
        let mut acc = 0.0;
        for (c, p) in cand.iter().zip(&probs) {
            acc += p;
            if r < acc {
                return Ok(c.0);
            }
        }
        Ok(cand[cand.len() - 1].0)
    }

    /// Uniform in [0, 1) (splitmix64).
    fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Keep the `top_k` most likely candidates (0: all), most likely first,
/// equal logits by id. The `top_k` are found by selection before they are
/// sorted: sorting a whole vocabulary (262,144 entries for Gemma 3) took
/// about as long as the model's decoding step.
fn most_likely(cand: &mut Vec<(u32, f32)>, top_k: usize) {
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if top_k > 0 && top_k < cand.len() {
        cand.select_nth_unstable_by(top_k - 1, order);
        cand.truncate(top_k);
    }
    cand.sort_by(order);
}

/// Probabilities of sorted candidates at temperature `t`.
fn softmax(cand: &[(u32, f32)], t: f32) -> Vec<f64> {
    let max = cand.first().map_or(0.0, |c| c.1 as f64);
    let e: Vec<f64> = cand
        .iter()
        .map(|c| ((c.1 as f64 - max) / t as f64).exp())
        .collect();
    let s: f64 = e.iter().sum();
    e.iter()
        .map(|x| if s > 0.0 { x / s } else { 0.0 })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, 3.0, -1.0, 0.5]
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(SamplingOptions::greedy()).unwrap();
        assert_eq!(s.sample(&logits()).unwrap(), 1);
    }

    #[test]
    fn penalty_moves_the_maximum() {
        let mut o = SamplingOptions::greedy();
        o.repeat_penalty = 2.0;
        let mut s = Sampler::new(o).unwrap();
        s.accept(1);
        // 3.0 / 2 = 1.5 < 3.0 of token 3.
        assert_eq!(s.sample(&logits()).unwrap(), 3);
    }

    #[test]
    fn top_k_one_is_greedy_and_same_seed_same_tokens() {
        let o = SamplingOptions {
            top_k: 1,
            temperature: 5.0,
            ..SamplingOptions::default()
        };
        let mut s = Sampler::new(o).unwrap();
        for _ in 0..20 {
            assert_eq!(s.sample(&logits()).unwrap(), 1);
        }
        let o = SamplingOptions {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.0,
            ..SamplingOptions::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(SamplingOptions { seed, ..o }).unwrap();
            (0..64)
                .map(|_| s.sample(&logits()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn draws_follow_the_distribution() {
        // Two tokens with logits ln 3 and 0: p = 0.75 / 0.25.
        let l = [3f32.ln(), 0.0];
        let o = SamplingOptions {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.0,
            ..SamplingOptions::default()
        };
        let mut s = Sampler::new(o).unwrap();
        let n = 20000;
        let zeros = (0..n).filter(|_| s.sample(&l).unwrap() == 0).count();
        let f = zeros as f64 / n as f64;
        assert!((f - 0.75).abs() < 0.02, "{f}");
    }

    #[test]
    fn min_p_and_top_p_cut() {
        // min_p 0.5: only tokens within ln(0.5) of the max survive (1 and 3).
        let o = SamplingOptions {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            temperature: 1.0,
            ..SamplingOptions::default()
        };
        let mut s = Sampler::new(o).unwrap();
        for _ in 0..200 {
            let t = s.sample(&logits()).unwrap();
            assert!(t == 1 || t == 3, "{t}");
        }
        // top_p tiny: only the most likely (id 1, first among equals).
        let o = SamplingOptions {
            top_k: 0,
            top_p: 0.01,
            min_p: 0.0,
            temperature: 1.0,
            ..SamplingOptions::default()
        };
        let mut s = Sampler::new(o).unwrap();
        for _ in 0..50 {
            assert_eq!(s.sample(&logits()).unwrap(), 1);
        }
    }

    #[test]
    fn the_top_k_are_those_of_a_full_sort() {
        // Logits with many ties (a few distinct values), every k from 1 to
        // past the vocabulary: the same candidates in the same order as
        // sorting everything and keeping the first k.
        let mut state = 7u64;
        let logits: Vec<f32> = (0..500)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 59) as f32) * 0.5 - 3.0
            })
            .collect();
        let all: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for k in [1, 2, 3, 17, 40, 250, 499, 500, 501, 0] {
            let mut cand = all.clone();
            most_likely(&mut cand, k);
            let want = if k == 0 || k >= all.len() {
                all.len()
            } else {
                k
            };
            assert_eq!(cand, sorted[..want].to_vec(), "k = {k}");
        }
    }

    #[test]
    fn bad_settings_are_errors() {
        for o in [
            SamplingOptions {
                top_p: 1.5,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                temperature: f32::NAN,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                repeat_penalty: 0.0,
                ..SamplingOptions::default()
            },
        ] {
            assert!(Sampler::new(o).is_err());
        }
        let mut s = Sampler::new(SamplingOptions::default()).unwrap();
        assert!(s.sample(&[]).is_err());
    }
}
