//! The uniform block every kernel reads: extents, byte strides and byte
//! offsets of the destination and up to four sources, plus a few op
//! parameters. One 256-byte block per dispatch, laid out exactly as the
//! `Params` struct of `shaders/common.wgsl`.

use bytemuck::{Pod, Zeroable};
use tessera::{Error, Layout, Result};

/// Size of one parameter block (also a valid uniform offset alignment on
/// every adapter: WebGPU caps `min_uniform_buffer_offset_alignment` at 256).
pub(crate) const PARAMS_SIZE: usize = 256;

/// The parameter block of one dispatch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct Params {
    pub ne_d: [u32; 4],
    pub nb_d: [u32; 4],
    /// Extents and strides of sources 0..=3 (`ne[i]`, `nb[i]`).
    pub src: [[[u32; 4]; 2]; 4],
    /// Byte offsets of dst, src0, src1, src2 in their bindings.
    pub off: [u32; 4],
    /// x: offset of src3; y: work items; z: 0 (the `nofma` key); w: kernel int.
    pub off2: [u32; 4],
    pub iu: [u32; 4],
    pub iu2: [u32; 4],
    pub fp: [f32; 4],
    pub fp2: [f32; 4],
}

const _: () = assert!(std::mem::size_of::<Params>() == PARAMS_SIZE);

/// `v` as u32, or an error naming `what` (shaders index with 32 bits).
pub(crate) fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        Error::Overflow(format!(
            "{what} = {v} does not fit the 32-bit indices of the wgpu kernels"
        ))
    })
}

/// Four extents or strides as u32 (see [`u32_of`]).
pub(crate) fn u32x4(v: [usize; 4], what: &str) -> Result<[u32; 4]> {
    Ok([
        u32_of(v[0], what)?,
        u32_of(v[1], what)?,
        u32_of(v[2], what)?,
        u32_of(v[3], what)?,
    ])
}

fn dims(l: &Layout) -> Result<([u32; 4], [u32; 4])> {
    let mut ne = [0u32; 4];
    let mut nb = [0u32; 4];
    for i in 0..4 {
        ne[i] = u32_of(l.ne[i], "an extent")?;
        nb[i] = u32_of(l.nb[i], "a stride")?;
    }
    Ok((ne, nb))
}

impl Params {
    /// A block for `dst` at byte `dst_off` and the sources given as
    /// `(layout, byte offset)`.
    pub(crate) fn new(dst: (&Layout, usize), srcs: &[(&Layout, usize)]) -> Result<Self> {
        let mut p = Params::default();
        let (ne, nb) = dims(dst.0)?;
        p.ne_d = ne;
        p.nb_d = nb;
        p.off[0] = u32_of(dst.1, "a tensor offset")?;
        for (i, (l, off)) in srcs.iter().enumerate().take(4) {
            let (ne, nb) = dims(l)?;
            p.src[i] = [ne, nb];
            let o = u32_of(*off, "a tensor offset")?;
            if i < 3 {
                p.off[i + 1] = o;
            } else {
                p.off2[0] = o;
            }
        }
        Ok(p)
    }

    /// Set the number of work items of an element kernel.
    pub(crate) fn items(mut self, n: usize) -> Result<Self> {
        self.off2[1] = u32_of(n, "the number of work items")?;
        Ok(self)
    }
}
