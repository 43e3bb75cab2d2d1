//! Bad input to the meta device: impossible shares, splits that do not
//! divide, pieces of the wrong shape, a partial tensor to allocate, and a
//! device failing in the middle of a compute — each an error, and nothing
//! corrupted: after a failed compute the same graph computes the right
//! result. Also a property test: host writes scatter and reads gather back
//! the same bytes for any shares, empty ones included.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use proptest::prelude::*;
use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{BufferUsage, DType, Device, Error, Graph, Layout, Placement, StreamOptions};
use tessera_meta::{MetaDevice, MetaOptions, MetaStream, Role, Split, SplitPolicy, SplitState};

fn two() -> Arc<MetaDevice> {
    let cpu = tessera_cpu::device();
    MetaDevice::new(
        vec![cpu.clone(), cpu],
        SplitPolicy::even(2).unwrap(),
        MetaOptions::default(),
    )
    .unwrap()
}

#[test]
fn impossible_shares_are_errors() {
    for r in [
        vec![],
        vec![0.0, 0.0],
        vec![-1.0, 2.0],
        vec![f64::NAN, 1.0],
        vec![f64::INFINITY, 1.0],
    ] {
        assert!(SplitPolicy::new(r.clone()).is_err(), "{r:?}");
    }
    let cpu = tessera_cpu::device();
    assert!(
        MetaDevice::new(
            vec![],
            SplitPolicy::even(1).unwrap(),
            MetaOptions::default()
        )
        .is_err()
    );
    let three = SplitPolicy::even(3).unwrap();
    assert!(MetaDevice::new(vec![cpu.clone(), cpu], three, MetaOptions::default()).is_err());
}

#[test]
fn splits_that_do_not_divide_are_errors() {
    let p = SplitPolicy::even(2).unwrap();
    let l = Layout::contiguous(DType::Q8_0, &[96, 10]).unwrap();
    // 96 columns in 2 units: 48 each, not whole blocks of 32.
    assert!(p.state(&l, Role::row(2), 0).is_err());
    // 10 rows in 3 units.
    assert!(p.state(&l, Role::column(3), 0).is_err());
    assert!(p.state(&l, Role::column(0), 0).is_err());
    assert!(p.state(&l, Role::Split { axis: 7, units: 1 }, 0).is_err());
    // Sizes that do not add up, or cut a block.
    assert!(Split::new(&l, 1, vec![4, 5]).is_err());
    assert!(Split::new(&l, 0, vec![16, 80]).is_err());
    assert!(Split::new(&l, 4, vec![10]).is_err());
    // Zero shares are fine: one device gets everything.
    let s = SplitPolicy::new(vec![0.0, 1.0])
        .unwrap()
        .state(&l, Role::row(3), 0)
        .unwrap();
    assert_eq!(
        s,
        SplitState::Split(Split {
            axis: 0,
            sizes: vec![0, 96]
        })
    );
}

#[test]
fn bad_allocations_and_pieces_are_errors() {
    let meta = two();
    let l = Layout::contiguous(DType::F32, &[8, 4]).unwrap();
    let e = meta
        .alloc_split(&[(l, SplitState::Partial)], BufferUsage::Weights)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidLayout(_)), "{e}");
    let bad = SplitState::Split(Split {
        axis: 1,
        sizes: vec![1, 1],
    });
    assert!(meta.alloc_split(&[(l, bad)], BufferUsage::Weights).is_err());
    // Pieces whose layouts are not the shares'.
    let cpu = tessera_cpu::device();
    let whole = alloc_tensors(&cpu.buffer_type(), &[l], BufferUsage::Weights)
        .unwrap()
        .tensors
        .remove(0);
    let split = SplitState::Split(Split {
        axis: 1,
        sizes: vec![2, 2],
    });
    let e = meta
        .bind_split(
            &[(l, split.clone())],
            vec![vec![Some(whole.clone()), Some(whole.clone())]],
            BufferUsage::Weights,
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidLayout(_)), "{e}");
    assert!(
        meta.bind_split(&[(l, split)], vec![vec![Some(whole)]], BufferUsage::Weights)
            .is_err()
    );
}

/// `y = W2 (gelu(W1 x))`, W1 column-parallel and W2 row-parallel on `meta`
/// (all on the CPU when `meta` is `None`); the result read back.
struct Mlp {
    graph: Graph,
    placement: Placement,
    x: tessera::TensorId,
    y: tessera::TensorId,
}

fn mlp(dev: &Arc<dyn Device>, meta: Option<&MetaDevice>) -> Mlp {
    let (k, h) = (64, 96);
    let mut g = Graph::new();
    let w1 = g.new_tensor(DType::F32, &[k, h]).unwrap();
    let w2 = g.new_tensor(DType::F32, &[h, k]).unwrap();
    let x = g.input("x", DType::F32, &[k, 3]).unwrap();
    let a = g.mul_mat(w1, x).unwrap();
    let a = g.gelu(a).unwrap();
    let y = g.mul_mat(w2, a).unwrap();
    g.set_output(y).unwrap();
    let l1 = g.node(w1).unwrap().layout;
    let l2 = g.node(w2).unwrap().layout;
    let ws = match meta {
        Some(m) => {
            let p = m.policy();
            let specs = [
                (l1, p.state(&l1, Role::column(h / 32), 0).unwrap()),
                (l2, p.state(&l2, Role::row(h / 32), 0).unwrap()),
            ];
            m.alloc_split(&specs, BufferUsage::Weights).unwrap().1
        }
        None => {
            alloc_tensors(&dev.buffer_type(), &[l1, l2], BufferUsage::Weights)
                .unwrap()
                .tensors
        }
    };
    let v1: Vec<f32> = (0..k * h)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
        .collect();
    let v2: Vec<f32> = (0..k * h)
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 70.0)
        .collect();
    ws[0].write_f32(&v1).unwrap();
    ws[1].write_f32(&v2).unwrap();
    let mut placement = Placement::new(&g);
    placement.bind(&g, w1, &ws[0]).unwrap();
    placement.bind(&g, w2, &ws[1]).unwrap();
    GraphAllocator::new(dev.buffer_type())
        .alloc_graph(&g, &mut placement)
        .unwrap();
    let xv: Vec<f32> = (0..k * 3)
        .map(|i| ((i * 29 % 89) as f32 - 44.0) / 50.0)
        .collect();
    placement.tensor(&g, x).unwrap().write_f32(&xv).unwrap();
    Mlp {
        graph: g,
        placement,
        x,
        y,
    }
}

#[test]
fn a_device_failing_mid_compute_is_an_error_and_corrupts_nothing() {
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let want = {
        let m = mlp(&cpu, None);
        cpu.new_stream(&StreamOptions::new())
            .unwrap()
            .compute(&m.graph, &m.placement)
            .unwrap();
        m.placement
            .tensor(&m.graph, m.y)
            .unwrap()
            .read_f32()
            .unwrap()
    };
    let meta = two();
    let dev: Arc<dyn Device> = meta.clone();
    let m = mlp(&dev, Some(&meta));
    let stream = dev.new_stream(&StreamOptions::new().threads(1)).unwrap();
    let ms = stream.as_any().downcast_ref::<MetaStream>().unwrap();
    // Device 1 fails as soon as it starts computing.
    ms.streams()[1]
        .set_abort_callback(Some(Arc::new(|| true)))
        .unwrap();
    let e = stream.compute(&m.graph, &m.placement).unwrap_err();
    assert!(matches!(e, Error::Aborted), "{e}");
    ms.streams()[1].set_abort_callback(None).unwrap();
    // The same graph again (input rewritten as a user would): right result.
    let xv = m
        .placement
        .tensor(&m.graph, m.x)
        .unwrap()
        .read_f32()
        .unwrap();
    m.placement
        .tensor(&m.graph, m.x)
        .unwrap()
        .write_f32(&xv)
        .unwrap();
    stream.compute(&m.graph, &m.placement).unwrap();
    let got = m
        .placement
        .tensor(&m.graph, m.y)
        .unwrap()
        .read_f32()
        .unwrap();
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-5 * scale, "element {i}: {a} vs {b}");
    }
    assert!(ms.stats().reduces >= 1, "{:?}", ms.stats());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whole and partial writes scatter, reads gather back the same bytes,
    /// for any axis and shares (empty ones included), F32 and Q8_0.
    #[test]
    fn host_io_round_trips(
        axis in 0usize..3,
        cuts in proptest::collection::vec(0usize..=4, 2),
        quant in any::<bool>(),
        lo in 0usize..2000,
        len in 0usize..2000,
    ) {
        let meta = MetaDevice::new(
            vec![tessera_cpu::device(); 3],
            SplitPolicy::even(3).unwrap(),
            MetaOptions::default(),
        ).unwrap();
        let dtype = if quant { DType::Q8_0 } else { DType::F32 };
        let ne = [if quant { 128 } else { 8 }, 4, 4];
        let l = Layout::contiguous(dtype, &ne).unwrap();
        let unit = if axis == 0 { dtype.block_size() * if quant { 1 } else { 2 } } else { 1 };
        let units = ne[axis] / unit;
        let mut c = cuts.iter().map(|x| x * units / 4).collect::<Vec<_>>();
        c.sort_unstable();
        let sizes = vec![c[0] * unit, (c[1] - c[0]) * unit, (units - c[1]) * unit];
        let state = SplitState::Split(Split::new(&l, axis, sizes).unwrap());
        let (buf, ts) = meta.alloc_split(&[(l, state)], BufferUsage::Weights).unwrap();
        let t = &ts[0];
        let n = l.nbytes();
        let bytes: Vec<u8> = (0..n).map(|i| (i * 131 % 251) as u8).collect();
        t.write(0, &bytes).unwrap();
        prop_assert_eq!(t.to_bytes().unwrap(), bytes.clone());
        let lo = lo % n;
        let len = len.min(n - lo);
        let patch: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        t.write(lo, &patch).unwrap();
        let mut want = bytes;
        want[lo..lo + len].copy_from_slice(&patch);
        prop_assert_eq!(t.to_bytes().unwrap(), want.clone());
        let mut part = vec![0u8; len];
        t.read(lo, &mut part).unwrap();
        prop_assert_eq!(&part[..], &want[lo..lo + len]);
        // Each device holds exactly its share.
        let per = buf.bytes_per_device();
        prop_assert_eq!(per.iter().sum::<usize>(), n);
    }
}
