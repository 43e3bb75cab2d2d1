//! Weights stored in the layout the CPU's matrix kernels read, once, at
//! load time (ggml's "extra" CPU_REPACK buffer type).
//!
//! The packed GEMM (`kernels::gemm`) multiplies 16 weight rows
//! at a time; from the file's layout it must first gather those rows'
//! blocks into a panel on every call (per `KC` slice of every unit), which
//! with few columns (8 to 64: batched decoding, short prompts) costs more
//! than the products themselves. A tensor in a [`RepackBufferType`] buffer
//! is stored with its rows interleaved in groups of [`ROWS`], so the
//! micro-kernels read its panels where they lie.
//!
//! **Q4_0, 16 rows** (the only layout so far; the format leaves room for
//! more). A group of 16 rows occupies exactly the bytes those rows occupy
//! in the file's layout (so sizes, offsets and memory are unchanged): for
//! each block `b` of 32 values, 288 bytes at `b * 288`:
//!
//! | bytes | what |
//! |---|---|
//! | `0..32` | the 16 rows' scales `d` (f16), row order |
//! | `32 + 64 c + 4 r .. + 4` | row `r`'s code bytes `qs[4c..4c + 4]`, `c` in `0..4` |
//!
//! One 64-byte chunk `c` thus holds, for all 16 rows, values `4c..4c + 4`
//! in its low nibbles and `16 + 4c..16 + 4c + 4` in its high ones: a mask
//! and a shift give `vpdpbusd`'s unsigned operand for two steps. Packing
//! is a permutation of each group's bytes (so a byte fill is unchanged by
//! it), done by `pack_group` and undone by `unpack_group`.
//!
//! Which tensors are packed: [`packs`] (Q4_0, contiguous, rows a multiple of
//! 16); every other tensor in such a buffer keeps the file's layout.

mod buffer;
#[cfg(test)]
mod tests;

pub use buffer::{RepackBuffer, RepackBufferType};

use tessera::{DType, Layout};

/// Rows per interleaved group.
pub const ROWS: usize = 16;

/// Bytes of one Q4_0 block of one row.
const Q4_0_BLOCK: usize = 18;
/// Bytes of one block of a whole group.
pub(crate) const Q4_0_GROUP_BLOCK: usize = ROWS * Q4_0_BLOCK;

/// How a tensor's bytes are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Packing {
    /// The file's (ggml's) layout.
    #[default]
    Standard,
    /// Q4_0 with rows interleaved by 16 (module docs).
    Q4_0x16,
}

/// The packing a [`RepackBufferType`] buffer gives a tensor of `layout`.
pub fn packs(layout: &Layout) -> Packing {
    let ok = layout.dtype == DType::Q4_0
        && layout.is_contiguous()
        && layout.ne[0] > 0
        && layout.ne[1] > 0
        && layout.ne[1].is_multiple_of(ROWS)
        && layout.ne[2] > 0
        && layout.ne[3] > 0
        && layout.checked_nbytes().is_ok();
    if ok {
        Packing::Q4_0x16
    } else {
        Packing::Standard
    }
}

/// Bytes of one group of [`ROWS`] rows of `layout` (a packed layout).
pub(crate) fn group_bytes(layout: &Layout) -> usize {
    layout.nb[1] * ROWS
}

/// Pack one group: `std` holds [`ROWS`] rows of `row_bytes` (whole Q4_0
/// blocks) in the file's layout, `out` receives the same bytes interleaved.
/// Both are `ROWS * row_bytes` long (else nothing is written).
pub(crate) fn pack_group(std: &[u8], out: &mut [u8], row_bytes: usize) {
    permute(std, out, row_bytes, true);
}

/// The inverse of [`pack_group`].
pub(crate) fn unpack_group(packed: &[u8], out: &mut [u8], row_bytes: usize) {
    permute(packed, out, row_bytes, false);
}

/// Move every byte of a group between the two layouts (`pack`: standard to
/// packed).
fn permute(src: &[u8], dst: &mut [u8], row_bytes: usize, pack: bool) {
    let n = ROWS * row_bytes;
    if src.len() != n || dst.len() != n || !row_bytes.is_multiple_of(Q4_0_BLOCK) {
        return;
    }
    for b in 0..row_bytes / Q4_0_BLOCK {
        let p = b * Q4_0_GROUP_BLOCK;
        for r in 0..ROWS {
            let s = r * row_bytes + b * Q4_0_BLOCK;
            // (standard start, packed start, length) of each piece of row
            // r's block: the scale, then the four chunks' code bytes.
            let pieces = [
                (s, p + 2 * r, 2),
                (s + 2, p + 32 + 4 * r, 4),
                (s + 6, p + 96 + 4 * r, 4),
                (s + 10, p + 160 + 4 * r, 4),
                (s + 14, p + 224 + 4 * r, 4),
            ];
            for (sa, pa, n) in pieces {
                if pack {
                    dst[pa..pa + n].copy_from_slice(&src[sa..sa + n]);
                } else {
                    dst[sa..sa + n].copy_from_slice(&src[pa..pa + n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn packing_is_a_permutation_and_unpacking_inverts_it() {
        let row_bytes = 3 * Q4_0_BLOCK;
        let std: Vec<u8> = (0..ROWS * row_bytes).map(|i| (i * 7 % 251) as u8).collect();
        let mut packed = vec![0u8; std.len()];
        pack_group(&std, &mut packed, row_bytes);
        let (mut a, mut b) = (std.clone(), packed.clone());
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the same bytes");
        let mut back = vec![0u8; std.len()];
        unpack_group(&packed, &mut back, row_bytes);
        assert_eq!(back, std);
        // Row 5's scale of block 2, and its code bytes 8..12 (chunk 2).
        let s = 5 * row_bytes + 2 * Q4_0_BLOCK;
        let p = 2 * Q4_0_GROUP_BLOCK;
        assert_eq!(packed[p + 10..p + 12], std[s..s + 2]);
        assert_eq!(
            packed[p + 32 + 128 + 20..p + 32 + 128 + 24],
            std[s + 10..s + 14]
        );
    }

    #[test]
    fn only_whole_groups_of_q4_0_rows_are_packed() {
        let l = |t, ne: &[usize]| Layout::contiguous(t, ne).unwrap();
        assert_eq!(packs(&l(DType::Q4_0, &[64, 32])), Packing::Q4_0x16);
        assert_eq!(packs(&l(DType::Q4_0, &[64, 32, 3])), Packing::Q4_0x16);
        assert_eq!(packs(&l(DType::Q4_0, &[64, 24])), Packing::Standard);
        assert_eq!(packs(&l(DType::Q8_0, &[64, 32])), Packing::Standard);
        assert_eq!(packs(&l(DType::F32, &[64, 32])), Packing::Standard);
    }
}
