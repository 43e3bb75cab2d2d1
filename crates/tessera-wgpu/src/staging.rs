//! Moving bytes in and out of device buffers: writes, reads through staging
//! buffers, fills and device-to-device copies, for any offset and size.
//!
//! wgpu copies need 4-byte-aligned offsets and sizes. The aligned middle of
//! a range goes through `Queue::write_buffer` / copy commands; the partial
//! words at the edges are merged on the GPU by the `transfer` kernel (a
//! (word, mask, value) patch, a masked fill or a masked copy), so no
//! operation needs to read the buffer back first and every one is ordered on
//! the queue like any other work: a write lands after everything submitted
//! before it and before everything submitted after it.
//!
//! Reads copy the covering aligned range into a `MAP_READ` staging buffer
//! and map it once the submission completes; [`read_async`] returns that as
//! a deferred result.

use std::sync::{Arc, Mutex};

use tessera::buffer::try_zeroed_vec;
use tessera::{DType, Error, Result};

use crate::batch::{Batch, WG};
use crate::device::Core;
use crate::params::{Params, u32_of};
use crate::pipelines::{Kernel, KernelKey};
use crate::wgsl::Binding;

const TRANSFER: &str = include_str!("shaders/transfer.wgsl");

const MODE_FILL: u32 = 0;
const MODE_COPY: u32 = 1;
const MODE_PATCH: u32 = 2;

fn transfer_kernel(core: &Core) -> Result<Arc<Kernel>> {
    let key = KernelKey {
        name: "transfer",
        body: TRANSFER,
        bindings: vec![
            Binding::plain("d", DType::I32),
            Binding::plain("s0", DType::I32),
        ],
    };
    core.pipelines.kernel(&core.device, &core.errors, &key)
}

fn words(lo: usize, hi: usize) -> (usize, usize) {
    (lo / 4, hi.div_ceil(4))
}

/// Record a masked fill of bytes `lo..hi` of `buf` with `value`.
pub(crate) fn record_fill(
    batch: &mut Batch<'_>,
    core: &Core,
    buf: &wgpu::Buffer,
    lo: usize,
    hi: usize,
    value: u8,
) -> Result<()> {
    if lo >= hi {
        return Ok(());
    }
    let (w0, w1) = words(lo, hi);
    let mut p = Params::default().items(w1 - w0)?;
    p.iu = [
        u32_of(w0, "a word index")?,
        u32_of(lo, "an offset")?,
        u32_of(hi, "an offset")?,
        MODE_FILL,
    ];
    p.iu2[1] = u32::from_ne_bytes([value; 4]);
    batch.dispatch(
        transfer_kernel(core)?,
        vec![buf.clone(), buf.clone()],
        p,
        (w1 - w0).div_ceil(WG),
    )
}

/// Record a copy of `len` bytes from `src` at `src_off` to `dst` at `dst_off`
/// (the ranges must not overlap when the buffers are the same).
pub(crate) fn record_copy(
    batch: &mut Batch<'_>,
    core: &Core,
    src: &wgpu::Buffer,
    src_off: usize,
    dst: &wgpu::Buffer,
    dst_off: usize,
    len: usize,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if src != dst && src_off.is_multiple_of(4) && dst_off.is_multiple_of(4) && len.is_multiple_of(4)
    {
        batch.copy(src, src_off, dst, dst_off, len);
        return Ok(());
    }
    let hi = dst_off + len;
    let (w0, w1) = words(dst_off, hi);
    let mut p = Params::default().items(w1 - w0)?;
    p.iu = [
        u32_of(w0, "a word index")?,
        u32_of(dst_off, "an offset")?,
        u32_of(hi, "an offset")?,
        MODE_COPY,
    ];
    p.iu2[0] = u32_of(src_off, "an offset")?;
    batch.dispatch(
        transfer_kernel(core)?,
        vec![dst.clone(), src.clone()],
        p,
        (w1 - w0).div_ceil(WG),
    )
}

/// Queue a write of `data` at byte `offset` of `buf`.
pub(crate) fn write(core: &Core, buf: &wgpu::Buffer, offset: usize, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let end = offset + data.len();
    let a0 = offset.next_multiple_of(4);
    let a1 = end / 4 * 4;
    if a0 < a1 {
        let middle = &data[a0 - offset..a1 - offset];
        core.scoped("writing a buffer", data.len(), || {
            core.queue.write_buffer(buf, a0 as u64, middle)
        })?;
    }
    // Partial words at the edges: (word, mask, value) patches.
    let mut patches: Vec<u32> = Vec::new();
    let mut patch = |w: usize| -> Result<()> {
        let (mut mask, mut value) = (0u32, 0u32);
        for b in (w * 4).max(offset)..(w * 4 + 4).min(end) {
            let sh = (b % 4) * 8;
            mask |= 0xff << sh;
            value |= u32::from(data[b - offset]) << sh;
        }
        patches.extend([u32_of(w, "a word index")?, mask, value]);
        Ok(())
    };
    if !offset.is_multiple_of(4) || data.len() < 4 {
        patch(offset / 4)?;
    }
    if !end.is_multiple_of(4) && end / 4 != offset / 4 {
        patch(end / 4)?;
    }
    if patches.is_empty() {
        return Ok(());
    }
    let n = patches.len() / 3;
    let list = core.scoped("writing a buffer", patches.len() * 4, || {
        let list = core.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera-patches"),
            size: (patches.len() * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        core.queue
            .write_buffer(&list, 0, bytemuck::cast_slice(&patches));
        list
    })?;
    let mut p = Params::default().items(n)?;
    p.iu[3] = MODE_PATCH;
    let mut batch = Batch::new(core);
    batch.dispatch(transfer_kernel(core)?, vec![buf.clone(), list], p, 1)?;
    batch.submit("writing a buffer")?;
    Ok(())
}

/// Queue a fill of `len` bytes at `offset` of `buf` with `value`.
pub(crate) fn fill(
    core: &Core,
    buf: &wgpu::Buffer,
    offset: usize,
    len: usize,
    value: u8,
) -> Result<()> {
    let mut batch = Batch::new(core);
    record_fill(&mut batch, core, buf, offset, offset + len, value)?;
    batch.submit("filling a buffer")?;
    Ok(())
}

/// Mappable staging buffers kept for the next reads (a decoding step reads
/// its logits every token: creating and destroying a mappable buffer each
/// time is a device allocation each time). Reads of up to
/// [`StagingPool::MAX_CLASS`] bytes stage in buffers of a power of two
/// from 4 KiB, kept for the next reads (at most [`StagingPool::KEEP`] of
/// each size and [`StagingPool::MAX_BYTES`] in all); larger reads in a
/// buffer of their own size, never kept.
#[derive(Debug, Default)]
pub(crate) struct StagingPool {
    free: Mutex<Vec<wgpu::Buffer>>,
}

impl StagingPool {
    const KEEP: usize = 2;
    const MAX_BYTES: u64 = 16 << 20;
    const MAX_CLASS: usize = 4 << 20;

    /// The size a read of `bytes` (a multiple of 4) stages in.
    fn class(bytes: usize) -> usize {
        let pooled = bytes.max(4096).next_power_of_two();
        if pooled <= Self::MAX_CLASS {
            pooled
        } else {
            bytes
        }
    }

    /// A kept buffer of size class `size`, if any.
    fn take(&self, size: usize) -> Option<wgpu::Buffer> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let i = free.iter().position(|b| b.size() == size as u64)?;
        Some(free.swap_remove(i))
    }

    /// Keep `buffer` (unmapped) for a later read, if there is room.
    fn give(&self, buffer: wgpu::Buffer) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let same = free.iter().filter(|b| b.size() == buffer.size()).count();
        let total: u64 = free.iter().map(wgpu::Buffer::size).sum();
        let size = buffer.size();
        let class =
            usize::try_from(size).is_ok_and(|b| b <= Self::MAX_CLASS && b.is_power_of_two());
        if class && same < Self::KEEP && total + size <= Self::MAX_BYTES {
            free.push(buffer);
        }
    }
}

/// Bytes of a read that become available once its submission completes.
pub(crate) struct PendingBytes {
    core: Arc<Core>,
    staging: Option<wgpu::Buffer>,
    index: Option<wgpu::SubmissionIndex>,
    mapped: Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>>,
    skip: usize,
    len: usize,
    /// Bytes of the staging buffer mapped (it may be larger).
    mapped_len: usize,
}

impl PendingBytes {
    /// Block until the bytes are available and copy them into `out`.
    pub(crate) fn wait_into(self, out: &mut [u8]) -> Result<()> {
        let Some(staging) = self.staging.as_ref() else {
            return Ok(());
        };
        self.core.wait(self.index.clone())?;
        match self.map_status()? {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return Err(Error::device(
                    &self.core.name,
                    format!("mapping a staging buffer: {e}"),
                ));
            }
            None => {
                return Err(Error::device(
                    &self.core.name,
                    "a staging buffer was not mapped after its submission completed",
                ));
            }
        }
        {
            let view = staging
                .get_mapped_range(..self.mapped_len as u64)
                .map_err(|e| {
                    Error::device(&self.core.name, format!("reading a staging buffer: {e}"))
                })?;
            let src = view.get(self.skip..self.skip + self.len).ok_or_else(|| {
                Error::device(&self.core.name, "staging buffer shorter than the read")
            })?;
            out.get_mut(..self.len)
                .ok_or_else(|| Error::OutOfBounds("read destination shorter than the read".into()))?
                .copy_from_slice(src);
        }
        staging.unmap();
        self.core.staging.give(staging.clone());
        Ok(())
    }

    /// The mapping's outcome once its submission has completed. wgpu runs
    /// map callbacks on whichever thread polls the device: when another
    /// stream's poll collected this one, the submission can be complete here
    /// while that thread has yet to run the callback, so a missing outcome
    /// is polled for (briefly) instead of being taken for a failure.
    fn map_status(&self) -> Result<Option<std::result::Result<(), wgpu::BufferAsyncError>>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let status = self.mapped.lock().unwrap_or_else(|p| p.into_inner()).take();
            if status.is_some() || std::time::Instant::now() >= deadline {
                return Ok(status);
            }
            self.core.poll_now()?;
            std::thread::yield_now();
        }
    }

    /// Block until the bytes are available and return them.
    pub(crate) fn wait(self) -> Result<Vec<u8>> {
        let mut out = try_zeroed_vec(self.len, "a device read")?;
        self.wait_into(&mut out)?;
        Ok(out)
    }
}

/// Queue a read of `len` bytes at `offset` of `buf` (`None`: nothing to
/// read). The covering aligned range lies inside the wgpu buffer, whose size
/// is a multiple of 4.
pub(crate) fn read_async(
    core: &Arc<Core>,
    buf: Option<&wgpu::Buffer>,
    offset: usize,
    len: usize,
) -> Result<PendingBytes> {
    let lo = offset / 4 * 4;
    let hi = (offset + len).next_multiple_of(4);
    let mapped = Arc::new(Mutex::new(None));
    let Some(buf) = buf.filter(|_| len > 0) else {
        return Ok(PendingBytes {
            core: core.clone(),
            staging: None,
            index: None,
            mapped,
            skip: 0,
            len: 0,
            mapped_len: 0,
        });
    };
    let size = StagingPool::class(hi - lo);
    let staging = match core.staging.take(size) {
        Some(b) => b,
        None => core.scoped("reading a buffer", size, || {
            core.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera-staging"),
                size: size as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?,
    };
    let mut batch = Batch::new(core);
    batch.copy(buf, lo, &staging, 0, hi - lo);
    let index = batch.submit("reading a buffer")?;
    let slot = mapped.clone();
    core.scoped("mapping a staging buffer", 0, || {
        staging
            .slice(..(hi - lo) as u64)
            .map_async(wgpu::MapMode::Read, move |r| {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            })
    })?;
    Ok(PendingBytes {
        core: core.clone(),
        staging: Some(staging),
        index,
        mapped,
        skip: offset - lo,
        len,
        mapped_len: hi - lo,
    })
}
