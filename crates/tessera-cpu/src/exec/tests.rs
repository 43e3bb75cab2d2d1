//! Unit tests of the executor's run loop: failures, panics and aborts on
//! any thread keep every thread in step, with parallel and solo nodes.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tessera::{DType, Device, Place};

use super::*;
use crate::kernels::NodeCtx;

fn boom(_: &NodeCtx) -> Result<()> {
    panic!("kernel bug")
}

fn fail_on_thread_1(ctx: &NodeCtx) -> Result<()> {
    if ctx.ith == 1 {
        return Err(Error::OutOfBounds("thread 1 failed".into()));
    }
    Ok(())
}

fn fail_always(_: &NodeCtx) -> Result<()> {
    Err(Error::OutOfBounds("node failed".into()))
}

/// Kernel calls, counted by the kernels below.
static CALLS: AtomicUsize = AtomicUsize::new(0);
/// Held by every test that calls `run_with` (they share `CALLS`).
static SERIAL: Mutex<()> = Mutex::new(());

fn count(ctx: &NodeCtx) -> Result<()> {
    CALLS.fetch_add(1, Ordering::SeqCst);
    // A kernel may wait on its barrier (every thread of the node does).
    ctx.barrier.wait();
    Ok(())
}

/// A chain of 6 ADDs, planned; `solo[k]` says whether node `k` is solo
/// (barriers recomputed as the planner does), node 2's kernel is
/// `kernel` and the others `count`.
fn run_with(kernel: KernelFn, nth: usize, solo: [bool; 6]) -> (Result<()>, Executor) {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[16]).unwrap();
    let mut x = a;
    for _ in 0..6 {
        x = g.add(x, a).unwrap();
    }
    let buffer = crate::device()
        .buffer_type()
        .alloc_buffer(64 * g.len())
        .unwrap();
    let mut p = Placement::new(&g);
    for id in g.ids() {
        let place = Place {
            buffer: Arc::clone(&buffer),
            offset: 64 * id.index(),
        };
        p.set(&g, id, place).unwrap();
    }
    let mut ex = Executor::new(nth).unwrap();
    ex.generation += 1;
    let bytes = ex.plan_nodes(&g, &p, 0..g.len(), nth, Isa::best()).unwrap();
    assert_eq!(ex.plan.len(), 6);
    // Tiny nodes are solo whenever there is more than one thread.
    assert!(ex.plan.iter().all(|n| n.solo == (nth > 1)));
    for (k, node) in ex.plan.iter_mut().enumerate() {
        node.solo = solo[k];
        node.kernel = if k == 2 { kernel } else { count };
    }
    for k in 0..6 {
        let next = solo.get(k + 1).copied();
        ex.plan[k].barrier_after = next.is_some_and(|n| !(solo[k] && n));
    }
    let r = ex.run(&g, nth, bytes, None, Isa::Scalar);
    (r, ex)
}

const PATTERNS: [[bool; 6]; 5] = [
    [false; 6],
    [true; 6],
    [true, false, true, true, false, true],
    [false, true, false, false, true, true],
    [true, true, false, true, false, false],
];

#[test]
fn a_panicking_kernel_is_an_error_naming_the_node_and_threads_stay_in_step() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for nth in [1, 2, 3] {
        for solo in PATTERNS {
            let (r, mut ex) = run_with(boom, nth, solo);
            match r {
                Err(Error::Device { message, .. }) => {
                    assert!(message.contains("panicked on node ADD #3"), "{message}");
                }
                other => panic!("expected a device error, got {other:?}"),
            }
            // The pool is still usable.
            ex.plan.clear();
            assert!(ex.run(&Graph::new(), nth, 0, None, Isa::Scalar).is_ok());
        }
    }
}

#[test]
fn an_error_on_one_thread_stops_all() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (r, _) = run_with(fail_on_thread_1, 2, [false; 6]);
    assert!(matches!(r, Err(Error::OutOfBounds(m)) if m == "thread 1 failed"));
    // On one thread nobody is thread 1; a solo node runs on thread 0.
    let (r, _) = run_with(fail_on_thread_1, 1, [false; 6]);
    assert!(r.is_ok());
    let (r, _) = run_with(fail_on_thread_1, 2, [true; 6]);
    assert!(r.is_ok());
}

#[test]
fn solo_and_parallel_nodes_run_once_per_thread_and_stop_together() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for nth in [2, 3] {
        for solo in PATTERNS {
            // Every node succeeds: a solo node is one call, a parallel
            // node one per thread.
            CALLS.store(0, Ordering::SeqCst);
            let (r, _) = run_with(count, nth, solo);
            assert!(r.is_ok());
            let want: usize = solo.iter().map(|&s| if s { 1 } else { nth }).sum();
            assert_eq!(CALLS.load(Ordering::SeqCst), want, "{solo:?}");
            // Node 2 fails: nodes after the next barrier never run, on
            // any thread, and the error is node 2's.
            CALLS.store(0, Ordering::SeqCst);
            let (r, _) = run_with(fail_always, nth, solo);
            assert!(matches!(r, Err(Error::OutOfBounds(m)) if m == "node failed"));
            // Nodes 0 and 1 ran; node 2 counts nothing; nothing after it
            // runs: a barrier follows it, or solo nodes that thread 0
            // skips once the failure is recorded.
            let before: usize = solo[..2].iter().map(|&s| if s { 1 } else { nth }).sum();
            assert_eq!(CALLS.load(Ordering::SeqCst), before, "{solo:?}");
        }
    }
}

/// The planner's ROPE groups: nodes with the same op, positions and
/// factors share a table whose first node fills it; a node with other
/// parameters alone gets none; a CPY into the positions ends the group, so
/// the next node with the same key fills a table again. Tables are
/// 64-byte aligned, disjoint, and lie before every node's own scratch.
#[test]
fn rope_nodes_with_the_same_positions_share_a_table() {
    use tessera::{RopeMode, RopeParams};
    let p = RopeParams::new(32, RopeMode::Neox, 10_000.0);
    let q = RopeParams::new(32, RopeMode::Neox, 500.0);
    let mut g = Graph::new();
    let pos = g.new_tensor(DType::I32, &[8]).unwrap();
    let newpos = g.new_tensor(DType::I32, &[8]).unwrap();
    let rope = |g: &mut Graph, pos, params| {
        let x = g.new_tensor(DType::F32, &[32, 2, 8]).unwrap();
        g.rope(x, pos, None, params).unwrap()
    };
    rope(&mut g, pos, p);
    rope(&mut g, pos, p);
    rope(&mut g, pos, q);
    let pos2 = g.cpy(newpos, pos).unwrap();
    rope(&mut g, pos2, p);
    rope(&mut g, pos2, p);
    rope(&mut g, pos2, p);
    let (placement, _buffer) = place_apart(&g, 4096);
    let mut ex = Executor::new(2).unwrap();
    ex.generation += 1;
    let bytes = ex
        .plan_nodes(&g, &placement, 0..g.len(), 2, Isa::best())
        .unwrap();
    let uses = table_uses(&ex);
    // 8 positions x 32 dimensions x 4 bytes = 1 KiB a table.
    let want = vec![
        Some((0, true)),
        Some((0, false)),
        None,
        None, // the CPY
        Some((1024, true)),
        Some((1024, false)),
        Some((1024, false)),
    ];
    assert_eq!(uses, want);
    assert!(ex.plan.iter().all(|n| n.scratch_off == 2048));
    assert!(bytes >= 2048, "{bytes}");
    assert!(ex.plan.iter().flat_map(|n| n.table).all(|t| t.len == 1024));
}

/// Products of the same activations on the GEMM path share one packed B
/// (`tables::packed_b`): a pair of one weight type (first fills, second
/// reads), a product packed otherwise (alone: no table; it closes the
/// pair's group), another pair (a new group, the same region), a CPY into
/// the activations (closes that group), a product after it (alone).
#[test]
fn products_of_one_input_share_a_packed_b() {
    let (k, m, n) = (256, 32, 64);
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[k, n]).unwrap();
    let z = g.new_tensor(DType::F32, &[k, n]).unwrap();
    let product = |g: &mut Graph, t, x| {
        let w = g.new_tensor(t, &[k, m]).unwrap();
        g.mul_mat(w, x).unwrap()
    };
    product(&mut g, DType::Q4_0, x);
    product(&mut g, DType::Q4_0, x);
    product(&mut g, DType::F16, x);
    product(&mut g, DType::Q4_0, x);
    product(&mut g, DType::Q4_0, x);
    let x2 = g.cpy(z, x).unwrap();
    product(&mut g, DType::Q4_0, x2);
    let (placement, _buffer) = place_apart(&g, 64 << 10);
    let mut ex = Executor::new(2).unwrap();
    ex.generation += 1;
    ex.plan_nodes(&g, &placement, 0..g.len(), 2, Isa::best())
        .unwrap();
    let uses = table_uses(&ex);
    let want = vec![
        Some((0, true)),
        Some((0, false)),
        None,
        Some((0, true)),
        Some((0, false)),
        None, // the CPY
        None,
    ];
    assert_eq!(uses, want);
    let len = ex.plan[0].table.unwrap().len;
    assert!(len >= k * n, "{len} bytes for {n} columns of {k}");
    assert!(ex.plan.iter().all(|p| p.scratch_off == len));
}

/// Every non-view tensor of `g` at `stride * index` in one CPU buffer, then
/// the views (the buffer is returned to keep it alive).
fn place_apart(g: &Graph, stride: usize) -> (Placement, Arc<dyn tessera::Buffer>) {
    let buffer = crate::device()
        .buffer_type()
        .alloc_buffer(stride * g.len())
        .unwrap();
    let mut placement = Placement::new(g);
    for id in g.ids() {
        if !g.node(id).unwrap().is_view() {
            let place = Place {
                buffer: Arc::clone(&buffer),
                offset: stride * id.index(),
            };
            placement.set(g, id, place).unwrap();
        }
    }
    placement.place_views(g).unwrap();
    (placement, buffer)
}

/// Each planned node's table: (offset, fills it), or none.
fn table_uses(ex: &Executor) -> Vec<Option<(usize, bool)>> {
    ex.plan
        .iter()
        .map(|n| n.table.map(|t| (t.offset, t.fill)))
        .collect()
}
