//! Test helpers for the CPU device's own tests: place a graph in one host
//! buffer, read and write tensors element by element through their layouts
//! (so permuted views and strided results need no special casing), compare
//! with f64 references, and generate deterministic data.
//!
//! Tensors are placed at 64-byte aligned offsets with a 64-byte gap after
//! each; the whole buffer starts filled with [`GUARD`], so a test can check
//! that nothing outside a result was written.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use half::{bf16, f16};
use tessera::{Buffer, DType, Device, Graph, Layout, Place, Placement, Stream, TensorId};

/// Byte the buffer is filled with before inputs are written.
pub const GUARD: u8 = 0xA5;

/// A graph placed in one host buffer of the CPU device.
pub struct Placed {
    pub graph: Graph,
    pub placement: Placement,
    pub buffer: Arc<dyn Buffer>,
}

/// Place every non-view tensor of `graph` (aligned, with gaps), then the views.
pub fn place(graph: Graph) -> Placed {
    let mut offsets = vec![None; graph.len()];
    let mut end = 0usize;
    for id in graph.ids() {
        if graph.node(id).unwrap().is_view() {
            continue;
        }
        offsets[id.index()] = Some(end);
        end = (end + graph.node(id).unwrap().layout.nbytes() + 64).div_ceil(64) * 64;
    }
    let buffer = tessera_cpu::device()
        .buffer_type()
        .alloc_buffer(end.max(64))
        .unwrap();
    buffer.clear(GUARD).unwrap();
    let mut placement = Placement::new(&graph);
    for id in graph.ids() {
        if let Some(offset) = offsets[id.index()] {
            placement
                .set(
                    &graph,
                    id,
                    Place {
                        buffer: buffer.clone(),
                        offset,
                    },
                )
                .unwrap();
        }
    }
    placement.place_views(&graph).unwrap();
    Placed {
        graph,
        placement,
        buffer,
    }
}

impl Placed {
    /// Byte offset of `id` in the buffer.
    pub fn offset(&self, id: TensorId) -> usize {
        self.placement.get(id).unwrap().offset
    }

    /// All bytes of the buffer.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.buffer.size()];
        self.buffer.read(0, &mut out).unwrap();
        out
    }

    /// Write `values` (logical row-major order) into `id`, converted to its type.
    pub fn set(&self, id: TensorId, values: &[f64]) {
        let l = self.graph.node(id).unwrap().layout;
        assert_eq!(values.len(), l.nelements(), "value count for {}", l);
        let mut bytes = self.bytes();
        let base = self.offset(id);
        for (k, idx) in indices(&l).enumerate() {
            let at = base + l.offset_of(idx);
            encode(l.dtype, values[k], &mut bytes[at..at + l.dtype.type_size()]);
        }
        self.buffer.write(0, &bytes).unwrap();
    }

    /// Write raw bytes at the start of `id` (for quantized tensors).
    pub fn set_raw(&self, id: TensorId, data: &[u8]) {
        self.buffer.write(self.offset(id), data).unwrap();
    }

    /// The values of `id` in logical row-major order, as f64.
    pub fn get(&self, id: TensorId) -> Vec<f64> {
        let l = self.graph.node(id).unwrap().layout;
        let bytes = self.bytes();
        let base = self.offset(id);
        indices(&l)
            .map(|idx| {
                let at = base + l.offset_of(idx);
                decode(l.dtype, &bytes[at..at + l.dtype.type_size()])
            })
            .collect()
    }

    /// The raw bytes of a contiguous tensor.
    pub fn get_raw(&self, id: TensorId) -> Vec<u8> {
        let l = self.graph.node(id).unwrap().layout;
        let mut out = vec![0u8; l.nbytes()];
        self.buffer.read(self.offset(id), &mut out).unwrap();
        out
    }

    /// Compute the whole graph on a new stream with `threads` threads.
    pub fn compute(&self, threads: usize) -> tessera::Result<()> {
        let stream = stream(threads);
        stream.compute(&self.graph, &self.placement)
    }
}

/// A CPU stream with `threads` threads.
pub fn stream(threads: usize) -> Arc<dyn Stream> {
    tessera_cpu::device()
        .new_stream(&tessera::StreamOptions::new().threads(threads))
        .unwrap()
}

/// Every index of `l` in logical row-major order (dimension 0 fastest).
pub fn indices(l: &Layout) -> impl Iterator<Item = [usize; 4]> + use<> {
    let ne = l.ne;
    let n = ne.iter().product::<usize>();
    (0..n).map(move |k| {
        [
            k % ne[0],
            k / ne[0] % ne[1],
            k / (ne[0] * ne[1]) % ne[2],
            k / (ne[0] * ne[1] * ne[2]),
        ]
    })
}

/// Store `v` as one element of `dtype`.
pub fn encode(dtype: DType, v: f64, out: &mut [u8]) {
    match dtype {
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        // Through f32, as the kernels round (half's f64 paths round differently).
        DType::F16 => out.copy_from_slice(&f16::from_f32(v as f32).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&bf16::from_f32(v as f32).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(v as i64).to_le_bytes()),
        t => panic!("no element encoding for {t}"),
    }
}

/// Read one element of `dtype` as f64.
pub fn decode(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes(b.try_into().unwrap())),
        DType::F16 => f16::from_le_bytes(b.try_into().unwrap()).to_f64(),
        DType::BF16 => bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
        DType::I32 => f64::from(i32::from_le_bytes(b.try_into().unwrap())),
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
        t => panic!("no element decoding for {t}"),
    }
}

/// `v` rounded to `dtype` (what storing it would give).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    let mut b = [0u8; 8];
    let n = dtype.type_size();
    encode(dtype, v, &mut b[..n]);
    decode(dtype, &b[..n])
}

/// Unit roundoff of a float type (half an ulp at 1).
pub fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::EPSILON) / 2.0,
        DType::F16 => 1.0 / 2048.0,
        DType::BF16 => 1.0 / 256.0,
        _ => 0.0,
    }
}

/// Assert `got[i]` is within `abs + rel * |want[i]|` of `want[i]` (NaN
/// matches NaN, infinities must be equal).
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], abs: f64, rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= abs + rel * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i}: got {g}, want {w} (abs {abs}, rel {rel})"
        );
    }
}

/// Deterministic pseudo-random numbers (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Linear index of `idx` in row-major order of extents `ne`.
pub fn lin(idx: [usize; 4], ne: [usize; 4]) -> usize {
    idx[0] + ne[0] * (idx[1] + ne[1] * (idx[2] + ne[2] * idx[3]))
}
