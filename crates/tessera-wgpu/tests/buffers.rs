//! Device buffers: byte-exact writes, reads, fills and copies at every
//! alignment (wgpu itself needs 4-byte-aligned copies), bounds errors, the
//! buffer types' limits and which buffer types the device accepts.
//! Every result is compared with a host mirror of the same operations.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{Buffer, BufferType, DType, Device, Error, Layout, Tensor, copy_between};
use tessera_wgpu::DeviceOptions;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

fn read_all(b: &dyn Buffer) -> Vec<u8> {
    let mut out = vec![0u8; b.size()];
    b.read(0, &mut out).unwrap();
    out
}

#[test]
fn unaligned_writes_reads_and_fills_are_byte_exact() {
    let Some(dev) = common::device("unaligned_writes_reads_and_fills_are_byte_exact") else {
        return;
    };
    let size = 203; // not a multiple of 4
    let buf = dev.buffer_type().alloc_buffer(size).unwrap();
    let mut mirror = pattern(size, 1);
    buf.write(0, &mirror).unwrap();
    assert_eq!(read_all(buf.as_ref()), mirror);
    let mut k = 0u8;
    for offset in 0..9 {
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 13, 64] {
            k = k.wrapping_add(1);
            if k.is_multiple_of(2) {
                let data = pattern(len, k);
                buf.write(offset + 11, &data).unwrap();
                mirror[offset + 11..offset + 11 + len].copy_from_slice(&data);
            } else {
                buf.fill(offset + 97, len, k).unwrap();
                mirror[offset + 97..offset + 97 + len].fill(k);
            }
            let mut part = vec![0u8; len];
            buf.read(offset + 5, &mut part).unwrap();
            assert_eq!(
                part,
                mirror[offset + 5..offset + 5 + len],
                "read at {} len {len}",
                offset + 5
            );
        }
    }
    assert_eq!(read_all(buf.as_ref()), mirror);
    // The last bytes of a buffer whose size is not a multiple of 4.
    buf.write(size - 3, &[9, 8, 7]).unwrap();
    mirror[size - 3..].copy_from_slice(&[9, 8, 7]);
    buf.clear(0x5A).unwrap();
    mirror.fill(0x5A);
    buf.write(size - 1, &[1]).unwrap();
    mirror[size - 1] = 1;
    assert_eq!(read_all(buf.as_ref()), mirror);
}

#[test]
fn device_to_device_copies_at_any_alignment() {
    let Some(dev) = common::device("device_to_device_copies_at_any_alignment") else {
        return;
    };
    let buft = dev.buffer_type();
    let a = buft.alloc_buffer(300).unwrap();
    let b = buft.alloc_buffer(301).unwrap();
    let mut ma = pattern(300, 3);
    let mut mb = pattern(301, 200);
    a.write(0, &ma).unwrap();
    b.write(0, &mb).unwrap();
    for (so, doff, len) in [
        (0, 0, 64),
        (4, 8, 12),
        (1, 2, 33),
        (3, 0, 5),
        (7, 250, 51),
        (0, 1, 0),
    ] {
        assert_eq!(
            b.copy_from(doff, a.as_ref(), so, len).unwrap(),
            tessera::Copied::Done
        );
        mb.copy_within(0..0, 0);
        let chunk = ma[so..so + len].to_vec();
        mb[doff..doff + len].copy_from_slice(&chunk);
    }
    assert_eq!(read_all(b.as_ref()), mb);
    // Within one buffer: disjoint ranges copy on the device, overlapping
    // ranges are refused (the generic path stages them through the host).
    assert_eq!(
        a.copy_from(200, a.as_ref(), 5, 37).unwrap(),
        tessera::Copied::Done
    );
    ma.copy_within(5..42, 200);
    assert_eq!(
        a.copy_from(10, a.as_ref(), 5, 37).unwrap(),
        tessera::Copied::Fallback
    );
    copy_between(a.as_ref(), 5, a.as_ref(), 10, 37).unwrap();
    ma.copy_within(5..42, 10);
    assert_eq!(read_all(a.as_ref()), ma);
    // Host to device and back through the generic copy.
    let host = tessera::HostBufferType::new("host", usize::MAX, None)
        .alloc_buffer(40)
        .unwrap();
    host.write(0, &pattern(40, 77)).unwrap();
    copy_between(host.as_ref(), 3, a.as_ref(), 1, 30).unwrap();
    ma[1..31].copy_from_slice(&pattern(40, 77)[3..33]);
    assert_eq!(read_all(a.as_ref()), ma);
}

#[test]
fn out_of_bounds_accesses_are_errors() {
    let Some(dev) = common::device("out_of_bounds_accesses_are_errors") else {
        return;
    };
    let buf = dev.buffer_type().alloc_buffer(64).unwrap();
    let oob = |r: tessera::Result<()>| assert!(matches!(r, Err(Error::OutOfBounds(_))), "{r:?}");
    oob(buf.write(60, &[0; 5]));
    oob(buf.write(usize::MAX, &[0; 2]));
    oob(buf.read(64, &mut [0; 1]));
    oob(buf.fill(1, 64, 0));
    let other = dev.buffer_type().alloc_buffer(8).unwrap();
    assert!(matches!(
        other.copy_from(0, buf.as_ref(), 60, 8),
        Err(Error::OutOfBounds(_))
    ));
    // Zero-length accesses at the end are fine; past it they are not.
    buf.write(64, &[]).unwrap();
    oob(buf.read(65, &mut []));
    // Tensors are checked against their buffer and their own extent.
    let layout = Layout::contiguous(DType::F32, &[8]).unwrap();
    assert!(matches!(
        Tensor::new(layout, buf.clone(), 40),
        Err(Error::OutOfBounds(_))
    ));
    let t = Tensor::new(layout, buf.clone(), 32).unwrap();
    oob(t.write(30, &[0; 4]));
    // An empty buffer has no device memory and no bytes.
    let empty = dev.buffer_type().alloc_buffer(0).unwrap();
    assert_eq!(empty.size(), 0);
    empty.write(0, &[]).unwrap();
    oob(empty.write(0, &[1]));
}

#[test]
fn buffer_types_report_the_adapter_limits() {
    let Some(dev) = common::device("buffer_types_report_the_adapter_limits") else {
        return;
    };
    let buft = dev.buffer_type();
    let limits = dev.limits();
    let binding = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    assert_eq!(
        buft.max_size() as u64,
        binding.min(u64::from(u32::MAX)) & !3
    );
    assert!(buft.alignment().is_power_of_two());
    assert!(buft.alignment() as u64 >= u64::from(limits.min_storage_buffer_offset_alignment));
    assert!(!buft.is_host());
    match buft.alloc_buffer(buft.max_size() + 1) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, buft.max_size() + 1),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // The host buffer type is host memory of this device, for staging.
    let host = dev.host_buffer_type().unwrap();
    assert!(host.is_host());
    assert_eq!(host.device().unwrap().name(), dev.name());
    let h = host.alloc_buffer(16).unwrap();
    assert!(h.host_region().is_some());
    // The kernels read only this device's own buffers.
    assert!(dev.supports_buffer_type(buft.as_ref()));
    assert!(!dev.supports_buffer_type(host.as_ref()));
    let other = tessera_wgpu::family()
        .open_device(
            0,
            &DeviceOptions {
                name: Some("WGPU0-other".into()),
                max_buffer_size: Some(1 << 20),
            },
        )
        .unwrap();
    assert!(!dev.supports_buffer_type(other.buffer_type().as_ref()));
    assert_eq!(other.buffer_type().max_size(), 1 << 20);
    let _keep: Arc<dyn Device> = other;
}

#[test]
fn device_props_are_honest() {
    let Some(dev) = common::device("device_props_are_honest") else {
        return;
    };
    let props = dev.props();
    assert!(props.name.starts_with("WGPU"));
    assert!(props.caps.async_ops && props.caps.events && dev.host_buffer_type().is_some());
    assert!(
        props.memory.estimated,
        "wgpu reports no memory figures: they are estimates"
    );
    let a = dev.adapter();
    assert!(
        matches!(a.backend.as_str(), "Vulkan" | "Metal" | "Dx12"),
        "{}",
        a.backend
    );
    if a.name.contains("llvmpipe") {
        assert!(a.software);
        assert_eq!(props.device_type, tessera::DeviceType::Cpu);
        assert!(
            props.description.contains("software adapter"),
            "{}",
            props.description
        );
    }
    eprintln!("{}: {} ({:?})", props.name, props.description, props.memory);
}

/// Reads go through staging buffers the device keeps for the next reads:
/// reads of one size class from different buffers, offsets and lengths,
/// each after a write, return exactly the bytes written, never a
/// previous read's; so do reads too large to be kept (their own staging).
#[test]
fn kept_staging_buffers_return_only_the_bytes_read() {
    let Some(dev) = common::device("kept_staging_buffers_return_only_the_bytes_read") else {
        return;
    };
    let (na, nb) = (6000, 5003);
    let a = dev.buffer_type().alloc_buffer(na).unwrap();
    let b = dev.buffer_type().alloc_buffer(nb).unwrap();
    for round in 0..3u8 {
        let (pa, pb) = (pattern(na, 11 + round), pattern(nb, 101 + round));
        a.write(0, &pa).unwrap();
        b.write(0, &pb).unwrap();
        for (buf, mirror, off, len) in [
            (&a, &pa, 0, 5000),
            (&b, &pb, 101, 4099),
            (&a, &pa, 3, 7),
            (&b, &pb, 0, nb),
            (&a, &pa, 4097, 1900),
        ] {
            let mut out = vec![0xAAu8; len];
            buf.read(off, &mut out).unwrap();
            assert!(
                out == mirror[off..off + len],
                "round {round}: {len} bytes at {off}"
            );
        }
    }
    let big = (5 << 20) + 3;
    let c = dev.buffer_type().alloc_buffer(big).unwrap();
    let pc = pattern(big, 7);
    c.write(0, &pc).unwrap();
    let mut out = vec![0u8; big - 2];
    c.read(1, &mut out).unwrap();
    assert!(out == pc[1..big - 1], "a read of 5 MiB");
}
