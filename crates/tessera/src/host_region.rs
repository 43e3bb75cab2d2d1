//! Host memory a buffer vouches for: the one place where safe code meets raw
//! memory.
//!
//! A device that reads host memory directly (the CPU device, the host side of
//! a copy) needs the address of a buffer's bytes. Handing out a raw pointer
//! from a safe trait method would let any safe `impl Buffer` make up an
//! address and have Tessera dereference it. Instead, a buffer hands out a
//! [`HostRegion`], which only `unsafe` code can create ([`HostRegion::new`]):
//! whoever writes that `unsafe` block promises what the region's users rely
//! on, in writing (the `# Safety` section below). Safe buffer implementations
//! can still forward a region they got from another buffer they own.
//!
//! # Why a lock
//!
//! Two threads of safe code may touch the same bytes at once: a compute on the
//! CPU writing a tensor while another thread reads it back, or two streams
//! computing into one buffer. With plain loads and stores that is a data race,
//! which Rust counts as undefined behaviour, not as "unspecified contents".
//! So every region carries a [`HostAccessLock`] (a reader-writer lock): every
//! access to the bytes, by the buffer's own `read`/`write`/`fill` and by
//! Tessera's users of the region, happens while holding it, shared for reads
//! and exclusive for writes. A CPU compute holds the locks of every buffer it
//! touches for its whole duration (exclusive where it writes results), so a
//! concurrent read simply waits for the compute to finish. Several locks are
//! always taken in address order ([`lock_all`]), so two threads can never wait
//! on each other in a cycle.
//!
//! Copies go through raw pointers ([`std::ptr::copy`]) under the lock; no
//! `&[u8]` or `&mut [u8]` is ever formed over a buffer's memory outside a held
//! guard.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{Error, Result};

/// The reader-writer lock that orders every access to one region of host
/// memory (see the module docs).
#[derive(Debug, Default)]
pub struct HostAccessLock(RwLock<()>);

impl HostAccessLock {
    /// A new, unlocked lock.
    pub const fn new() -> Self {
        HostAccessLock(RwLock::new(()))
    }

    fn shared(&self) -> RwLockReadGuard<'_, ()> {
        // The lock guards no data of its own: a panic while it was held
        // leaves nothing inconsistent, so poisoning is ignored.
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    fn addr(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

/// Host memory of `len` bytes that a buffer vouches for, valid for `'a`.
///
/// Obtained from [`crate::Buffer::host_region`]. Its bytes are reached only
/// through its methods, which check bounds and take the region's lock, or,
/// inside Tessera's devices, through raw pointers while a guard from
/// [`HostRegion::lock`] / [`lock_all`] is held.
///
/// Safe code cannot make one up: the constructor is `unsafe`,
///
/// ```compile_fail
/// use std::ptr::NonNull;
/// let lock = tessera::HostAccessLock::new();
/// // error[E0133]: call to unsafe function requires an unsafe block
/// let forged = tessera::HostRegion::new(NonNull::dangling(), 1 << 30, true, &lock);
/// ```
///
/// nor keep a region past the life of the buffer that vouched for it:
///
/// ```compile_fail
/// fn dangling(buft: &dyn tessera::BufferType) -> Option<tessera::HostRegion<'static>> {
///     let buffer = buft.alloc_buffer(64).ok()?;
///     // error[E0515]: returns a value referencing the local `buffer`
///     buffer.host_region()
/// }
/// ```
///
/// while forwarding the region of a buffer one owns is fine:
///
/// ```
/// # use std::sync::Arc;
/// # use tessera::{Buffer, HostRegion};
/// struct Wrapper(Arc<dyn Buffer>);
/// impl Wrapper {
///     fn host_region(&self) -> Option<HostRegion<'_>> {
///         self.0.host_region()
///     }
/// }
/// let buft = tessera::HostBufferType::new("host", usize::MAX, None);
/// let w = Wrapper(tessera::BufferType::alloc_buffer(buft.as_ref(), 64)?);
/// assert_eq!(w.host_region().map(|r| r.len()), Some(64));
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct HostRegion<'a> {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    lock: &'a HostAccessLock,
    _bytes: PhantomData<&'a [u8]>,
}

// SAFETY: a region is an address, a length and a reference to a `Sync` lock;
// every access it allows is ordered by that lock (see `HostRegion::new`), so
// sharing or sending it between threads cannot cause a data race.
unsafe impl Send for HostRegion<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for HostRegion<'_> {}

impl fmt::Debug for HostRegion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl<'a> HostRegion<'a> {
    /// A region of `len` bytes at `ptr`, ordered by `lock`.
    ///
    /// # Safety
    ///
    /// The caller promises, for the whole lifetime `'a`:
    ///
    /// 1. `ptr` is valid for reads of `len` initialised bytes, and for writes
    ///    of them too if `writable`; the memory is neither freed nor moved.
    /// 2. Every access to these bytes that does not go through a
    ///    `HostRegion` made with the same `lock` happens while holding
    ///    `lock` — shared ([`HostAccessLock`]'s read side) for reads,
    ///    exclusive for writes — so that accesses ordered by the lock never
    ///    race. Memory nothing ever writes (e.g. a read-only file mapping
    ///    given with `writable == false`) needs no further care.
    /// 3. If `writable` is false, nothing writes these bytes during `'a`.
    pub unsafe fn new(
        ptr: NonNull<u8>,
        len: usize,
        writable: bool,
        lock: &'a HostAccessLock,
    ) -> Self {
        HostRegion {
            ptr,
            len,
            writable,
            lock,
            _bytes: PhantomData,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The start address. Dereferencing it is only sound while a guard of
    /// this region is held and within `len` bytes (see [`HostRegion::new`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Take the region's lock: exclusive if `write`, else shared. Writing
    /// through a read-only region is refused.
    pub fn lock(&self, write: bool) -> Result<HostGuard<'a>> {
        if write {
            if !self.writable {
                return Err(read_only());
            }
            Ok(HostGuard::Exclusive(self.lock.exclusive()))
        } else {
            Ok(HostGuard::Shared(self.lock.shared()))
        }
    }

    /// Copy `out.len()` bytes at `offset` into `out` (bounds-checked, under
    /// the shared lock).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let _guard = self.lock(false)?;
        // SAFETY: the range lies inside the region (checked); the shared lock
        // orders this read after every write (contract item 2 of `new`); `out`
        // is a distinct `&mut` borrow, so it cannot overlap memory another
        // thread may write under the lock.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copy `data` to `offset` (bounds-checked, under the exclusive lock).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let _guard = self.lock(true)?;
        // SAFETY: the range lies inside the writable region (checked, and
        // `lock(true)` refused a read-only one); the exclusive lock excludes
        // every other access. `copy` tolerates `data` overlapping the region.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Set `len` bytes at `offset` to `value` (bounds-checked, exclusive lock).
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let _guard = self.lock(true)?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), value, len) };
        Ok(())
    }

    /// `Err(OutOfBounds)` unless `offset + len <= self.len()`.
    pub fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} do not fit in a host region of {} bytes",
                self.len
            ))),
        }
    }

    fn same_lock(&self, other: &HostRegion<'_>) -> bool {
        std::ptr::eq(self.lock, other.lock)
    }
}

/// A held lock of a [`HostRegion`]: while it lives, raw accesses to the
/// region's bytes are ordered with every other access (shared: reads only).
#[derive(Debug)]
pub enum HostGuard<'a> {
    /// Reads only.
    Shared(RwLockReadGuard<'a, ()>),
    /// Reads and writes.
    Exclusive(RwLockWriteGuard<'a, ()>),
}

/// Lock several regions at once, exclusive where `write` is true, in address
/// order of their locks (so that no two threads can deadlock), each lock
/// once (a region both read and written is locked exclusively).
pub fn lock_all<'a>(regions: &[(HostRegion<'a>, bool)]) -> Result<Vec<HostGuard<'a>>> {
    let mut order: Vec<(usize, &'a HostAccessLock, bool, bool)> = regions
        .iter()
        .map(|(r, w)| (r.lock.addr(), r.lock, *w, r.writable))
        .collect();
    order.sort_by_key(|o| o.0);
    let mut merged: Vec<(usize, &'a HostAccessLock, bool, bool)> = Vec::with_capacity(order.len());
    for o in order {
        match merged.last_mut() {
            Some(last) if last.0 == o.0 => {
                last.2 |= o.2;
                last.3 &= o.3;
            }
            _ => merged.push(o),
        }
    }
    let mut guards = Vec::with_capacity(merged.len());
    for (_, lock, write, writable) in merged {
        if write && !writable {
            return Err(read_only());
        }
        guards.push(if write {
            HostGuard::Exclusive(lock.exclusive())
        } else {
            HostGuard::Shared(lock.shared())
        });
    }
    Ok(guards)
}

/// Copy `len` bytes between two host regions (possibly of the same buffer,
/// possibly overlapping), bounds-checked, with both locks held.
pub fn copy_regions(
    src: &HostRegion<'_>,
    src_offset: usize,
    dst: &HostRegion<'_>,
    dst_offset: usize,
    len: usize,
) -> Result<()> {
    src.check(src_offset, len)?;
    dst.check(dst_offset, len)?;
    if len == 0 {
        return Ok(());
    }
    if !dst.writable {
        return Err(read_only());
    }
    let _guards = if src.same_lock(dst) {
        vec![dst.lock(true)?]
    } else {
        // Address order, as `lock_all`, without tying the two lifetimes.
        let (s, d) = (src.lock.addr(), dst.lock.addr());
        if s < d {
            let g1 = src.lock(false)?;
            vec![g1, dst.lock(true)?]
        } else {
            let g1 = dst.lock(true)?;
            vec![g1, src.lock(false)?]
        }
    };
    // SAFETY: both ranges lie inside their regions (checked), the destination
    // is writable, and the locks held order this copy with every other
    // access; `copy` handles overlap when both are the same memory.
    unsafe {
        std::ptr::copy(
            src.ptr.as_ptr().add(src_offset),
            dst.ptr.as_ptr().add(dst_offset),
            len,
        )
    };
    Ok(())
}

fn read_only() -> Error {
    Error::unsupported("host memory", "writes: the region is read-only")
}
