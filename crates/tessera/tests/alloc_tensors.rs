//! The linear allocator and `alloc_tensors`: alignment, packing, out of
//! memory as an error, and chunking into a multi-buffer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod alloc_common;

use std::sync::Arc;

use alloc_common::*;
use tessera::{
    BufferType, BufferUsage, Error, LinearAllocator, MultiBuffer, alloc_tensors, alloc_tensors_size,
};

#[test]
fn linear_allocator_packs_aligned_tensors_until_full() {
    let buft = host_max("LIN", 1 << 20);
    let buffer = ok(buft.alloc_buffer(1000));
    let mut lin = ok(LinearAllocator::new(buffer.clone()));
    let sizes = [16usize, 10, 1, 33, 64];
    let mut expected = 0;
    let mut got = Vec::new();
    for &n in &sizes {
        let t = ok(lin.alloc(&f32_layout(&[n])));
        assert_eq!(t.offset(), expected, "tensor of {n} floats");
        assert!(same(t.buffer(), &buffer));
        expected += (4 * n).next_multiple_of(64);
        got.push(t);
    }
    assert_eq!(lin.offset(), expected);
    assert_eq!(lin.remaining(), 1000 - expected);
    for w in got.windows(2) {
        assert!(w[0].offset() + w[0].nbytes() <= w[1].offset());
    }
    // 640 bytes used, 360 left: 100 floats (400 bytes) do not fit.
    match lin.alloc(&f32_layout(&[100])) {
        Err(Error::OutOfMemory {
            device,
            requested,
            detail,
        }) => {
            assert_eq!(device, "LIN");
            assert_eq!(requested, 448);
            assert!(
                detail.contains("1000") && detail.contains("360"),
                "{detail}"
            );
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // A tensor that still fits is placed after the failure.
    let t = ok(lin.alloc(&f32_layout(&[80])));
    assert_eq!(t.offset(), expected);
}

#[test]
fn alloc_tensors_splits_at_the_max_size_into_a_multi_buffer() {
    let buft = host_max("SMALL", 4096);
    // 250 floats = 1000 bytes, padded to 1024: four per 4096-byte buffer.
    let layouts = vec![f32_layout(&[250]); 10];
    assert_eq!(ok(alloc_tensors_size(&buft, &layouts)), 10 * 1024);
    let set = ok(alloc_tensors(&buft, &layouts, BufferUsage::Weights));
    assert_eq!(set.tensors.len(), 10);
    assert!(MultiBuffer::is_multi(set.buffer.as_ref()));
    let multi = set.buffer.as_any().downcast_ref::<MultiBuffer>().unwrap();
    let parts = multi.parts();
    assert_eq!(
        parts.iter().map(|p| p.size()).collect::<Vec<_>>(),
        vec![4096, 4096, 2048]
    );
    assert_eq!(set.buffer.size(), 10 * 1024);
    assert_eq!(set.buffer.usage(), BufferUsage::Weights);
    for part in parts {
        assert_eq!(part.usage(), BufferUsage::Weights);
    }
    for (i, t) in set.tensors.iter().enumerate() {
        let part = &parts[i / 4];
        assert!(same(t.buffer(), part), "tensor {i} in part {}", i / 4);
        assert_eq!(t.offset(), (i % 4) * 1024);
        assert_eq!(t.layout(), &layouts[i]);
    }
    // The tensors are usable memory.
    let bytes: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();
    ok(set.tensors[9].write(0, &bytes));
    assert_eq!(ok(set.tensors[9].to_bytes()), bytes);
}

#[test]
fn alloc_tensors_in_one_buffer_when_it_fits() {
    let buft = host();
    let layouts = [f32_layout(&[3, 5]), f32_layout(&[64]), f32_layout(&[0, 4])];
    let set = ok(alloc_tensors(&buft, &layouts, BufferUsage::Any));
    assert!(!MultiBuffer::is_multi(set.buffer.as_ref()));
    assert_eq!(set.buffer.size(), 64 + 256);
    assert_eq!(ok(alloc_tensors_size(&buft, &layouts)), 64 + 256);
    let offsets: Vec<_> = set.tensors.iter().map(|t| t.offset()).collect();
    assert_eq!(offsets, vec![0, 64, 320]);
}

#[test]
fn a_tensor_larger_than_the_max_size_is_an_error_naming_it() {
    let buft = host_max("SMALL", 4096);
    let layouts = [
        f32_layout(&[16]),
        f32_layout(&[16]),
        f32_layout(&[16]),
        f32_layout(&[2000]),
    ];
    for r in [
        alloc_tensors_size(&buft, &layouts),
        alloc_tensors(&buft, &layouts, BufferUsage::Weights).map(|_| 0),
    ] {
        match r {
            Err(Error::OutOfMemory {
                requested, detail, ..
            }) => {
                assert_eq!(requested, 8000);
                assert!(
                    detail.contains("tensor 3") && detail.contains("4096"),
                    "{detail}"
                );
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
}

#[test]
fn an_empty_list_gives_an_empty_set() {
    let buft: Arc<dyn BufferType> = host();
    let set = ok(alloc_tensors(&buft, &[], BufferUsage::Weights));
    assert!(set.tensors.is_empty());
    assert_eq!(set.buffer.size(), 0);
    assert_eq!(ok(alloc_tensors_size(&buft, &[])), 0);
}
