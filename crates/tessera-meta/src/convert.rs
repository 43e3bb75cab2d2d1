//! Conversions between split states, each run on every device: mirrored
//! → split is a local slice (a view and a copy kernel, or a copy through
//! the host for a device without that kernel); split → mirrored an
//! all-gather; a partial sum all-reduced (by exchange here, or by
//! reduce-scatter, `crate::collective`).

// Loops over device indices walk several per-device vectors at once.
#![allow(clippy::needless_range_loop)]

use tessera::{Error, Graph, Layout, Result, TensorId};

use crate::lower::{Held, Lower, Step};
use crate::state::{Split, SplitState};

impl Lower<'_> {
    /// `h` held whole by every device (an all-gather for a split tensor).
    pub fn mirrored(&mut self, h: &Held) -> Result<Held> {
        let split = match &h.state {
            SplitState::Mirrored => return Ok(h.clone()),
            SplitState::Partial => return self.reduce(h),
            SplitState::Split(s) => s.clone(),
        };
        let whole = Layout::contiguous4(h.layout.dtype, h.layout.ne)?;
        let mut pieces = vec![None; self.n];
        for j in 0..self.n {
            if let Some(pid) = h.ids[j] {
                let pid = if self.gs[j].layout(pid)?.is_contiguous() {
                    pid
                } else {
                    self.gs[j].cont(pid)?
                };
                self.gs[j].set_output(pid)?;
                pieces[j] = Some(pid);
            }
        }
        self.flush();
        let mut ids = Vec::with_capacity(self.n);
        let mut wholes = Vec::with_capacity(self.n);
        for g in &mut self.gs {
            let w = g.new_leaf(whole)?;
            wholes.push(w);
            ids.push(Some(w));
        }
        self.steps.push(Step::Gather {
            pieces,
            whole: wholes,
            runs: split.runs(&whole)?,
        });
        Ok(Held {
            state: SplitState::Mirrored,
            layout: whole,
            ids,
        })
    }

    /// `h` cut as `split` says (slicing a mirrored copy on each device;
    /// a tensor split otherwise is gathered first).
    pub fn sliced(&mut self, h: &Held, split: &Split) -> Result<Held> {
        if let SplitState::Split(s) = &h.state
            && s == split
        {
            return Ok(h.clone());
        }
        let m = self.mirrored(h)?;
        let l = m.layout;
        let bs = l.dtype.block_size();
        let starts = split.starts();
        let mut ids = vec![None; self.n];
        if !self.can_slice(&m, split)? {
            return self.slice_by_copy(&m, split);
        }
        for j in 0..self.n {
            let Some(sid) = m.ids[j] else { continue };
            if split.sizes[j] == 0 {
                continue;
            }
            let mut sid = sid;
            let mut full = self.gs[j].layout(sid)?;
            if full.nb[0] != full.dtype.type_size() {
                // Elements not packed along dimension 0: make a packed copy.
                sid = self.gs[j].cont(sid)?;
                full = self.gs[j].layout(sid)?;
            }
            let mut ne = full.ne;
            ne[split.axis] = split.sizes[j];
            let off = if split.axis == 0 {
                starts[j] / bs * full.nb[0]
            } else {
                starts[j] * full.nb[split.axis]
            };
            let v = self.gs[j].view(sid, ne, [full.nb[1], full.nb[2], full.nb[3]], off)?;
            ids[j] = Some(self.gs[j].cont(v)?);
        }
        Ok(Held {
            state: SplitState::Split(split.clone()),
            layout: l,
            ids,
        })
    }

    /// Every device with a share runs the view-and-copy slice of `m`
    /// (asked on a probe graph: a view of its copy, then CONT).
    fn can_slice(&self, m: &Held, split: &Split) -> Result<bool> {
        for j in 0..self.n {
            let Some(sid) = m.ids[j] else { continue };
            let Some(piece) = split.piece_layout(&m.layout, j)? else {
                continue;
            };
            let full = self.gs[j].layout(sid)?;
            let mut probe = Graph::new();
            let leaf = probe.new_leaf(full)?;
            let src = if full.nb[0] == full.dtype.type_size() {
                leaf
            } else {
                let c = probe.cont(leaf)?;
                if !self.devices[j].supports_op(&probe, c) {
                    return Ok(false);
                }
                c
            };
            let l = probe.layout(src)?;
            let v = probe.view(src, piece.ne, [l.nb[1], l.nb[2], l.nb[3]], 0)?;
            let c = probe.cont(v)?;
            if !self.devices[j].supports_op(&probe, c) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Slicing through the host: every device's piece copied out of its
    /// whole copy (which must be contiguous) between compute steps.
    fn slice_by_copy(&mut self, m: &Held, split: &Split) -> Result<Held> {
        let whole = Layout::contiguous4(m.layout.dtype, m.layout.ne)?;
        let mut from = vec![None; self.n];
        let mut piece = vec![None; self.n];
        for j in 0..self.n {
            let Some(sid) = m.ids[j] else { continue };
            let Some(pl) = split.piece_layout(&m.layout, j)? else {
                continue;
            };
            if self.gs[j].layout(sid)? != whole {
                return Err(Error::unsupported(
                    self.devices[j].name(),
                    format!("slicing the strided tensor {}", m.layout),
                ));
            }
            self.gs[j].set_output(sid)?;
            from[j] = Some(sid);
            piece[j] = Some(self.gs[j].new_leaf(pl)?);
        }
        self.flush();
        self.steps.push(Step::Slice {
            whole: from,
            piece: piece.clone(),
            runs: split.runs(&whole)?,
        });
        Ok(Held {
            state: SplitState::Split(split.clone()),
            layout: whole,
            ids: piece,
        })
    }

    /// All-reduce of a partial sum: the contributions are exchanged, and
    /// each device adds them in device order (so every device's sum is the
    /// same, bit for bit).
    pub fn reduce(&mut self, h: &Held) -> Result<Held> {
        let contributors: Vec<usize> = (0..self.n).filter(|&j| h.ids[j].is_some()).collect();
        if contributors.is_empty() {
            return Err(Error::unsupported("Meta", "a partial sum no device holds"));
        }
        if crate::collective::use_reduce_scatter(self.all_reduce, &contributors, self.n, &h.layout)
        {
            return self.reduce_scatter(h);
        }
        // Each contributor's partial sum lives until its own add below,
        // after the exchange; the received ones only around it.
        self.flush();
        let mut into = vec![vec![None; self.n]; self.n];
        for (j, row) in into.iter_mut().enumerate() {
            for &c in &contributors {
                if c != j {
                    // A lone received sum is the result itself (it lives on
                    // after the add's step): an ordinary leaf.
                    row[c] = Some(if contributors.len() == 1 {
                        self.gs[j].new_leaf(h.layout)?
                    } else {
                        self.receive_leaf(j, h.layout)?
                    });
                }
            }
        }
        // Exchange: every contributor's partial sum to every other device.
        let mut copies = Vec::new();
        for (j, row) in into.iter().enumerate() {
            for (c, r) in row.iter().enumerate() {
                if let (Some(r), Some(f)) = (*r, h.ids[c]) {
                    copies.push((c, f, j, r));
                }
            }
        }
        self.push_copy(copies, true);
        let mut ids = Vec::with_capacity(self.n);
        for (j, row) in into.iter().enumerate() {
            let terms: Vec<TensorId> = contributors
                .iter()
                .filter_map(|&c| if c == j { h.ids[j] } else { row[c] })
                .collect();
            let mut acc = terms[0];
            for &t in &terms[1..] {
                acc = self.gs[j].add(acc, t)?;
            }
            ids.push(Some(acc));
        }
        Ok(Held {
            state: SplitState::Mirrored,
            layout: h.layout,
            ids,
        })
    }
}
