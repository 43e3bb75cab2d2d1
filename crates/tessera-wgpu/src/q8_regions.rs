//! The regions of the activation scratch ([`crate::matvec_q8`]) within one
//! compute: handed out first fit, each given back once the last product
//! that reads it is recorded.
//!
//! Why: a prompt's products quantize every input they read (512 columns of
//! 2,048 to 8,192 values: 1.3 to 5.2 MB each, four a layer); kept for the
//! whole compute, a 1B model's prompt needed ~150 MB of scratch (more than
//! one binding holds on many devices) and an 8B model's ~550 MB, though no
//! more than two inputs are ever in use at once. Reuse is safe on the GPU:
//! the dispatches that write a region again come after the ones that read
//! it in the queue's order, and wgpu puts a barrier between a dispatch
//! that reads a storage buffer and one that writes it.
//!
//! Offsets and lengths are multiples of 16 (the kernels read the regions
//! as 16-byte vectors).

use std::ops::Range;

/// Free space of a scratch buffer, in ascending, disjoint, non-adjacent
/// ranges.
#[derive(Debug)]
pub(crate) struct Regions {
    free: Vec<Range<usize>>,
}

/// `bytes` rounded up to a multiple of 16 (`None`: it overflows).
fn rounded(bytes: usize) -> Option<usize> {
    bytes.checked_next_multiple_of(16)
}

impl Regions {
    /// A buffer of `size` bytes, all free (its tail past a multiple of 16
    /// unused).
    pub(crate) fn new(size: usize) -> Self {
        let size = size - size % 16;
        let mut free = Vec::new();
        if size > 0 {
            free.push(0..size);
        }
        Regions { free }
    }

    /// Where `bytes` would go (the first free range that holds them), or
    /// `None` where none does. Takes nothing: see [`Regions::take`].
    pub(crate) fn find(&self, bytes: usize) -> Option<usize> {
        let len = rounded(bytes)?;
        self.free
            .iter()
            .find(|r| r.end - r.start >= len)
            .map(|r| r.start)
    }

    /// Take `bytes` at `at` (as [`Regions::find`] gave): `false` where they
    /// are not free.
    pub(crate) fn take(&mut self, at: usize, bytes: usize) -> bool {
        let Some(end) = rounded(bytes).and_then(|l| at.checked_add(l)) else {
            return false;
        };
        let Some(i) = self.free.iter().position(|r| r.start <= at && end <= r.end) else {
            return false;
        };
        let r = self.free.remove(i);
        if end < r.end {
            self.free.insert(i, end..r.end);
        }
        if r.start < at {
            self.free.insert(i, r.start..at);
        }
        true
    }

    /// Give back `bytes` at `at` (taken before), joining its neighbours.
    pub(crate) fn give(&mut self, at: usize, bytes: usize) {
        let Some(end) = rounded(bytes).and_then(|l| at.checked_add(l)) else {
            return;
        };
        if end == at {
            return;
        }
        let i = self.free.partition_point(|r| r.start < at);
        self.free.insert(i, at..end);
        if i + 1 < self.free.len() && self.free[i].end == self.free[i + 1].start {
            let next = self.free.remove(i + 1);
            self.free[i].end = next.end;
        }
        if i > 0 && self.free[i - 1].end == self.free[i].start {
            let this = self.free.remove(i);
            self.free[i - 1].end = this.end;
        }
    }

    /// The free ranges (tests).
    #[cfg(test)]
    pub(crate) fn free(&self) -> &[Range<usize>] {
        &self.free
    }
}

/// The most bytes live at once when regions of `sizes[i].0` bytes are
/// live from node `sizes[i].1` to node `sizes[i].2` (inclusive), plus
/// room for the first fit's gaps: twice the largest region. What a
/// compute's scratch is sized by ([`crate::matvec_q8::scratch_bytes`]);
/// a product that still finds no room takes the float kernels.
pub(crate) fn peak_bytes(lives: &[(usize, usize, usize)]) -> usize {
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(2 * lives.len());
    for &(bytes, from, to) in lives {
        let bytes = rounded(bytes).unwrap_or(usize::MAX);
        events.push((from, true, bytes));
        // Free after node `to`: ordered after every start at `to`.
        events.push((to.saturating_add(1), false, bytes));
    }
    // Frees before starts at the same node (a region freed after node i
    // is free again when node i + 1 quantizes).
    events.sort_by_key(|&(at, start, _)| (at, start));
    let (mut now, mut peak) = (0usize, 0usize);
    for (_, start, bytes) in events {
        if start {
            now = now.saturating_add(bytes);
            peak = peak.max(now);
        } else {
            now = now.saturating_sub(bytes);
        }
    }
    let largest = lives
        .iter()
        .map(|l| rounded(l.0).unwrap_or(usize::MAX))
        .max()
        .unwrap_or(0);
    peak.saturating_add(largest.saturating_mul(2))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::{Regions, peak_bytes};

    /// Random takes and gives against a byte map: a taken region never
    /// overlaps another live one, the free list stays sorted, disjoint and
    /// joined, and everything given back makes the buffer whole again.
    #[test]
    fn regions_never_overlap_and_join_again() {
        let size = 4096;
        let mut regions = Regions::new(size + 7);
        let mut owner = vec![usize::MAX; size];
        let mut live: Vec<(usize, usize, usize)> = Vec::new();
        let mut values = crate::test_values(11);
        for step in 0..2000 {
            let r = values.next().unwrap();
            if r > 0.0 || live.is_empty() {
                let bytes = 1 + ((r.abs() * 700.0) as usize);
                if let Some(at) = regions.find(bytes) {
                    assert_eq!(at % 16, 0, "step {step}: offset {at}");
                    assert!(regions.take(at, bytes), "step {step}: found yet not free");
                    let end = at + bytes.next_multiple_of(16);
                    for (b, o) in owner[at..end].iter_mut().enumerate() {
                        assert_eq!(*o, usize::MAX, "step {step}: byte {} twice", at + b);
                        *o = step;
                    }
                    live.push((at, bytes, step));
                } else {
                    let free: usize = regions.free().iter().map(|f| f.end - f.start).sum();
                    let longest = regions.free().iter().map(|f| f.end - f.start).max();
                    assert!(
                        longest.unwrap_or(0) < bytes.next_multiple_of(16),
                        "step {step}: {bytes} bytes refused with {free} free"
                    );
                }
            } else {
                let i = (r.abs() * live.len() as f32) as usize % live.len();
                let (at, bytes, _) = live.swap_remove(i);
                for o in &mut owner[at..at + bytes.next_multiple_of(16)] {
                    *o = usize::MAX;
                }
                regions.give(at, bytes);
            }
            let free = regions.free();
            for w in free.windows(2) {
                assert!(w[0].end < w[1].start, "step {step}: {free:?}");
            }
            for f in free {
                assert!(f.start < f.end && f.end <= size);
                assert!(owner[f.start..f.end].iter().all(|&o| o == usize::MAX));
            }
        }
        for (at, bytes, _) in live.drain(..) {
            regions.give(at, bytes);
        }
        let whole = regions.free();
        assert!(whole.len() == 1 && whole[0] == (0..size), "{whole:?}");
        assert!(!regions.take(size - 16, 32), "past the end");
    }

    /// The peak counts regions live at the same node, not ones that end
    /// before another starts.
    #[test]
    fn the_peak_counts_what_is_live_at_once() {
        // Two at a time at most (0-2 with 1-3, then 4-5 alone).
        let lives = [(100, 0, 2), (50, 1, 3), (200, 4, 5)];
        assert_eq!(peak_bytes(&lives), 208 + 2 * 208);
        // One ending at node 2 and one starting at node 3: never together.
        assert_eq!(peak_bytes(&[(64, 0, 2), (64, 3, 4)]), 64 + 128);
        // One ending at node 2 and one starting there: together.
        assert_eq!(peak_bytes(&[(64, 0, 2), (64, 2, 4)]), 128 + 128);
        assert_eq!(peak_bytes(&[]), 0);
    }
}
