//! Bad input for tessera-core without a graph: layouts (constructors and
//! every accessor on hand-made layouts), element types, and the
//! quantization entry points (mismatched lengths, values that are not
//! finite).

use proptest::prelude::*;
use tessera::dtype::ALL_DTYPES;
use tessera::quant::{
    self, BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4K, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8K,
};
use tessera::{DType, Layout, MAX_DIMS};

use super::strategies::{dtype, extent, raw_layout, sample, shape};
use super::{Case, Group, Stop, Verdict, ensure};

/// The groups of this module: `core-layout`, `core-quant`, plus the graph
/// builder's (`core-graph`, see `graph_cases`).
pub fn core_groups() -> Vec<Group> {
    vec![
        Group::new("core-layout", layout_cases),
        Group::new("core-quant", quant_cases),
        Group::new("core-graph", super::graph_cases::graph_cases),
    ]
}

fn layout_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (t, ne) in sample((dtype(), shape()), 150, 1) {
        cases.push(Case::new(
            format!("Layout::contiguous({t}, {ne:?})"),
            move || -> Result<(), Stop> {
                let l = Layout::contiguous(t, &ne)?;
                accessors(&l)?;
                ensure(l.is_contiguous() && l.is_self_disjoint(), || {
                    format!("{l:?} from contiguous() is not contiguous")
                })?;
                let n = l.checked_nbytes()?;
                ensure(l.nbytes() == n, || format!("nbytes {} != {n}", l.nbytes()))
            },
        ));
    }
    for l in sample(raw_layout(), 250, 2) {
        cases.push(Case::new(
            format!("accessors of a hand-made {l:?}"),
            move || -> Result<(), Stop> {
                accessors(&l)?;
                covers_last_element(&l)
            },
        ));
    }
    for (a, b) in sample((raw_layout(), raw_layout()), 60, 3) {
        cases.push(Case::new(
            format!("can_repeat_to / same_* of {a:?} and {b:?}"),
            move || {
                let _ = (a.can_repeat_to(&b), b.can_repeat_to(&a));
                let _ = (a.same_shape(&b), a.same_layout(&b));
                Verdict::Ok
            },
        ));
    }
    for (t, ne0) in sample((dtype(), extent()), 60, 4) {
        cases.push(Case::new(format!("{t}.row_size({ne0})"), move || {
            t.row_size(ne0)
        }));
    }
    for id in sample(prop_oneof![0u32..40, any::<u32>()], 30, 5) {
        cases.push(Case::new(format!("DType::from_ggml_id({id})"), move || {
            DType::from_ggml_id(id)
        }));
    }
    for name in sample("\\PC{0,8}", 20, 6) {
        cases.push(Case::new(
            format!("DType::from_name({name:?})"),
            move || DType::from_name(&name),
        ));
    }
    cases
}

/// Every accessor of `l`, which must not panic whatever the fields say.
fn accessors(l: &Layout) -> Result<(), Stop> {
    let nbytes = l.checked_nbytes();
    let _ = (l.nbytes(), l.checked_nelements(), l.nelements(), l.nrows());
    let _ = (l.row_bytes(), l.is_contiguous(), l.is_contiguous_rows());
    for n in 0..=MAX_DIMS + 1 {
        let _ = l.is_contiguous_dims(n);
    }
    let _ = (l.is_transposed(), l.is_permuted(), l.is_matrix());
    let _ = (l.is_self_disjoint(), l.describe(), l.to_string());
    if let Ok(n) = nbytes {
        ensure(l.nbytes() == n, || format!("nbytes {} != {n}", l.nbytes()))?;
    }
    Ok(())
}

/// "Bytes spanned, from the first byte to one past the last": the last
/// element (block) of a layout must end inside its `checked_nbytes`.
fn covers_last_element(l: &Layout) -> Result<(), Stop> {
    let Ok(n) = l.checked_nbytes() else {
        return Ok(());
    };
    if l.ne.contains(&0) {
        return Ok(());
    }
    let bs = l.dtype.block_size();
    let last = [l.ne[0] - bs, l.ne[1] - 1, l.ne[2] - 1, l.ne[3] - 1];
    let end = l.offset_of(last).checked_add(l.dtype.type_size());
    ensure(end.is_some_and(|e| e <= n), || {
        format!(
            "the last element ends at byte {end:?}, past checked_nbytes() = {n} (the span misses bytes a kernel touches)"
        )
    })
}

fn quant_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let lens = (dtype(), 0usize..=600, 0usize..=700);
    for (t, n, bytes) in sample(lens, 120, 10) {
        cases.push(Case::new(
            format!("quant::from_f32({t}, {n} values, {bytes} bytes)"),
            move || {
                let src = vec![0.5f32; n];
                let mut dst = vec![0u8; bytes];
                quant::from_f32(t, &src, &mut dst)
            },
        ));
        cases.push(Case::new(
            format!("quant::to_f32({t}, {bytes} bytes, {n} values)"),
            move || {
                let src = vec![0x7Fu8; bytes];
                let mut dst = vec![0f32; n];
                quant::to_f32(t, &src, &mut dst)
            },
        ));
    }
    // Whole rows of values that are not finite, or far out of range.
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -0.0,
        1e30,
        4194304.0,
    ];
    for t in ALL_DTYPES {
        for (k, &x) in specials.iter().enumerate() {
            cases.push(Case::new(
                format!("quant::from_f32({t}) of a row of {x} and a ramp"),
                move || -> Result<(), Stop> {
                    let n = t.block_size() * 2;
                    let mut src: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
                    src[k % n] = x;
                    src[n - 1] = x;
                    let mut bytes = vec![0u8; t.row_size(n)?];
                    quant::from_f32(t, &src, &mut bytes)?;
                    let mut back = vec![0f32; n];
                    quant::to_f32(t, &bytes, &mut back)?;
                    Ok(())
                },
            ));
        }
    }
    for (nv, nb) in sample((0usize..=600, 0usize..=4), 12, 11) {
        cases.push(Case::new(
            format!("quant::quantize_row/dequantize_row with {nv} values, {nb} blocks"),
            move || -> Result<(), Stop> {
                let src = vec![1.0f32; nv];
                let mut out = vec![0f32; nv];
                let mut r = Vec::new();
                macro_rules! both {
                    ($b:ty, $qk:expr) => {{
                        let mut blocks = vec![<$b as bytemuck::Zeroable>::zeroed(); nb];
                        r.push(quant::quantize_row::<$b, { $qk }>(&src, &mut blocks).is_ok());
                        r.push(quant::dequantize_row::<$b, { $qk }>(&blocks, &mut out).is_ok());
                    }};
                }
                both!(BlockQ4_0, quant::QK4_0);
                both!(BlockQ8_0, quant::QK8_0);
                both!(BlockQ2K, quant::QK_K);
                both!(BlockQ3K, quant::QK_K);
                both!(BlockQ4K, quant::QK_K);
                both!(BlockQ5K, quant::QK_K);
                both!(BlockQ6K, quant::QK_K);
                both!(BlockQ8K, quant::QK_K);
                both!(BlockIQ4NL, quant::QK4_NL);
                both!(BlockIQ4XS, quant::QK_K);
                let _ = r;
                Ok(())
            },
        ));
    }
    for j in sample(prop_oneof![0usize..16, Just(usize::MAX)], 6, 12) {
        cases.push(Case::new(
            format!("quant::get_scale_min_k4({j})"),
            move || {
                let q = [0xFFu8; quant::K_SCALE_SIZE];
                let _ = quant::get_scale_min_k4(j, &q);
                Verdict::Ok
            },
        ));
    }
    cases
}
