//! The shaders' correctly rounded division and square root (`div_rn`,
//! `sqrt_rn` in `common.wgsl`) on the adapter at hand: started from the
//! host's results moved by up to three ulp (a GPU's division or square root
//! may be that far off), the correction must land on the host's IEEE result,
//! bit for bit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tessera::{Buffer, DType, Device};

use crate::batch::Batch;
use crate::params::Params;
use crate::pipelines::KernelKey;
use crate::wgsl::Binding;

/// d[i] = div_fix(a, b, q) and d[n + i] = sqrt_fix(|a|, r) for
/// (a, b, q, r) = s0[4i..4i+4]: q and r are the host's exact results moved
/// by a few ulp.
const BODY: &str = "
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let n = P.iu.x;
    if (i >= n) {
        return;
    }
    let a = s0_ld(16u * i);
    let b = s0_ld(16u * i + 4u);
    d_st(4u * i, div_fix(a, b, s0_ld(16u * i + 8u)));
    d_st(4u * (n + i), sqrt_fix(abs(a), s0_ld(16u * i + 12u)));
}
";

fn nudge(v: f32, k: i32) -> f32 {
    f32::from_bits(v.to_bits().wrapping_add(k as u32))
}

#[test]
fn division_and_square_root_round_like_the_host() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    // Operands like the quantizers': scales, sums and ranges over many
    // magnitudes, with a deterministic generator.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let n = 4096usize;
    let mut input = Vec::with_capacity(16 * n);
    let mut cases = Vec::with_capacity(n);
    for i in 0..n {
        let r = next();
        let mant = |bits: u64| 1.0 + (bits & 0x7f_ffff) as f32 / 8_388_608.0;
        let a = mant(r) * 2f32.powi(((r >> 24) % 40) as i32 - 20);
        let b = mant(r >> 30) * 2f32.powi(((r >> 54) % 20) as i32 - 10);
        let a = if r & (1 << 62) != 0 { -a } else { a };
        let b = if r & (1 << 63) != 0 { -b } else { b };
        let k = (i % 7) as i32 - 3;
        input.extend_from_slice(&a.to_le_bytes());
        input.extend_from_slice(&b.to_le_bytes());
        input.extend_from_slice(&nudge(a / b, k).to_le_bytes());
        input.extend_from_slice(&nudge(a.abs().sqrt(), k).to_le_bytes());
        cases.push((a, b, k));
    }
    let bt = dev.buffer_type();
    let src = bt.alloc_buffer(input.len()).unwrap();
    src.write(0, &input).unwrap();
    let dst = bt.alloc_buffer(8 * n).unwrap();
    let raw = |b: &dyn Buffer| {
        b.as_any()
            .downcast_ref::<crate::WgpuBuffer>()
            .and_then(|w| w.raw().cloned())
            .unwrap()
    };
    let core = dev.core();
    let key = KernelKey {
        name: "rounding_test",
        body: BODY,
        bindings: vec![
            Binding::plain("d", DType::F32),
            Binding::plain("s0", DType::F32),
        ],
    };
    let kernel = core
        .pipelines
        .kernel(&core.device, &core.errors, &key)
        .unwrap();
    let mut batch = Batch::new(core);
    let mut p = Params::default();
    p.iu[0] = n as u32;
    batch
        .dispatch(
            kernel,
            vec![raw(dst.as_ref()), raw(src.as_ref())],
            p,
            n.div_ceil(64),
        )
        .unwrap();
    let index = batch.submit("rounding test").unwrap();
    core.wait(index).unwrap();
    let mut out = vec![0u8; 8 * n];
    dst.read(0, &mut out).unwrap();
    let got = |j: usize| f32::from_le_bytes(out[4 * j..4 * j + 4].try_into().unwrap());
    for (i, &(a, b, k)) in cases.iter().enumerate() {
        let q = a / b;
        assert_eq!(
            got(i).to_bits(),
            q.to_bits(),
            "{a:e} / {b:e} from {:e}: got {:e}, IEEE {q:e}",
            nudge(q, k),
            got(i)
        );
        let s = a.abs().sqrt();
        assert_eq!(
            got(n + i).to_bits(),
            s.to_bits(),
            "sqrt({:e}) from {:e}: got {:e}, IEEE {s:e}",
            a.abs(),
            nudge(s, k),
            got(n + i)
        );
    }
}
