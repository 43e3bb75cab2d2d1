//! The scheduler over two devices on one machine: a decorator device
//! (`tessera_testkit::decorate::Refusing`: the CPU under another name, with
//! memory the CPU cannot read, refusing chosen ops) before the CPU. Both
//! compute with the CPU's kernels, so a scheduled graph must give results
//! *identical* to the same graph on the CPU alone; the assignment, the
//! splits and the copies are checked exactly on known graphs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Error, EvalCallback, Graph, GraphAllocator, Op, OpOffload,
    Placement, Reason, Scheduler, SchedulerOptions, Stream, StreamOptions, TensorId,
};
use tessera_testkit::block::{Block, BlockShape};
use tessera_testkit::decorate::Refusing;

fn cpu() -> Arc<dyn Device> {
    tessera_cpu::device()
}

fn stream(d: &Arc<dyn Device>) -> Arc<dyn Stream> {
    d.new_stream(&StreamOptions::new().threads(2)).unwrap()
}

/// A decorator refusing ops whose name is in `refused`.
fn refusing(refused: &'static [&'static str]) -> Arc<dyn Device> {
    Refusing::new(cpu(), "DEC", move |g: &Graph, id: TensorId| {
        refused.contains(&g.node(id).unwrap().op.display_name())
    })
}

fn sched(devs: &[Arc<dyn Device>], options: SchedulerOptions) -> Scheduler {
    Scheduler::new(devs.iter().map(stream).collect(), options).unwrap()
}

/// Bind every weight of `b` in a Weights buffer of `dev`, with its values.
fn bind_weights(b: &Block, dev: &Arc<dyn Device>, p: &mut Placement) -> tessera::TensorSet {
    b.bind_weights(dev.as_ref(), p).unwrap()
}

/// The block's output computed on the CPU alone.
fn reference(b: &Block, step: u64) -> Vec<f32> {
    let cpu = cpu();
    let mut p = Placement::new(&b.graph);
    let _w = bind_weights(b, &cpu, &mut p);
    GraphAllocator::new(cpu.buffer_type())
        .alloc_graph(&b.graph, &mut p)
        .unwrap();
    p.tensor(&b.graph, b.x)
        .unwrap()
        .write_f32(&b.input_values(step).unwrap())
        .unwrap();
    stream(&cpu).compute(&b.graph, &p).unwrap();
    p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap()
}

fn shape(wtype: DType) -> BlockShape {
    BlockShape {
        n_embd: 64,
        n_ff: 128,
        n_tokens: 7,
        n_layers: 2,
        wtype,
    }
}

/// `mm = W x; h = mm + bias; s = silu(h); o = s * h`, W and bias on the
/// decorator, which refuses SILU.
struct Small {
    g: Graph,
    x: TensorId,
    w: TensorId,
    bias: TensorId,
    mm: TensorId,
    h: TensorId,
    s: TensorId,
    o: TensorId,
}

fn small() -> Small {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[32, 4]).unwrap();
    let w = g.new_tensor(DType::F32, &[32, 16]).unwrap();
    let bias = g.new_tensor(DType::F32, &[16, 4]).unwrap();
    let mm = g.mul_mat(w, x).unwrap();
    let h = g.add(mm, bias).unwrap();
    let s = g.silu(h).unwrap();
    let o = g.mul(s, h).unwrap();
    g.set_output(o).unwrap();
    Small {
        g,
        x,
        w,
        bias,
        mm,
        h,
        s,
        o,
    }
}

fn ramp(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * k).collect()
}

fn run_small(sc: &mut Scheduler, t: &Small, dev: &Arc<dyn Device>) -> Vec<f32> {
    let mut p = Placement::new(&t.g);
    let layouts = [t.w, t.bias].map(|id| t.g.node(id).unwrap().layout);
    let set = alloc_tensors(&dev.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    p.bind(&t.g, t.w, &set.tensors[0]).unwrap();
    p.bind(&t.g, t.bias, &set.tensors[1]).unwrap();
    set.tensors[0].write_f32(&ramp(32 * 16, 0.05)).unwrap();
    set.tensors[1].write_f32(&ramp(16 * 4, 0.1)).unwrap();
    sc.alloc_graph(&t.g, &mut p).unwrap();
    p.tensor(&t.g, t.x)
        .unwrap()
        .write_f32(&ramp(32 * 4, 0.03))
        .unwrap();
    sc.compute(&t.g, &p).unwrap();
    p.tensor(&t.g, t.o).unwrap().read_f32().unwrap()
}

#[test]
fn a_refused_op_runs_on_the_fallback_with_copies_in_and_out() {
    let t = small();
    let before = t.g.clone();
    let dec = refusing(&["SILU"]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    let got = run_small(&mut sc, &t, &dec);
    // The same graph on the CPU alone.
    let mut cpu_only = sched(&[cpu()], SchedulerOptions::default());
    let want = run_small(&mut cpu_only, &t, &cpu());
    assert_eq!(got, want, "scheduled result differs from the CPU's");
    assert_eq!(cpu_only.n_splits(), 1);
    assert_eq!(cpu_only.n_copies_made(), 0);

    let expect = [
        (t.w, 0, Reason::Buffer),
        (t.bias, 0, Reason::Buffer),
        (t.x, 1, Reason::Input),
        (t.mm, 0, Reason::Weights),
        (t.h, 0, Reason::Weights),
        (t.s, 1, Reason::BestInputs),
        (t.o, 0, Reason::ExpandGpu),
    ];
    for (id, dev, why) in expect {
        assert_eq!(sc.device_of(id), Some((dev, why)), "node {id}");
    }
    // DEC [mm, h] | CPU [s] | DEC [o]: x copied in, h out, s back in.
    assert_eq!(sc.n_splits(), 3);
    let devs: Vec<usize> = sc.splits().iter().map(|s| s.device).collect();
    assert_eq!(devs, [0, 1, 0]);
    let inputs: Vec<Vec<TensorId>> = sc
        .splits()
        .iter()
        .map(|s| s.inputs.iter().map(|i| i.source).collect())
        .collect();
    assert_eq!(inputs, [vec![t.x], vec![t.h], vec![t.s]]);
    assert_eq!(sc.n_copies_made(), 3);
    // `o` reads `h` on DEC itself: no second copy of `h`.
    assert_eq!(t.g, before, "the user's graph is unchanged");
    let text = sc.describe(&t.g, true);
    assert!(text.contains("3 splits, 3 copies"), "{text}");
    assert!(
        text.contains("best-inputs") && text.contains("expand-gpu"),
        "{text}"
    );
    let dot = sc.to_dot(&t.g);
    assert!(
        dot.contains("cluster_2") && dot.contains("style=dashed"),
        "{dot}"
    );
}

#[test]
fn a_transformer_block_over_two_devices_matches_the_cpu() {
    for (wtype, refused) in [
        (DType::F32, &["SOFT_MAX"][..]),
        (DType::Q8_0, &["SOFT_MAX", "RMS_NORM"][..]),
        (DType::Q4_0, &["MUL_MAT"][..]),
        (DType::F16, &[][..]),
    ] {
        let refused: &'static [&'static str] = Box::leak(refused.to_vec().into_boxed_slice());
        let b = Block::build(shape(wtype)).unwrap();
        let dec = refusing(refused);
        let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
        let mut p = Placement::new(&b.graph);
        let _w = bind_weights(&b, &dec, &mut p);
        sc.alloc_graph(&b.graph, &mut p).unwrap();
        for step in 0..2 {
            p.tensor(&b.graph, b.x)
                .unwrap()
                .write_f32(&b.input_values(step).unwrap())
                .unwrap();
            sc.compute(&b.graph, &p).unwrap();
            let got = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            assert_eq!(got, reference(&b, step), "{wtype} refusing {refused:?}");
        }
        for id in b.graph.op_ids() {
            let n = b.graph.node(id).unwrap();
            if n.op.is_view() {
                continue;
            }
            let (d, _) = sc.device_of(id).unwrap();
            if refused.contains(&n.op.display_name()) {
                assert_eq!(d, 1, "{} must fall back to the CPU", n.label(id));
            }
        }
        assert_eq!(sc.plan_count(), 1, "recomputing reuses the plan");
        if refused.is_empty() {
            // Everything on DEC: one split, the input copied once.
            assert_eq!((sc.n_splits(), sc.n_copies_made()), (1, 1));
        }
    }
}

#[test]
fn reserve_size_is_what_reserve_allocates() {
    for refused in [
        &["SOFT_MAX"][..],
        &["MUL_MAT"][..],
        &["ADD", "MUL"][..],
        &[][..],
    ] {
        let refused: &'static [&'static str] = Box::leak(refused.to_vec().into_boxed_slice());
        let b = Block::build(shape(DType::Q8_0)).unwrap();
        let dec = refusing(refused);
        let mut p = Placement::new(&b.graph);
        let _w = bind_weights(&b, &dec, &mut p);
        let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
        let sizes = sc.reserve_size(&b.graph, &p).unwrap();
        assert_eq!(sizes.len(), 2);
        assert_eq!(sc.buffer_size(0).unwrap(), 0, "nothing allocated yet");
        sc.reserve(&b.graph, &p).unwrap();
        let held = [sc.buffer_size(0).unwrap(), sc.buffer_size(1).unwrap()];
        assert_eq!(held.to_vec(), sizes, "refusing {refused:?}");
        // Allocation needs nothing more.
        sc.alloc_graph(&b.graph, &mut p).unwrap();
        let after = [sc.buffer_size(0).unwrap(), sc.buffer_size(1).unwrap()];
        assert_eq!(after, held);
        // Reserving the same graph twice, then sizing it, works (the
        // graph is not modified by splitting).
        sc.reserve(&b.graph, &p).unwrap();
        assert_eq!(sc.reserve_size(&b.graph, &p).unwrap(), sizes);
    }
}

#[test]
fn a_changed_graph_is_planned_again() {
    let dec = refusing(&["SOFT_MAX"]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    for (k, n_tokens) in [7usize, 7, 3, 3, 7].into_iter().enumerate() {
        let b = Block::build(BlockShape {
            n_tokens,
            ..shape(DType::F32)
        })
        .unwrap();
        let mut p = Placement::new(&b.graph);
        let _w = bind_weights(&b, &dec, &mut p);
        sc.alloc_graph(&b.graph, &mut p).unwrap();
        p.tensor(&b.graph, b.x)
            .unwrap()
            .write_f32(&b.input_values(k as u64).unwrap())
            .unwrap();
        sc.compute(&b.graph, &p).unwrap();
        let got = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
        assert_eq!(got, reference(&b, k as u64), "graph {k}");
        // Plans: 7 -> new, 7 -> reuse, 3 -> new, 3 -> reuse, 7 -> new.
        assert_eq!(sc.plan_count(), [1, 1, 2, 2, 3][k], "graph {k}");
    }
}

#[test]
fn pins_and_op_offload_move_nodes() {
    let t = small();
    // Pin: `h` to the CPU.
    let dec = refusing(&[]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    sc.pin(t.h, 1).unwrap();
    let got = run_small(&mut sc, &t, &dec);
    assert_eq!(sc.device_of(t.h), Some((1, Reason::Pin)));
    assert_eq!(
        got,
        run_small(&mut sched(&[cpu()], Default::default()), &t, &cpu())
    );
    assert!(sc.pin(t.h, 2).is_err(), "no device 2");
    sc.reset();
    let _ = run_small(&mut sc, &t, &dec);
    assert_ne!(
        sc.device_of(t.h).map(|d| d.1),
        Some(Reason::Pin),
        "reset clears pins"
    );

    // Offload: weights in host (CPU) memory, 32 rows: DEC's offload_op says
    // yes from 32 rows.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[64, 32]).unwrap();
    let w = g.new_tensor(DType::F32, &[64, 64]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    g.set_output(y).unwrap();
    for (policy, want) in [
        (OpOffload::Device, (0, Reason::Offload)),
        (OpOffload::Off, (1, Reason::Weights)),
        (OpOffload::MinBatch(64), (1, Reason::Weights)),
        (OpOffload::MinBatch(16), (0, Reason::Offload)),
    ] {
        let mut sc = sched(
            &[dec.clone(), cpu()],
            SchedulerOptions {
                op_offload: policy,
                ..Default::default()
            },
        );
        let mut p = Placement::new(&g);
        let set = alloc_tensors(
            &cpu().buffer_type(),
            &[g.node(w).unwrap().layout],
            BufferUsage::Weights,
        )
        .unwrap();
        p.bind(&g, w, &set.tensors[0]).unwrap();
        set.tensors[0].write_f32(&ramp(64 * 64, 0.01)).unwrap();
        sc.alloc_graph(&g, &mut p).unwrap();
        p.tensor(&g, x)
            .unwrap()
            .write_f32(&ramp(64 * 32, 0.1))
            .unwrap();
        sc.compute(&g, &p).unwrap();
        assert_eq!(sc.device_of(y), Some(want), "{policy:?}");
        if want.0 == 0 {
            // The weight and the input are copied to DEC.
            let copied: Vec<TensorId> = sc.splits()[0].inputs.iter().map(|i| i.source).collect();
            assert!(copied.contains(&w) && copied.contains(&x), "{copied:?}");
        }
    }
}

#[test]
fn the_eval_callback_observes_and_stop_means_nothing_after_runs() {
    // x -> a = 2x (DEC) -> b = W a (CPU: DEC refuses MUL_MAT) -> c = b + b
    // (DEC). Stopping at `a` leaves `b` and `c` uncomputed; `b` lives while
    // `a` does, so its memory is its own.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[16, 2]).unwrap();
    let w = g.new_tensor(DType::F32, &[16, 16]).unwrap();
    let a = g.scale(x, 2.0).unwrap();
    let b = g.mul_mat(w, a).unwrap();
    let c = g.add(b, b).unwrap();
    g.set_output(c).unwrap();
    let dec = refusing(&["MUL_MAT"]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        sc.set_eval_callback(Some(EvalCallback {
            want: Box::new(|_, _| true),
            observe: Box::new(move |_, id, tensor| {
                seen.lock().unwrap().push((id, tensor.read_f32().unwrap()));
                id != a
            }),
        }));
    }
    let mut p = Placement::new(&g);
    let set = alloc_tensors(
        &cpu().buffer_type(),
        &[g.node(w).unwrap().layout],
        BufferUsage::Weights,
    )
    .unwrap();
    p.bind(&g, w, &set.tensors[0]).unwrap();
    set.tensors[0].write_f32(&ramp(256, 0.1)).unwrap();
    sc.alloc_graph(&g, &mut p).unwrap();
    p.tensor(&g, x).unwrap().write_f32(&ramp(32, 0.5)).unwrap();
    let tb = p.tensor(&g, b).unwrap();
    tb.write_f32(&[f32::NAN; 32]).unwrap();
    assert!(matches!(sc.compute(&g, &p), Err(Error::Aborted)));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "observed up to the stop only");
    assert_eq!(seen[0].0, a);
    let want_a: Vec<f32> = ramp(32, 0.5).iter().map(|v| 2.0 * v).collect();
    assert_eq!(seen[0].1, want_a, "the observed tensor holds its value");
    assert!(
        tb.read_f32().unwrap().iter().all(|v| v.is_nan()),
        "nothing after the stop ran"
    );
    // Without the callback the same scheduler computes everything.
    sc.set_eval_callback(None);
    sc.compute(&g, &p).unwrap();
    let got_c = p.tensor(&g, c).unwrap().read_f32().unwrap();
    let got_b = tb.read_f32().unwrap();
    assert!(got_b.iter().all(|v| v.is_finite()));
    let want_c: Vec<f32> = got_b.iter().map(|v| v + v).collect();
    assert_eq!(got_c, want_c);
}

#[test]
fn errors_name_the_node_and_the_scheduler_recovers() {
    let t = small();
    // SILU runs nowhere: both devices refuse it.
    let a = refusing(&["SILU"]);
    let b = Refusing::new(cpu(), "DEC2", |g: &Graph, id: TensorId| {
        g.node(id).unwrap().op.display_name() == "SILU"
    }) as Arc<dyn Device>;
    let mut sc = sched(&[a.clone(), b], SchedulerOptions::default());
    let mut p = Placement::new(&t.g);
    match sc.alloc_graph(&t.g, &mut p) {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("SILU"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Weights in memory no device of the scheduler reads.
    let other = refusing(&[]);
    let mut sc = sched(&[refusing(&[]), cpu()], SchedulerOptions::default());
    let mut p = Placement::new(&t.g);
    let set = alloc_tensors(
        &other.buffer_type(),
        &[t.g.node(t.w).unwrap().layout],
        BufferUsage::Weights,
    )
    .unwrap();
    p.bind(&t.g, t.w, &set.tensors[0]).unwrap();
    match sc.alloc_graph(&t.g, &mut p) {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("none of"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A device failing mid-compute: the CPU stream's abort callback.
    let cpu_stream = stream(&cpu());
    let dec = refusing(&["SILU"]);
    let mut sc = Scheduler::new(
        vec![stream(&dec), cpu_stream.clone()],
        SchedulerOptions::default(),
    )
    .unwrap();
    cpu_stream
        .set_abort_callback(Some(Arc::new(|| true)))
        .unwrap();
    let mut p = Placement::new(&t.g);
    let layouts = [t.w, t.bias].map(|id| t.g.node(id).unwrap().layout);
    let set = alloc_tensors(&dec.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    p.bind(&t.g, t.w, &set.tensors[0]).unwrap();
    p.bind(&t.g, t.bias, &set.tensors[1]).unwrap();
    sc.alloc_graph(&t.g, &mut p).unwrap();
    assert!(matches!(sc.compute(&t.g, &p), Err(Error::Aborted)));
    cpu_stream.set_abort_callback(None).unwrap();
    sc.compute(&t.g, &p).unwrap();
    // A graph larger than the memory a device may allocate: an error naming
    // the buffer type, and the scheduler still works for a smaller graph.
    let tiny: Arc<dyn tessera::BufferType> = tessera::HostBufferType::new("TINY", 4096, None);
    let mut sc = Scheduler::with_buffer_types(
        vec![stream(&cpu())],
        vec![tiny],
        SchedulerOptions::default(),
    )
    .unwrap();
    let mut big = Graph::new();
    let a = big.input("a", DType::F32, &[4096]).unwrap();
    let b2 = big.scale(a, 2.0).unwrap();
    big.set_output(b2).unwrap();
    let mut p = Placement::new(&big);
    match sc.alloc_graph(&big, &mut p) {
        Err(e @ Error::OutOfMemory { .. }) => assert!(e.to_string().contains("TINY"), "{e}"),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let mut small_g = Graph::new();
    let a = small_g.input("a", DType::F32, &[16]).unwrap();
    let b2 = small_g.scale(a, 2.0).unwrap();
    small_g.set_output(b2).unwrap();
    let mut p = Placement::new(&small_g);
    sc.alloc_graph(&small_g, &mut p).unwrap();
    p.tensor(&small_g, a)
        .unwrap()
        .write_f32(&[1.5; 16])
        .unwrap();
    sc.compute(&small_g, &p).unwrap();
    assert_eq!(
        p.tensor(&small_g, b2).unwrap().read_f32().unwrap(),
        vec![3.0; 16]
    );
    // Bad options and arguments.
    assert!(Scheduler::new(vec![], SchedulerOptions::default()).is_err());
    let mut sc = sched(&[cpu()], SchedulerOptions::default());
    assert!(sc.pin(t.h, 1).is_err());
    assert!(
        Scheduler::with_buffer_types(
            vec![stream(&cpu())],
            vec![dec.buffer_type()],
            SchedulerOptions::default()
        )
        .is_err(),
        "the CPU cannot compute in DEC memory"
    );
    let _ = Op::None;
}

#[test]
fn pipelined_input_copies_give_the_sequential_results() {
    let dec = refusing(&["SOFT_MAX"]);
    let b = Block::build(shape(DType::Q8_0)).unwrap();
    let want: Vec<Vec<f32>> = (0..6).map(|s| reference(&b, s)).collect();
    for n_copies in [1, 2, 4] {
        let opts = SchedulerOptions {
            n_copies,
            ..Default::default()
        };
        // reserve_size is what reserve allocates, slots included.
        let mut p = Placement::new(&b.graph);
        let _w = bind_weights(&b, &dec, &mut p);
        let mut fresh = sched(&[dec.clone(), cpu()], opts);
        let sizes = fresh.reserve_size(&b.graph, &p).unwrap();
        fresh.reserve(&b.graph, &p).unwrap();
        assert_eq!(
            sizes,
            vec![fresh.buffer_size(0).unwrap(), fresh.buffer_size(1).unwrap()],
            "n_copies {n_copies}"
        );

        let mut sc = sched(&[dec.clone(), cpu()], opts);
        let mut seen_inputs = std::collections::HashSet::new();
        for step in 0..6u64 {
            // A decode loop: allocate (next copy), write the inputs, compute.
            sc.alloc_graph(&b.graph, &mut p).unwrap();
            let x = p.tensor(&b.graph, b.x).unwrap();
            seen_inputs.insert((
                x.buffer().name().to_owned(),
                x.offset(),
                Arc::as_ptr(x.buffer()) as *const u8 as usize,
            ));
            x.write_f32(&b.input_values(step).unwrap()).unwrap();
            sc.compute(&b.graph, &p).unwrap();
            let got = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            assert_eq!(got, want[step as usize], "n_copies {n_copies} step {step}");
            // The same graph again, without allocating: the same inputs.
            sc.compute(&b.graph, &p).unwrap();
            let again = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            assert_eq!(
                again, want[step as usize],
                "n_copies {n_copies} step {step}, twice"
            );
        }
        // Inputs rotate through n_copies places.
        assert_eq!(seen_inputs.len(), n_copies, "n_copies {n_copies}");
        // An older placement (the inputs of another copy) is computed with
        // the inputs it holds, not the newest copy's.
        if n_copies > 1 {
            let old = p.clone();
            old.tensor(&b.graph, b.x)
                .unwrap()
                .write_f32(&b.input_values(1).unwrap())
                .unwrap();
            sc.alloc_graph(&b.graph, &mut p).unwrap();
            p.tensor(&b.graph, b.x)
                .unwrap()
                .write_f32(&b.input_values(2).unwrap())
                .unwrap();
            sc.compute(&b.graph, &old).unwrap();
            let got = old.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            assert_eq!(got, want[1], "n_copies {n_copies}: the older copy's inputs");
            sc.compute(&b.graph, &p).unwrap();
            let got = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            assert_eq!(got, want[2], "n_copies {n_copies}: the newer copy's inputs");
        }
        assert_eq!(sc.plan_count(), 1);
    }
    assert!(
        Scheduler::new(
            vec![stream(&cpu())],
            SchedulerOptions {
                n_copies: 0,
                ..Default::default()
            }
        )
        .is_err()
    );
}

#[test]
fn every_reason_is_reached_where_ggml_would() {
    // Devices: ACCEL (the CPU's own memory, runs only MUL_MAT and ADD),
    // DEC (memory of its own, refuses MUL), then the CPU.
    let accel: Arc<dyn Device> = Refusing::sharing_memory(cpu(), "ACCEL", |g: &Graph, id| {
        !matches!(g.node(id).unwrap().op.display_name(), "MUL_MAT" | "ADD")
    });
    let dec = refusing(&["MUL"]);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[16, 2]).unwrap();
    let w = g.new_tensor(DType::F32, &[16, 16]).unwrap(); // host weights
    let w2 = g.new_tensor(DType::F32, &[16, 2]).unwrap(); // host weights
    let k = g.new_tensor(DType::F32, &[16, 2]).unwrap(); // unplaced constant
    let unused = g.new_tensor(DType::F32, &[4]).unwrap();
    let a = g.rms_norm(x, 1e-5).unwrap(); // no weight: goes where most inputs are
    let b = g.mul_mat(w, a).unwrap(); // weights in host memory: ACCEL reads them
    let q = g.add(b, k).unwrap(); // spread from ACCEL; `k` follows it
    let c = g.mul(b, w2).unwrap(); // only the CPU runs MUL with host weights
    let d = g.add(c, c).unwrap(); // spread from the CPU, then upgraded to ACCEL
    let d2 = g.scale(d, 1.0).unwrap(); // spread from the CPU (ACCEL refuses it)
    g.set_output(d2).unwrap();
    let t = g.transpose(d).unwrap(); // a view: where its memory is
    let e = g.cont(t).unwrap();
    g.set_output(e).unwrap();
    g.set_output(q).unwrap();
    let devs = [accel.clone(), dec.clone(), cpu()];
    let mut sc = sched(
        &devs,
        SchedulerOptions {
            op_offload: OpOffload::Off,
            ..Default::default()
        },
    );
    let mut p = Placement::new(&g);
    let layouts = [w, w2].map(|id| g.node(id).unwrap().layout);
    let set = alloc_tensors(&cpu().buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    p.bind(&g, w, &set.tensors[0]).unwrap();
    p.bind(&g, w2, &set.tensors[1]).unwrap();
    sc.pin(e, 2).unwrap();
    sc.alloc_graph(&g, &mut p).unwrap();
    let expect = [
        (x, 2, Reason::Input),
        (w, 0, Reason::Buffer),
        (w2, 0, Reason::Buffer),
        (b, 0, Reason::Weights),
        (q, 0, Reason::ExpandGpu),
        (k, 0, Reason::Consumer),
        (c, 2, Reason::Weights),
        (d, 0, Reason::Upgrade),
        (d2, 2, Reason::Expand),
        (a, 2, Reason::BestInputs),
        (t, 0, Reason::ViewSource),
        (e, 2, Reason::Pin),
        (unused, 2, Reason::Fallback),
    ];
    let text = sc.describe(&g, true);
    for (id, dev, why) in expect {
        assert_eq!(sc.device_of(id), Some((dev, why)), "node {id}\n{text}");
    }
    // Expansion: a graph where a DEC op spreads to its neighbours, and the
    // CPU spreads where DEC cannot.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[16, 2]).unwrap();
    let w = g.new_tensor(DType::F32, &[16, 16]).unwrap();
    let a = g.scale(x, 2.0).unwrap();
    let b = g.mul_mat(w, a).unwrap();
    let c = g.silu(b).unwrap();
    let m = g.mul(c, c).unwrap();
    let n = g.scale(m, 0.5).unwrap();
    g.set_output(n).unwrap();
    let dec = refusing(&["MUL"]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    let mut p = Placement::new(&g);
    let set = alloc_tensors(
        &dec.buffer_type(),
        &[g.node(w).unwrap().layout],
        BufferUsage::Weights,
    )
    .unwrap();
    p.bind(&g, w, &set.tensors[0]).unwrap();
    sc.alloc_graph(&g, &mut p).unwrap();
    let text = sc.describe(&g, true);
    for (id, dev, why) in [
        (b, 0, Reason::Weights),
        (a, 0, Reason::ExpandGpu),
        (c, 0, Reason::ExpandGpu),
        (m, 1, Reason::BestInputs),
        (n, 0, Reason::ExpandGpu),
    ] {
        assert_eq!(sc.device_of(id), Some((dev, why)), "node {id}\n{text}");
    }
}

/// Run by `sched_debug_prints_the_plan` in a child process with
/// `TESSERA_SCHED_DEBUG` set (it is read when a scheduler is made).
#[test]
fn sched_debug_child() {
    if std::env::var("TESSERA_SCHED_DEBUG").is_err() {
        return;
    }
    let t = small();
    let dec = refusing(&["SILU"]);
    let mut sc = sched(&[dec.clone(), cpu()], SchedulerOptions::default());
    let _ = run_small(&mut sc, &t, &dec);
}

#[test]
fn sched_debug_prints_the_plan() {
    for (level, nodes) in [("1", false), ("2", true)] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sched_debug_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TESSERA_SCHED_DEBUG", level)
            .output()
            .unwrap();
        assert!(out.status.success(), "child failed");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("3 splits, 3 copies"), "level {level}: {err}");
        assert!(
            err.contains("## split 1: CPU") && err.contains("input"),
            "{err}"
        );
        assert_eq!(err.contains("best-inputs"), nodes, "level {level}: {err}");
    }
}

/// A view over memory the user bound (a KV cache written in place and read
/// through a view) is placed by `alloc_graph` over the user's buffer; that
/// place must not count as user memory, or every compute after it (and every
/// step of a decode loop) plans again.
#[test]
fn views_over_user_memory_keep_the_plan() {
    let cpu = cpu();
    let mut g = Graph::new();
    let cache = g.new_tensor(DType::F32, &[8, 4]).unwrap();
    let x = g.input("x", DType::F32, &[8, 1]).unwrap();
    let ids = g.input("ids", DType::I64, &[1]).unwrap();
    let written = g.set_rows(cache, x, ids).unwrap();
    let rows = g.view_2d(written, 8, 2, 8 * 4, 0).unwrap();
    let out = g.sum_rows(rows).unwrap();
    g.set_output(out).unwrap();
    let set = alloc_tensors(
        &cpu.buffer_type(),
        &[g.node(cache).unwrap().layout],
        BufferUsage::Any,
    )
    .unwrap();
    set.tensors[0].write_f32(&[0.0; 32]).unwrap();
    let mut sc = sched(std::slice::from_ref(&cpu), SchedulerOptions::default());
    let mut p = Placement::new(&g);
    for step in 0..4i64 {
        if step == 2 {
            // A fresh placement with the same user memory, as a decode loop makes.
            p = Placement::new(&g);
        }
        p.bind(&g, cache, &set.tensors[0]).unwrap();
        sc.alloc_graph(&g, &mut p).unwrap();
        p.tensor(&g, x)
            .unwrap()
            .write_f32(&[1.0 + step as f32; 8])
            .unwrap();
        p.tensor(&g, ids).unwrap().write_slice(&[step % 2]).unwrap();
        sc.compute(&g, &p).unwrap();
        let got = p.tensor(&g, out).unwrap().read_f32().unwrap();
        // Rows 0 and 1 hold the last values written there.
        let row = |r: i64| {
            if r <= step {
                (1 + r + 2 * ((step - r) / 2)) as f32 * 8.0
            } else {
                0.0
            }
        };
        assert_eq!(got, vec![row(0), row(1)], "step {step}");
        assert_eq!(sc.plan_count(), 1, "step {step}: planned again");
    }
}
