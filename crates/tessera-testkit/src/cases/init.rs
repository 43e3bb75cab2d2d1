//! Leaf initialisation: the values a case's inputs start with, encoded into
//! the bytes both the device and the reference receive.
//!
//! Values are generated in f64, stored through the leaf's layout with the
//! reference's storage rules (so an F16 leaf holds the f16 rounding of its
//! random values and a quantized leaf the reference quantization of them),
//! and the resulting bytes are what gets written to the device.

use tessera::{DType, Error, Graph, Result, TensorId};

use crate::reference::memory::{Dense, Region, store_view};
use crate::rng::Rng;

/// How a leaf is filled.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// Uniform in `[lo, hi)`.
    Uniform {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// Uniform integers in `lo..=hi` (as values of any type; small ranges make ties).
    Ints {
        /// Lower bound.
        lo: i64,
        /// Upper bound (inclusive).
        hi: i64,
    },
    /// Row indices in `0..rows` for GET_ROWS/SET_ROWS: each run of `ne0`
    /// values (one row of the ids tensor) is drawn independently; with
    /// `distinct`, the values of a run are distinct (a shuffled subset).
    RowIds {
        /// Rows of the indexed tensor.
        rows: usize,
        /// No repeats within a run (SET_ROWS: no two rows to the same place).
        distinct: bool,
    },
    /// ROPE positions `0, 1, ..., n - 2` and `large` last.
    Positions {
        /// The last position (exercises large angles).
        large: i64,
    },
    /// An attention mask: uniform in [-1, 1] with a fraction `neg_inf` of
    /// `-inf`, and at least one finite entry per row.
    Mask {
        /// Fraction of `-inf` entries.
        neg_inf: f32,
    },
    /// Exactly these values, in logical order.
    Values(Vec<f64>),
}

/// The initialisation of leaves a case does not specify: uniform in [-1, 1]
/// for float and quantized types, integers in -1000..=1000 otherwise.
pub fn default_init(dtype: DType) -> Init {
    if dtype.is_int() {
        Init::Ints {
            lo: -1000,
            hi: 1000,
        }
    } else {
        Init::Uniform { lo: -1.0, hi: 1.0 }
    }
}

/// The logical values of a tensor of extents `ne` under `init`.
pub fn init_values(init: &Init, ne: [usize; 4], rng: &mut Rng) -> Result<Dense> {
    let mut d = Dense::zeros(ne)?;
    let ne0 = ne[0];
    match init {
        Init::Uniform { lo, hi } => d
            .data
            .iter_mut()
            .for_each(|x| *x = f64::from(rng.uniform_f32(*lo, *hi))),
        Init::Ints { lo, hi } => d
            .data
            .iter_mut()
            .for_each(|x| *x = rng.int_in(*lo, *hi) as f64),
        Init::RowIds { rows, distinct } => {
            if *distinct && ne0 > *rows {
                return Err(Error::InvalidLayout(format!(
                    "{ne0} distinct row ids cannot be drawn from {rows} rows"
                )));
            }
            for run in d.data.chunks_mut(ne0.max(1)) {
                if *distinct {
                    let mut all: Vec<usize> = (0..*rows).collect();
                    rng.shuffle(&mut all);
                    run.iter_mut().zip(all).for_each(|(x, r)| *x = r as f64);
                } else {
                    run.iter_mut()
                        .for_each(|x| *x = rng.below(*rows as u64) as f64);
                }
            }
        }
        Init::Positions { large } => {
            let n = d.data.len();
            for (i, x) in d.data.iter_mut().enumerate() {
                *x = if n >= 2 && i == n - 1 {
                    *large as f64
                } else {
                    i as f64
                };
            }
        }
        Init::Mask { neg_inf } => {
            for run in d.data.chunks_mut(ne0.max(1)) {
                for x in run.iter_mut() {
                    *x = if rng.next_f64() < f64::from(*neg_inf) {
                        f64::NEG_INFINITY
                    } else {
                        f64::from(rng.uniform_f32(-1.0, 1.0))
                    };
                }
                if run.iter().all(|x| x.is_infinite()) {
                    let k = rng.below(run.len() as u64) as usize;
                    if let Some(x) = run.get_mut(k) {
                        *x = f64::from(rng.uniform_f32(-1.0, 1.0));
                    }
                }
            }
        }
        Init::Values(v) => d = Dense::from_vec(ne, v.clone())?,
    }
    Ok(d)
}

/// The bytes of leaf `id` of `graph` initialised by `init`.
pub fn leaf_bytes(graph: &Graph, id: TensorId, init: &Init, rng: &mut Rng) -> Result<Vec<u8>> {
    let node = graph.node(id)?;
    let layout = node.layout;
    let values = init_values(init, layout.ne, rng)?;
    let mut region = Region::zeroed(layout.dtype, layout.checked_nbytes()?)?;
    store_view(&mut region, &layout, 0, &values)
        .map_err(|e| Error::Malformed(format!("initialising leaf {}: {e}", node.label(id))))?;
    Ok(region.to_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn ids_positions_and_masks_have_their_properties() {
        let mut rng = Rng::new(1);
        let ids = init_values(
            &Init::RowIds {
                rows: 9,
                distinct: true,
            },
            [9, 3, 1, 1],
            &mut rng,
        )
        .unwrap();
        for run in ids.data.chunks(9) {
            let mut s: Vec<i64> = run.iter().map(|&x| x as i64).collect();
            s.sort_unstable();
            assert_eq!(s, (0..9).collect::<Vec<_>>());
        }
        assert!(
            init_values(
                &Init::RowIds {
                    rows: 2,
                    distinct: true
                },
                [3, 1, 1, 1],
                &mut rng
            )
            .is_err()
        );
        let p = init_values(&Init::Positions { large: 5000 }, [4, 1, 1, 1], &mut rng).unwrap();
        assert_eq!(p.data, vec![0., 1., 2., 5000.]);
        let m = init_values(&Init::Mask { neg_inf: 0.9 }, [4, 50, 1, 1], &mut rng).unwrap();
        assert!(m.data.chunks(4).all(|r| r.iter().any(|x| x.is_finite())));
        assert!(m.data.iter().any(|x| x.is_infinite()));
    }

    #[test]
    fn leaf_bytes_encode_the_type() {
        let mut g = Graph::new();
        let h = g.new_tensor(DType::F16, &[3]).unwrap();
        let i = g.new_tensor(DType::I64, &[2]).unwrap();
        let mut rng = Rng::new(0);
        let b = leaf_bytes(&g, h, &Init::Values(vec![1.0, -2.0, 0.5]), &mut rng).unwrap();
        assert_eq!(b, [0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38]);
        let b = leaf_bytes(&g, i, &Init::Values(vec![7.0, -1.0]), &mut rng).unwrap();
        assert_eq!(&b[..8], &7i64.to_le_bytes());
        assert_eq!(&b[8..], &(-1i64).to_le_bytes());
    }
}
