//! Oracle cross-check: a file written by gguf-py's GGUFWriter (the reference
//! implementation; scripts/gguf-fixtures/generate.py) reads back with the
//! values the script wrote.

#![allow(clippy::unwrap_used)]

use tessera::{DType, Device, quant};
use tessera_gguf::GgufFile;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf_py.gguf");

#[test]
fn reads_what_gguf_py_wrote() {
    let f = GgufFile::open(FIXTURE).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.get::<&str>("general.architecture").unwrap(), "llama");
    assert_eq!(f.get::<&str>("general.name").unwrap(), "tessera-fixture");
    assert_eq!(f.get::<u32>("llama.block_count").unwrap(), 2);
    assert_eq!(f.get::<u32>("llama.context_length").unwrap(), 128);
    assert_eq!(
        f.get::<f32>("llama.attention.layer_norm_rms_epsilon")
            .unwrap(),
        1e-5
    );
    assert_eq!(f.get::<i8>("t.i8").unwrap(), -7);
    assert_eq!(f.get::<u16>("t.u16").unwrap(), 65000);
    assert_eq!(f.get::<i32>("t.i32").unwrap(), -123456);
    assert_eq!(f.get::<u64>("t.u64").unwrap(), 1 << 40);
    assert_eq!(f.get::<i64>("t.i64").unwrap(), -(1 << 40));
    assert_eq!(f.get::<f64>("t.f64").unwrap(), 0.125);
    assert!(f.get::<bool>("t.bool").unwrap());
    assert_eq!(
        f.get::<Vec<&str>>("t.tokens").unwrap(),
        ["<s>", "</s>", "héllo"]
    );
    assert_eq!(f.get::<Vec<i32>>("t.ints").unwrap(), [1, 2, 3]);

    let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["f32", "f16", "q8"]);
    let expect_f: Vec<f32> = (0..24).map(|i| ((i % 17) as f32 - 8.0) / 4.0).collect();
    let buffer = f.data_buffer(tessera_cpu::device().buffer_type());

    let t = f.tensor_info("f32").unwrap();
    assert_eq!(
        (t.dtype, t.ne.as_slice(), t.nbytes),
        (Some(DType::F32), &[6, 4][..], Some(96))
    );
    assert_eq!(
        f.tensor_in(&buffer, "f32").unwrap().read_f32().unwrap(),
        expect_f
    );

    let t = f.tensor_info("f16").unwrap();
    assert_eq!(
        (t.dtype, t.ne.as_slice(), t.nbytes),
        (Some(DType::F16), &[24][..], Some(48))
    );
    assert_eq!(
        f.tensor_in(&buffer, "f16").unwrap().read_f32().unwrap(),
        expect_f
    );

    let t = f.tensor_info("q8").unwrap();
    assert_eq!(
        (t.dtype, t.ne.as_slice(), t.nbytes),
        (Some(DType::Q8_0), &[32, 2][..], Some(68))
    );
    // gguf-py's Q8_0 bytes equal Tessera's quantization of the same values.
    let src: Vec<f32> = (0..64).map(|i| ((i % 23) as f32 - 11.0) / 8.0).collect();
    let mut ours = vec![0u8; 68];
    quant::from_f32(DType::Q8_0, &src, &mut ours).unwrap();
    assert_eq!(f.tensor_data("q8").unwrap(), &ours[..]);
    let back = f.tensor_in(&buffer, "q8").unwrap().read_f32().unwrap();
    for (a, b) in back.iter().zip(&src) {
        assert!((a - b).abs() < 0.02, "{a} vs {b}");
    }
}
