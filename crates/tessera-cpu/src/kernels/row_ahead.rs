//! How far ahead of the bytes they read the dot-product kernels prefetch a
//! weight row: the machine's distance ([`crate::tuning::prefetch_bytes`]),
//! or, while a tile call reads short weight rows whole, the next tiles'.
//!
//! The kernels prefetch each row they read `distance` bytes past where they
//! read it. Within long rows that is the same row further on. A tile of
//! [`super::dot::TILE_ROWS`] short rows (an expert's 2,048 values: 1-2 KiB) is
//! read in a few hundred nanoseconds, and the machine's distance (1,536
//! bytes) then lands mostly inside the tile's own rows: each new tile waits
//! on memory. [`Plan::tile`](super::matmul) sets the distance to the rows
//! one or two tiles on instead, at the same offset, for the length of the
//! call ([`RowAhead`]). Measured on an AMD EPYC Zen 5 (2 threads, `tessera
//! bench ops --op MUL_MAT_ID`, experts of 768 x 2048, 32 tokens of 8
//! experts: about two columns an expert, units of ~192 KiB of rows): Q4_K
//! 6.8 -> 3.6-3.9 ms an op, Q6_K 8.2 -> 4.1-4.6, Q8_0 10.4 -> 4.9-6.4
//! (ggml 6.2, 7.1, 7.8). Dense products of a few columns take it too
//! (prompts shorter than the GEMM's start): Gemma 3 270M Q4_K_M pp4
//! (`tessera bench model -p 4 -n 0 -r 5`, alternated) 374-375 -> 424-430
//! tokens/s, a 1B Q4_K_M file 82-85 -> 82-100; pp8 (the GEMM) unchanged.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// This thread's distance while a [`RowAhead`] lives (0: the machine's).
    static AHEAD: Cell<usize> = const { Cell::new(0) };
}

/// The distance in force on this thread (read in the kernels' loops: a
/// thread-local word, then the tuning's relaxed load).
#[inline]
pub(crate) fn distance() -> usize {
    match AHEAD.with(Cell::get) {
        0 => crate::tuning::prefetch_bytes(),
        d => d,
    }
}

/// Least distance a tile call of short rows sets: whole tiles of rows
/// until at least this many bytes (one tile of Q8_0 rows of 2,048 values,
/// two of Q4_K's; measured as above, one tile of Q4_K rows ahead took
/// 3.6-3.9 ms, two 3.3-3.4).
const MIN_TILE_AHEAD: usize = 8 << 10;

/// Longest rows a tile call prefetches by tiles: longer ones are long
/// streams of their own, which the machine's distance serves (a tile call
/// reads rows whole only up to 2,048 quantized or 1,024 float values, or
/// with one column).
const MAX_SHORT_ROW: usize = 4 << 10;

/// The distance of a tile call over rows `stride` bytes apart, `rows` at a
/// time, each read whole: the same offset in the rows whole tiles on, at
/// least [`MIN_TILE_AHEAD`] bytes on (`None`: rows longer than
/// [`MAX_SHORT_ROW`], or past `usize`).
pub(crate) fn tile_distance(rows: usize, stride: usize) -> Option<usize> {
    if stride > MAX_SHORT_ROW {
        return None;
    }
    let tile = rows.checked_mul(stride)?.max(1);
    MIN_TILE_AHEAD.div_ceil(tile).checked_mul(tile)
}

/// Sets this thread's distance until dropped, then puts back the one before
/// (on the same thread: the guard is neither `Send` nor `Sync`).
pub(crate) struct RowAhead {
    before: usize,
    _thread: PhantomData<*const ()>,
}

impl RowAhead {
    /// The distance `bytes` (0: the machine's) until the guard drops.
    pub(crate) fn set(bytes: usize) -> RowAhead {
        RowAhead {
            before: AHEAD.replace(bytes),
            _thread: PhantomData,
        }
    }
}

impl Drop for RowAhead {
    fn drop(&mut self) {
        AHEAD.set(self.before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_sets_the_distance_and_puts_the_previous_back() {
        // The tuning installed first (another test could otherwise install
        // it, and the machine's distance with it, between the asserts).
        let _ = crate::tuning::active();
        let machine = crate::tuning::prefetch_bytes();
        assert_eq!(distance(), machine);
        {
            let _outer = RowAhead::set(8704);
            assert_eq!(distance(), 8704);
            {
                let _inner = RowAhead::set(0);
                assert_eq!(distance(), machine);
            }
            assert_eq!(distance(), 8704);
        }
        assert_eq!(distance(), machine);
        // Other threads keep the machine's distance.
        let _g = RowAhead::set(123);
        let other = std::thread::spawn(distance).join().ok();
        assert_eq!(other, Some(machine));
    }

    #[test]
    fn tile_distances_are_whole_tiles_of_at_least_8_kib() {
        // Q8_0 rows of 2,048 values (2,176 bytes): one tile of four.
        assert_eq!(tile_distance(4, 2176), Some(8704));
        // Q4_K's (1,152 bytes): two tiles.
        assert_eq!(tile_distance(4, 1152), Some(9216));
        // Rows longer than the least distance: one tile.
        assert_eq!(tile_distance(4, 4096), Some(16384));
        // Long rows: the machine's distance.
        assert_eq!(tile_distance(4, 4097), None);
        assert_eq!(tile_distance(4, 15232), None);
        assert_eq!(tile_distance(4, 0), Some(8192));
        assert_eq!(tile_distance(usize::MAX, 2), None);
    }
}
