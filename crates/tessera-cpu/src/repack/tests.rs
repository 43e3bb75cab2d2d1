//! The repacked-weights buffer against a shadow copy of what was written,
//! and MUL_MAT from repacked weights against an f64 reference, on every
//! instruction set family this CPU runs.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tessera::alloc::alloc_tensors;
use tessera::{
    Buffer, BufferType, BufferUsage, DType, Device, Graph, Layout, Place, Placement, StreamOptions,
    TensorSet,
};

use super::{Packing, ROWS, RepackBuffer, pack_group};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn f32(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
}

/// The buffer type (the device offers it only with AVX-512 VNNI; its
/// portable kernels run anywhere).
fn repack_type() -> Arc<dyn BufferType> {
    let t: Arc<dyn BufferType> = super::RepackBufferType::new(None);
    assert!(!t.is_host(), "its memory does not have the standard layout");
    assert!(crate::device().supports_buffer_type(t.as_ref()));
    t
}

fn layouts(shapes: &[(DType, &[usize])]) -> Vec<Layout> {
    shapes
        .iter()
        .map(|(t, ne)| Layout::contiguous(*t, ne).unwrap())
        .collect()
}

fn repack_buffer(set: &TensorSet) -> &RepackBuffer {
    set.buffer.as_any().downcast_ref::<RepackBuffer>().unwrap()
}

#[test]
fn the_buffer_reads_and_writes_the_standard_layout() {
    let ls = layouts(&[
        (DType::Q4_0, &[64, 32]),
        (DType::F32, &[48]),
        (DType::Q4_0, &[96, 16, 2]),
        (DType::Q4_0, &[64, 24]),
    ]);
    let set = alloc_tensors(&repack_type(), &ls, BufferUsage::Weights).unwrap();
    let buf = repack_buffer(&set);
    let t = &set.tensors;
    let expect = [
        Packing::Q4_0x16,
        Packing::Standard,
        Packing::Q4_0x16,
        Packing::Standard,
    ];
    for (t, want) in t.iter().zip(expect) {
        let got = buf.packing_of(t.offset(), t.layout(), t.nbytes()).unwrap();
        assert_eq!(got, want, "{}", t.layout());
    }
    // Write the whole buffer in odd pieces, read it back in others.
    let mut rng = Rng(3);
    let size = set.buffer.size();
    let shadow: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
    for piece in shadow.chunks(37).enumerate() {
        set.buffer.write(piece.0 * 37, piece.1).unwrap();
    }
    let mut back = vec![0u8; size];
    for (i, out) in back.chunks_mut(101).enumerate() {
        set.buffer.read(i * 101, out).unwrap();
    }
    assert_eq!(back, shadow);
    // The memory of the first tensor is its packed form.
    let row = t[0].layout().nb[1];
    let mut want = vec![0u8; ROWS * row];
    let o = t[0].offset();
    pack_group(&shadow[o..o + ROWS * row], &mut want, row);
    let mut raw = vec![0u8; ROWS * row];
    buf.region().unwrap().read(o, &mut raw).unwrap();
    assert_eq!(raw, want);
    assert_ne!(raw[..], shadow[o..o + ROWS * row], "packed, not as written");
    // A fill cutting a group, then a read of the tensor.
    let mut shadow = shadow;
    set.buffer.fill(o + 100, 700, 0xA5).unwrap();
    shadow[o + 100..o + 800].fill(0xA5);
    assert_eq!(t[0].to_bytes().unwrap(), shadow[o..o + t[0].nbytes()]);
    // Copies to other memory get the standard bytes.
    let host = crate::device().buffer_type().alloc_buffer(size).unwrap();
    tessera::copy_between(&*set.buffer, 0, &*host, 0, size).unwrap();
    let mut copied = vec![0u8; size];
    host.read(0, &mut copied).unwrap();
    assert_eq!(copied, shadow);
}

#[test]
fn views_of_repacked_tensors_are_whole_groups_of_rows_or_errors() {
    let ls = layouts(&[(DType::Q4_0, &[64, 48])]);
    let set = alloc_tensors(&repack_type(), &ls, BufferUsage::Weights).unwrap();
    let buf = repack_buffer(&set);
    let row = ls[0].nb[1];
    let rows = |n: usize| Layout::contiguous(DType::Q4_0, &[64, n]).unwrap();
    let p = |off: usize, l: &Layout| buf.packing_of(off, l, l.nbytes());
    assert_eq!(p(16 * row, &rows(32)).unwrap(), Packing::Q4_0x16);
    assert!(p(8 * row, &rows(16)).is_err(), "starts inside a group");
    assert!(p(0, &rows(8)).is_err(), "ends inside a group");
    assert!(p(32 * row, &rows(32)).is_err(), "past the tensor");
    // Another tensor placed over a packed one.
    let f32s = Layout::contiguous(DType::F32, &[16]).unwrap();
    assert!(set.buffer.init_tensor(&f32s, 64).is_err());
    // Placing the same tensor again changes nothing.
    set.buffer.init_tensor(&ls[0], 0).unwrap();
}

#[test]
fn placements_never_unpack_or_overlap_a_packed_tensor() {
    let l = Layout::contiguous(DType::Q4_0, &[64, 16]).unwrap();
    let f32s = |n: usize| Layout::contiguous(DType::F32, &[n]).unwrap();
    let buffer = repack_type().alloc_buffer(8192).unwrap();
    let buf = buffer.as_any().downcast_ref::<RepackBuffer>().unwrap();
    buffer.init_tensor(&l, 0).unwrap();
    // An empty tensor at the packed one's offset leaves it packed.
    buffer.init_tensor(&f32s(0), 0).unwrap();
    assert_eq!(buf.packing_of(0, &l, l.nbytes()).unwrap(), Packing::Q4_0x16);
    // A packed tensor inside an earlier long standard one, past a short
    // one between them, is refused.
    buffer.init_tensor(&f32s(500), 1024).unwrap();
    buffer.init_tensor(&f32s(2), 1088).unwrap();
    assert!(buffer.init_tensor(&l, 1152).is_err());
}

#[test]
fn a_plan_is_not_reused_after_bytes_are_packed_under_it() {
    // One graph, placement and stream computed twice: first over Q4_0
    // bytes placed but not yet registered (read as standard), then after
    // the tensor is placed (packed in place). The second compute must not
    // reuse the first's plan, which read the bytes as standard.
    let (k, m) = (64, 32);
    let (wq, b) = operands(k, m, 1, 1, 1);
    let la = Layout::contiguous(DType::Q4_0, &[k, m]).unwrap();
    let weights = repack_type().alloc_buffer(wq.len()).unwrap();
    weights.write(0, &wq).unwrap();
    let (g, p, io, d_off) = mul_mat_graph(&weights, la, &b, [k, 1, 1]).unwrap();
    let s = crate::device()
        .new_stream(&StreamOptions::new().threads(2))
        .unwrap();
    let mut w = vec![0f32; k * m];
    tessera::quant::to_f32(DType::Q4_0, &wq, &mut w).unwrap();
    for packed in [false, true] {
        if packed {
            weights.init_tensor(&la, 0).unwrap();
        }
        s.compute(&g, &p).unwrap();
        let mut out = vec![0u8; m * 4];
        io.read(d_off, &mut out).unwrap();
        let got: &[f32] = bytemuck::cast_slice(&out);
        for (i, &v) in got.iter().enumerate() {
            let (want, mag) = reference(&w[i * k..][..k], &b);
            // Both paths quantize the activations (the standard one with
            // f16 scales): within a hundredth of the terms' magnitudes.
            let tol = 1e-2 * mag + 1e-4;
            assert!(
                (f64::from(v) - want).abs() <= tol,
                "packed {packed} row {i}: {v} vs {want}"
            );
        }
    }
}

#[test]
fn bytes_written_before_placing_are_packed_when_placed() {
    let l = Layout::contiguous(DType::Q4_0, &[32, 16]).unwrap();
    let buffer = repack_type().alloc_buffer(l.nbytes()).unwrap();
    let data: Vec<u8> = (0..l.nbytes()).map(|i| (i * 13 % 256) as u8).collect();
    buffer.write(0, &data).unwrap();
    buffer.init_tensor(&l, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    buffer.read(0, &mut back).unwrap();
    assert_eq!(back, data);
}

/// Random Q4_0 weights `[k, m, ne2]` (bytes) and f32 activations.
fn operands(k: usize, m: usize, ne2: usize, n: usize, bne2: usize) -> (Vec<u8>, Vec<f32>) {
    let mut rng = Rng(11 + (k * m * n) as u64);
    let w: Vec<f32> = (0..k * m * ne2).map(|_| rng.f32()).collect();
    let mut wq = vec![0u8; DType::Q4_0.row_size(k).unwrap() * m * ne2];
    tessera::quant::from_f32(DType::Q4_0, &w, &mut wq).unwrap();
    let b: Vec<f32> = (0..k * n * bne2).map(|_| rng.f32()).collect();
    (wq, b)
}

/// `sum_l w[l, i] * b[l, j]` in f64 with `b` quantized per 32 values as the
/// integer kernels quantize it (`dy = max|b| / 127`, codes rounded), and the
/// sum of the terms' magnitudes (for the tolerance).
fn reference(w: &[f32], b: &[f32]) -> (f64, f64) {
    let (mut sum, mut mag) = (0f64, 0f64);
    for (wb, bb) in w.chunks(32).zip(b.chunks(32)) {
        let amax = bb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let dy = amax / 127.0;
        let id = if dy != 0.0 { 1.0 / dy } else { 0.0 };
        for (&x, &y) in wb.iter().zip(bb) {
            let t = f64::from(x) * f64::from(dy) * f64::from((y * id).round());
            sum += t;
            mag += t.abs();
        }
    }
    (sum, mag)
}

/// The graph of `a x b` with `a` (`la`) in `weights` at 0 and the
/// activations `b` (`bne`) and the result in a new host buffer: the graph,
/// its placement, that buffer and the result's offset in it.
fn mul_mat_graph(
    weights: &Arc<dyn Buffer>,
    la: Layout,
    b: &[f32],
    bne: [usize; 3],
) -> tessera::Result<(Graph, Placement, Arc<dyn Buffer>, usize)> {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::Q4_0, &la.ne[..3])?;
    let bt = g.new_tensor(DType::F32, &bne)?;
    let d = g.mul_mat(a, bt)?;
    let nd = la.ne[1] * bne[1] * bne[2];
    let io = crate::device()
        .buffer_type()
        .alloc_buffer((b.len() + nd) * 4 + 64)?;
    io.write(0, bytemuck::cast_slice(b))?;
    let d_off = (b.len() * 4).div_ceil(64) * 64;
    let mut p = Placement::new(&g);
    for (id, buffer, offset) in [(a, weights, 0), (bt, &io, 0), (d, &io, d_off)] {
        let buffer = buffer.clone();
        p.set(&g, id, Place { buffer, offset })?;
    }
    Ok((g, p, io, d_off))
}

/// `a x b` with `a` in `weights` (a buffer of either buffer type) on a
/// stream with `options`.
fn mul_mat(
    weights: &Arc<dyn Buffer>,
    la: Layout,
    b: &[f32],
    bne: [usize; 3],
    options: &StreamOptions,
) -> tessera::Result<Vec<f32>> {
    let (g, p, io, d_off) = mul_mat_graph(weights, la, b, bne)?;
    let nd = la.ne[1] * bne[1] * bne[2];
    let s = crate::device().new_stream(options)?;
    s.compute(&g, &p)?;
    let mut out = vec![0u8; nd * 4];
    io.read(d_off, &mut out)?;
    Ok(bytemuck::cast_slice(&out).to_vec())
}

#[test]
fn mul_mat_from_repacked_weights_matches_f64_on_every_isa() {
    let mut isas = vec![("best", StreamOptions::new().threads(2))];
    for isa in ["avx2", "scalar"] {
        isas.push((isa, StreamOptions::new().threads(2).set("isa", isa)));
    }
    // (k, m, matrices, columns, broadcast): several KC slices (k = 320),
    // every kernel width, a partial last width, broadcast matrices.
    let cases = [
        (320, 48, 1, 1, 1),
        (96, 512, 1, 1, 1),
        (320, 48, 1, 2, 1),
        (320, 48, 1, 3, 1),
        (320, 48, 1, 7, 1),
        (320, 48, 1, 8, 1),
        (320, 48, 1, 13, 1),
        (320, 32, 1, 40, 1),
        (96, 16, 2, 5, 4),
    ];
    for (k, m, ne2, n, r2) in cases {
        let (wq, b) = operands(k, m, ne2, n, ne2 * r2);
        let la = Layout::contiguous(DType::Q4_0, &[k, m, ne2]).unwrap();
        let set = alloc_tensors(&repack_type(), &[la], BufferUsage::Weights).unwrap();
        set.tensors[0].write(0, &wq).unwrap();
        let host = crate::device()
            .buffer_type()
            .alloc_buffer(wq.len())
            .unwrap();
        host.write(0, &wq).unwrap();
        let mut w = vec![0f32; k * m * ne2];
        tessera::quant::to_f32(DType::Q4_0, &wq, &mut w).unwrap();
        let bne = [k, n, ne2 * r2];
        let standard = mul_mat(&host, la, &b, bne, &isas[0].1).unwrap();
        for (name, options) in &isas {
            let got = mul_mat(&set.buffer, la, &b, bne, options).unwrap();
            for (idx, (&v, &s)) in got.iter().zip(&standard).enumerate() {
                let (i, j, c) = (idx % m, idx / m % n, idx / (m * n));
                let wrow = &w[(c / r2 * m + i) * k..][..k];
                let (want, mag) = reference(wrow, &b[(c * n + j) * k..][..k]);
                let tol = 1e-5 * mag + 1e-6;
                let case = format!("{name} k={k} m={m} n={n} row {i} col {j} mat {c}");
                assert!((f64::from(v) - want).abs() <= tol, "{case}: {v} vs {want}");
                // The standard layout's kernels agree within the same bound
                // plus their own quantization of the activations.
                assert!(
                    (v - s).abs() <= 1e-2 * (mag as f32) + 1e-4,
                    "{case}: {v} vs {s}"
                );
            }
        }
    }
}

#[test]
fn only_mul_mat_weights_may_be_repacked_operands() {
    let la = Layout::contiguous(DType::Q4_0, &[64, 32]).unwrap();
    let set = alloc_tensors(&repack_type(), &[la], BufferUsage::Weights).unwrap();
    let mut g = Graph::new();
    let a = g.new_tensor(DType::Q4_0, &[64, 32]).unwrap();
    let ids = g.new_tensor(DType::I32, &[2]).unwrap();
    let rows = g.get_rows(a, ids).unwrap();
    let io = crate::device().buffer_type().alloc_buffer(1024).unwrap();
    io.write(0, bytemuck::cast_slice(&[1i32, 2])).unwrap();
    let mut p = Placement::new(&g);
    p.set(
        &g,
        a,
        Place {
            buffer: set.buffer.clone(),
            offset: 0,
        },
    )
    .unwrap();
    p.set(
        &g,
        ids,
        Place {
            buffer: io.clone(),
            offset: 0,
        },
    )
    .unwrap();
    p.set(
        &g,
        rows,
        Place {
            buffer: io,
            offset: 64,
        },
    )
    .unwrap();
    let s = crate::device()
        .new_stream(&StreamOptions::new().threads(2))
        .unwrap();
    let e = s.compute(&g, &p).unwrap_err().to_string();
    assert!(e.contains("repacked") && e.contains("GET_ROWS"), "{e}");
}
