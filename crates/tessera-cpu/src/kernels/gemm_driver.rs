//! The GEMM's execution ([`super::gemm`] describes the algorithm): the
//! validated plan of one MUL_MAT node, the shared B packing with its
//! barriers, the units handed out by a counter, and each unit's loop over
//! `k` slices (A packing, prefetch of the next slice, micro-kernel calls)
//! on either path.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{DType, Error, Op, Result};

use super::gemm::{AP_BYTES, KC, KC_Q, LINE, MC, Path, Sizes, TMP_BYTES, check, cols_per_matrix};
use super::gemm_pack::{PackBufs, PanelSrc, SlicePrefetch, Tile, pack_a, pack_b};
use super::gemm_packed::{BLOCK as PACKED_BLOCK, panel_from_packed};
use super::gemm_q8::{QB, QTile, pack_a_q8, pack_b_q8};
use super::gemm_sb::{SB, Sb, pack_b_sb, rec_dwords};
use super::{NodeCtx, TensorRef};
use crate::repack::Packing;

/// Most columns per B panel of any kernel set.
const NR_MAX: usize = 12;
/// Values of `k` per B-packing work item (a multiple of every block size).
const KB: usize = 1024;

/// Everything the threads need, validated once.
pub(crate) struct Plan {
    a: TensorRef,
    b: TensorRef,
    dst: TensorRef,
    path: Path,
    mr: usize,
    nr: usize,
    k: usize,
    m: usize,
    /// `b`'s ne1 and the broadcast ratios.
    n: usize,
    r2: usize,
    r3: usize,
    ncol: usize,
    sizes: Sizes,
    scratch: *mut u8,
    /// The packed B shared with other products of the same activations
    /// (`exec::tables`, [`super::gemm_shared_b`]): where it is, and whether
    /// this node packs it (else it only reads it).
    shared: Option<(*mut u8, bool)>,
    /// One thread computes the product (MUL_MAT_ID's experts, each on a
    /// thread of its own): it takes the units in order, so the next rows'
    /// first slice is worth prefetching during a unit's last.
    single: bool,
}

/// One thread's buffers: A panels (f32, or codes then scales), conversion
/// rows and a zero row.
struct ThreadBufs {
    pack: PackBufs,
    ap: *mut u8,
}

impl Plan {
    pub(crate) fn new(ctx: &NodeCtx) -> Result<Self> {
        if !matches!(ctx.op, Op::MulMat) {
            return Err(Error::op(
                "MUL_MAT",
                format!("kernel called for {}", ctx.op.name()),
            ));
        }
        let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.dst);
        let (la, lb, ld) = (a.layout, b.layout, dst.layout);
        check(&la, &lb)?;
        let want = [la.ne[1], lb.ne[1], lb.ne[2], lb.ne[3]];
        if ld.dtype != DType::F32 || ld.ne != want || !ld.is_contiguous() {
            return Err(Error::op(
                "MUL_MAT",
                format!("dst {ld} must be contiguous f32 {want:?}"),
            ));
        }
        let ncol = cols_per_matrix(&la, &lb);
        if a.packing != Packing::Standard && !la.ne[1].is_multiple_of(super::gemm_packed::MR) {
            return Err(Error::op(
                "MUL_MAT",
                format!("repacked weights {la} must have whole groups of 16 rows"),
            ));
        }
        let path = Path::choose(la.dtype, ncol, ctx.isa, a.packing);
        let sizes = Sizes::new(&la, &lb, ctx.nth, &path)
            .ok_or_else(|| Error::Overflow(format!("MUL_MAT scratch for a {la}, b {lb}")))?;
        let s = ctx.scratch;
        if s.len < sizes.total || s.ptr.is_null() || !(s.ptr as usize).is_multiple_of(LINE) {
            return Err(Error::InvalidLayout(format!(
                "MUL_MAT needs {} bytes of 64-byte aligned scratch, {} given",
                sizes.total, s.len
            )));
        }
        // A shared packed B holds the one block (the planner's key says so;
        // checked alike on every thread, before any barrier).
        let shared = match ctx.table {
            Some(t) => {
                let need = sizes.groups.checked_mul(sizes.group_bytes);
                let fits = sizes.nblocks == 1
                    && need.is_some_and(|n| n <= t.len)
                    && !t.ptr.is_null()
                    && (t.ptr as usize).is_multiple_of(LINE);
                if !fits {
                    return Err(Error::InvalidLayout(format!(
                        "MUL_MAT's shared packed activations: {} bytes given for {} blocks of {} groups of {} bytes",
                        t.len, sizes.nblocks, sizes.groups, sizes.group_bytes
                    )));
                }
                Some((t.ptr, t.fill))
            }
            None => None,
        };
        Ok(Plan {
            a,
            b,
            dst,
            path,
            mr: path.mr(),
            nr: path.nr(),
            k: la.ne[0],
            m: la.ne[1],
            n: lb.ne[1],
            r2: lb.ne[2] / la.ne[2],
            r3: lb.ne[3] / la.ne[3],
            ncol,
            sizes,
            scratch: s.ptr,
            shared,
            single: ctx.nth <= 1,
        })
    }

    /// The counter handing out the units of block `jb`.
    fn counter(&self, jb: usize) -> &AtomicUsize {
        // SAFETY: the scratch starts with `nblocks` cache lines of counters
        // (checked in `new`), 64-byte aligned, only ever accessed atomically
        // by the node's threads.
        unsafe { &*self.scratch.add(jb * LINE).cast::<AtomicUsize>() }
    }

    /// Packed B group `i` of the current block.
    fn group(&self, i: usize) -> *mut u8 {
        if let Some((table, _)) = self.shared {
            // SAFETY: one block (checked in `new`): i < groups, and the
            // table holds groups * group_bytes bytes (checked in `new`).
            return unsafe { table.add(i * self.sizes.group_bytes) };
        }
        // SAFETY: i < block_groups groups of group_bytes, inside the scratch
        // (Sizes::total covers them).
        unsafe {
            self.scratch
                .add(self.sizes.bp_off + i * self.sizes.group_bytes)
        }
    }

    pub(crate) fn run(&self, ctx: &NodeCtx) {
        let s = self.sizes;
        let nth = ctx.nth.max(1);
        if ctx.ith == 0 {
            // Every thread's first unit is its index; the counters hand out
            // the rest. Published by the first barrier.
            for jb in 0..s.nblocks {
                self.counter(jb).store(nth, Ordering::Relaxed);
            }
        }
        let bufs = self.thread_bufs(ctx.ith);
        for jb in 0..s.nblocks {
            let g0 = jb * s.block_groups;
            let g1 = s.groups.min(g0 + s.block_groups);
            // A shared B is packed by the group's first node only; the
            // others read it, ordered after that node by its barriers. The
            // barrier stays for them too: it publishes the counters.
            if self.shared.is_none_or(|(_, fill)| fill) {
                self.pack_b_share(ctx, g0..g1);
            }
            ctx.barrier.wait();
            self.compute_block(ctx, jb, g0..g1, &bufs);
            if jb + 1 < s.nblocks {
                // The next block overwrites the packed B.
                ctx.barrier.wait();
            }
        }
    }

    /// This thread's buffers.
    fn thread_bufs(&self, ith: usize) -> ThreadBufs {
        let off = self.sizes.thread_off + ith * self.sizes.per_thread;
        // SAFETY: thread `ith < nth` owns `per_thread` bytes at `off`, inside
        // the scratch (Sizes::total); every part is 64-byte aligned.
        unsafe {
            let ap = self.scratch.add(off);
            let tmp = self.scratch.add(off + AP_BYTES).cast::<f32>();
            let zeros = self.scratch.add(off + AP_BYTES + TMP_BYTES).cast::<f32>();
            std::ptr::write_bytes(zeros, 0, KC);
            ThreadBufs {
                pack: PackBufs {
                    tmp,
                    kc_max: KC,
                    zeros,
                },
                ap,
            }
        }
    }

    /// (i11, i12, i13) of column `c` of weight matrix `p`.
    fn col_index(&self, p: usize, c: usize) -> (usize, usize, usize) {
        let ne02 = self.a.ne(2);
        let (i02, i03) = (p % ne02, p / ne02);
        let (s, t, i11) = (c / (self.r2 * self.n), c / self.n % self.r2, c % self.n);
        (i11, i02 * self.r2 + t, i03 * self.r3 + s)
    }

    /// Pack this thread's share of B groups `groups` (the current block).
    fn pack_b_share(&self, ctx: &NodeCtx, groups: Range<usize>) {
        let (k, nr) = (self.k, self.nr);
        let kchunks = k.div_ceil(KB);
        for item in ctx.split(groups.len() * kchunks) {
            let g = groups.start + item / kchunks;
            let (l0, l1) = (item % kchunks * KB, (item % kchunks * KB + KB).min(k));
            let (p, lg) = (g / self.sizes.gpm, g % self.sizes.gpm);
            let mut cols = [std::ptr::null::<u8>(); NR_MAX];
            let valid = nr.min(self.ncol - lg * nr);
            for (c, col) in cols.iter_mut().enumerate().take(valid) {
                let (i11, i12, i13) = self.col_index(p, lg * nr + c);
                // SAFETY: the indices are in range for `b` (column < ncol).
                *col = unsafe { self.b.row(i11, i12, i13) };
            }
            let out = self.group(g - groups.start);
            let nb0 = self.b.nb(0);
            // SAFETY: each column holds k values at stride nb0; the group
            // holds all of k and this item's rows l0..l1 are written by this
            // thread only (work items are disjoint).
            unsafe {
                match self.path {
                    Path::F32 { .. } => pack_b(&cols[..valid], nb0, nr, l0, l1, out.cast()),
                    Path::Q8 {
                        s, sb: None, sym, ..
                    } => pack_b_q8(&cols[..valid], nb0, nr, s, sym, k, l0, l1, out),
                    Path::Q8 {
                        s, sb: Some(kind), ..
                    } => pack_b_sb(&cols[..valid], nb0, nr, s, kind, k, l0, l1, out),
                    Path::Packed { .. } => {
                        pack_b_q8(&cols[..valid], nb0, nr, QB, None, k, l0, l1, out)
                    }
                }
            }
        }
    }

    /// Units of a block: rows per unit, and the unit counts along rows and
    /// column groups.
    fn split(&self, nmats: usize, gmax: usize, nth: usize) -> (usize, usize, usize) {
        let mr = self.mr;
        if nth > 1 && matches!(self.path, Path::Packed { quad: Some(_), .. }) {
            // One column of repacked weights: units of four panels (one
            // call of the four-panel kernel), many of them, so the threads
            // finish together (with 4 units a thread, the last one left
            // a thread waiting 7 % of a decoding step).
            let mu = 4 * mr;
            return (mu, self.m.div_ceil(mu), 1);
        }
        let want = if nth > 1 { 4 * nth } else { 1 };
        // On the integer paths rows are cut finer than that (down to one
        // panel): a unit of fewer rows packs no more (each row is packed
        // once per slice whatever the unit), and with 16 units a thread the
        // last one leaves the others less to wait for (Gemma 3 270M's
        // prompt, two threads: products of 640 rows were 8 units, and
        // threads waited 4-10 % of them at the barrier after; 1-2 % now).
        // The f32 path keeps 4 (the 1B F16 prompt read 3-4 % slower with
        // 16, alternated).
        let want_rows = match self.path {
            _ if nth == 1 => 1,
            Path::F32 { .. } => want,
            Path::Q8 { .. } | Path::Packed { .. } => 16 * nth,
        };
        let panels = self.m.div_ceil(mr);
        let nmc0 = self
            .m
            .div_ceil(MC)
            .max(want_rows.div_ceil(nmats))
            .min(panels)
            .max(1);
        let mu = panels.div_ceil(nmc0) * mr;
        let nmc = self.m.div_ceil(mu);
        let ngc = if nmats * nmc >= want {
            1
        } else {
            want.div_ceil(nmats * nmc).min(gmax).max(1)
        };
        (mu, nmc, ngc)
    }

    fn compute_block(&self, ctx: &NodeCtx, jb: usize, groups: Range<usize>, bufs: &ThreadBufs) {
        if self.m == 0 || groups.is_empty() {
            return;
        }
        let gpm = self.sizes.gpm;
        let (p_lo, p_hi) = (groups.start / gpm, (groups.end - 1) / gpm);
        let nmats = p_hi - p_lo + 1;
        let (mu, nmc, ngc) = self.split(nmats, gpm.min(groups.len()), ctx.nth.max(1));
        let units = nmats * nmc * ngc;
        let counter = self.counter(jb);
        let mut u = ctx.ith;
        while u < units {
            let (pi, rest) = (u / (nmc * ngc), u % (nmc * ngc));
            let (mc, gc) = (rest / ngc, rest % ngc);
            let p = p_lo + pi;
            let ga = groups.start.max(p * gpm);
            let gb = groups.end.min((p + 1) * gpm);
            let len = gb - ga;
            let (gs, ge) = (ga + len * gc / ngc, ga + len * (gc + 1) / ngc);
            let rows = (mc * mu).min(self.m)..((mc + 1) * mu).min(self.m);
            if gs < ge && !rows.is_empty() {
                self.unit(p, rows, gs..ge, groups.start, bufs);
            }
            u = counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The output columns of group `g` of matrix `p` (at most `nr`).
    fn out_cols(&self, p: usize, g: usize, cols: &mut [*mut f32; NR_MAX]) -> usize {
        let (nr, lg) = (self.nr, g % self.sizes.gpm);
        let valid = nr.min(self.ncol - lg * nr);
        for (c, col) in cols.iter_mut().enumerate().take(valid) {
            let (i11, i12, i13) = self.col_index(p, lg * nr + c);
            // SAFETY: in-range indices of dst (same ne1..3 as b).
            *col = unsafe { self.dst.row(i11, i12, i13) }.cast();
        }
        valid
    }

    /// Rows `rows` (at most MC) of weight matrix `p` times B groups `groups`
    /// of the block starting at group `g0`.
    fn unit(
        &self,
        p: usize,
        rows: Range<usize>,
        groups: Range<usize>,
        g0: usize,
        bufs: &ThreadBufs,
    ) {
        let (mr, nr, k) = (self.mr, self.nr, self.k);
        let ne02 = self.a.ne(2);
        let nb01 = self.a.nb(1);
        let dtype = self.a.layout.dtype;
        // SAFETY: p < ne02 * ne03, so (0, i02, i03) is in range.
        let a0 = unsafe { self.a.row(0, p % ne02, p / ne02) };
        let panels = rows.len().div_ceil(mr);
        let mut cols = [std::ptr::null_mut::<f32>(); NR_MAX];
        // Repacked weights times one column group: nothing to keep in L2
        // for other groups, so each panel is read in one pass over `k` (one
        // sequential stream per call instead of one short run per slice).
        let slice = match self.path {
            Path::Packed { .. } if groups.len() == 1 => k,
            Path::Q8 { s, .. } if self.one_slice(rows.len(), s) => k,
            Path::Q8 { .. } | Path::Packed { .. } => KC_Q,
            Path::F32 { .. } => KC,
        };
        let mut pc = 0;
        loop {
            let kc = slice.min(k - pc);
            // Pack the A panels of this slice.
            for ip in 0..panels {
                let r = rows.start + ip * mr;
                // SAFETY: row r < m of the matrix.
                let row0 = unsafe { a0.add(r * nb01) };
                let nrows = mr.min(rows.end - r);
                // SAFETY: the rows hold k values (whole blocks; pc and kc are
                // multiples of the slice, KC or KC_Q, or end at k); panel
                // ip of this thread's A buffer (MC / mr panels of KC * mr
                // f32, or on the integer path KC_Q * mr codes in its first
                // half and their scales in the second: `gemm::KC_Q` checks
                // that they fit).
                unsafe {
                    match self.path {
                        Path::F32 { ks, .. } => {
                            let src = PanelSrc {
                                row0,
                                nb1: nb01,
                                rows: nrows,
                                dtype,
                            };
                            let out = bufs.ap.cast::<f32>().add(ip * kc * mr);
                            pack_a(ks, &src, pc, kc, out, &bufs.pack);
                        }
                        Path::Q8 { qk, s, sb, .. } => {
                            let codes = bufs.ap.add(ip * kc * mr);
                            let scales = bufs.ap.add(AP_BYTES / 2).cast::<f32>();
                            let scales = scales.add(ip * (kc / s) * 2 * mr);
                            if self.a.packing == Packing::Standard {
                                let scaled = sb == Some(Sb::Scaled);
                                pack_a_q8(
                                    qk, dtype, row0, nb01, nrows, pc, kc, codes, scales,
                                    &bufs.pack, scaled,
                                );
                            } else {
                                // Panel `r / 16` of repacked weights (r is
                                // a multiple of 16).
                                panel_from_packed(row0, pc, kc, codes, scales);
                            }
                        }
                        // The weights are the panels.
                        Path::Packed { .. } => {}
                    }
                }
            }
            let mut pf = self.next_slice(a0, &rows, pc + kc, slice, groups.len() * panels);
            let mut call = |ip: usize, g: usize, cols: &[*mut f32], four: bool| {
                let gb = self.group(g - g0);
                let row = rows.start + ip * mr;
                let (tmr, acc) = (mr.min(rows.end - row), pc > 0);
                // SAFETY: full panels of kc values (this slice of the A
                // buffer, step pc of group g); the tile's outputs are rows
                // row..row + mr of columns this unit owns; the kernels were
                // chosen for this CPU.
                unsafe {
                    match self.path {
                        Path::F32 { kernel, .. } => kernel(&Tile {
                            kc,
                            a: bufs.ap.cast::<f32>().add(ip * kc * mr),
                            b: gb.cast::<f32>().add(pc * nr),
                            c: cols,
                            row,
                            mr: tmr,
                            accumulate: acc,
                        }),
                        Path::Q8 { kernel, s, sb, .. } => kernel(&QTile {
                            kc,
                            a: bufs.ap.add(ip * kc * mr),
                            a_scales: bufs
                                .ap
                                .add(AP_BYTES / 2)
                                .cast::<f32>()
                                .add(ip * (kc / s) * 2 * mr),
                            b: gb.add(pc * nr),
                            b_scales: gb.add(k * nr).cast::<f32>().add(match sb {
                                None => pc / s * nr * 2,
                                Some(_) => pc / SB * nr * rec_dwords(s),
                            }),
                            c: cols,
                            row,
                            mr: tmr,
                            accumulate: acc,
                        }),
                        // Panel `row / 16` of the matrix: its blocks from
                        // `pc / 32` on (the group is `16 * nb01` bytes); with
                        // `four`, it and the next three.
                        Path::Packed { kernel, quad, .. } => {
                            let tile = QTile {
                                kc,
                                a: a0.add(row * nb01 + pc / QB * PACKED_BLOCK),
                                a_scales: std::ptr::null(),
                                b: gb.add(pc * nr),
                                b_scales: gb.add(k * nr).cast::<f32>().add(pc / QB * nr * 2),
                                c: cols,
                                row,
                                mr: if four { 4 * mr } else { tmr },
                                accumulate: acc,
                            };
                            match quad {
                                Some(quad) if four => quad(&tile, mr * nb01),
                                _ => kernel(&tile),
                            }
                        }
                    }
                }
                pf.step();
            };
            // One column of repacked weights: four panels a call where the
            // unit has them (its rows are whole panels: m % 16 == 0).
            let quads = matches!(self.path, Path::Packed { quad: Some(_), .. });
            for g in groups.clone() {
                let valid = self.out_cols(p, g, &mut cols);
                // The next B panel (next group, or the first group's next
                // slice) goes to L2 while this group's panels run.
                let next = if g + 1 < groups.end {
                    Some((g + 1, pc, kc))
                } else {
                    (pc + kc < k).then(|| (groups.start, pc + kc, slice.min(k - pc - kc)))
                };
                let calls = if quads { panels.div_ceil(4) } else { panels };
                let mut bpf = match next {
                    Some((gn, pn, kn)) => self.b_panel_prefetch(gn - g0, pn, kn, calls),
                    None => SlicePrefetch::none(),
                };
                let mut ip = 0;
                while ip < panels {
                    let four = quads && ip + 4 <= panels && rows.start + (ip + 4) * mr <= rows.end;
                    call(ip, g, &cols[..valid], four);
                    bpf.step();
                    ip += if four { 4 } else { 1 };
                }
            }
            pc += kc;
            if pc >= k {
                break;
            }
        }
    }

    /// Does all of `k` fit one slice of the integer path for a unit of
    /// `rows` rows (sub-blocks of `s`)? Up to `2 * KC_Q` values, where the
    /// unit's codes and scales fit the A buffer's halves and a row's codes
    /// a conversion row. Gemma 3's `k = 640` was a slice of 512 and one of
    /// 128, whose calls load and store each output tile for a quarter of
    /// the steps.
    fn one_slice(&self, rows: usize, s: usize) -> bool {
        let (k, panel_rows) = (self.k, rows.next_multiple_of(self.mr));
        k <= 2 * KC_Q
            && k <= KC * 4
            && panel_rows * k <= AP_BYTES / 2
            && panel_rows * (k / s.max(1)) * 2 * 4 <= AP_BYTES / 2
    }

    /// The prefetcher of the B panel of group `i` (of the packed block) for
    /// the `kc` values of `k` from `l0` (their codes or floats; the scales
    /// are a few lines), spread over `calls` kernel calls. Without it the
    /// panels of a large product come from L3 at each group's first call
    /// (F16 `n = 512`, `k = 14336`, one thread on Zen 4: with AVX2 kernels
    /// 95-97 -> 101-103 GFLOPS, with AVX-512 ones 95-96 -> 97).
    fn b_panel_prefetch(&self, i: usize, l0: usize, kc: usize, calls: usize) -> SlicePrefetch {
        let (nr, base) = (self.nr, self.group(i).cast_const());
        let elem = match self.path {
            Path::F32 { .. } => 4,
            Path::Q8 { .. } | Path::Packed { .. } => 1,
        };
        SlicePrefetch::new(
            base.wrapping_add(l0 * nr * elem),
            0,
            1,
            kc * nr * elem,
            calls,
        )
    }

    /// The prefetcher of the slice of `k` starting at `l0` of weight rows
    /// `rows` (matrix at `a0`; slices of `slice` values), spread over
    /// `calls` kernel calls; nothing after the last slice.
    fn next_slice(
        &self,
        a0: *const u8,
        rows: &Range<usize>,
        l0: usize,
        slice: usize,
        calls: usize,
    ) -> SlicePrefetch {
        if l0 >= self.k {
            // After the last slice: on one thread, the next unit is the
            // next rows (of the same column groups: `split` makes one
            // column range on one thread), whose first slice would
            // otherwise come from memory at its first packing (a third of
            // a Q4_K MUL_MAT_ID prompt's time waited there, at the first
            // byte of each block).
            let next = rows.end..(rows.end + rows.len()).min(self.m);
            if self.single && !next.is_empty() && self.a.packing == Packing::Standard {
                return self.next_slice(a0, &next, 0, slice, calls);
            }
            return SlicePrefetch::none();
        }
        let t = self.a.layout.dtype;
        let kc = slice.min(self.k - l0);
        if self.a.packing != Packing::Standard {
            // Panels of 16 rows, each slice `kc / 32` consecutive blocks.
            let (mr, nb1) = (super::gemm_packed::MR, self.a.nb(1));
            let base = a0.wrapping_add(rows.start * nb1 + l0 / QB * PACKED_BLOCK);
            let bytes = kc / QB * PACKED_BLOCK;
            return SlicePrefetch::new(base, nb1 * mr, rows.len().div_ceil(mr), bytes, calls);
        }
        let (bs, ts) = (t.block_size().max(1), t.type_size());
        let nb1 = self.a.nb(1);
        let base = a0.wrapping_add(rows.start * nb1 + l0 / bs * ts);
        SlicePrefetch::new(base, nb1, rows.len(), kc / bs * ts, calls)
    }
}
