//! Bad input for tessera's object model without a device: tensors over host
//! buffers (`Tensor::new`, `read`, `write`, `fill`, typed and f32 access with
//! bad offsets, lengths and element types), buffers (`write_2d`, `read_2d`,
//! `copy_between`, absurd allocation sizes, read-only memory), placements,
//! stream options and the registry. Every `Ok` that writes is checked
//! against a mirror or a canary: bytes outside what the call may touch must
//! be unchanged.

use std::sync::Arc;

use proptest::prelude::*;
use tessera::buffer::{check_range, try_filled_vec, try_zeroed_vec};
use tessera::stream_options::MAX_THREADS;
use tessera::{
    Buffer, BufferType, DType, Error, HostBufferType, HostMemory, Layout, MultiBuffer, Registry,
    StreamOptions, Tensor, copy_between,
};

use super::strategies::{
    any_len, huge, offset, option_string, raw_layout, sample, slice_len, small_layout, threads,
};
use super::{Case, Group, Stop, Verdict, ensure, must_fail, setup};

/// The groups of this module.
pub fn object_groups() -> Vec<Group> {
    vec![
        Group::new("tensor-access", tensor_cases),
        Group::new("host-buffers", buffer_cases),
        Group::new("placement", super::alloc_cases::placement_cases),
        Group::new("allocators", super::alloc_cases::allocator_cases),
        Group::new("stream-options", option_cases),
    ]
}

/// Canary byte of arenas.
pub(crate) const CANARY: u8 = 0xA5;

/// A host buffer type limited to 1 MiB per buffer.
pub(crate) fn host_buft() -> Arc<HostBufferType> {
    HostBufferType::new("BADINPUT", 1 << 20, None)
}

/// A host buffer of `size` bytes filled with [`CANARY`].
pub(crate) fn arena(size: usize) -> Result<Arc<dyn Buffer>, Stop> {
    let b = setup(host_buft().alloc_buffer(size))?;
    setup(b.clear(CANARY))?;
    Ok(b)
}

/// All bytes of `b`.
pub(crate) fn bytes_of(b: &dyn Buffer) -> Result<Vec<u8>, Stop> {
    let mut v = vec![0u8; b.size()];
    setup(b.read(0, &mut v))?;
    Ok(v)
}

/// Every byte of `b` outside `[lo, hi)` is still the canary.
pub(crate) fn untouched_outside(b: &dyn Buffer, lo: usize, hi: usize) -> Result<(), Stop> {
    let bytes = bytes_of(b)?;
    let bad = bytes
        .iter()
        .enumerate()
        .position(|(i, &x)| (i < lo || i >= hi) && x != CANARY);
    ensure(bad.is_none(), || {
        format!("byte {bad:?} outside [{lo}, {hi}) of the buffer was changed")
    })
}

fn tensor_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let layouts = prop_oneof![3 => small_layout(), 1 => raw_layout()];
    let specs = (
        layouts,
        prop_oneof![4 => 0usize..=256, 1 => huge()],
        0usize..12,
    );
    let args = (offset(), slice_len(), any_len(), 0usize..5);
    for ((l, toff, op), (off, len, big, ty)) in sample((specs, args), 360, 30) {
        cases.push(Case::new(
            format!(
                "tensor op {op} on {l:?} at {toff}: off {off}, len {len}, big {big}, type #{ty}"
            ),
            move || -> Result<(), Stop> {
                let buf = arena(4096)?;
                let t = Tensor::new(l, buf.clone(), toff)?;
                let n = t.nbytes();
                let fits = |o: usize, k: usize| o.checked_add(k).is_some_and(|e| e <= n);
                let nel = l.checked_nelements().unwrap_or(0);
                let count = if len % 3 == 0 { nel } else { len };
                let r = match op {
                    0 => t.write(off, &vec![7u8; len]),
                    1 => t.read(off, &mut vec![0u8; len]),
                    2 => t.fill(off, big, 0x3C),
                    3 => t.to_bytes().map(drop),
                    4 => t.write_f32(&vec![0.25f32; count]),
                    5 => t.read_f32().map(drop),
                    6 => typed_write(&t, ty, count),
                    7 => typed_read(&t, ty),
                    8 => t.copy_to(&Tensor::new(l, buf.clone(), off % 2048)?),
                    9 => t.write(n, &[]),
                    10 => t.read(usize::MAX, &mut []),
                    _ => t.fill(off, usize::MAX - off, 1),
                };
                r?;
                match op {
                    0 | 1 => ensure(fits(off, len), || "an out-of-range access succeeded".into())?,
                    2 => ensure(fits(off, big), || "an out-of-range fill succeeded".into())?,
                    _ => {}
                }
                let (lo, hi) = if op == 8 {
                    (off % 2048, off % 2048 + n)
                } else {
                    (toff, toff + n)
                };
                untouched_outside(buf.as_ref(), lo, hi)
            },
        ));
    }
    cases
}

fn typed_write(t: &Tensor, ty: usize, n: usize) -> tessera::Result<()> {
    match ty {
        0 => t.write_slice(&vec![1f32; n]),
        1 => t.write_slice(&vec![half::f16::ONE; n]),
        2 => t.write_slice(&vec![half::bf16::ONE; n]),
        3 => t.write_slice(&vec![-1i32; n]),
        _ => t.write_slice(&vec![i64::MIN; n]),
    }
}

fn typed_read(t: &Tensor, ty: usize) -> tessera::Result<()> {
    match ty {
        0 => t.read_vec::<f32>().map(drop),
        1 => t.read_vec::<half::f16>().map(drop),
        2 => t.read_vec::<half::bf16>().map(drop),
        3 => t.read_vec::<i32>().map(drop),
        _ => t.read_vec::<i64>().map(drop),
    }
}

/// The default `write_2d` semantics on a host mirror (small `n` only);
/// `Wrong` if a piece lies outside the data or the buffer.
fn mirror_2d(
    m: &mut [u8],
    off: usize,
    data: &[u8],
    (piece, n, bs, ds): (usize, usize, usize, usize),
) -> Result<(), Stop> {
    if piece == 0 {
        return Ok(());
    }
    for i in 0..n {
        let s = i
            .checked_mul(ds)
            .filter(|s| s.checked_add(piece).is_some_and(|e| e <= data.len()));
        let d = i
            .checked_mul(bs)
            .and_then(|d| d.checked_add(off))
            .filter(|d| d.checked_add(piece).is_some_and(|e| e <= m.len()));
        let (Some(s), Some(d)) = (s, d) else {
            return Err(Stop::Wrong(format!(
                "piece {i} is out of range but the call succeeded"
            )));
        };
        m[d..d + piece].copy_from_slice(&data[s..s + piece]);
    }
    Ok(())
}

fn buffer_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let small = prop_oneof![4 => 0usize..=48, 1 => huge()];
    let n = prop_oneof![4 => 0usize..=6, 1 => huge()];
    let shape2d = (
        offset(),
        slice_len(),
        small.clone(),
        n,
        small.clone(),
        small,
    );
    for ((off, dlen, piece, n, bs, ds), read) in sample((shape2d, any::<bool>()), 160, 40) {
        let what = if read { "read_2d" } else { "write_2d" };
        cases.push(Case::new(
            format!("{what}(offset {off}, {dlen} bytes, piece {piece}, n {n}, buffer stride {bs}, data stride {ds})"),
            move || -> Result<(), Stop> {
                let buf = arena(512)?;
                let data: Vec<u8> = (0..dlen).map(|i| i as u8).collect();
                if read {
                    let mut out = vec![0u8; dlen];
                    buf.read_2d(off, &mut out, piece, n, bs, ds)?;
                    return untouched_outside(buf.as_ref(), 0, 0);
                }
                let before = bytes_of(buf.as_ref())?;
                buf.write_2d(off, &data, piece, n, bs, ds)?;
                ensure(n <= 64 || piece == 0, || format!("{n} pieces written into 512 bytes"))?;
                let mut mirror = before;
                mirror_2d(&mut mirror, off, &data, (piece, n, bs, ds))?;
                ensure(bytes_of(buf.as_ref())? == mirror, || {
                    "the buffer differs from the mirror".into()
                })
            },
        ));
    }
    // Many pieces of nothing, or many pieces at one place: Err or quick Ok.
    let edges = [
        (0usize, usize::MAX, 0usize, 0usize),
        (0, usize::MAX, 1, 1),
        (1, usize::MAX, 0, 0),
        (1, usize::MAX, 0, 1),
        (1, usize::MAX, 1, 0),
        (4, 1 << 40, 0, 4),
        (0, usize::MAX, usize::MAX, usize::MAX),
    ];
    for (piece, n, bs, ds) in edges {
        for read in [false, true] {
            let what = if read { "read_2d" } else { "write_2d" };
            cases.push(Case::new(
                format!("{what}(offset 0, 64 bytes, piece {piece}, n {n}, buffer stride {bs}, data stride {ds})"),
                move || -> Result<(), Stop> {
                    let buf = arena(512)?;
                    let mut data = vec![3u8; 64];
                    if read {
                        buf.read_2d(0, &mut data, piece, n, bs, ds)?;
                    } else {
                        buf.write_2d(0, &data, piece, n, bs, ds)?;
                    }
                    Ok(())
                },
            ));
        }
    }
    let ranges = (offset(), offset(), any_len(), 0usize..4);
    for (so, doff, len, kind) in sample(ranges, 120, 41) {
        cases.push(Case::new(
            format!("copy_between(kind {kind}, src offset {so}, dst offset {doff}, {len} bytes)"),
            move || -> Result<(), Stop> {
                let a = arena(300)?;
                setup(a.write(0, &(0..300).map(|i| i as u8).collect::<Vec<_>>()))?;
                let b: Arc<dyn Buffer> = match kind {
                    0 => a.clone(),
                    1 => arena(200)?,
                    2 => read_only(vec![CANARY; 200])?,
                    _ => Arc::new(MultiBuffer::new(vec![arena(64)?, arena(64)?], host_buft())),
                };
                let src_before = bytes_of(a.as_ref())?;
                let dst_before = if kind == 3 {
                    Vec::new()
                } else {
                    bytes_of(b.as_ref())?
                };
                copy_between(a.as_ref(), so, b.as_ref(), doff, len)?;
                ensure(kind != 2 || len == 0, || {
                    "a read-only buffer was written".into()
                })?;
                ensure(kind != 3 || len == 0, || {
                    "a multi-buffer was written".into()
                })?;
                let fits = |o: usize, size: usize| check_range("x", size, o, len).is_ok();
                ensure(fits(so, 300) && fits(doff, b.size()), || {
                    "an out-of-range copy succeeded".into()
                })?;
                if kind == 3 {
                    return Ok(());
                }
                let mut mirror = dst_before;
                if len > 0 {
                    mirror[doff..doff + len].copy_from_slice(&src_before[so..so + len]);
                }
                ensure(bytes_of(b.as_ref())? == mirror, || {
                    "the copy differs from the mirror".into()
                })
            },
        ));
    }
    for (off, len, v) in sample((offset(), any_len(), any::<u8>()), 40, 42) {
        cases.push(Case::new(
            format!("fill / read / write at offset {off}, len {len} of 100 bytes"),
            move || -> Result<(), Stop> {
                let buf = arena(100)?;
                let r = buf.fill(off, len, v);
                let fits = check_range("x", 100, off, len).is_ok();
                ensure(r.is_ok() == fits, || {
                    format!("fill gave {r:?}, range fits: {fits}")
                })?;
                let ro = read_only(vec![1u8; 100])?;
                must_fail(ro.fill(off, len.max(1), v), "fill of read-only memory")
            },
        ));
    }
    let sizes = [
        (1usize << 20) + 1,
        isize::MAX as usize,
        isize::MAX as usize + 1,
        usize::MAX,
        usize::MAX - 63,
        1 << 62,
    ];
    for size in sizes {
        // 1 MiB + 1 is absurd only for the limited type.
        let absurd = size > 1 << 21;
        for limited in [true, false].into_iter().filter(|&l| l || absurd) {
            cases.push(Case::new(
                format!("alloc_buffer({size}) of a host buffer type (limited {limited})"),
                move || -> Result<(), Stop> {
                    let buft = if limited {
                        host_buft()
                    } else {
                        HostBufferType::new("UNLIMITED", usize::MAX, None)
                    };
                    match buft.alloc_buffer(size) {
                        Err(Error::OutOfMemory { .. }) => Err(Stop::Lib(Error::OutOfMemory {
                            device: "host".into(),
                            requested: size,
                            detail: "as expected".into(),
                        })),
                        Ok(_) => Err(Stop::Wrong(format!("{size} bytes were allocated"))),
                        Err(e) => Err(Stop::Wrong(format!("not OutOfMemory: {e}"))),
                    }
                },
            ));
        }
        if !absurd {
            continue;
        }
        cases.push(Case::new(
            format!("HostMemory::alloc({size})"),
            move || match HostMemory::alloc(size) {
                Ok(_) => Verdict::Wrong(format!("{size} bytes were allocated")),
                Err(e) => Verdict::Err(e),
            },
        ));
        cases.push(Case::new(
            format!("try_filled_vec({size} f64)"),
            move || try_filled_vec(size, 1.0f64, "bad input").map(drop),
        ));
        cases.push(Case::new(format!("try_zeroed_vec({size})"), move || {
            try_zeroed_vec(size, "bad input").map(drop)
        }));
    }
    cases.push(Case::new(
        "empty borrowed memory: every access",
        || -> Result<(), Stop> {
            let b = read_only(Vec::new())?;
            b.read(0, &mut [])?;
            must_fail(b.write(0, &[1]), "write past an empty buffer")
        },
    ));
    cases.push(Case::new(
        "multi-buffer byte access",
        || -> Result<(), Stop> {
            let m = MultiBuffer::new(Vec::new(), host_buft());
            let _ = (m.size(), m.usage(), m.is_writable(), m.clear(1));
            must_fail(m.read(0, &mut [0; 4]), "read of a multi-buffer")
        },
    ));
    cases
}

/// A read-only host buffer over `bytes`.
pub(crate) fn read_only(bytes: Vec<u8>) -> Result<Arc<dyn Buffer>, Stop> {
    let buft: Arc<dyn BufferType> = host_buft();
    Ok(Arc::new(tessera::HostBuffer::from_memory(
        HostMemory::borrowed(bytes),
        buft,
    )))
}

fn option_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for s in sample(option_string(), 150, 50) {
        cases.push(Case::new(
            format!("StreamOptions::parse({s:?})"),
            move || -> Result<(), Stop> {
                let o = StreamOptions::parse(&s)?;
                let n = o.thread_count()?;
                ensure(n.is_none_or(|n| (1..=MAX_THREADS).contains(&n)), || {
                    format!("thread count {n:?} accepted")
                })?;
                let again = StreamOptions::parse(&o.to_string());
                ensure(again.as_ref().ok() == Some(&o), || {
                    format!("'{o}' does not parse back: {again:?}")
                })?;
                o.only("X", &["isa"])?;
                Ok(())
            },
        ));
    }
    for n in sample(threads(), 20, 51) {
        cases.push(Case::new(
            format!("StreamOptions::threads({n})"),
            move || -> Result<(), Stop> {
                let r = StreamOptions::new().threads(n).thread_count();
                let valid = (1..=MAX_THREADS).contains(&n);
                ensure(r.is_ok() == valid, || format!("{n} threads gave {r:?}"))?;
                r.map(drop).map_err(Stop::Lib)
            },
        ));
    }
    for (s, t) in sample((option_string(), any::<u32>()), 30, 52) {
        cases.push(Case::new(
            format!("an empty Registry asked for {s:?}"),
            move || -> Result<(), Stop> {
                let r = Registry::new();
                let _ = (r.devices(), r.families(), r.family_by_name(&s));
                let _ = r.device_by_type(tessera::DeviceType::Gpu);
                let _ = r.init_by_name(&s, &StreamOptions::new().threads(t as usize));
                must_fail(r.init_best(), "a stream from an empty registry")
            },
        ));
    }
    let layouts = sample((raw_layout(), any_len()), 10, 53);
    for (l, _) in layouts {
        cases.push(Case::new(format!("DType checks of {l:?}"), move || {
            let t = l.dtype;
            let _ = (t.is_float(), t.is_int(), t.is_quantized(), t.name());
            let _ = DType::from_ggml_id(t.ggml_id());
            Layout::contiguous4(t, l.ne).map(drop)
        }));
    }
    cases
}
