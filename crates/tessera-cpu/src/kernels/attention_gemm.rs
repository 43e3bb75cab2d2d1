//! Flash attention for many rows at once (prompts), on the GEMM's f32
//! micro-kernels: a group of up to [`GEMM_ROWS`] (query, head) rows that
//! share a KV head is computed as two small matrix products per block of
//! [`KV_BLOCK`] keys, `S = K Q^T` and `O += V^T P`, instead of one dot
//! product per (key, row) pair and one pass over V per 8 rows (the form in
//! [`super::attention_group`], kept for decoding and quantized caches).
//!
//! Per group the queries are packed once into B panels (rounded to f16 for
//! an F16 K, as ggml and the other form do). Per block of keys:
//! - the K rows are converted and packed into A panels (`pack_a`, in
//!   slices of at most [`KC`] values of the head dimension) and the
//!   micro-kernels write the raw scores of every (key, row) pair into each
//!   row's block of scores;
//! - each row's scores go through the same scale, softcap, mask and
//!   online-softmax step as in the other form ([`Group::softmax_step`]),
//!   which leaves the keys' weights `P` in place;
//! - the weights are packed into B panels, the V rows converted into A
//!   panels (the panel's rows are V's columns: `vp[l * MR + i] = v[l][i]`),
//!   and the micro-kernels add `V^T P` to the rows' f32 accumulators.
//!
//! Keys masked for every row of the group are not read: a block of only
//! such keys is skipped, and inside a block their V rows are packed as
//! zeros (their weights are 0 for every row). Sums are f32 (FMA), like the
//! other form; only their order differs.

use tessera::{DType, Error, Result};

use super::act_quant::round_to_f16;
use super::attention_group::Group;
use super::gemm::KC;
use super::gemm_pack::{Kernels, MR_MAX, PackBufs, PanelSrc, Tile, pack_a, pack_b};

/// Most (query, head) rows computed together in the GEMM form.
pub const GEMM_ROWS: usize = 64;

/// Fewest rows in a group of the GEMM form: nodes whose groups would be
/// smaller (decoding: the query heads of one KV head; a few queries cut
/// into a group per thread) run the dot-product form.
pub const GEMM_MIN_ROWS: usize = 32;

/// Keys per block of the online softmax in the GEMM form (the dot-product
/// form's [`super::attention::KV_BLOCK`] is 64): each micro-kernel call of
/// `O += V^T P` runs over a block, so its output tile's loads and stores
/// are spread over more keys.
pub const KV_BLOCK: usize = 128;

/// Most columns of a B panel of any kernel set.
const NR_MAX: usize = 12;

/// Columns of packed queries or weights: [`GEMM_ROWS`] rounded up to whole
/// panels of any width.
const COLS: usize = GEMM_ROWS + NR_MAX;

/// Bytes of one thread's scratch in the GEMM form for head sizes `dk` and
/// `dv` (see [`GemmBufs`]), `None` on overflow.
pub(crate) fn gemm_bytes(dk: usize, dv: usize) -> Option<usize> {
    lens(dk, dv)?
        .iter()
        .try_fold(0usize, |at, &n| at.checked_add(padded(n)?))
}

/// `n` f32 in bytes, rounded up to a cache line.
fn padded(n: usize) -> Option<usize> {
    n.checked_mul(4)?.checked_next_multiple_of(64)
}

/// The f32 counts of the parts, in the order of [`GemmBufs`]'s fields.
fn lens(dk: usize, dv: usize) -> Option<[usize; 9]> {
    let dv_pad = dv.checked_next_multiple_of(MR_MAX)?;
    Some([
        COLS.checked_mul(dk)?,
        COLS * KV_BLOCK,
        KV_BLOCK * KC,
        dv_pad.checked_mul(KV_BLOCK)?,
        GEMM_ROWS * KV_BLOCK,
        GEMM_ROWS * KV_BLOCK,
        GEMM_ROWS.checked_mul(dv)?,
        MR_MAX * KC,
        KC,
    ])
}

/// One thread's scratch in the GEMM form, cut into its parts (each starts
/// on a cache line).
pub(crate) struct GemmBufs<'s> {
    /// The group's queries in B panels (`COLS * dk`).
    qp: &'s mut [f32],
    /// A block's weights in B panels (`COLS * KV_BLOCK`).
    pp: &'s mut [f32],
    /// A block's K rows in A panels, one slice of the head dimension
    /// (`KV_BLOCK * KC`).
    kp: &'s mut [f32],
    /// A block's V rows in A panels (`dv` rounded up to `MR_MAX`, times
    /// `KV_BLOCK`).
    vp: &'s mut [f32],
    /// Each row's block of scores, then weights (`GEMM_ROWS * KV_BLOCK`).
    scores: &'s mut [f32],
    /// Each row's block of mask values (`GEMM_ROWS * KV_BLOCK`).
    mvals: &'s mut [f32],
    /// Each row's accumulator (`GEMM_ROWS * dv`).
    acc: &'s mut [f32],
    /// `pack_a`'s conversion rows and zero row.
    tmp: &'s mut [f32],
    zeros: &'s mut [f32],
}

impl<'s> GemmBufs<'s> {
    /// Cut `mem` (64-byte aligned, at least [`gemm_bytes`]) into the parts
    /// for head sizes `dk` and `dv`.
    pub(crate) fn new(mem: &'s mut [u8], dk: usize, dv: usize) -> Result<Self> {
        let bad = || Error::device("CPU", "FLASH_ATTN_EXT: GEMM scratch too small or unaligned");
        let lens = lens(dk, dv).ok_or_else(bad)?;
        let mut rest = mem;
        let mut parts: [&'s mut [f32]; 9] = Default::default();
        for (part, &n) in parts.iter_mut().zip(&lens) {
            let bytes = padded(n).ok_or_else(bad)?;
            if rest.len() < bytes {
                return Err(bad());
            }
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
            rest = tail;
            let f: &mut [f32] = bytemuck::try_cast_slice_mut(head).map_err(|_| bad())?;
            if !(f.as_ptr() as usize).is_multiple_of(64) {
                return Err(bad());
            }
            *part = &mut f[..n];
        }
        let [qp, pp, kp, vp, scores, mvals, acc, tmp, zeros] = parts;
        Ok(GemmBufs {
            qp,
            pp,
            kp,
            vp,
            scores,
            mvals,
            acc,
            tmp,
            zeros,
        })
    }
}

impl Group {
    /// Rows `rows` (numbered query-major: `r = iq1 * heads_per_kv + h`, at
    /// most [`GEMM_ROWS`]) of KV head `ik2` in batch entry `iq3`, with the
    /// f32 micro-kernels `ks`. K and V are F16 or F32.
    pub fn compute_gemm(
        &self,
        ks: &Kernels,
        iq3: usize,
        ik2: usize,
        rows: std::ops::Range<usize>,
        b: &mut GemmBufs,
    ) -> Result<()> {
        let (n_head, dk, n_kv) = (self.q.ne(2), self.k.ne(0), self.k.ne(1));
        let (kt, vt) = (self.k.layout.dtype, self.v.layout.dtype);
        if !matches!(kt, DType::F16 | DType::F32) || !matches!(vt, DType::F16 | DType::F32) {
            return Err(Error::unsupported(
                "CPU",
                format!("FLASH_ATTN_EXT GEMM form with {kt} K, {vt} V"),
            ));
        }
        let rk2 = n_head / self.k.ne(2);
        let ik3 = iq3 / (self.q.ne(3) / self.k.ne(3));
        let dv = self.v.ne(0);
        let ng = rows.len().min(GEMM_ROWS);
        let (mr, nr, kernel) = (ks.mr, ks.nr[0], ks.kernel[0]);
        if ng == 0 || dv == 0 {
            return Ok(());
        }
        let nvp = dv.div_ceil(mr);
        let fits = mr <= MR_MAX
            && (4..=NR_MAX).contains(&nr)
            && KV_BLOCK.is_multiple_of(mr)
            && b.qp.len() >= COLS * dk
            && b.vp.len() >= nvp * mr * KV_BLOCK
            && b.acc.len() >= ng * dv;
        if !fits {
            return Err(Error::device(
                "CPU",
                "FLASH_ATTN_EXT: GEMM scratch does not fit the kernels",
            ));
        }
        let np = ng.div_ceil(nr);

        // The rows and their queries, packed into B panels once.
        let mut st = [self.row_state(0, 0, 0); GEMM_ROWS];
        let mut qcols = [std::ptr::null::<u8>(); GEMM_ROWS];
        for (g, r) in rows.take(ng).enumerate() {
            let (iq1, iq2) = (r / rk2, ik2 * rk2 + r % rk2);
            st[g] = self.row_state(iq1, iq2, iq3);
            // SAFETY: iq1 < n_q, iq2 < n_head (r < n_q * rk2, ik2 <
            // n_kv_head), iq3 < ne3: the row holds dk f32 at stride nb0.
            qcols[g] = unsafe { self.q.row(iq1, iq2, iq3) };
        }
        let st = &mut st[..ng];
        // The row whose mask values row g uses (itself or an earlier one).
        let mut msrc = [0usize; GEMM_ROWS];
        for g in 0..ng {
            let same = g > 0
                && st[g].slope == st[g - 1].slope
                && st[g].mask.map(<[u8]>::as_ptr) == st[g - 1].mask.map(<[u8]>::as_ptr);
            msrc[g] = if same { msrc[g - 1] } else { g };
        }
        let qp = b.qp.as_mut_ptr();
        for j in 0..np {
            let cols = &qcols[j * nr..((j + 1) * nr).min(ng)];
            // SAFETY: each column holds dk f32 at stride nb0 (q rows); panel
            // j holds dk * nr f32 inside `qp` (np * nr <= COLS, checked).
            unsafe { pack_b(cols, self.q.nb(0), nr, 0, dk, qp.add(j * nr * dk)) };
        }
        if kt == DType::F16 {
            // As ggml: the queries meet an F16 K as f16 values.
            round_to_f16(self.isa, &mut b.qp[..np * nr * dk]);
        }
        b.acc[..ng * dv].fill(0.0);
        b.zeros.fill(0.0);

        for c0 in (0..n_kv).step_by(KV_BLOCK) {
            let nk = (n_kv - c0).min(KV_BLOCK);
            // Mask values (times the slope); keys masked for every row are dead.
            // Per panel of rows, the keys past the last one any of its rows
            // sees are not scored or added (the triangle a causal mask
            // leaves in the block on the diagonal).
            // Rows that read the same mask row with the same slope (the
            // query heads of one query, without ALiBi) share its values.
            let mut dead = [st.iter().all(|row| row.mask.is_some()); KV_BLOCK];
            let mut ends = [0usize; GEMM_ROWS.div_ceil(4)];
            let mut end = 0;
            for (g, row) in st.iter().enumerate() {
                if g > 0 && msrc[g] != g {
                    ends[g / nr] = ends[g / nr].max(end);
                    continue;
                }
                let mv = &mut b.mvals[g * KV_BLOCK..g * KV_BLOCK + nk];
                end = match row.mask {
                    Some(m) => {
                        (self.f16_row)(m.get(2 * c0..2 * (c0 + nk)).unwrap_or(&[]), mv);
                        if row.slope != 1.0 {
                            mv.iter_mut().for_each(|x| *x *= row.slope);
                        }
                        for (x, d) in mv.iter().zip(dead.iter_mut()) {
                            *d &= *x == f32::NEG_INFINITY;
                        }
                        mv.iter()
                            .rposition(|&x| x != f32::NEG_INFINITY)
                            .map_or(0, |l| l + 1)
                    }
                    None => {
                        mv.fill(0.0);
                        nk
                    }
                };
                ends[g / nr] = ends[g / nr].max(end);
            }
            if dead[..nk].iter().all(|&d| d) {
                continue;
            }
            let ends = &ends[..np];
            self.scores(ks, b, ng, c0, ends, ik2, ik3)?;

            // The softmax step per row; the weights replace the scores.
            for (g, row) in st.iter_mut().enumerate() {
                let sc = &mut b.scores[g * KV_BLOCK..g * KV_BLOCK + nk];
                let mv = &b.mvals[msrc[g] * KV_BLOCK..msrc[g] * KV_BLOCK + nk];
                if let Some(ms) = self.softmax_step(row, sc, mv) {
                    b.acc[g * dv..(g + 1) * dv]
                        .iter_mut()
                        .for_each(|a| *a *= ms);
                }
            }

            // O += V^T P: the weights into B panels, V into A panels.
            self.pack_v(b, c0, nk, &dead, ik2, ik3, mr)?;
            let (sp, pp) = (b.scores.as_mut_ptr(), b.pp.as_mut_ptr());
            let (vp, acc) = (b.vp.as_ptr(), b.acc.as_mut_ptr());
            for (j, &end) in ends.iter().enumerate() {
                let valid = nr.min(ng - j * nr);
                let mut cols = [std::ptr::null::<u8>(); NR_MAX];
                let mut outs = [std::ptr::null_mut::<f32>(); NR_MAX];
                for c in 0..valid {
                    // SAFETY: row j * nr + c < ng <= GEMM_ROWS: its block
                    // of weights and its accumulator are inside their parts.
                    unsafe {
                        cols[c] = sp.add((j * nr + c) * KV_BLOCK).cast_const().cast();
                        outs[c] = acc.add((j * nr + c) * dv);
                    }
                }
                // SAFETY: each column holds nk contiguous f32 weights; panel
                // j (KV_BLOCK * nr f32) is inside `pp` (COLS * KV_BLOCK).
                unsafe { pack_b(&cols[..valid], 4, nr, 0, end, pp.add(j * nr * KV_BLOCK)) };
                for ip in 0..nvp {
                    // SAFETY: full panels of nk steps (A: V panel ip, 64-byte
                    // aligned; B: weight panel j); the outputs are values
                    // ip * mr .. + mr of the rows' accumulators (ip * mr <
                    // dv), this thread's; the kernels suit this CPU.
                    unsafe {
                        kernel(&Tile {
                            kc: end,
                            a: vp.add(ip * mr * KV_BLOCK),
                            b: pp.add(j * nr * KV_BLOCK),
                            c: &outs[..valid],
                            row: ip * mr,
                            mr: mr.min(dv - ip * mr),
                            accumulate: true,
                        })
                    };
                }
            }
        }

        self.finish(st, &mut b.acc[..ng * dv], iq3);
        Ok(())
    }

    /// The raw scores of the keys from `c0` against the group's `ng` packed
    /// queries, `S = K Q^T`, into each row's block of scores: for panel `j`
    /// of rows the keys `c0 .. c0 + ends[j]` (the scores of later keys are
    /// left as they are: their mask hides them). K is packed in slices of
    /// at most [`KC`] of its `dk` values.
    #[allow(clippy::too_many_arguments)]
    fn scores(
        &self,
        ks: &Kernels,
        b: &mut GemmBufs,
        ng: usize,
        c0: usize,
        ends: &[usize],
        ik2: usize,
        ik3: usize,
    ) -> Result<()> {
        let dk = self.k.ne(0);
        let (mr, nr, kernel) = (ks.mr, ks.nr[0], ks.kernel[0]);
        let nk = ends.iter().copied().max().unwrap_or(0);
        if dk == 0 {
            // Empty dot products: every score is 0.
            for sc in b.scores.chunks_exact_mut(KV_BLOCK).take(ng) {
                sc[..nk].fill(0.0);
            }
            return Ok(());
        }
        let kpanels = nk.div_ceil(mr);
        let pack_bufs = PackBufs {
            tmp: b.tmp.as_mut_ptr(),
            kc_max: KC,
            zeros: b.zeros.as_ptr(),
        };
        let (kp, qp, sp) = (b.kp.as_mut_ptr(), b.qp.as_ptr(), b.scores.as_mut_ptr());
        let mut outs = [std::ptr::null_mut::<f32>(); GEMM_ROWS];
        for (g, o) in outs.iter_mut().enumerate().take(ng) {
            // SAFETY: row g < GEMM_ROWS: its block is inside `scores`.
            *o = unsafe { sp.add(g * KV_BLOCK) };
        }
        for d0 in (0..dk).step_by(KC) {
            let kc = (dk - d0).min(KC);
            for ip in 0..kpanels {
                let src = PanelSrc {
                    // SAFETY: key c0 + ip * mr < n_kv, (ik2, ik3) in k's range.
                    row0: unsafe { self.k.row(c0 + ip * mr, ik2, ik3) },
                    nb1: self.k.nb(1),
                    rows: mr.min(nk - ip * mr),
                    dtype: self.k.layout.dtype,
                };
                // SAFETY: the rows hold dk >= d0 + kc values (F16 or F32,
                // no blocks); `pack_bufs` holds MR_MAX * KC + KC f32 and
                // kc <= KC; panel ip (kc * mr f32, 64-byte aligned: mr * 4
                // is a multiple of 64) is inside `kp` (KV_BLOCK * KC).
                unsafe { pack_a(ks, &src, d0, kc, kp.add(ip * mr * kc), &pack_bufs) };
            }
            for (j, &end) in ends.iter().enumerate() {
                let c = &outs[j * nr..((j + 1) * nr).min(ng)];
                for ip in 0..end.div_ceil(mr) {
                    // SAFETY: full panels of kc steps (A: panel ip of `kp`;
                    // B: slice d0 of query panel j); the outputs are keys
                    // ip * mr .. + mr (< KV_BLOCK) of the rows' blocks of
                    // scores, this thread's; the kernels suit this CPU.
                    unsafe {
                        kernel(&Tile {
                            kc,
                            a: kp.add(ip * mr * kc),
                            b: qp.add(j * nr * dk + d0 * nr),
                            c,
                            row: ip * mr,
                            mr: mr.min(nk - ip * mr),
                            accumulate: d0 > 0,
                        })
                    };
                }
            }
        }
        Ok(())
    }

    /// Convert V rows `c0 .. c0 + nk` into A panels of `mr` of V's columns
    /// (`vp[(ip * KV_BLOCK + l) * mr + i] = v[c0 + l][ip * mr + i]`), zeros
    /// past `dv` and for dead keys.
    #[allow(clippy::too_many_arguments)]
    fn pack_v(
        &self,
        b: &mut GemmBufs,
        c0: usize,
        nk: usize,
        dead: &[bool; KV_BLOCK],
        ik2: usize,
        ik3: usize,
        mr: usize,
    ) -> Result<()> {
        let dv = self.v.ne(0);
        let nvp = dv.div_ceil(mr);
        let row_bytes = self.v.layout.row_bytes();
        let f16 = self.v.layout.dtype == DType::F16;
        let avx2 = self.isa.has_avx2();
        for (l, &d) in dead.iter().enumerate().take(nk) {
            let src = {
                // SAFETY: key c0 + l < n_kv, (ik2, ik3) in v's range; the
                // row holds dv contiguous values.
                unsafe { std::slice::from_raw_parts(self.v.row(c0 + l, ik2, ik3), row_bytes) }
            };
            for ip in 0..nvp {
                let out = &mut b.vp[(ip * KV_BLOCK + l) * mr..][..mr];
                let n = mr.min(dv - ip * mr);
                if d {
                    out.fill(0.0);
                    continue;
                }
                if f16 {
                    self.f16_chunk(&src[2 * ip * mr..2 * (ip * mr + n)], &mut out[..n], avx2);
                } else {
                    let vals = src[4 * ip * mr..4 * (ip * mr + n)].chunks_exact(4);
                    for (x, e) in out.iter_mut().zip(vals) {
                        *x = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                    }
                }
                out[n..].fill(0.0);
            }
        }
        Ok(())
    }

    /// `out[i] = f16 value i of from` (`from` holds `out.len()` values): a
    /// chunk of a V row, converted in place of a call through `f16_row`
    /// where the CPU has F16C (`avx2`: the stream's `isa.has_avx2()`,
    /// asked once per block).
    fn f16_chunk(&self, from: &[u8], out: &mut [f32], avx2: bool) {
        #[cfg(target_arch = "x86_64")]
        if avx2 && from.len() >= 2 * out.len() {
            // SAFETY: AVX2/F16C present (`has_avx2` checked the CPU); `from`
            // holds out.len() f16 (unaligned loads), `out` as many f32.
            unsafe {
                super::cvt_avx2::f16_to_f32(out.as_mut_ptr(), from.as_ptr().cast(), out.len())
            };
            return;
        }
        let _ = avx2;
        (self.f16_row)(from, out);
    }
}
