//! Typed and untyped tensor access: typed reads and writes check the element
//! type, not just its size (issue 9).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use half::{bf16, f16};
use tessera::*;

fn tensor(dtype: DType, ne: &[usize]) -> Tensor {
    let buft = HostBufferType::new("HOST", usize::MAX, None);
    let l = Layout::contiguous(dtype, ne).unwrap();
    let b: Arc<dyn Buffer> = buft.alloc_buffer(l.nbytes()).unwrap();
    Tensor::new(l, b, 0).unwrap()
}

fn invalid_naming(r: Result<impl std::fmt::Debug>, a: &str, b: &str) {
    match r {
        Err(Error::InvalidLayout(msg)) => {
            assert!(msg.contains(a) && msg.contains(b), "{msg}");
        }
        other => panic!("expected InvalidLayout naming {a} and {b}, got {other:?}"),
    }
}

#[test]
fn typed_writes_reject_a_same_sized_other_type() {
    let ints = tensor(DType::I32, &[3]);
    ints.write(0, &[0xAB; 12]).unwrap();
    invalid_naming(ints.write_slice(&[1.0f32, 2.0, 3.0]), "f32", "i32");
    // The failed write left the bytes alone.
    assert_eq!(ints.to_bytes().unwrap(), vec![0xAB; 12]);
    ints.write_slice(&[1i32, -2, 3]).unwrap();
    assert_eq!(ints.read_vec::<i32>().unwrap(), vec![1, -2, 3]);

    let floats = tensor(DType::F32, &[2]);
    invalid_naming(floats.write_slice(&[7i32, 8]), "i32", "f32");

    let halves = tensor(DType::F16, &[2]);
    invalid_naming(
        halves.write_slice(&[bf16::from_f32(1.0), bf16::ONE]),
        "bf16",
        "f16",
    );
    halves
        .write_slice(&[f16::ONE, f16::from_f32(-2.0)])
        .unwrap();
    assert_eq!(
        halves.read_vec::<f16>().unwrap(),
        vec![f16::ONE, f16::from_f32(-2.0)]
    );

    let longs = tensor(DType::I64, &[2]);
    longs.write_slice(&[5i64, -6]).unwrap();
    assert_eq!(longs.read_vec::<i64>().unwrap(), vec![5, -6]);
}

#[test]
fn typed_reads_reject_a_same_sized_other_type() {
    let ints = tensor(DType::I32, &[2]);
    ints.write_slice(&[1i32, 2]).unwrap();
    invalid_naming(ints.read_vec::<f32>(), "f32", "i32");
    let brains = tensor(DType::BF16, &[2]);
    invalid_naming(brains.read_vec::<f16>(), "f16", "bf16");
    brains.write_slice(&[bf16::ONE, bf16::ONE]).unwrap();
    assert_eq!(brains.read_vec::<bf16>().unwrap(), vec![bf16::ONE; 2]);
    // Quantized tensors have no element type: bytes or f32 only.
    let q = tensor(DType::Q8_0, &[32]);
    assert!(matches!(q.read_vec::<f32>(), Err(Error::InvalidLayout(_))));
    assert_eq!(q.to_bytes().unwrap().len(), 34);
}
