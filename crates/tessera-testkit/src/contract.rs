//! The async contract of `tessera::Stream`, checked on any device.
//!
//! `crates/tessera/src/stream.rs` states what `set_async`, `get_async`,
//! `copy_async`, events and `compute_async` guarantee. These checks exercise
//! the *ordering* those guarantees imply, not only the numbers: a write
//! queued after a read must not leak into it, a stream that waits on an event
//! must see the other stream's results, a graph may be dropped as soon as
//! `compute_async` returns. On a synchronous device they hold trivially; on
//! an asynchronous one (a GPU queue) they are the real test. Each check
//! returns `Err` with what went wrong.
//!
//! The event checks ([`check_events`], module `events`) are built so that a
//! stream whose `record_event` or `wait_event` does nothing fails them on an
//! asynchronous device; the tests prove it on the deterministic
//! [`crate::gated::GatedDevice`] with [`crate::sabotage::skip_events`].

mod events;

pub use events::{EventWork, check_events, check_events_between, check_events_with};

use std::sync::Arc;

use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{BufferUsage, DType, Device, Graph, Placement, Tensor, copy_async};

type Check = std::result::Result<(), String>;

fn err(e: tessera::Error) -> String {
    e.to_string()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `y = x * scale` over `n` floats, with `x` an input bound in its own buffer.
struct ScaleGraph {
    graph: Graph,
    placement: Placement,
    x: Tensor,
    y: Tensor,
    _galloc: GraphAllocator,
}

fn scale_graph(
    device: &Arc<dyn Device>,
    n: usize,
    scale: f32,
) -> std::result::Result<ScaleGraph, String> {
    let mut graph = Graph::new();
    let xi = graph.input("x", DType::F32, &[n]).map_err(err)?;
    let yi = graph.scale(xi, scale).map_err(err)?;
    graph.set_output(yi).map_err(err)?;
    let mut placement = Placement::new(&graph);
    let inputs = alloc_tensors(
        &device.buffer_type(),
        &[graph.nodes()[xi.index()].layout],
        BufferUsage::Any,
    )
    .map_err(err)?;
    let x = inputs.tensors[0].clone();
    placement.bind(&graph, xi, &x).map_err(err)?;
    let mut galloc = GraphAllocator::new(device.buffer_type());
    galloc.alloc_graph(&graph, &mut placement).map_err(err)?;
    let y = placement.tensor(&graph, yi).map_err(err)?;
    Ok(ScaleGraph {
        graph,
        placement,
        x,
        y,
        _galloc: galloc,
    })
}

fn expect_eq(what: &str, got: &[f32], want: &[f32]) -> Check {
    if got == want {
        Ok(())
    } else {
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        Err(format!(
            "{what}: element {i} is {:?}, expected {:?}",
            got.get(i),
            want.get(i)
        ))
    }
}

/// Items 1, 2, 4 and 6: queued writes, computes and reads happen in
/// submission order; a read sees what was queued before it and not what was
/// queued after; the graph may be dropped right after `compute_async`.
pub fn check_ordering(device: &Arc<dyn Device>) -> Check {
    let n = 1000;
    let stream = device
        .new_stream(&tessera::StreamOptions::new())
        .map_err(err)?;
    let sg = scale_graph(device, n, 2.0)?;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| -(i as f32)).collect();
    stream.set_async(&sg.x, 0, f32_bytes(&a)).map_err(err)?;
    {
        // A clone of the graph and placement, dropped before synchronizing.
        let (g, p) = (sg.graph.clone(), sg.placement.clone());
        stream.compute_async(&g, &p, 0..g.len()).map_err(err)?;
    }
    let first = stream.get_async(&sg.y, 0, 4 * n).map_err(err)?;
    stream.set_async(&sg.x, 0, f32_bytes(&b)).map_err(err)?;
    stream
        .compute_async(&sg.graph, &sg.placement, 0..sg.graph.len())
        .map_err(err)?;
    let second = stream.get_async(&sg.y, 0, 4 * n).map_err(err)?;
    let input_now = stream.get_async(&sg.x, 0, 4 * n).map_err(err)?;
    let want_a: Vec<f32> = a.iter().map(|v| v * 2.0).collect();
    let want_b: Vec<f32> = b.iter().map(|v| v * 2.0).collect();
    expect_eq(
        "read queued between two computes",
        &to_f32(&first.wait().map_err(err)?),
        &want_a,
    )?;
    expect_eq(
        "read after the second compute",
        &to_f32(&second.wait().map_err(err)?),
        &want_b,
    )?;
    expect_eq(
        "read of the input after its second write",
        &to_f32(&input_now.wait().map_err(err)?),
        &b,
    )?;
    stream.synchronize().map_err(err)?;
    expect_eq(
        "blocking read after synchronize",
        &sg.y.read_vec::<f32>().map_err(err)?,
        &want_b,
    )
}

/// Item 3 across devices: `copy_async` from a stream of `a` to a stream of
/// `b` lands the bytes before `b`'s later work, whatever path it takes.
pub fn check_copy_between(a: &Arc<dyn Device>, b: &Arc<dyn Device>) -> Check {
    let n = 777;
    let sa = a.new_stream(&tessera::StreamOptions::new()).map_err(err)?;
    let sb = b.new_stream(&tessera::StreamOptions::new()).map_err(err)?;
    let ga = scale_graph(a, n, 4.0)?;
    let gb = scale_graph(b, n, 0.25)?;
    let v: Vec<f32> = (0..n).map(|i| i as f32 - 300.0).collect();
    sa.set_async(&ga.x, 0, f32_bytes(&v)).map_err(err)?;
    sa.compute_async(&ga.graph, &ga.placement, 0..ga.graph.len())
        .map_err(err)?;
    copy_async(sa.as_ref(), sb.as_ref(), &ga.y, &gb.x).map_err(err)?;
    sb.compute_async(&gb.graph, &gb.placement, 0..gb.graph.len())
        .map_err(err)?;
    let out = sb.get_async(&gb.y, 0, 4 * n).map_err(err)?;
    expect_eq(
        &format!("{} -> {} copy then compute", a.name(), b.name()),
        &to_f32(&out.wait().map_err(err)?),
        &v,
    )
}

/// Errors surface: computing a graph with an unplaced tensor fails (at the
/// call or at the next synchronize) and the stream stays usable.
pub fn check_errors(device: &Arc<dyn Device>) -> Check {
    let stream = device
        .new_stream(&tessera::StreamOptions::new())
        .map_err(err)?;
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[8]).map_err(err)?;
    let y = g.silu(x).map_err(err)?;
    g.set_output(y).map_err(err)?;
    let p = Placement::new(&g);
    let failed = stream
        .compute_async(&g, &p, 0..g.len())
        .and_then(|_| stream.synchronize());
    match failed {
        Err(tessera::Error::Unallocated { .. }) => {}
        other => {
            return Err(format!(
                "computing an unallocated graph gave {other:?}, expected Unallocated"
            ));
        }
    }
    check_ordering(device)
}

/// Every check on one device (plus a copy to itself).
pub fn check_all(device: &Arc<dyn Device>) -> Check {
    check_ordering(device)?;
    check_events(device)?;
    check_copy_between(device, device)?;
    check_errors(device)
}
