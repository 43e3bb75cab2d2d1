//! Q8_0 activations laid out for the AVX2 multi-column tiles of the
//! 32-value block types (Q4_0, Q5_0, Q8_0, IQ4_NL x Q8_0 activations;
//! kernels in [`super::gemv_avx2_tiled`]).
//!
//! Why: with several columns, a tile kernel holds one accumulator per (row,
//! column) in AVX2's sixteen vector registers, and every value it prepares
//! per column and block (the activations of a pair of blocks, their offset
//! sums, the scale products) either takes another register or is spilled
//! and reloaded through the stack. Laid out as the kernels read them, those
//! values are plain memory operands instead, prepared once per column when
//! the activations are converted (shared by every weight row), and Q8_0's
//! signed codes can be multiplied with `vpmaddwd` directly (16-bit
//! activations) instead of ggml's sign trick (two more vector operations
//! per block and column, on the ports the products need).
//!
//! The values are exactly those of the Q8_0 activations ggml uses (the
//! same quantizer, then rearranged), so the integer block sums are exact
//! and the results equal the Q8_0 path's up to f32 summation order.
//!
//! A row is made of groups of [`GROUP_BLOCKS`] blocks (the last one may be
//! partial); a group is [`GROUP_BYTES`] bytes (fewer when partial):
//!
//! | bytes | what |
//! |---|---|
//! | `0..32` | the blocks' scales `d` as f32 (zero past a partial group's end) |
//! | `32 + 64 j ..` | block `j`: [`Q8Tiled::Unsigned`]: the 32 codes (i8), then 16 i16 `offset * (y[2i] + y[2i + 1])`; [`Q8Tiled::Signed`]: the 32 codes as i16 |

use tessera::{DType, Error, Result};

use super::act_quant::{GROUP, convert_strided};
use crate::isa::Isa;

/// Blocks of 32 values per group.
pub const GROUP_BLOCKS: usize = 8;
/// Bytes of one block inside a group.
pub const BLOCK_BYTES: usize = 64;
/// Bytes of the scales at the start of a group.
pub const SCALE_BYTES: usize = 32;
/// Bytes of a whole group.
pub const GROUP_BYTES: usize = SCALE_BYTES + GROUP_BLOCKS * BLOCK_BYTES;

/// Values per block.
const QK: usize = 32;
/// Values per group (one act_quant [`GROUP`]).
const GROUP_VALUES: usize = GROUP_BLOCKS * QK;
const _: () = assert!(GROUP_VALUES == GROUP);
/// Bytes of one Q8_0 block.
const Q8_0_BYTES: usize = 34;

/// Which of the two layouts (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Tiled {
    /// Codes as i8 beside `offset` times their pair sums, for weights
    /// whose codes are unsigned with a constant offset (Q4_0: 8, Q5_0: 16)
    /// multiplied by `vpmaddubsw`.
    Unsigned {
        /// The weights' code offset.
        offset: i16,
    },
    /// Codes widened to i16, for weights with signed codes (Q8_0, IQ4_NL)
    /// multiplied by `vpmaddwd`.
    Signed,
}

impl Q8Tiled {
    /// The layout the tiles of `weights` read, if it has such tiles.
    pub fn for_weights(weights: DType) -> Option<Self> {
        match weights {
            DType::Q4_0 => Some(Self::Unsigned { offset: 8 }),
            DType::Q5_0 => Some(Self::Unsigned { offset: 16 }),
            DType::Q8_0 | DType::IQ4NL => Some(Self::Signed),
            _ => None,
        }
    }

    /// Bytes of the first `values` values of a row (`values` a multiple of
    /// 32, or the row's length).
    pub fn bytes(values: usize) -> usize {
        let (groups, rest) = (values / GROUP_VALUES, values % GROUP_VALUES / QK);
        groups * GROUP_BYTES
            + if rest > 0 {
                SCALE_BYTES + rest * BLOCK_BYTES
            } else {
                0
            }
    }

    /// Bytes of a row of `values` values, or an error if it overflows or
    /// `values` is not whole blocks.
    pub fn row_size(values: usize) -> Result<usize> {
        if !values.is_multiple_of(QK) {
            return Err(Error::InvalidLayout(format!(
                "{values} activations are not whole blocks of {QK}"
            )));
        }
        let rest = values % GROUP_VALUES / QK;
        (values / GROUP_VALUES)
            .checked_mul(GROUP_BYTES)
            .and_then(|b| {
                b.checked_add(if rest > 0 {
                    SCALE_BYTES + rest * BLOCK_BYTES
                } else {
                    0
                })
            })
            .ok_or_else(|| Error::Overflow(format!("tiled activations of {values} values")))
    }

    /// Whole blocks in a row of `len` bytes.
    pub fn blocks_in(len: usize) -> usize {
        let (groups, rest) = (len / GROUP_BYTES, len % GROUP_BYTES);
        groups * GROUP_BLOCKS + rest.saturating_sub(SCALE_BYTES) / BLOCK_BYTES
    }

    /// Convert `n` f32 values (a multiple of 32), read from `src` with a
    /// byte stride of `stride`, into `dst` (exactly [`Self::bytes`]`(n)`
    /// bytes), starting at a group boundary of the row: quantized to Q8_0
    /// with `isa`'s conversion (bit-identical on every ISA), then laid out.
    ///
    /// # Safety
    /// For every `i < n`, the 4 bytes at `src + i * stride` must be readable.
    pub unsafe fn convert(
        self,
        isa: Isa,
        src: *const u8,
        stride: usize,
        n: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        if !n.is_multiple_of(QK) || dst.len() != Self::bytes(n) {
            return Err(Error::InvalidLayout(format!(
                "tiled activations: {n} values need {} bytes, {} given",
                Self::bytes(n),
                dst.len()
            )));
        }
        let mut q = [0u8; GROUP_BLOCKS * Q8_0_BYTES];
        for (g, out) in dst.chunks_mut(GROUP_BYTES).enumerate() {
            let len = (n - g * GROUP_VALUES).min(GROUP_VALUES);
            let nb = len / QK;
            let q = &mut q[..nb * Q8_0_BYTES];
            // SAFETY: values g * 256 .. + len < n of the caller's run.
            unsafe {
                convert_strided(
                    isa,
                    DType::Q8_0,
                    src.add(g * GROUP_VALUES * stride),
                    stride,
                    len,
                    q,
                )?
            };
            self.lay_out(q, out);
        }
        Ok(())
    }

    /// Lay out the Q8_0 blocks `q` (at most a group) into `out`.
    fn lay_out(self, q: &[u8], out: &mut [u8]) {
        let (scales, blocks) = out.split_at_mut(SCALE_BYTES.min(out.len()));
        scales.fill(0);
        for (j, (b, o)) in q
            .chunks_exact(Q8_0_BYTES)
            .zip(blocks.chunks_exact_mut(BLOCK_BYTES))
            .enumerate()
        {
            let d = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            scales[4 * j..4 * j + 4].copy_from_slice(&d.to_le_bytes());
            let codes = b[2..].iter().map(|&c| c as i8);
            match self {
                Self::Unsigned { offset } => {
                    let (y, sums) = o.split_at_mut(QK);
                    y.copy_from_slice(&b[2..]);
                    for (s, p) in sums.chunks_exact_mut(2).zip(b[2..].chunks_exact(2)) {
                        let v = offset * (i16::from(p[0] as i8) + i16::from(p[1] as i8));
                        s.copy_from_slice(&v.to_le_bytes());
                    }
                }
                Self::Signed => {
                    for (s, c) in o.chunks_exact_mut(2).zip(codes) {
                        s.copy_from_slice(&i16::from(c).to_le_bytes());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::kernels::act_quant::convert_row;

    fn f32_at(b: &[u8], i: usize) -> f32 {
        f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    fn i16_at(b: &[u8], i: usize) -> i16 {
        i16::from_le_bytes([b[i], b[i + 1]])
    }

    /// Every block of the layout holds its Q8_0 block's values: the scale
    /// as f32, the codes (i8 with `offset` pair sums, or i16); the scales
    /// past a partial group's end are zero; sizes and block counts agree.
    #[test]
    fn layouts_hold_the_q8_0_blocks() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0
        };
        // One block, a partial group, a group, two groups and a partial one.
        for nb in [1usize, 5, 8, 16, 19] {
            let n = nb * QK;
            // Strided: every other f32 of `wide`.
            let wide: Vec<f32> = (0..2 * n).map(|_| next()).collect();
            let vals: Vec<f32> = wide.iter().step_by(2).copied().collect();
            let mut q = vec![0u8; DType::Q8_0.row_size(n).unwrap()];
            convert_row(DType::Q8_0, &vals, &mut q).unwrap();
            assert_eq!(Q8Tiled::row_size(n).unwrap(), Q8Tiled::bytes(n));
            assert_eq!(Q8Tiled::blocks_in(Q8Tiled::bytes(n)), nb);
            for layout in [
                Q8Tiled::Unsigned { offset: 8 },
                Q8Tiled::Unsigned { offset: 16 },
                Q8Tiled::Signed,
            ] {
                for isa in Isa::all_available() {
                    let mut out = vec![0xAAu8; Q8Tiled::bytes(n)];
                    // SAFETY: `wide` holds 2n f32, read at stride 8 bytes.
                    unsafe {
                        layout
                            .convert(isa, wide.as_ptr().cast(), 8, n, &mut out)
                            .unwrap()
                    };
                    for b in 0..nb.div_ceil(GROUP_BLOCKS) * GROUP_BLOCKS {
                        let (g, j) = (b / GROUP_BLOCKS, b % GROUP_BLOCKS);
                        let at = g * GROUP_BYTES;
                        if at >= out.len() {
                            break;
                        }
                        let what = format!("{layout:?} {isa:?} nb={nb} block {b}");
                        if b >= nb {
                            assert_eq!(f32_at(&out, at + 4 * j), 0.0, "{what}: scale past the end");
                            continue;
                        }
                        let qb = &q[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
                        let d = half::f16::from_le_bytes([qb[0], qb[1]]).to_f32();
                        assert_eq!(
                            f32_at(&out, at + 4 * j).to_bits(),
                            d.to_bits(),
                            "{what}: scale"
                        );
                        let o = at + SCALE_BYTES + j * BLOCK_BYTES;
                        let codes: Vec<i8> = qb[2..].iter().map(|&c| c as i8).collect();
                        match layout {
                            Q8Tiled::Unsigned { offset } => {
                                assert_eq!(&out[o..o + QK], &qb[2..], "{what}: codes");
                                for i in 0..QK / 2 {
                                    let want = offset
                                        * (i16::from(codes[2 * i]) + i16::from(codes[2 * i + 1]));
                                    assert_eq!(
                                        i16_at(&out, o + QK + 2 * i),
                                        want,
                                        "{what}: sum {i}"
                                    );
                                }
                            }
                            Q8Tiled::Signed => {
                                for (i, &c) in codes.iter().enumerate() {
                                    assert_eq!(
                                        i16_at(&out, o + 2 * i),
                                        i16::from(c),
                                        "{what}: code {i}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_lengths_are_errors() {
        let vals = [0.5f32; 64];
        let mut out = vec![0u8; Q8Tiled::bytes(64)];
        // SAFETY: 64 contiguous f32.
        let r =
            unsafe { Q8Tiled::Signed.convert(Isa::Scalar, vals.as_ptr().cast(), 4, 48, &mut out) };
        assert!(r.is_err(), "48 values are not whole blocks");
        // SAFETY: as above.
        let r =
            unsafe { Q8Tiled::Signed.convert(Isa::Scalar, vals.as_ptr().cast(), 4, 32, &mut out) };
        assert!(r.is_err(), "a 64-value buffer for 32 values");
        assert!(Q8Tiled::row_size(48).is_err());
        assert!(Q8Tiled::row_size(usize::MAX / 2 / QK * QK).is_err());
    }
}
