//! The cooperative-matrix kernel against the f64 product, on adapters that
//! have cooperative matrices (lavapipe from Mesa 26 does; CI's does not).

#![allow(clippy::unwrap_used, clippy::panic)]
use std::sync::atomic::Ordering;

use super::*;

thread_local! {
    /// Products this thread recorded with the kernel.
    pub(crate) static RECORDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The largest subgroup [`kernel`] takes the device to have, on this
    /// thread (`None`: the device's).
    pub(crate) static LARGEST: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// The side [`kernel`] takes, on this thread (`None`: the device's).
    pub(crate) static SIDE: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// Whether [`kernel`] takes the 128 x 128 tiles, on this thread
    /// (`None`: the environment's choice).
    pub(crate) static BIG_TILES: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    /// The kind for which [`kernel`] gives [`BROKEN_SOURCE`], on this
    /// thread.
    pub(crate) static BROKEN: std::cell::Cell<Option<Kind>> = const { std::cell::Cell::new(None) };
}

/// A kernel no device compiles (a float where a u32 is declared).
pub(crate) const BROKEN_SOURCE: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n\
    @compute @workgroup_size(64) fn main() { let x: u32 = 1.5; }\n";

/// Both shapes with both sides keep every cooperative load and store in
/// their arrays; other sides, and shapes whose parts do not cover the
/// tile exactly or whose last part would reach past it, are refused.
#[test]
fn every_load_and_store_of_both_shapes_is_in_bounds() {
    for shape in [SMALL, BIG] {
        assert!(in_bounds(shape, 8) && in_bounds(shape, 16), "{shape:?}");
        assert!(!in_bounds(shape, 32) && !in_bounds(shape, 4) && !in_bounds(shape, 12));
    }
    let skewed = Shape {
        part_rows: 48,
        ..SMALL
    };
    let too_many = Shape { parts: 8, ..SMALL };
    let too_tall = Shape {
        parts: 2,
        part_rows: 64,
        part_cols: 64,
        tile: 32,
    };
    for shape in [skewed, too_many, too_tall] {
        assert!(!in_bounds(shape, 8) && !in_bounds(shape, 16), "{shape:?}");
    }
    // The 128 tile's workgroup memory: 20 KiB staged, 8 KiB of results
    // (16 x 16), a scale per column.
    assert_eq!(
        BIG.workgroup_bytes(16, Kind::Products, 0),
        20480 + 8192 + 512
    );
    // The 64 tile's for MUL_MAT_ID in workgroups of 128: 10 KiB staged,
    // 4 KiB of results, a scale and a pair per column, a count per
    // invocation, the total; within WebGPU's 16 KiB.
    let id = SMALL.workgroup_bytes(16, Kind::Experts, 128);
    assert_eq!(id, 10240 + 4096 + 256 + 256 + 512 + 4);
    assert!(id <= 16384);
}

#[test]
fn the_largest_f16_configuration_is_picked() {
    use wgpu::wgt::{CooperativeMatrixProperties as P, CooperativeScalarType as T};
    let p = |s: u32, ab, cr| P {
        m_size: s,
        n_size: s,
        k_size: s,
        ab_type: ab,
        cr_type: cr,
        saturating_accumulation: false,
    };
    assert_eq!(
        pick(&[p(8, T::F16, T::F32), p(16, T::F16, T::F32)]),
        Some(16)
    );
    assert_eq!(pick(&[p(8, T::F16, T::F16), p(8, T::F16, T::F32)]), Some(8));
    assert_eq!(pick(&[p(16, T::F16, T::F16), p(8, T::F32, T::F32)]), None);
}

/// The device when it takes cooperative matrices, else `None` (the test
/// skips, saying so: CI's lavapipe has none), unless
/// `TESSERA_REQUIRE_COOPMAT=1` (`scripts/coopmat-check/`).
fn coop_device() -> Option<std::sync::Arc<crate::WgpuDevice>> {
    let required = std::env::var("TESSERA_REQUIRE_COOPMAT").is_ok_and(|v| v == "1");
    let Some(dev) = crate::test_device() else {
        assert!(!required, "TESSERA_REQUIRE_COOPMAT=1 but no adapter");
        return None;
    };
    if dev.core().coop_side.is_none() {
        assert!(
            !required,
            "TESSERA_REQUIRE_COOPMAT=1 but no cooperative matrices"
        );
        eprintln!("skipped: the adapter has no cooperative matrices (f16, summed in f32)");
        return None;
    }
    Some(dev)
}

/// Products of `wt` weights (`k` x `m`) by `cols` columns from `rnd`
/// (column `big`, if any, times 10^6: past f16's range), two of one
/// input: one quantization and two dispatches, both by the kernel, each
/// within f16 rounding of the f64 product of the activations as quantized
/// (2^-10 + 1e-5 of the products' magnitudes).
fn check(
    dev: &crate::WgpuDevice,
    wt: tessera::DType,
    (k, m, cols): (usize, usize, usize),
    big: Option<usize>,
    rnd: &mut impl FnMut() -> f32,
    what: &str,
) {
    use tessera::{DType, Graph, Stream};
    let stream = dev.new_wgpu_stream().unwrap();
    let mut g = Graph::new();
    let w1 = g.input("w1", wt, &[k, m]).unwrap();
    let w2 = g.input("w2", wt, &[k, m]).unwrap();
    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
    let y1 = g.mul_mat(w1, x).unwrap();
    let y2 = g.mul_mat(w2, x).unwrap();
    g.set_output(y1).unwrap();
    g.set_output(y2).unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    let mut ws = Vec::new();
    for w in [w1, w2] {
        let (q, deq) = crate::matvec_q8::tests::weights(wt, k, m, rnd);
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        ws.push(deq);
    }
    let xs: Vec<f32> = (0..k * cols)
        .map(|i| {
            let v = if i % 97 == 5 { 40.0 } else { rnd() };
            if Some(i / k) == big { v * 1e6 } else { v }
        })
        .collect();
    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    let (before, coop) = (crate::batch::counts::now().0, RECORDED.with(|r| r.get()));
    stream.compute(&g, &pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(dispatches, 3, "{wt}{what}: one quantization, two products");
    assert_eq!(
        RECORDED.with(|r| r.get()) - coop,
        2,
        "{wt}{what}: both by the kernel"
    );
    for (w, y) in ws.iter().zip([y1, y2]) {
        let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
        // Each weight and activation rounded to f16 (2^-11 of each), the
        // sums in f32.
        let rel = 2f64.powi(-10) + 1e-5;
        let what = format!("{wt}{what}");
        crate::matvec_q8::tests::within_rounding_by(w, &xs, &got, (k, m, cols), &what, rel);
    }
}

/// A prompt's expert products (`crate::matmul_q8_id`'s gathering of each
/// expert's pairs, [`crate::matvec_q8_id::tests::prompt_ids`]) on the
/// kernel: every weight type, gate/up-like and down-like, rows ending
/// mid-tile, both sides (as the test below), workgroups of 1x and 2x the
/// subgroups; within f16 rounding, every product by the kernel.
#[test]
fn cooperative_expert_products_are_within_f16_rounding() {
    let Some(dev) = coop_device() else {
        return;
    };
    force(Some(true));
    crate::matvec_q8::force(Some(true));
    crate::matmul_q8::force(Some(true));
    crate::matmul_q8_id::force(Some(true));
    crate::matvec_q8_id::force(Some(true));
    let mut values = crate::test_values(43);
    let mut rnd = move || values.next().unwrap();
    let largest = dev.core().largest_subgroup.unwrap();
    let mut sides = vec![dev.core().coop_side.unwrap()];
    if std::env::var("TESSERA_COOPMAT_UNREPORTED").is_ok_and(|v| v == "1") && sides[0] == 8 {
        sides.push(16);
    }
    let ((used, tokens, experts), id) = crate::matvec_q8_id::tests::prompt_ids();
    let rel = 2f64.powi(-10) + 1e-5;
    for side in sides {
        SIDE.with(|s| s.set(Some(side)));
        for wide in [largest, 2 * largest] {
            LARGEST.with(|l| l.set(Some(wide)));
            for wt in crate::matvec_q8::TYPES {
                let k = if wt.block_size() == 32 { 288 } else { 256 };
                for (m, ne11) in [(70, 1), (37, used)] {
                    let coop = RECORDED.with(|r| r.get());
                    crate::matvec_q8_id::tests::check_ids(
                        &dev,
                        wt,
                        (k, m, experts),
                        (used, ne11, tokens),
                        &id,
                        &mut rnd,
                        rel,
                    );
                    assert_eq!(
                        RECORDED.with(|r| r.get()) - coop,
                        1,
                        "{wt} ({side} x {side}, subgroups of {wide}): by the kernel"
                    );
                }
            }
        }
    }
    SIDE.with(|s| s.set(None));
    LARGEST.with(|l| l.set(None));
    crate::matvec_q8_id::force(None);
    crate::matmul_q8_id::force(None);
    crate::matmul_q8::force(None);
    crate::matvec_q8::force(None);
    force(None);
}

/// Every weight type the integer kernels take, in shapes that end
/// mid-tile (rows and columns), across several tiles both ways, with an
/// odd count of units: within f16 rounding of the f64 product of the
/// activations as quantized. Tiles of 64 and of 128
/// (`TESSERA_WGPU_COOPMAT=big`), each also in workgroups of twice the
/// subgroups (as on a device whose largest subgroup is twice the one it
/// runs: the second half of the subgroups repeating the first's parts).
/// With `TESSERA_COOPMAT_UNREPORTED=1` also 16 x 16 matrices on a device
/// that reports 8 x 8 only: outside Vulkan's contract, but lavapipe
/// computes them, which checks the variant NVIDIA's GPUs take
/// (`scripts/coopmat-check/` sets it).
#[test]
fn cooperative_products_are_within_f16_rounding() {
    let Some(dev) = coop_device() else {
        return;
    };
    force(Some(true));
    crate::matvec_q8::force(Some(true));
    crate::matmul_q8::force(Some(true));
    let mut values = crate::test_values(41);
    let mut rnd = move || values.next().unwrap();
    let largest = dev.core().largest_subgroup.unwrap();
    let mut sides = vec![dev.core().coop_side.unwrap()];
    if std::env::var("TESSERA_COOPMAT_UNREPORTED").is_ok_and(|v| v == "1") && sides[0] == 8 {
        sides.push(16);
    }
    for side in sides {
        SIDE.with(|s| s.set(Some(side)));
        for big in [false, true] {
            BIG_TILES.with(|b| b.set(Some(big)));
            for wide in [largest, 2 * largest] {
                LARGEST.with(|l| l.set(Some(wide)));
                let (_, shape) = kernel(dev.core(), super::Kind::Products).unwrap();
                assert_eq!(shape, if big { BIG } else { SMALL });
                let what =
                    format!(" ({side} x {side}, big tiles {big}, subgroups of {wide} at most)");
                for wt in crate::matvec_q8::TYPES {
                    let k_odd = if wt.block_size() == 32 { 288 } else { 512 };
                    for shape in [(256, 37, 9), (k_odd, 70, 65), (256, 129, 130)] {
                        check(&dev, wt, shape, None, &mut rnd, &what);
                    }
                }
            }
        }
    }
    BIG_TILES.with(|b| b.set(None));
    SIDE.with(|s| s.set(None));
    LARGEST.with(|l| l.set(None));
    crate::matmul_q8::force(None);
    crate::matvec_q8::force(None);
    force(None);
}

/// A column of activations a million times the others (its values up to
/// 4 x 10^7, past f16's 65,504) is staged scaled down by a power of two
/// and its results scaled back: within f16 rounding like the others, not
/// infinite.
#[test]
fn a_column_past_f16_range_is_scaled() {
    let Some(dev) = coop_device() else {
        return;
    };
    force(Some(true));
    crate::matvec_q8::force(Some(true));
    crate::matmul_q8::force(Some(true));
    let mut values = crate::test_values(43);
    let mut rnd = move || values.next().unwrap();
    for wt in [tessera::DType::Q8_0, tessera::DType::Q4K] {
        check(
            &dev,
            wt,
            (256, 70, 20),
            Some(13),
            &mut rnd,
            " (column 13 x 1e6)",
        );
    }
    crate::matmul_q8::force(None);
    crate::matvec_q8::force(None);
    force(None);
}

/// A device that refuses the kernel (here: a source that does not
/// compile, as a driver might refuse an experimental feature) computes
/// the products with the integer tiles instead (within their float
/// rounding of the f64 product of the activations as quantized, where
/// f16 staging would not be), says so once, and takes the integer tiles
/// from then on without trying again; its other kernel (MUL_MAT_ID's)
/// stays on.
#[test]
fn a_refused_kernel_leaves_the_products_to_the_integer_tiles() {
    use tessera::{DType, Graph, Stream};
    if coop_device().is_none() {
        return;
    }
    // A device of its own: the refusal is the device's for good.
    let opts = crate::DeviceOptions {
        name: Some("WGPU0.coop-refused".into()),
        max_buffer_size: None,
    };
    let dev = crate::family().open_device(0, &opts).unwrap();
    force(Some(true));
    crate::matvec_q8::force(Some(true));
    crate::matmul_q8::force(Some(true));
    BROKEN.with(|b| b.set(Some(Kind::Products)));
    let mut values = crate::test_values(47);
    let mut rnd = move || values.next().unwrap();
    let (k, m, cols) = (256, 70, 20);
    let stream = dev.new_wgpu_stream().unwrap();
    for round in 0..2 {
        let mut g = Graph::new();
        let w = g.input("w", DType::Q4_0, &[k, m]).unwrap();
        let x = g.input("x", DType::F32, &[k, cols]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        g.set_output(y).unwrap();
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let (q, deq) = crate::matvec_q8::tests::weights(DType::Q4_0, k, m, &mut rnd);
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        let xs: Vec<f32> = (0..k * cols).map(|_| rnd()).collect();
        pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
        let coop = RECORDED.with(|r| r.get());
        stream.compute(&g, &pl).unwrap();
        assert_eq!(
            RECORDED.with(|r| r.get()),
            coop,
            "round {round}: not by the kernel"
        );
        assert_eq!(dev.core().coop_refused.load(Ordering::Relaxed), 1);
        let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
        let what = format!("refused, round {round}");
        crate::matvec_q8::tests::within_rounding(&deq, &xs, &got, (k, m, cols), &what);
    }
    assert!(kernel(dev.core(), super::Kind::Products).is_none());
    BROKEN.with(|b| b.set(None));
    assert!(kernel(dev.core(), super::Kind::Experts).is_some());
    crate::matmul_q8::force(None);
    crate::matvec_q8::force(None);
    force(None);
}
