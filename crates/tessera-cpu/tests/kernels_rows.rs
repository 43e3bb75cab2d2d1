//! GET_ROWS and SET_ROWS on the CPU device: gathered/scattered rows compared
//! exactly with the indexed source (conversions rounded once), quantized
//! rows with `tessera::quant`'s reference conversions, and indices out of
//! range rejected with `Error::OutOfBounds` without any write.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{GUARD, Rng, lin, place, round_to};
use tessera::{DType, Error, Graph, quant};

#[test]
fn get_rows_of_plain_types() {
    let mut rng = Rng::new(40);
    for t in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        // a: [ne0 5, 7 rows, 2, 3]; ids: [4, 2, 3].
        let ne = [5, 7, 2, 3];
        let mut g = Graph::new();
        let a = g.new_tensor(t, &ne).unwrap();
        let ids = g.new_tensor(DType::I32, &[4, 2, 3]).unwrap();
        let out = g.get_rows(a, ids).unwrap();
        let r = place(g);
        let vals: Vec<f64> = (0..ne.iter().product())
            .map(|_| (rng.uniform(-50.0, 50.0)).round())
            .collect();
        r.set(a, &vals);
        let idv: Vec<f64> = (0..24).map(|_| rng.below(7) as f64).collect();
        r.set(ids, &idv);
        r.compute(3).unwrap();
        let av = r.get(a);
        let mut want = Vec::new();
        for i12 in 0..3 {
            for i11 in 0..2 {
                for i10 in 0..4 {
                    let row = idv[lin([i10, i11, i12, 0], [4, 2, 3, 1])] as usize;
                    for i0 in 0..5 {
                        want.push(av[lin([i0, row, i11, i12], ne)]);
                    }
                }
            }
        }
        let want_t = if t == DType::I32 {
            DType::I32
        } else {
            DType::F32
        };
        assert_eq!(r.graph.node(out).unwrap().layout.dtype, want_t);
        assert_eq!(r.get(out), want, "{t}");
    }
}

#[test]
fn get_rows_dequantizes_like_the_reference() {
    let mut rng = Rng::new(41);
    for qt in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ] {
        let ne0 = 256;
        let n_rows = 5;
        let row_bytes = qt.row_size(ne0).unwrap();
        let src: Vec<f32> = rng
            .vec(ne0 * n_rows, -1.0, 1.0)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let mut qbytes = vec![0u8; row_bytes * n_rows];
        for (s, d) in src.chunks(ne0).zip(qbytes.chunks_mut(row_bytes)) {
            quant::from_f32(qt, s, d).unwrap();
        }
        let mut g = Graph::new();
        let a = g.new_tensor(qt, &[ne0, n_rows]).unwrap();
        let ids = g.new_tensor(DType::I32, &[3]).unwrap();
        let out = g.get_rows(a, ids).unwrap();
        let r = place(g);
        r.set_raw(a, &qbytes);
        r.set(ids, &[4.0, 0.0, 4.0]);
        r.compute(2).unwrap();
        let mut want = Vec::new();
        for row in [4, 0, 4] {
            let mut f = vec![0f32; ne0];
            quant::to_f32(qt, &qbytes[row * row_bytes..(row + 1) * row_bytes], &mut f).unwrap();
            want.extend(f.iter().map(|&v| f64::from(v)));
        }
        assert_eq!(r.get(out), want, "{qt}");
    }
}

#[test]
fn get_rows_rejects_an_index_out_of_range() {
    for bad in [7.0, -1.0] {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[3, 7]).unwrap();
        let ids = g.new_tensor(DType::I32, &[4]).unwrap();
        let out = g.get_rows(a, ids).unwrap();
        let r = place(g);
        r.set(ids, &[0.0, 6.0, bad, 1.0]);
        let before = r.bytes();
        let err = r.compute(2).unwrap_err();
        match &err {
            Error::OutOfBounds(msg) => {
                assert!(
                    msg.contains("GET_ROWS")
                        && msg.contains(&format!("{}", bad as i64))
                        && msg.contains("7 rows"),
                    "{msg}"
                );
            }
            e => panic!("expected OutOfBounds, got {e:?}"),
        }
        // Nothing outside the result was written.
        let after = r.bytes();
        let (o, n) = (r.offset(out), r.graph.node(out).unwrap().layout.nbytes());
        assert_eq!(&before[..o], &after[..o]);
        assert_eq!(&before[o + n..], &after[o + n..]);
    }
}

#[test]
fn set_rows_converts_and_broadcasts_ids() {
    let mut rng = Rng::new(42);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for it in [DType::I32, DType::I64] {
            // dst: [6, 9 rows, 4, 2]; src: [6, 3, 4, 2]; ids: [3, 2, 1] broadcast over dims 2-3.
            let dne = [6, 9, 4, 2];
            let sne = [6, 3, 4, 2];
            let mut g = Graph::new();
            let dst = g.new_tensor(dt, &dne).unwrap();
            let src = g.new_tensor(DType::F32, &sne).unwrap();
            let ids = g.new_tensor(it, &[3, 2, 1]).unwrap();
            let out = g.set_rows(dst, src, ids).unwrap();
            let r = place(g);
            let before: Vec<f64> = rng.vec(dne.iter().product(), -9.0, 9.0);
            r.set(dst, &before);
            let before = r.get(dst);
            let sv = rng.vec(sne.iter().product(), -9.0, 9.0);
            r.set(src, &sv);
            let idv = [8.0, 0.0, 3.0, 5.0, 1.0, 8.0];
            r.set(ids, &idv);
            r.compute(3).unwrap();
            let mut want = before.clone();
            let ine = r.graph.node(ids).unwrap().layout.ne; // [3, 2, 1, 1]
            for i3 in 0..2 {
                for i2 in 0..4 {
                    for i in 0..3 {
                        let row = idv[lin([i, i2 % ine[1], i3 % ine[2], 0], ine)] as usize;
                        for i0 in 0..6 {
                            want[lin([i0, row, i2, i3], dne)] =
                                round_to(dt, sv[lin([i0, i, i2, i3], sne)]);
                        }
                    }
                }
            }
            assert_eq!(r.get(out), want, "{dt} ids {it}");
        }
    }
}

#[test]
fn set_rows_duplicate_indices_keep_the_last_row_for_any_thread_count() {
    for threads in [1, 2, 3] {
        let mut g = Graph::new();
        let dst = g.new_tensor(DType::F32, &[2, 4]).unwrap();
        let src = g.new_tensor(DType::F32, &[2, 3]).unwrap();
        let ids = g.new_tensor(DType::I64, &[3]).unwrap();
        let out = g.set_rows(dst, src, ids).unwrap();
        let r = place(g);
        r.set(dst, &[0.0; 8]);
        r.set(src, &[1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
        r.set(ids, &[2.0, 2.0, 0.0]);
        r.compute(threads).unwrap();
        assert_eq!(
            r.get(out),
            vec![3.0, 3.5, 0.0, 0.0, 2.0, 2.5, 0.0, 0.0],
            "{threads} threads"
        );
    }
}

#[test]
fn set_rows_quantizes_like_the_reference() {
    let mut rng = Rng::new(43);
    for qt in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ] {
        let ne0 = 256;
        let row_bytes = qt.row_size(ne0).unwrap();
        let mut g = Graph::new();
        let dst = g.new_tensor(qt, &[ne0, 4]).unwrap();
        let src = g.new_tensor(DType::F32, &[ne0, 2]).unwrap();
        let ids = g.new_tensor(DType::I32, &[2]).unwrap();
        let out = g.set_rows(dst, src, ids).unwrap();
        let r = place(g);
        let untouched: Vec<u8> = (0..4 * row_bytes).map(|i| (i % 13) as u8).collect();
        r.set_raw(dst, &untouched);
        let sv = rng.vec(2 * ne0, -3.0, 3.0);
        r.set(src, &sv);
        r.set(ids, &[3.0, 1.0]);
        r.compute(2).unwrap();
        let mut want = untouched.clone();
        let s32: Vec<f32> = sv.iter().map(|&v| v as f32).collect();
        for (i, row) in [3usize, 1].into_iter().enumerate() {
            quant::from_f32(
                qt,
                &s32[i * ne0..(i + 1) * ne0],
                &mut want[row * row_bytes..(row + 1) * row_bytes],
            )
            .unwrap();
        }
        assert_eq!(r.get_raw(out), want, "{qt}");
    }
}

#[test]
fn set_rows_with_a_bad_index_writes_nothing() {
    for bad in [4.0, -3.0, 1e12] {
        let mut g = Graph::new();
        let dst = g.new_tensor(DType::F32, &[3, 4]).unwrap();
        let src = g.new_tensor(DType::F32, &[3, 3]).unwrap();
        let ids = g.new_tensor(DType::I64, &[3]).unwrap();
        g.set_rows(dst, src, ids).unwrap();
        let r = place(g);
        r.set(dst, &[7.0; 12]);
        r.set(src, &[1.0; 9]);
        r.set(ids, &[0.0, 1.0, bad]);
        let before = r.bytes();
        let err = r.compute(3).unwrap_err();
        match &err {
            Error::OutOfBounds(msg) => {
                assert!(
                    msg.contains("SET_ROWS")
                        && msg.contains(&format!("{}", bad as i64))
                        && msg.contains("4 rows"),
                    "{msg}"
                );
            }
            e => panic!("expected OutOfBounds, got {e:?}"),
        }
        // Not a byte changed: neither the valid rows nor anything else.
        assert_eq!(r.bytes(), before);
        assert!(r.bytes().iter().filter(|&&b| b == GUARD).count() > 0);
    }
}
