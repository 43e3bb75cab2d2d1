//! ROPE: rotary position embedding, normal and NeoX pairing and the
//! multi-section modes, with YaRN (ggml's `ggml_compute_forward_rope_flt`,
//! `ggml_mrope_cache_init`, `rope_yarn`, `ggml_rope_yarn_corr_dims`).
//!
//! For row `(i1, i2, i3)` at position `p = pos[i2]` and pair `i` (`0 <= i <
//! n_dims / 2`): `theta_i = p * theta_scale^i` with `theta_scale =
//! freq_base^(-2 / n_dims)`, accumulated by repeated multiplication in f32
//! as ggml does, divided by `freq_factors[i]` when given. YaRN mixes the
//! interpolated angle `freq_scale * theta` with the extrapolated one by a
//! ramp over the correction dimensions when `ext_factor != 0`, and then
//! scales the magnitude by `1 + 0.1 ln(1 / freq_scale)`; `attn_factor`
//! always scales it. Normal mode rotates `(x[2i], x[2i+1])`, NeoX rotates
//! `(x[i], x[i + n_dims/2])`; dimensions `n_dims..ne0` are copied through.
//!
//! Multi-section modes (`ggml_rope_multi`) read four positions per token
//! (streams t, h, w, e at `pos[i2 + s * ne2]`) and keep four angles, each
//! multiplied by `theta_scale` at every pair; pair `i` of section
//! `sector = i % sum(sections)` takes its angle from one stream: M-RoPE by
//! contiguous sections, interleaved M-RoPE (`sector % 3` within
//! `3 * sections[..]`), vision by contiguous sections whose angles restart
//! at each section's first pair. M-RoPE and interleaved M-RoPE rotate NeoX
//! pairs over `n_dims`; vision rotates `(x[i], x[i + n_dims])` over all
//! `ne0 = 2 n_dims` dimensions (the NeoX rotation over `ne0`).
//!
//! F32 and F16, computed in f32; rows must have contiguous elements (checked
//! by `support`); in place works. Threads split the rows; each keeps a
//! cos/sin cache per position in its part of the scratch (computed once
//! per position, shared by every head of that position), laid out for the
//! mode so the AVX2 rotation (`rope_avx2`, bit-identical to the portable
//! loop) reads it with plain loads. The next position's cache is filled a
//! few pairs after each row of the current one, so the cos/sin overlap the
//! rotations' memory traffic.
//!
//! Where the executor found several ROPE nodes of one compute with the same
//! positions and parameters (`exec::tables`), they share one table of every
//! position's cos/sin instead: the first node fills it, the others only
//! rotate ([`run_table`]).

use half::f16;
use tessera::{DType, Error, Op, Result, RopeMode, RopeParams};

use super::elem::{Float, rows};
use super::simd::Simd;
use super::{NodeCtx, SharedTable, TensorRef};

/// Compute this thread's share of a ROPE node.
pub fn rope(ctx: &NodeCtx) -> Result<()> {
    let Op::Rope(p) = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a ROPE node"));
    };
    let x = ctx.src(0)?;
    let pos = ctx.src(1)?;
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let ok = x.layout.ne == ne
        && x.layout.dtype == d.layout.dtype
        && pos.layout.dtype == DType::I32
        && multi_fits(&p, ne, pos.layout.ne[0])
        && ctx.src[2].is_none_or(|f| f.layout.dtype == DType::F32 && f.layout.ne[0] >= p.n_pairs());
    if !ok {
        return Err(Error::op(
            "ROPE",
            format!("operands do not fit the result {}", d.layout),
        ));
    }
    match d.layout.dtype {
        DType::F32 => run::<f32>(ctx, &x, &pos, &p),
        DType::F16 => run::<f16>(ctx, &x, &pos, &p),
        t => Err(Error::unsupported("CPU", format!("ROPE of {t}"))),
    }
}

/// The checks on `n_dims`, the positions' length `n_pos` and the sections
/// that the kernel relies on (the builder's, restated for the device).
pub fn multi_fits(p: &RopeParams, ne: [usize; 4], n_pos: usize) -> bool {
    let streams = if p.mode.is_multi() { 4 } else { 1 };
    let s = p.sections.map(u64::from);
    p.n_dims > 0
        && p.n_dims.is_multiple_of(2)
        && p.n_dims <= ne[0]
        && ne[2].checked_mul(streams).is_some_and(|n| n_pos >= n)
        && (!p.mode.is_multi() || (s[0] + s[1] + s[2] > 0 && s.iter().sum::<u64>() <= ne[0] as u64))
        && (p.mode != RopeMode::Vision || 2 * p.n_dims == ne[0])
}

/// ggml's `ggml_rope_yarn_corr_dims`: the first and last dimension of the
/// YaRN ramp, in f32.
pub fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * freq_base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    let last = n_dims as f32 - 1.0;
    // C's MAX(0, start) and MIN(n_dims - 1, end), NaN behaviour included.
    [
        if 0.0 > start { 0.0 } else { start },
        if last < end { last } else { end },
    ]
}

/// ggml's `rope_yarn_ramp` for dimension `i0` (an even index).
fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let den = if 0.001 > high - low {
        0.001
    } else {
        high - low
    };
    let y = ((i0 / 2) as f32 - low) / den;
    let clamped = if 0.0 > y { 0.0 } else { y };
    1.0 - if 1.0 < clamped { 1.0 } else { clamped }
}

/// The `(cos, sin)` of pair `i0 / 2` for extrapolated angle `theta_extrap`
/// (ggml's `rope_yarn`).
pub fn rope_yarn(theta_extrap: f32, p: &RopeParams, corr: [f32; 2], i0: usize) -> (f32, f32) {
    let theta_interp = p.freq_scale * theta_extrap;
    let mut theta = theta_interp;
    let mut mscale = p.attn_factor;
    if p.ext_factor != 0.0 {
        let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
        theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

/// What filling a cos/sin cache needs besides the position.
struct Angles<'a> {
    p: &'a RopeParams,
    corr: [f32; 2],
    theta_scale: f32,
    factors: Option<TensorRef>,
    neox: bool,
    /// Rotated pairs per row.
    h: usize,
    /// Tokens (`ne2`): the stride between position streams.
    ne2: usize,
}

/// The cos/sin cache of one position (`i2`), filled a few pairs at a time:
/// `k` pairs done, `theta` the next pair's angle per stream (t, h, w, e;
/// only t outside the multi-section modes), `base` the streams' positions.
/// The angles follow ggml's sequence exactly (repeated multiplication by
/// `theta_scale` in f32, ggml's resets and stream choice).
struct Fill {
    i2: usize,
    k: usize,
    theta: [f32; 4],
    base: [f32; 4],
}

impl Fill {
    fn start(pos: &TensorRef, i2: usize, a: &Angles) -> Self {
        let streams = if a.p.mode.is_multi() { 4 } else { 1 };
        let mut base = [0.0f32; 4];
        for (s, b) in base.iter_mut().enumerate().take(streams) {
            // SAFETY: callers pass `i2 < ne2`, and `pos.ne0 >= streams * ne2`
            // (checked by `rope`).
            *b = unsafe { (pos.at(i2 + s * a.ne2, 0, 0, 0) as *const i32).read() } as f32;
        }
        Fill {
            i2,
            k: 0,
            theta: base,
            base,
        }
    }

    /// The angle of pair `k` (ggml's `ggml_mrope_cache_init` stream choice;
    /// vision restarts a stream at its section's first pair).
    fn angle(&mut self, k: usize, p: &RopeParams) -> f32 {
        if !p.mode.is_multi() {
            return self.theta[0];
        }
        let sec = p.sections.map(|s| s as usize);
        let sect_dims = sec.iter().sum::<usize>().max(1);
        let sec_w = sec[0] + sec[1];
        let sec_e = sec_w + sec[2];
        let sector = k % sect_dims;
        if p.mode == RopeMode::Vision {
            let reset = if sector == 0 {
                Some(0)
            } else if sector == sec[0] {
                Some(1)
            } else if sector == sec_w {
                Some(2)
            } else if sector == sec_e {
                Some(3)
            } else {
                None
            };
            if let Some(r) = reset {
                self.theta[r] = self.base[r];
            }
        }
        let stream = if p.mode == RopeMode::Imrope {
            if sector % 3 == 1 && sector < 3 * sec[1] {
                1
            } else if sector % 3 == 2 && sector < 3 * sec[2] {
                2
            } else if sector.is_multiple_of(3) && sector < 3 * sec[0] {
                0
            } else {
                3
            }
        } else if sector >= sec[0] && sector < sec_w {
            1
        } else if sector >= sec_w && sector < sec_e {
            2
        } else if sector >= sec_e {
            3
        } else {
            0
        };
        self.theta[stream]
    }

    /// Fill up to `count` more pairs into `cache` (`n_dims` f32: normal
    /// `[c0, s0, c1, s1, ...]`, NeoX `[c0, c1, ..., s0, s1, ...]`).
    ///
    /// # Safety
    /// `cache` holds `2 * a.h` f32.
    unsafe fn step(&mut self, cache: *mut f32, count: usize, a: &Angles) {
        let end = (self.k + count).min(a.h);
        for k in self.k..end {
            let factor = match a.factors {
                // SAFETY: `k < n_pairs <= ne0` of the factors (checked by `rope`).
                Some(f) => unsafe { (f.at(k, 0, 0, 0) as *const f32).read() },
                None => 1.0,
            };
            let theta = self.angle(k, a.p);
            let (c, s) = rope_yarn(theta / factor, a.p, a.corr, 2 * k);
            let (ic, is) = if a.neox {
                (k, a.h + k)
            } else {
                (2 * k, 2 * k + 1)
            };
            // SAFETY: `ic, is < 2h` (precondition).
            unsafe {
                *cache.add(ic) = c;
                *cache.add(is) = s;
            }
            for t in &mut self.theta {
                *t *= a.theta_scale;
            }
        }
        self.k = end;
    }
}

fn run<T: Float>(ctx: &NodeCtx, x: &TensorRef, pos: &TensorRef, p: &RopeParams) -> Result<()> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    // Rotated dimensions: n_dims, or ne0 = 2 n_dims for vision.
    let nd = 2 * p.n_pairs();
    let h = nd / 2;
    let size = size_of::<T>();
    if x.nb(0) != size || d.nb(0) != size {
        return Err(Error::op("ROPE", "rows must have contiguous elements"));
    }
    let a = Angles {
        p,
        corr: yarn_corr_dims(
            p.n_dims,
            p.n_ctx_orig,
            p.freq_base,
            p.beta_fast,
            p.beta_slow,
        ),
        theta_scale: p.freq_base.powf(-2.0 / p.n_dims as f32),
        factors: ctx.src[2],
        neox: p.mode.is_neox_like(),
        h,
        ne2: ne[2],
    };
    let simd = Simd::new(ctx.isa);
    if let Some(t) = ctx.table {
        return run_table::<T>(ctx, x, pos, &a, t, simd);
    }
    let range = ctx.split(ne[1] * ne[2] * ne[3]);
    if range.is_empty() {
        return Ok(());
    }
    // Two caches: the current position's, and the next one's, filled a few
    // pairs after each row so that the (compute-bound) cos/sin overlap the
    // (memory-bound) rotations.
    let base = ctx.thread_scratch_f32(2 * nd)?;
    // SAFETY: the thread's scratch holds `2 n_dims` f32.
    let mut caches = [base, unsafe { base.add(nd) }];
    let chunk = h.div_ceil(ne[1].max(1)).max(1);
    let mut cur = usize::MAX;
    let mut next: Option<Fill> = None;
    let mut left = range.len();
    for (i1, i2, i3) in rows(range, &ne) {
        if cur != i2 {
            let mut f = match next.take() {
                Some(f) if f.i2 == i2 => {
                    caches.swap(0, 1);
                    f
                }
                _ => Fill::start(pos, i2, &a),
            };
            // SAFETY: each cache holds `n_dims = 2h` f32.
            unsafe { f.step(caches[0], h, &a) };
            cur = i2;
            // Rows of this thread after this position's: then the next
            // position comes (`i2 + 1`, or 0 of the next `i3`).
            let after = left.saturating_sub(ne[1] - i1);
            let following = (i2 + 1) % ne[2];
            next = (after > 0 && following != i2).then(|| Fill::start(pos, following, &a));
        }
        // SAFETY: an in-range row; the current cache holds `n_dims` f32 of
        // position `i2` in the layout of the mode.
        unsafe { rotate_row::<T>(simd, a.neox, x, d, (i1, i2, i3), caches[0], nd) };
        if let Some(f) = &mut next {
            // SAFETY: the spare cache holds `2h` f32.
            unsafe { f.step(caches[1], chunk, &a) };
        }
        left -= 1;
    }
    Ok(())
}

/// ROPE with the compute's shared angle table (`exec::tables`): the
/// group's first node fills the slots of all `ne2` positions (each thread a
/// share, then the node's barrier), every node of the group rotates its
/// rows from them. Slot `i2` holds `n_dims` f32 laid out as `run`'s caches,
/// computed by the same [`Fill`] steps, so the results are bit for bit
/// those of the per-thread caches.
fn run_table<T: Float>(
    ctx: &NodeCtx,
    x: &TensorRef,
    pos: &TensorRef,
    a: &Angles,
    t: SharedTable,
    simd: Simd,
) -> Result<()> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let nd = 2 * a.h;
    // The same answer on every thread, so either all reach the barrier
    // below or none does.
    let need = ne[2].checked_mul(nd).and_then(|n| n.checked_mul(4));
    if need.is_none_or(|n| n > t.len) || !(t.ptr as usize).is_multiple_of(4) {
        return Err(Error::device(
            "CPU",
            format!(
                "ROPE: a shared angle table of {} bytes is too small for {} positions of {nd} dimensions",
                t.len, ne[2]
            ),
        ));
    }
    let table = t.ptr.cast::<f32>();
    if t.fill {
        for i2 in ctx.split(ne[2]) {
            let mut f = Fill::start(pos, i2, a);
            // SAFETY: slot `i2 < ne2` of `nd` f32 lies inside the table
            // (`need <= len`, checked above); the threads' position ranges
            // are disjoint, and nobody reads the table before the barrier.
            unsafe { f.step(table.add(i2 * nd), a.h, a) };
        }
        ctx.barrier.wait();
    }
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: an in-range row; slot `i2` holds position `i2`'s `nd`
        // f32, written before the barrier of this node (fill) or of an
        // earlier one (the executor's contract for shared tables).
        unsafe { rotate_row::<T>(simd, a.neox, x, d, (i1, i2, i3), table.add(i2 * nd), nd) };
    }
    Ok(())
}

/// Rotate row `(i1, i2, i3)` of `x` into `d` with the cos/sin at `cache`,
/// and copy its dimensions past `nd` through.
///
/// # Safety
/// The row index is in range for both tensors (equal layouts, contiguous
/// aligned elements of `T`, `ne0 >= nd`); `cache` holds `nd` f32 in the
/// layout of the mode; `d`'s row equals `x`'s (in place) or does not
/// overlap it (executor contract).
unsafe fn rotate_row<T: Float>(
    simd: Simd,
    neox: bool,
    x: &TensorRef,
    d: &TensorRef,
    (i1, i2, i3): (usize, usize, usize),
    cache: *const f32,
    nd: usize,
) {
    let ne0 = d.layout.ne[0];
    // SAFETY: in-range row (the caller's).
    let (src, dst) = unsafe { (x.row(i1, i2, i3) as *const T, d.row(i1, i2, i3) as *mut T) };
    // SAFETY: forwarded to the caller.
    unsafe { rotate::<T>(simd, neox, dst, src, cache, nd) };
    if !std::ptr::eq(src, dst) && ne0 > nd {
        // SAFETY: elements `nd..ne0` of both rows; distinct rows do not
        // overlap (executor contract).
        unsafe { std::ptr::copy_nonoverlapping(src.add(nd), dst.add(nd), ne0 - nd) };
    }
}

/// Rotate the first `nd` elements of one row with the cached cos/sin.
///
/// # Safety
/// `nd` elements at `src` and `dst` (equal or not overlapping), `nd` f32 at
/// `cache` laid out for the mode (see `run`).
unsafe fn rotate<T: Float>(
    simd: Simd,
    neox: bool,
    dst: *mut T,
    src: *const T,
    cache: *const f32,
    nd: usize,
) {
    let h = nd / 2;
    #[cfg(target_arch = "x86_64")]
    {
        use super::rope_avx2 as v;
        if simd.is_avx2() {
            // SAFETY: `is_avx2` means the CPU has AVX2, FMA and F16C; the
            // pointer preconditions are forwarded; `T::DTYPE` names `T`, so
            // the casts keep the element type.
            unsafe {
                match (T::DTYPE, neox) {
                    (DType::F32, false) => return v::normal_f32(dst.cast(), src.cast(), cache, nd),
                    (DType::F16, false) => return v::normal_f16(dst.cast(), src.cast(), cache, nd),
                    (DType::F32, true) => {
                        return v::neox_f32(dst.cast(), src.cast(), cache, cache.add(h), h);
                    }
                    (DType::F16, true) => {
                        return v::neox_f16(dst.cast(), src.cast(), cache, cache.add(h), h);
                    }
                    _ => {}
                }
            }
        }
    }
    let _ = simd;
    let (offset, step) = if neox { (h, 1) } else { (1, 2) };
    for k in 0..h {
        // Normal: pair (2k, 2k + 1); NeoX: pair (k, k + h).
        let ic = k * step;
        let (cc, cs) = if neox { (k, h + k) } else { (2 * k, 2 * k + 1) };
        // SAFETY: `ic + offset < n_dims` and `cc, cs < n_dims`. Both inputs
        // are read before either output is written (in place is fine).
        unsafe {
            let (c, s) = (*cache.add(cc), *cache.add(cs));
            let x0 = (*src.add(ic)).to_f32();
            let x1 = (*src.add(ic + offset)).to_f32();
            *dst.add(ic) = T::from_f32(x0 * c - x1 * s);
            *dst.add(ic + offset) = T::from_f32(x0 * s + x1 * c);
        }
    }
}
