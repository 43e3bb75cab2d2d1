//! Proptest strategies for hostile inputs, and [`sample`], which draws a
//! fixed number of values from a strategy with a fixed seed.
//!
//! The suite does not shrink or retry: every drawn value becomes one case of
//! its own (run in a child process, see [`super::runner`]), and the parent
//! and the children of a run must draw the same values, so each draw comes
//! from a [`TestRunner`] seeded with a constant.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tessera::dtype::ALL_DTYPES;
use tessera::{DType, Layout, MAX_DIMS};

/// `n` values of `strategy`, the same on every call with the same `seed`.
pub fn sample<S: Strategy>(strategy: S, n: usize, seed: u64) -> Vec<S::Value> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(b"tessera!");
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, rng);
    let mut out = Vec::with_capacity(n);
    let mut tries = 0;
    while out.len() < n && tries < n.saturating_mul(10) {
        tries += 1;
        if let Ok(tree) = strategy.new_tree(&mut runner) {
            out.push(tree.current());
        }
    }
    out
}

/// Huge values that overflow sizes: near `usize::MAX`, above `isize::MAX`,
/// and powers of two whose products overflow.
pub fn huge() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(usize::MAX),
        Just(usize::MAX - 1),
        Just(usize::MAX / 2),
        Just(usize::MAX / 3 + 1),
        Just(isize::MAX as usize + 1),
        Just(1usize << 32),
        Just(1usize << 40),
        Just((1usize << 62) + 256),
    ]
}

/// One extent: mostly small (0, 1, block multiples), sometimes huge.
pub fn extent() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => Just(0usize),
        6 => Just(1usize),
        8 => 2usize..=9,
        3 => Just(32usize),
        2 => Just(256usize),
        3 => 10usize..=300,
        3 => huge(),
    ]
}

/// A shape of 0 to 5 extents (more than four is an error).
pub fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(extent(), 0..=5)
}

/// Any element type.
pub fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(ALL_DTYPES.to_vec())
}

/// A byte stride: 0, small (aligned or not), or huge.
pub fn stride() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(0usize),
        4 => 1usize..=40,
        4 => (1usize..=64).prop_map(|k| k * 4),
        2 => huge(),
    ]
}

/// A hand-made layout (the fields are public): any type, extents and
/// strides, consistent or not.
pub fn raw_layout() -> impl Strategy<Value = Layout> {
    (
        dtype(),
        prop::array::uniform4(extent()),
        prop::array::uniform4(stride()),
    )
        .prop_map(|(dtype, ne, nb)| Layout { dtype, ne, nb })
}

/// A small layout that a compute can afford: extents up to 9 (block
/// multiples for quantized types), strides contiguous or perturbed.
pub fn small_layout() -> impl Strategy<Value = Layout> {
    (
        dtype(),
        prop::array::uniform4(prop_oneof![4 => 1usize..=4, 1 => Just(0usize), 1 => 5usize..=9]),
        prop::array::uniform4(prop_oneof![6 => Just(None), 1 => (0usize..=80).prop_map(Some)]),
    )
        .prop_map(|(dtype, mut ne, tweak)| {
            ne[0] *= dtype.block_size();
            let mut l = Layout::contiguous4(dtype, ne).unwrap_or(Layout {
                dtype,
                ne: [dtype.block_size(), 1, 1, 1],
                nb: [dtype.type_size(); MAX_DIMS],
            });
            for (nb, t) in l.nb.iter_mut().zip(tweak) {
                if let Some(t) = t {
                    *nb = t;
                }
            }
            l
        })
}

/// A byte offset: small, page-ish, or near `usize::MAX`.
pub fn offset() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..=64,
        2 => 65usize..=4096,
        2 => huge(),
    ]
}

/// A length of a real host slice (kept small: it is allocated).
pub fn slice_len() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..=64, 1 => 65usize..=2048]
}

/// A length for calls that take one without a slice (`fill`, reads into a
/// fresh vector): small or huge.
pub fn any_len() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..=256, 1 => huge()]
}

/// A thread count: 0, a few, just above the limit, or absurd.
pub fn threads() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(0usize),
        3 => 1usize..=3,
        2 => 513usize..=600,
        2 => huge(),
    ]
}

/// A stream option string: printable noise, plausible keys with bad values,
/// or anything unicode.
pub fn option_string() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("threads".to_string()),
        Just("isa".to_string()),
        Just("".to_string()),
        "[a-z]{1,8}",
    ];
    let value = prop_oneof![
        Just("".to_string()),
        Just("0".to_string()),
        Just("1".to_string()),
        Just("2".to_string()),
        Just("-1".to_string()),
        Just("513".to_string()),
        Just("18446744073709551616".to_string()),
        Just("scalar".to_string()),
        Just("avx512".to_string()),
        Just("AVX2".to_string()),
        "[ -~]{0,6}",
    ];
    let item =
        (key, value, any::<bool>()).prop_map(|(k, v, eq)| if eq { format!("{k}={v}") } else { k });
    prop_oneof![
        3 => prop::collection::vec(item, 0..=3).prop_map(|v| v.join(",")),
        1 => "[ -~]{0,24}",
        1 => "\\PC{0,12}",
    ]
}

/// An f32 parameter: ordinary, zero, negative, or not finite.
pub fn float_param() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -4.0f32..4.0,
        1 => Just(0.0f32),
        1 => Just(-1.0f32),
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(f32::MAX),
        1 => Just(1e-30f32),
    ]
}

/// A row id for GET_ROWS / SET_ROWS data: in range or far out of it.
pub fn row_id() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..4,
        2 => 4i64..=9,
        2 => Just(-1i64),
        1 => Just(i64::from(i32::MIN)),
        1 => Just(i64::from(i32::MAX)),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(1i64 << 32),
    ]
}
