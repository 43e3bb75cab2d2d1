//! The README's "Using it" example, compiled and checked: weights bound in a
//! Weights buffer, the rest planned by the graph allocator, a Q4_0 matrix
//! product followed by RMS_NORM, compared with an f64 computation.

use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{BufferUsage, DType, Graph, Placement, StreamOptions};

#[test]
fn readme_example_runs_and_is_right() -> tessera::Result<()> {
    tessera_cpu::register();
    let cpu = tessera::Registry::global().device_by_name("cpu")?;
    let stream = cpu.new_stream(&StreamOptions::new().threads(2))?;

    let mut g = Graph::new();
    let w = g.new_tensor(DType::Q4_0, &[4096, 64])?;
    let x = g.input("x", DType::F32, &[4096, 1])?;
    let y = g.mul_mat(w, x)?;
    let y = g.rms_norm(y, 1e-6)?;
    g.set_output(y)?;

    let mut placement = Placement::new(&g);
    let weights = alloc_tensors(
        &cpu.buffer_type(),
        &[g.node(w)?.layout],
        BufferUsage::Weights,
    )?;
    placement.bind(&g, w, &weights.tensors[0])?;
    GraphAllocator::new(cpu.buffer_type()).alloc_graph(&g, &mut placement)?;

    let wv: Vec<f32> = (0..4096 * 64)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    weights.tensors[0].write_f32(&wv)?;
    placement.tensor(&g, x)?.write_f32(&vec![0.5; 4096])?;
    stream.compute(&g, &placement)?;
    let out = placement.tensor(&g, y)?.read_f32()?;

    // f64 reference over the dequantized weights.
    let wq = weights.tensors[0].read_f32()?;
    let rows: Vec<f64> = wq
        .chunks(4096)
        .map(|r| r.iter().map(|&v| v as f64 * 0.5).sum())
        .collect();
    let ms = rows.iter().map(|v| v * v).sum::<f64>() / rows.len() as f64;
    let scale = 1.0 / (ms + 1e-6).sqrt();
    for (o, r) in out.iter().zip(&rows) {
        assert!((*o as f64 - r * scale).abs() < 2e-2, "{o} vs {}", r * scale);
    }
    Ok(())
}
