//! Filling benchmark inputs quickly: random values, quantized by tiling a few
//! quantized rows (quantizing a 58 M-element matrix with the reference
//! K-quant search would dominate the run and change nothing measured).

use tessera::{DType, Result, Tensor, quant};

use super::cases::Fill;

/// A small, fast, deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Fill a contiguous tensor according to `fill`.
pub fn fill(t: &Tensor, fill: Fill) -> Result<()> {
    let l = *t.layout();
    let n = l.checked_nelements()?;
    match fill {
        Fill::Positions => {
            let pos: Vec<i32> = (0..n as i32).collect();
            t.write_slice(&pos)
        }
        Fill::Zeros => t.fill(0, t.nbytes(), 0),
        Fill::Ids(rows) => {
            let ids: Vec<i32> = (0..n)
                .map(|i| ((i as u64 * 2_654_435_761) % rows.max(1) as u64) as i32)
                .collect();
            t.write_slice(&ids)
        }
        Fill::Uniform if l.dtype == DType::F32 => {
            let mut rng = Rng(42);
            let v: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
            t.write_f32(&v)
        }
        Fill::Uniform => {
            // Quantize (or convert) up to 16 distinct rows, then tile them.
            let row = l.ne[0];
            let row_bytes = l.row_bytes();
            let rows = l.nrows();
            let distinct = rows.min(16);
            let mut rng = Rng(7);
            let mut pattern = vec![0u8; distinct * row_bytes];
            for r in 0..distinct {
                let v: Vec<f32> = (0..row).map(|_| rng.next_f32()).collect();
                quant::from_f32(
                    l.dtype,
                    &v,
                    &mut pattern[r * row_bytes..(r + 1) * row_bytes],
                )?;
            }
            let mut bytes = vec![0u8; rows * row_bytes];
            for (i, chunk) in bytes.chunks_mut(row_bytes).enumerate() {
                let r = i % distinct;
                chunk.copy_from_slice(&pattern[r * row_bytes..(r + 1) * row_bytes]);
            }
            t.write(0, &bytes)
        }
    }
}
