//! Panels of the packed GEMM's f32 path ([`super::gemm`]): the shapes the
//! micro-kernels read, the code that fills them, and the pieces both paths
//! share (the edge-tile store, the next-slice prefetcher).
//!
//! - **A panels** (weights): `MR` rows of the weight matrix over `kc` values
//!   of `k`, interleaved `ap[l * MR + r] = a[r][l]` so a micro-kernel loads
//!   one vector of `MR` rows per step of `l`. Packing *dequantizes*: each
//!   row's segment is first converted to f32 (F16, BF16, Q8_0, Q4_0, Q4_K,
//!   Q6_K; F32 rows are read in place), then `MR` rows are transposed into
//!   the panel. The conversion happens once per weight value and `kc` block,
//!   and is shared by every column of the product.
//! - **B panels** (activations): `NR` columns of `b` (its rows) over all `k`,
//!   interleaved `bp[l * NR + c] = b[c][l]`, read from any strides (permuted,
//!   transposed or broadcast `b`), columns past the end filled with zeros.
//!
//! The micro-kernel contract is [`Tile`]; the per-ISA kernels, transposers
//! and dequantizers live in `gemm_portable`, `gemm_avx2` and `gemm_avx512`
//! (the integer path's panels are in `gemm_q8`).

use tessera::DType;

/// One call of a micro-kernel: `C[0..mr, 0..nr] (+)= A(MR x kc) B(kc x NR)`.
#[derive(Debug)]
pub(crate) struct Tile<'a> {
    /// Steps of `l` (may be 0: the tile is then zeros, or unchanged when
    /// accumulating).
    pub kc: usize,
    /// The A panel: `kc * MR` f32, 64-byte aligned.
    pub a: *const f32,
    /// The B panel: `kc * NR` f32, 4-byte aligned.
    pub b: *const f32,
    /// Output columns (`nr <= NR` of them): column `j` of the tile is
    /// `c[j] + row .. c[j] + row + mr`.
    pub c: &'a [*mut f32],
    /// First output row of the tile inside each column.
    pub row: usize,
    /// Valid rows (`1..=MR`); the panel's other rows are zeros.
    pub mr: usize,
    /// Add to the output instead of overwriting it.
    pub accumulate: bool,
}

/// A micro-kernel for one (MR, NR) geometry.
///
/// # Safety
/// `a` and `b` hold full panels of `t.kc` steps, every `c[j] + row .. + mr`
/// is valid, writable f32 memory no other thread touches, and the CPU has
/// the kernel's features.
pub(crate) type KernelFn = unsafe fn(t: &Tile);

/// Interleave `rows.len()` (= MR) rows into a panel:
/// `out[l * MR + r] = rows[r][l]` for `l < kc`.
///
/// # Safety
/// Every `rows[r]` points at `kc` readable f32, `out` at `kc * MR` writable
/// f32 (64-byte aligned), and the CPU has the transposer's features.
pub(crate) type TransposeFn = unsafe fn(rows: &[*const f32], kc: usize, out: *mut f32);

/// Convert and interleave `rows.len()` (= MR) rows of a 2-byte weight type
/// (F16, BF16) into a panel in one pass: `out[l * MR + r] = f32(rows[r][l])`
/// for `l < kc`.
///
/// # Safety
/// Every `rows[r]` points at `kc` readable values (`2 * kc` bytes), `out` at
/// `kc * MR` writable f32 (64-byte aligned), and the CPU has the
/// function's features.
pub(crate) type HalfTransposeFn = unsafe fn(rows: &[*const u8], kc: usize, out: *mut f32);

/// Convert `nblk` whole blocks of a weight row, starting at block `blk0`,
/// to `nblk * block_size` f32 values at `out`.
///
/// # Safety
/// The blocks lie in readable memory at `src + blk0 * type_size`, `out`
/// holds the values, and the CPU has the dequantizer's features.
pub(crate) type DequantFn = unsafe fn(src: *const u8, blk0: usize, nblk: usize, out: *mut f32);

/// Everything one instruction set brings to the GEMM.
#[derive(Debug)]
pub(crate) struct Kernels {
    /// Rows per A panel (a multiple of 8).
    pub mr: usize,
    /// Columns per B panel: the wide kernel's and the narrow one's (chosen
    /// per product to waste the least padding).
    pub nr: [usize; 2],
    /// The micro-kernels for `nr[0]` and `nr[1]`.
    pub kernel: [KernelFn; 2],
    /// The A-panel transposer for `mr` rows.
    pub transpose: TransposeFn,
    /// Row converter per weight type (`None` for F32: read in place).
    pub dequant: fn(DType) -> Option<DequantFn>,
    /// Converter-transposer per 2-byte weight type, where there is one: the
    /// panel is written without a pass through `PackBufs::tmp`.
    pub half_transpose: fn(DType) -> Option<HalfTransposeFn>,
}

/// Pack `nr` columns (`cols`, each a pointer to element 0 of a `b` row whose
/// elements are `nb0` bytes apart; fewer than `nr` pointers leave the rest
/// zero) over `l` in `l0..l1` into a B panel of `k` steps at `out`
/// (`out[l * nr + c]`).
///
/// # Safety
/// Each column holds `l1` f32 values at stride `nb0` (4-byte aligned) and
/// `out` holds `l1 * nr` writable f32 that no other thread touches.
pub(crate) unsafe fn pack_b(
    cols: &[*const u8],
    nb0: usize,
    nr: usize,
    l0: usize,
    l1: usize,
    out: *mut f32,
) {
    if nb0 == 4 {
        #[cfg(target_arch = "x86_64")]
        if crate::isa::Isa::Avx2.available() && cols.len() <= nr && nr <= NR_PACK_MAX {
            let mut rows = [std::ptr::null::<f32>(); NR_PACK_MAX];
            for (r, &c) in rows.iter_mut().zip(cols) {
                *r = c.cast();
            }
            // SAFETY: the columns hold l1 f32 each, `out` l1 * nr (this
            // function's contract); AVX2 present (checked).
            unsafe {
                super::gemm_avx2::imp::pack_b_rows(&rows[..cols.len()], nr, l0, l1, out);
            }
            return;
        }
        // Contiguous rows, no AVX2: element-wise reads vectorise poorly,
        // but this is a small share of the work.
        for l in l0..l1 {
            for c in 0..nr {
                let v = match cols.get(c) {
                    // SAFETY: l < l1 values of column c (caller contract).
                    Some(&p) => unsafe { *p.cast::<f32>().add(l) },
                    None => 0.0,
                };
                // SAFETY: l * nr + c < l1 * nr, inside `out`.
                unsafe { *out.add(l * nr + c) = v };
            }
        }
        return;
    }
    for l in l0..l1 {
        for c in 0..nr {
            let v = match cols.get(c) {
                // SAFETY: element l < l1 of column c at stride nb0.
                Some(&p) => unsafe { *p.add(l * nb0).cast::<f32>() },
                None => 0.0,
            };
            // SAFETY: as above.
            unsafe { *out.add(l * nr + c) = v };
        }
    }
}

/// Most columns of a B panel the vector packer takes.
const NR_PACK_MAX: usize = 16;

/// Where the rows of one A panel come from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PanelSrc {
    /// Row 0 of the panel in the weight matrix.
    pub row0: *const u8,
    /// Bytes between weight rows.
    pub nb1: usize,
    /// Valid rows (`1..=MR`).
    pub rows: usize,
    /// Weight type.
    pub dtype: DType,
}

/// Per-thread buffers of the A packing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackBufs {
    /// `MR * KC` f32 for dequantized rows (row stride `kc_max`).
    pub tmp: *mut f32,
    /// Row stride of `tmp`.
    pub kc_max: usize,
    /// `kc_max` zeros (stand-in rows below the matrix).
    pub zeros: *const f32,
}

/// Pack the A panel of `src`'s rows over `l` in `l0..l0 + kc` into `out`
/// (`kc * MR` f32): 2-byte types in one pass where `ks` has a
/// `half_transpose`, other types dequantized through `bufs.tmp` and then
/// interleaved, F32 interleaved in place.
///
/// # Safety
/// `src` describes readable weight rows that hold `l0 + kc` values (whole
/// blocks: `l0` and `kc` are multiples of the block size), `bufs` holds
/// `MR * kc_max` + `kc_max` f32 with `kc <= kc_max`, `out` is 64-byte
/// aligned and holds `kc * MR` f32, and the CPU has the features of `ks`.
pub(crate) unsafe fn pack_a(
    ks: &Kernels,
    src: &PanelSrc,
    l0: usize,
    kc: usize,
    out: *mut f32,
    bufs: &PackBufs,
) {
    let mr = ks.mr.min(MR_MAX);
    let bs = src.dtype.block_size().max(1);
    let ts = src.dtype.type_size();
    if let Some(f) = (ks.half_transpose)(src.dtype) {
        // Rows past the matrix read the zeros (kc_max f32: at least 2 * kc
        // zero bytes, and zero bits are 0.0 in both 2-byte types).
        let mut rows = [bufs.zeros.cast::<u8>(); MR_MAX];
        for (r, row) in rows.iter_mut().enumerate().take(src.rows.min(mr)) {
            // SAFETY: r < rows valid rows, which hold l0 + kc values.
            *row = unsafe { src.row0.add(r * src.nb1 + l0 * ts) };
        }
        // SAFETY: each of the mr rows holds kc readable values; `out` holds
        // kc * mr f32; the CPU has the features of `ks`.
        unsafe { f(&rows[..mr], kc, out) };
        return;
    }
    let mut rows = [bufs.zeros; MR_MAX];
    let dequant = (ks.dequant)(src.dtype);
    for (r, row) in rows.iter_mut().enumerate().take(src.rows.min(mr)) {
        // SAFETY: r < rows valid rows of the matrix (caller contract).
        let w = unsafe { src.row0.add(r * src.nb1) };
        match dequant {
            // SAFETY: F32 rows hold l0 + kc values in place.
            None => *row = unsafe { w.add(l0 * ts) }.cast::<f32>(),
            Some(f) => {
                // SAFETY: row r of tmp holds kc_max >= kc values; the
                // blocks l0 / bs .. (l0 + kc) / bs lie in the row.
                unsafe {
                    let t = bufs.tmp.add(r * bufs.kc_max);
                    f(w, l0 / bs, kc / bs, t);
                    *row = t;
                }
            }
        }
    }
    // SAFETY: each of the mr row pointers holds kc readable values (weights,
    // tmp or zeros); `out` holds kc * mr values.
    unsafe { (ks.transpose)(&rows[..mr], kc, out) };
}

/// The most rows a panel of any instruction set has.
pub(crate) const MR_MAX: usize = 32;

/// Write (or add) the valid `t.mr x t.c.len()` part of a tile held in `buf`
/// (column `j` at `buf[j * stride..]`) to the output: the edge path of every
/// micro-kernel.
///
/// # Safety
/// As for [`KernelFn`]; `buf` holds `t.c.len()` columns of `stride >= mr`.
pub(crate) unsafe fn store_tile(t: &Tile, buf: &[f32], stride: usize) {
    for (j, &c) in t.c.iter().enumerate() {
        let col = buf.get(j * stride..).unwrap_or(&[]);
        for (r, &v) in col.iter().enumerate().take(t.mr) {
            // SAFETY: rows row .. row + mr of column j are the tile's output.
            unsafe {
                let p = c.add(t.row + r);
                *p = if t.accumulate { *p + v } else { v };
            }
        }
    }
}

/// Ask for a tile's output lines (`mr` f32 from `row` of each column in
/// `c`) to be brought into L1: a micro-kernel calls it before its sums, so
/// its stores at the end find the lines there instead of waiting for them
/// (hints only, never faulting; a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_out(c: &[*mut f32], row: usize, mr: usize) {
    #[cfg(target_arch = "x86_64")]
    for &col in c {
        let first = col.wrapping_add(row);
        for p in [first, first.wrapping_add(mr.saturating_sub(1))] {
            // SAFETY: PREFETCHT0 is a hint that never faults and has no
            // effect on program state; SSE is part of the x86-64 baseline.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>(p.cast_const().cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (c, row, mr);
}

/// Ask for the cache line at `p` to be brought into L2 (a hint: never
/// faults, whatever the address; a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT1 is a hint that never faults and has no effect on
    // program state; SSE is part of the x86-64 baseline.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T1>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the lines holding the `bytes` bytes at `p` (one hint per cache
/// line, from the line of `p` on) to be brought into L1 (hints: never
/// faulting, whatever the address; a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_l1(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes + (p as usize & 63)).step_by(64) {
        let p = p.wrapping_sub(p as usize & 63);
        // SAFETY: PREFETCHT0 is a hint that never faults and has no effect
        // on program state; SSE is part of the x86-64 baseline.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// Prefetches the weight bytes the next `k` slice of a unit will pack,
/// a few lines per micro-kernel call of the current slice, so the packing
/// finds them in L2 instead of waiting on memory (weights of the large
/// products stream from DRAM or L3).
#[derive(Debug)]
pub(crate) struct SlicePrefetch {
    /// Bytes between rows.
    nb1: usize,
    /// Lines per row, lines in all, lines issued, lines per call.
    per_row: usize,
    total: usize,
    done: usize,
    per_call: usize,
    /// Where the next line is: its row's first byte (row 0's is the first
    /// byte of the next slice) and its line in the row, kept so that a
    /// step divides nothing (a division per line).
    row_base: *const u8,
    line: usize,
}

impl SlicePrefetch {
    /// The next slice: `bytes` bytes from `base` in each of `rows` rows
    /// `nb1` apart, spread over `calls` calls of [`SlicePrefetch::step`].
    pub(crate) fn new(
        base: *const u8,
        nb1: usize,
        rows: usize,
        bytes: usize,
        calls: usize,
    ) -> Self {
        let per_row = bytes.div_ceil(64) + 1;
        let total = per_row * rows;
        SlicePrefetch {
            nb1,
            per_row,
            total,
            done: 0,
            per_call: total.div_ceil(calls.max(1)),
            row_base: base,
            line: 0,
        }
    }

    /// Nothing to prefetch.
    pub(crate) fn none() -> Self {
        SlicePrefetch {
            nb1: 0,
            per_row: 1,
            total: 0,
            done: 0,
            per_call: 0,
            row_base: std::ptr::null(),
            line: 0,
        }
    }

    /// Issue this call's share of the prefetches.
    #[inline]
    pub(crate) fn step(&mut self) {
        let end = self.total.min(self.done + self.per_call);
        while self.done < end {
            prefetch_l2(self.row_base.wrapping_add(self.line * 64));
            self.line += 1;
            if self.line == self.per_row {
                self.line = 0;
                self.row_base = self.row_base.wrapping_add(self.nb1);
            }
            self.done += 1;
        }
    }
}
