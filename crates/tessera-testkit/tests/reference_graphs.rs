//! The reference on whole graphs: the memory model (storage rounding, views
//! that write their root, SET_ROWS leaving other rows alone) and checked
//! errors for data-dependent indices. Expected values are computed here from
//! the definitions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tessera::{DType, Error, Graph, TensorId};
use tessera_testkit::reference::{Dense, RefMemory, evaluate};

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(g: &Graph, leaves: &[(TensorId, Vec<u8>)]) -> tessera::Result<RefMemory> {
    let mut mem = RefMemory::new(g)?;
    for (id, b) in leaves {
        mem.set_bytes(*id, b)?;
    }
    evaluate(g, &mut mem)?;
    Ok(mem)
}

#[test]
fn cpy_into_f16_rounds_to_nearest_even() {
    let mut g = Graph::new();
    let src = g.new_tensor(DType::F32, &[4]).unwrap();
    let dst = g.new_tensor(DType::F16, &[4]).unwrap();
    let c = g.cpy(src, dst).unwrap();
    // Half-way cases tie to the even neighbour; 70000 overflows f16.
    let x = [
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        70000.0,
        -0.1,
    ];
    let mem = run(&g, &[(src, bytes_f32(&x))]).unwrap();
    let got = mem.load(&g, c).unwrap().data;
    assert_eq!(got[0], 1.0);
    assert_eq!(got[1], 1.0 + 2f64.powi(-9));
    assert_eq!(got[2], f64::INFINITY);
    // -0.1 is stored as the nearest f16: |error| <= half an ulp (2^-15 at 0.1).
    assert!((got[3] + 0.1).abs() <= 2f64.powi(-15), "{}", got[3]);
    // The result is a view of dst: dst's own memory holds the same bits.
    let raw = mem.bytes(dst).unwrap();
    assert_eq!(&raw[..2], &[0x00, 0x3c]);
    assert_eq!(mem.load(&g, dst).unwrap().data, got);
}

#[test]
fn cpy_through_a_transposed_view_writes_the_root_in_its_order() {
    let mut g = Graph::new();
    let src = g.new_tensor(DType::F32, &[2, 3]).unwrap();
    let dst = g.new_tensor(DType::F32, &[3, 2]).unwrap();
    let view = g.transpose(dst).unwrap();
    g.cpy(src, view).unwrap();
    let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let mem = run(&g, &[(src, bytes_f32(&x))]).unwrap();
    // View element (i0, i1) = src[i0 + 2 i1] lives at dst (i1, i0) = flat i1 + 3 i0.
    let d = mem.load(&g, dst).unwrap();
    for i0 in 0..2 {
        for i1 in 0..3 {
            assert_eq!(d.data[i1 + 3 * i0], x[i0 + 2 * i1] as f64);
        }
    }
}

#[test]
fn set_rows_writes_only_the_indexed_rows() {
    let mut g = Graph::new();
    let dst = g.new_tensor(DType::F16, &[2, 5]).unwrap();
    let src = g.new_tensor(DType::F32, &[2, 2]).unwrap();
    let ids = g.new_tensor(DType::I64, &[2]).unwrap();
    let out = g.set_rows(dst, src, ids).unwrap();
    let ids_b: Vec<u8> = [4i64, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
    // dst starts as f16 0.5 everywhere (0x3800).
    let dst_b: Vec<u8> = (0..10).flat_map(|_| [0x00u8, 0x38]).collect();
    let rows = [1.0f32, 2.0, 1.0 / 3.0, 4.0];
    let mem = run(&g, &[(dst, dst_b), (src, bytes_f32(&rows)), (ids, ids_b)]).unwrap();
    let d = mem.load(&g, out).unwrap();
    let third = f64::from(half::f16::from_f32(1.0 / 3.0));
    let want = [0.5, 0.5, third, 4.0, 0.5, 0.5, 0.5, 0.5, 1.0, 2.0];
    assert_eq!(d.data, want);
}

#[test]
fn out_of_range_indices_are_errors_not_panics() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[3, 4]).unwrap();
    let ids = g.new_tensor(DType::I32, &[2]).unwrap();
    g.get_rows(a, ids).unwrap();
    for bad in [4i32, -1] {
        let idb: Vec<u8> = [0i32, bad].iter().flat_map(|x| x.to_le_bytes()).collect();
        match run(&g, &[(ids, idb)]) {
            Err(Error::OutOfBounds(m)) => assert!(m.contains(&bad.to_string()), "{m}"),
            other => panic!("expected OutOfBounds, got {other:?}"),
        }
    }
    let mut g = Graph::new();
    let dst = g.new_tensor(DType::F32, &[3, 4]).unwrap();
    let src = g.new_tensor(DType::F32, &[3, 1]).unwrap();
    let ids = g.new_tensor(DType::I64, &[1]).unwrap();
    g.set_rows(dst, src, ids).unwrap();
    let r = run(&g, &[(ids, 9i64.to_le_bytes().to_vec())]);
    assert!(matches!(r, Err(Error::OutOfBounds(_))), "{r:?}");
}

#[test]
fn views_read_their_root_at_an_offset_and_mul_mat_takes_strided_b() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[8]).unwrap();
    let w = g.view_1d(a, 3, 8).unwrap();
    let s = g.sum_rows(w).unwrap();
    // A 2x3 product with b stored transposed ([n, k] then transposed to [k, n]).
    let m = g.new_tensor(DType::F32, &[3, 2]).unwrap();
    let bt = g.new_tensor(DType::F32, &[2, 3]).unwrap();
    let b = g.transpose(bt).unwrap();
    let p = g.mul_mat(m, b).unwrap();
    let av: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let mv = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let btv = [1.0f32, -1.0, 0.5, 2.0, 0.0, 1.0];
    let mem = run(
        &g,
        &[
            (a, bytes_f32(&av)),
            (m, bytes_f32(&mv)),
            (bt, bytes_f32(&btv)),
        ],
    )
    .unwrap();
    // Elements 2, 3, 4.
    assert_eq!(mem.load(&g, s).unwrap().data, vec![9.0]);
    // Column j of B is b[:, j] = (bt[j, 0], bt[j, 1], bt[j, 2]) = btv[j + 2 k].
    let d = mem.load(&g, p).unwrap();
    for j in 0..2 {
        for i in 0..2 {
            let want: f64 = (0..3)
                .map(|k| f64::from(mv[k + 3 * i]) * f64::from(btv[j + 2 * k]))
                .sum();
            assert_eq!(d.get([i, j, 0, 0]).unwrap(), want);
        }
    }
}

#[test]
fn dense_helpers_check_their_inputs() {
    assert!(Dense::from_vec([2, 2, 1, 1], vec![0.0; 3]).is_err());
    let d = Dense::zeros([2, 3, 1, 1]).unwrap();
    assert!(d.get([2, 0, 0, 0]).is_err());
    assert!(Dense::zeros([usize::MAX, 2, 1, 1]).is_err());
}

#[test]
fn quantized_memory_stores_and_reads_whole_blocks() {
    for t in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
    ] {
        let k = t.block_size();
        let mut g = Graph::new();
        let src = g.new_tensor(DType::F32, &[k, 3]).unwrap();
        let q = g.new_tensor(t, &[k, 3]).unwrap();
        let c = g.cpy(src, q).unwrap();
        let ids = g.new_tensor(DType::I32, &[2]).unwrap();
        let rows = g.get_rows(c, ids).unwrap();
        let x: Vec<f32> = (0..3 * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let idb: Vec<u8> = [2i32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mem = run(&g, &[(src, bytes_f32(&x)), (ids, idb)]).unwrap();
        // Independently: quantize each row with the reference quantizer and
        // dequantize it back.
        let mut want = Vec::new();
        for r in 0..3 {
            let mut qb = vec![0u8; t.row_size(k).unwrap()];
            tessera::quant::from_f32(t, &x[r * k..(r + 1) * k], &mut qb).unwrap();
            let mut back = vec![0f32; k];
            tessera::quant::to_f32(t, &qb, &mut back).unwrap();
            want.push(back);
        }
        let stored = mem.load(&g, c).unwrap().data;
        let flat: Vec<f64> = want.iter().flatten().map(|&v| f64::from(v)).collect();
        assert_eq!(stored, flat, "{t}");
        let got = mem.load(&g, rows).unwrap().data;
        let expect: Vec<f64> = [2usize, 0]
            .iter()
            .flat_map(|&r| want[r].iter().map(|&v| f64::from(v)))
            .collect();
        assert_eq!(got, expect, "{t}");
    }
}
