//! Unit tests of the public conversion API: error classification, odd
//! inputs, alignment, and ggml's round-trip error bounds.
//!
//! Byte-exactness against upstream lives in `tests/quant_fixtures.rs`.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use proptest::prelude::*;

use super::*;
use crate::dtype::ALL_DTYPES;

/// ggml's `generate_data` of test-quantize-fns: `0.1 + 2*cos(i + offset)`.
fn ggml_test_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1f64 + f64::from(2.0f32 * (i as f32 + offset).cos())) as f32)
        .collect()
}

/// ggml's `array_rmse` (sic: sqrt of the sum, divided by n).
fn ggml_array_rmse(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    (sum.sqrt() as f32) / a.len() as f32
}

fn round_trip(dtype: DType, x: &[f32]) -> Vec<f32> {
    let mut q = vec![0u8; dtype.row_size(x.len()).unwrap()];
    from_f32(dtype, x, &mut q).unwrap();
    let mut y = vec![0.0f32; x.len()];
    to_f32(dtype, &q, &mut y).unwrap();
    y
}

#[test]
fn round_trip_error_within_test_quantize_fns_bounds() {
    // test-quantize-fns: 4096 values, MAX_QUANTIZATION_TOTAL_ERROR = 0.002.
    let x = ggml_test_data(0.0, 32 * 128);
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q8K,
        DType::F16,
        DType::BF16,
    ] {
        let err = ggml_array_rmse(&x, &round_trip(dtype, &x));
        assert!(err < 0.002, "{dtype}: total error {err}");
    }
    // MAX_QUANTIZATION_TOTAL_ERROR_3BITS and _2BITS.
    for (dtype, bound) in [(DType::Q3K, 0.004), (DType::Q2K, 0.0075)] {
        let err = ggml_array_rmse(&x, &round_trip(dtype, &x));
        assert!(err < bound, "{dtype}: total error {err}");
    }
    assert_eq!(round_trip(DType::F32, &x), x);
}

#[test]
fn finer_types_are_more_accurate() {
    let x = ggml_test_data(0.5, 1024);
    let err = |t| ggml_array_rmse(&x, &round_trip(t, &x));
    assert!(err(DType::Q8_0) < err(DType::Q4_0));
    assert!(err(DType::Q5_0) < err(DType::Q4_0));
    assert!(err(DType::Q5_1) < err(DType::Q4_1));
    assert!(err(DType::Q8_0) < err(DType::Q5_0));
    assert!(err(DType::Q3K) < err(DType::Q2K));
    assert!(err(DType::Q4K) < err(DType::Q3K));
    assert!(err(DType::Q5K) < err(DType::Q4K));
    assert!(err(DType::Q6K) < err(DType::Q5K));
    assert!(err(DType::Q8K) < err(DType::Q6K));
    // A min and a scale beat a signed scale on data offset from zero.
    let shifted: Vec<f32> = x.iter().map(|v| v + 3.0).collect();
    let err = |t| ggml_array_rmse(&shifted, &round_trip(t, &shifted));
    assert!(err(DType::Q4_1) < err(DType::Q4_0) / 2.0);
    assert!(err(DType::Q5_1) < err(DType::Q5_0) / 2.0);
}

#[test]
fn length_errors_are_classified() {
    let x = vec![0.5f32; 300];
    // Not a multiple of the block size.
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q8K,
    ] {
        let mut q = vec![0u8; 4096];
        assert!(matches!(
            from_f32(dtype, &x[..33], &mut q),
            Err(Error::BlockSize { .. })
        ));
        let mut y = vec![0.0f32; 33];
        assert!(matches!(
            to_f32(dtype, &q, &mut y),
            Err(Error::BlockSize { .. })
        ));
    }
    // Wrong number of bytes.
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ] {
        let n = 64;
        let want = dtype.row_size(n).unwrap();
        for len in [0, want - 1, want + 1] {
            let mut q = vec![0u8; len];
            let r = from_f32(dtype, &x[..n], &mut q);
            assert!(
                matches!(r, Err(Error::InvalidLayout(_))),
                "{dtype} {len}: {r:?}"
            );
            let mut y = vec![0.0f32; n];
            let r = to_f32(dtype, &q, &mut y);
            assert!(
                matches!(r, Err(Error::InvalidLayout(_))),
                "{dtype} {len}: {r:?}"
            );
        }
    }
    // Integer types.
    let mut q = vec![0u8; 256];
    assert!(matches!(
        from_f32(DType::I32, &x[..64], &mut q),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        from_f32(DType::I64, &x[..32], &mut q),
        Err(Error::Unsupported { .. })
    ));
    let mut y = vec![0.0f32; 32];
    assert!(matches!(
        to_f32(DType::I64, &q, &mut y),
        Err(Error::Unsupported { .. })
    ));
    // Empty rows are fine.
    assert!(from_f32(DType::Q4K, &[], &mut []).is_ok());
    assert!(to_f32(DType::Q6K, &[], &mut []).is_ok());
}

#[test]
fn i32_to_f32_and_f32_copy() {
    let ints = [0i32, 1, -1, 16_777_217, i32::MIN, i32::MAX];
    let bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut y = [0.0f32; 6];
    to_f32(DType::I32, &bytes, &mut y).unwrap();
    assert_eq!(y, ints.map(|v| v as f32));

    let x = [1.5f32, -0.0, f32::NAN, f32::INFINITY];
    let mut q = [0u8; 16];
    from_f32(DType::F32, &x, &mut q).unwrap();
    let mut back = [0.0f32; 4];
    to_f32(DType::F32, &q, &mut back).unwrap();
    assert_eq!(x.map(f32::to_bits), back.map(f32::to_bits));
}

#[test]
fn unaligned_bytes_are_read_and_written() {
    let x = ggml_test_data(1.0, 512);
    for dtype in [DType::F16, DType::Q8_0, DType::Q4K, DType::Q8K] {
        let n = dtype.row_size(x.len()).unwrap();
        let mut aligned = vec![0u8; n];
        from_f32(dtype, &x, &mut aligned).unwrap();
        let mut buf = vec![0u8; n + 1];
        from_f32(dtype, &x, &mut buf[1..]).unwrap();
        assert_eq!(&buf[1..], &aligned[..], "{dtype}");
        let (mut a, mut b) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
        to_f32(dtype, &aligned, &mut a).unwrap();
        to_f32(dtype, &buf[1..], &mut b).unwrap();
        assert_eq!(a, b, "{dtype}");
    }
}

#[test]
fn typed_rows_match_byte_rows() {
    let x = ggml_test_data(2.0, 512);
    let mut blocks = vec![BlockQ6K::zeroed(); 2];
    quantize_row(&x, &mut blocks).unwrap();
    let mut bytes = vec![0u8; 420];
    from_f32(DType::Q6K, &x, &mut bytes).unwrap();
    assert_eq!(bytemuck::cast_slice::<BlockQ6K, u8>(&blocks), &bytes[..]);
    let mut y = vec![0.0f32; 512];
    dequantize_row(&blocks, &mut y).unwrap();
    assert_eq!(y, round_trip(DType::Q6K, &x));

    let mut q8 = vec![BlockQ8_0::zeroed(); 3];
    assert!(matches!(
        quantize_row(&x[..64], &mut q8),
        Err(Error::InvalidLayout(_))
    ));
    assert!(matches!(
        quantize_row(&x[..65], &mut q8),
        Err(Error::BlockSize { .. })
    ));
    assert!(matches!(
        dequantize_row(&q8, &mut y[..64]),
        Err(Error::InvalidLayout(_))
    ));
}

use bytemuck::Zeroable;

/// Any f32 bit pattern, NaNs and subnormals included, weighted toward specials.
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => any::<u32>().prop_map(f32::from_bits),
        2 => -10.0f32..10.0,
        1 => Just(0.0f32),
        1 => prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, 1e-40, -1e30]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random lengths and values: never a panic, and the result is Ok exactly
    /// when the lengths are consistent.
    #[test]
    fn never_panics_and_classifies(
        values in prop::collection::vec(any_f32(), 0..700),
        extra in -3i64..4,
        type_index in 0usize..ALL_DTYPES.len(),
    ) {
        let dtype = ALL_DTYPES[type_index];
        let n = values.len();
        let good = dtype.row_size(n).ok();
        let nbytes = match good {
            Some(b) => (b as i64 + extra).max(0) as usize,
            None => n * 2,
        };
        let mut q = vec![0u8; nbytes];
        let r = from_f32(dtype, &values, &mut q);
        let expect_ok = !dtype.is_int() && good == Some(nbytes);
        prop_assert_eq!(r.is_ok(), expect_ok, "{} n={} bytes={}: {:?}", dtype, n, nbytes, r);
        if let Err(e) = &r {
            let kind_ok = match e {
                Error::Unsupported { .. } => dtype.is_int(),
                Error::BlockSize { .. } => good.is_none(),
                Error::InvalidLayout(_) => good.is_some(),
                _ => false,
            };
            prop_assert!(kind_ok, "{}: unexpected error {:?}", dtype, e);
        }

        let mut y = vec![0.0f32; n];
        let r = to_f32(dtype, &q, &mut y);
        let expect_ok = dtype != DType::I64 && good == Some(nbytes);
        prop_assert_eq!(r.is_ok(), expect_ok, "{} to_f32: {:?}", dtype, r);
    }

    /// Blocks of random bytes (any scale, any bits) dequantize without panicking,
    /// and finite inputs quantize to blocks that dequantize to values of the
    /// same order of magnitude.
    #[test]
    fn random_blocks_dequantize(bytes in prop::collection::vec(any::<u8>(), 292 * 2)) {
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2K, DType::Q3K, DType::Q4K, DType::Q5K, DType::Q6K, DType::Q8K] {
            let n = 512;
            let nbytes = dtype.row_size(n).unwrap();
            let mut y = vec![0.0f32; n];
            prop_assert!(to_f32(dtype, &bytes[..nbytes], &mut y).is_ok());
        }
    }

    #[test]
    fn quantized_values_stay_close(values in prop::collection::vec(-100.0f32..100.0, 256)) {
        let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (dtype, tol) in [(DType::Q8_0, 0.01), (DType::Q4_0, 0.15), (DType::Q4_1, 0.075), (DType::Q5_0, 0.07), (DType::Q5_1, 0.04), (DType::Q2K, 0.6), (DType::Q3K, 0.3), (DType::Q4K, 0.25), (DType::Q5K, 0.15), (DType::Q6K, 0.05), (DType::Q8K, 0.01)] {
            let y = round_trip(dtype, &values);
            for (a, b) in values.iter().zip(&y) {
                prop_assert!((a - b).abs() <= tol * amax + 1e-3, "{}: {} -> {}", dtype, a, b);
            }
        }
    }
}
