//! Property tests of everything a peer controls: any command byte with any
//! payload decodes to an error or to a request that re-encodes to the same
//! bytes; and valid requests with random bytes flipped, fed to a server
//! session, end in a reply or an error, never a panic, with the session
//! still serving afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::raw::f32v;
use proptest::prelude::*;
use tessera::Device;
use tessera_rpc::msg::Request;
use tessera_rpc::proto::FLAG_COMPUTE;
use tessera_rpc::session::Session;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_decode_or_fail_cleanly(cmd in 0u8..=255, payload in proptest::collection::vec(any::<u8>(), 0..1400)) {
        if let Ok(req) = Request::decode(cmd, &payload) {
            prop_assert_eq!(req.cmd() as u8, cmd);
            prop_assert_eq!(req.encode(), payload);
        }
    }
}

fn session() -> (Session, u64, u64) {
    let devs: Vec<Arc<dyn Device>> = vec![common::cpu()];
    let mut s = Session::new(Arc::new(devs), Arc::new(common::config()));
    let r = s
        .handle(Request::AllocBuffer {
            device: 0,
            size: 256,
        })
        .unwrap()
        .unwrap();
    let h = u64::from_le_bytes(r[..8].try_into().unwrap());
    let base = u64::from_le_bytes(
        s.handle(Request::BufferGetBase { buffer: h })
            .unwrap()
            .unwrap()[..8]
            .try_into()
            .unwrap(),
    );
    (s, h, base)
}

/// Valid requests of every tensor-carrying kind on a 256-byte buffer.
fn seeds(h: u64, base: u64) -> Vec<Request> {
    let x = f32v(1, 4, h, base);
    let y = f32v(2, 4, h, base + 16);
    let mut z = f32v(3, 4, h, base + 32);
    z.op = 29; // MUL_MAT of [4] x [4] -> [1]
    z.ne = [1, 1, 1, 1];
    z.nb = [4, 4, 4, 4];
    z.src[0] = 1;
    z.src[1] = 2;
    z.flags = FLAG_COMPUTE;
    let mut v = f32v(4, 2, h, base + 8);
    v.op = 37;
    v.src[0] = 1;
    v.view_src = 1;
    v.op_params[0] = 8;
    v.flags = FLAG_COMPUTE;
    let mut r = f32v(5, 2, h, base + 48);
    r.op = 25;
    r.src[0] = 4;
    r.op_params[0] = 1e-5f32.to_bits() as i32;
    r.flags = FLAG_COMPUTE;
    vec![
        Request::SetTensor {
            tensor: f32v(1, 8, h, base),
            cache_flag: 0,
            offset: 4,
            data: vec![0x3f; 16],
        },
        Request::GetTensor {
            tensor: f32v(1, 8, h, base),
            offset: 8,
            size: 8,
        },
        Request::CopyTensor {
            src: f32v(1, 4, h, base),
            dst: f32v(2, 4, h, base + 64),
        },
        Request::MemsetTensor {
            tensor: f32v(1, 8, h, base),
            offset: 0,
            size: 8,
            value: 1,
        },
        Request::GraphCompute {
            device: 0,
            nodes: vec![3, 4, 5],
            tensors: vec![x, y, z, v, r],
        },
        Request::GraphRecompute { device: 0 },
        Request::BufferClear {
            buffer: h,
            value: 0,
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn mutated_requests_never_panic_the_session(
        which in 0usize..7,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let (mut s, h, base) = session();
        let seeds = seeds(h, base);
        // The seed itself is valid (the graph computes before GRAPH_RECOMPUTE).
        if which == 5 {
            s.handle(seeds[4].clone()).unwrap();
        }
        let seed = &seeds[which];
        s.handle(seed.clone()).unwrap();
        let mut p = seed.encode();
        for (at, x) in flips {
            let n = p.len();
            p[at % n] ^= x | 1;
        }
        if let Ok(req) = Request::decode(seed.cmd() as u8, &p) {
            let _ = s.handle(req);
        }
        // The session (and its buffer) still work.
        let back = s.handle(Request::GetTensor { tensor: f32v(1, 4, h, base), offset: 0, size: 16 });
        prop_assert!(back.is_ok());
    }
}

/// One frame of the fuzz target `rpc_session` (`fuzz/`): `| cmd | len: u16
/// le | payload |`.
fn fuzz_frame(req: &Request) -> Vec<u8> {
    let p = req.encode();
    let mut f = vec![req.cmd() as u8];
    f.extend_from_slice(&u16::try_from(p.len()).unwrap().to_le_bytes());
    f.extend_from_slice(&p);
    f
}

/// Regenerates the fuzzer's seeds in `fuzz/seeds/`: each valid request of
/// [`seeds`] as one frame (on the target's first buffer: handle 1 at its
/// fake base), and all of them in order in one file.
#[test]
#[ignore = "writes fuzz/seeds"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    std::fs::create_dir_all(&dir).unwrap();
    let h = 1;
    let base = tessera_rpc::rebuild::fake_base(h);
    let all = seeds(h, base);
    let mut every = Vec::new();
    for (i, r) in all.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}-{:?}", r.cmd())), fuzz_frame(r)).unwrap();
        every.extend(fuzz_frame(r));
    }
    std::fs::write(dir.join("seed-all"), every).unwrap();
}
