//! Zero-copy binding: tensors over the file's bytes (a memory map) in one
//! read-only CPU buffer, used by a MUL_MAT on the CPU device.

#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::*;
use tessera::{Buffer, DType, Device, Graph, Placement, StreamOptions};
use tessera_gguf::{GgufFile, GgufWriter};

#[test]
fn tensors_alias_the_file_bytes_without_copying() {
    let f = GgufFile::from_bytes(sample_writer().to_bytes().unwrap()).unwrap();
    let cpu = tessera_cpu::device();
    let buffer = f.data_buffer(cpu.buffer_type());
    assert_eq!(buffer.size(), f.bytes().len() - f.data_offset());
    // The buffer's memory is the file's memory: same address.
    let region = buffer.host_region().unwrap();
    let section = &f.bytes()[f.data_offset()..];
    assert_eq!(region.as_ptr().cast_const(), section.as_ptr());
    let a = f.tensor_in(&buffer, "a").unwrap();
    assert_eq!(a.read_f32().unwrap(), values(6, 1));
    assert_eq!(a.offset(), 0);
    let q = f.tensor_in(&buffer, "q").unwrap();
    assert_eq!(q.dtype(), DType::Q8_0);
    assert_eq!(q.to_bytes().unwrap(), f.tensor_data("q").unwrap());
    // Read-only: the file cannot be written through the buffer.
    assert!(a.write_f32(&[0.0; 6]).is_err());
    // A buffer of another size is refused.
    let other: std::sync::Arc<dyn Buffer> = cpu.buffer_type().alloc_buffer(16).unwrap();
    assert!(f.tensor_in(&other, "a").is_err());
}

#[test]
fn mul_mat_reads_a_mapped_q8_0_weight() {
    let (k, n) = (64, 3);
    let wv = values(k * n, 5);
    let mut w = GgufWriter::new();
    w.add("general.architecture", "test");
    w.add_tensor("w", DType::Q8_0, &[k, n], &encode(DType::Q8_0, &wv))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-gguf-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("w.gguf");
    w.write_file(&path).unwrap();
    // SAFETY: the test wrote the file and nothing changes it while mapped.
    let f = unsafe { GgufFile::open_mapped(&path) }.unwrap();

    let cpu = tessera_cpu::device();
    let bound = f.bind_all(cpu.buffer_type()).unwrap();
    assert_eq!(bound.tensors.len(), 1);
    let wt = bound.get("w").unwrap();

    let mut g = Graph::new();
    let wid = g.new_tensor(DType::Q8_0, &[k, n]).unwrap();
    let x = g.input("x", DType::F32, &[k, 1]).unwrap();
    let y = g.mul_mat(wid, x).unwrap();
    g.set_output(y).unwrap();
    let mut p = Placement::new(&g);
    p.bind(&g, wid, wt).unwrap();
    tessera::GraphAllocator::new(cpu.buffer_type())
        .alloc_graph(&g, &mut p)
        .unwrap();
    let xv = values(k, 9);
    p.tensor(&g, x).unwrap().write_f32(&xv).unwrap();
    let s = cpu.new_stream(&StreamOptions::new().threads(2)).unwrap();
    s.compute(&g, &p).unwrap();
    let out = p.tensor(&g, y).unwrap().read_f32().unwrap();

    // Reference over the dequantized weights.
    let wq = wt.read_f32().unwrap();
    for (r, o) in out.iter().enumerate() {
        let want: f64 = (0..k).map(|i| wq[r * k + i] as f64 * xv[i] as f64).sum();
        assert!((*o as f64 - want).abs() < 0.05, "row {r}: {o} vs {want}");
        let exact: f64 = (0..k).map(|i| wv[r * k + i] as f64 * xv[i] as f64).sum();
        assert!((*o as f64 - exact).abs() < 0.2, "row {r}: {o} vs {exact}");
    }
    assert!(out.iter().any(|v| v.abs() > 0.1), "{out:?}");
    drop((bound, p, f));
    std::fs::remove_dir_all(&dir).unwrap();
}
