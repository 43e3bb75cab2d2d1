//! The reference's model of device memory.
//!
//! Every root (non-view) tensor of a graph owns a typed [`Region`] of exactly
//! `nbytes` bytes, addressed by byte offset as on a device. What a region
//! holds depends on its element type: F32 keeps exact f64 values (the
//! reference never rounds intermediate results to f32), F16/BF16 keep the
//! 16-bit patterns a device would store, integers keep integers, and
//! quantized types keep the quantized bytes. A view (or the result of CPY and
//! SET_ROWS) reads and writes its root's region through its own layout, so
//! aliasing behaves exactly as on a device.
//!
//! [`Dense`] is the logical form an op works on: the elements of a layout in
//! row-major order (dimension 0 fastest), as f64.

use tessera::{DType, Error, Graph, Layout, MAX_DIMS, Result, TensorId, quant};

use super::scalar::{bf16_bits, bf16_value, f16_bits, f16_value};

/// Logical elements of a tensor in row-major order, dimension 0 fastest.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    /// Extents.
    pub ne: [usize; MAX_DIMS],
    /// `ne[0] * ne[1] * ne[2] * ne[3]` values.
    pub data: Vec<f64>,
}

impl Dense {
    /// All zeros, with an overflow check on the element count.
    pub fn zeros(ne: [usize; MAX_DIMS]) -> Result<Self> {
        let n = checked_count(ne)?;
        Ok(Dense {
            ne,
            data: vec![0.0; n],
        })
    }

    /// `data` with extents `ne`; errors if the counts disagree.
    pub fn from_vec(ne: [usize; MAX_DIMS], data: Vec<f64>) -> Result<Self> {
        let n = checked_count(ne)?;
        if n != data.len() {
            return Err(Error::InvalidLayout(format!(
                "{} values given for extents {ne:?} ({n} elements)",
                data.len()
            )));
        }
        Ok(Dense { ne, data })
    }

    /// Flat index of element `i` (each index must be below its extent).
    pub fn flat(&self, i: [usize; MAX_DIMS]) -> usize {
        ((i[3] * self.ne[2] + i[2]) * self.ne[1] + i[1]) * self.ne[0] + i[0]
    }

    /// Element `i`, or an error naming it when it is out of range.
    pub fn get(&self, i: [usize; MAX_DIMS]) -> Result<f64> {
        if (0..MAX_DIMS).any(|d| i[d] >= self.ne[d]) {
            return Err(Error::OutOfBounds(format!(
                "element {i:?} of extents {:?}",
                self.ne
            )));
        }
        self.data
            .get(self.flat(i))
            .copied()
            .ok_or_else(|| Error::OutOfBounds(format!("element {i:?} of extents {:?}", self.ne)))
    }

    /// Row `(i1, i2, i3)` (empty if out of range).
    pub fn row(&self, i1: usize, i2: usize, i3: usize) -> &[f64] {
        let start = self.flat([0, i1, i2, i3]);
        self.data.get(start..start + self.ne[0]).unwrap_or(&[])
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// The same data with other extents of the same element count.
    pub fn reshaped(self, ne: [usize; MAX_DIMS]) -> Result<Self> {
        Dense::from_vec(ne, self.data)
    }
}

/// Element count of `ne`, checked.
pub fn checked_count(ne: [usize; MAX_DIMS]) -> Result<usize> {
    ne.iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .ok_or_else(|| Error::Overflow(format!("extents {ne:?}")))
}

/// Multi-index of flat element `k` of extents `ne` (for messages).
pub fn unflatten(ne: [usize; MAX_DIMS], k: usize) -> [usize; MAX_DIMS] {
    let mut i = [0; MAX_DIMS];
    let mut r = k;
    for d in 0..MAX_DIMS {
        let n = ne[d].max(1);
        i[d] = r % n;
        r /= n;
    }
    i
}

#[derive(Clone, Debug, PartialEq)]
enum Storage {
    /// F32: one exact value per 4 bytes.
    Real(Vec<f64>),
    /// I32 / I64: one integer per 4 / 8 bytes.
    Int(Vec<i64>),
    /// F16 / BF16: the stored bit patterns.
    Half(Vec<u16>),
    /// Quantized types: the bytes.
    Blocks(Vec<u8>),
}

/// The memory of one root tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    dtype: DType,
    nbytes: usize,
    storage: Storage,
}

impl Region {
    /// `nbytes` of zeros holding `dtype` elements.
    pub fn zeroed(dtype: DType, nbytes: usize) -> Result<Self> {
        let es = dtype.type_size();
        if !nbytes.is_multiple_of(es) {
            return Err(Error::InvalidLayout(format!(
                "{nbytes} bytes are not whole {dtype} elements/blocks"
            )));
        }
        let n = nbytes / es;
        let storage = match dtype {
            DType::F32 => Storage::Real(vec![0.0; n]),
            DType::I32 | DType::I64 => Storage::Int(vec![0; n]),
            DType::F16 | DType::BF16 => Storage::Half(vec![0; n]),
            _ => Storage::Blocks(vec![0; nbytes]),
        };
        Ok(Region {
            dtype,
            nbytes,
            storage,
        })
    }

    /// A region holding `bytes` (little-endian, as a device stores them).
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Result<Self> {
        let mut r = Region::zeroed(dtype, bytes.len())?;
        let es = dtype.type_size();
        match &mut r.storage {
            Storage::Real(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(es)) {
                    *x = f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                }
            }
            Storage::Int(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(es)) {
                    *x = if es == 4 {
                        i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    } else {
                        i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                    };
                }
            }
            Storage::Half(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(2)) {
                    *x = u16::from_le_bytes([c[0], c[1]]);
                }
            }
            Storage::Blocks(v) => v.copy_from_slice(bytes),
        }
        Ok(r)
    }

    /// The bytes a device would hold (F32 values rounded to f32).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.nbytes);
        match &self.storage {
            Storage::Real(v) => v.iter().for_each(|&x| out.extend((x as f32).to_le_bytes())),
            Storage::Int(v) if self.dtype == DType::I32 => {
                v.iter().for_each(|&x| out.extend((x as i32).to_le_bytes()))
            }
            Storage::Int(v) => v.iter().for_each(|&x| out.extend(x.to_le_bytes())),
            Storage::Half(v) => v.iter().for_each(|&x| out.extend(x.to_le_bytes())),
            Storage::Blocks(v) => out.extend_from_slice(v),
        }
        out
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Index of the element at byte `offset`, checked for alignment and range.
    fn slot(&self, offset: usize) -> Result<usize> {
        let es = self.dtype.type_size();
        if !offset.is_multiple_of(es) || offset.checked_add(es).is_none_or(|e| e > self.nbytes) {
            return Err(Error::OutOfBounds(format!(
                "{} element at byte {offset} of a {}-byte region",
                self.dtype, self.nbytes
            )));
        }
        Ok(offset / es)
    }

    /// The element at byte `offset` (non-quantized types).
    pub fn get(&self, offset: usize) -> Result<f64> {
        let i = self.slot(offset)?;
        let v = match &self.storage {
            Storage::Real(v) => v.get(i).copied(),
            Storage::Int(v) => v.get(i).map(|&x| x as f64),
            Storage::Half(v) => v.get(i).map(|&b| {
                if self.dtype == DType::F16 {
                    f16_value(b)
                } else {
                    bf16_value(b)
                }
            }),
            Storage::Blocks(_) => None,
        };
        v.ok_or_else(|| quantized_element(self.dtype))
    }

    /// Store `v` at byte `offset`, rounded as the element type stores it.
    pub fn set(&mut self, offset: usize, v: f64) -> Result<()> {
        let i = self.slot(offset)?;
        let dtype = self.dtype;
        let cell = match &mut self.storage {
            Storage::Real(s) => s.get_mut(i).map(|x| *x = v),
            Storage::Int(s) => s.get_mut(i).map(|x| {
                *x = if dtype == DType::I32 {
                    i64::from(v as i32)
                } else {
                    v as i64
                }
            }),
            Storage::Half(s) => s.get_mut(i).map(|x| {
                *x = if dtype == DType::F16 {
                    f16_bits(v)
                } else {
                    bf16_bits(v)
                }
            }),
            Storage::Blocks(_) => None,
        };
        cell.ok_or_else(|| quantized_element(dtype))
    }

    /// Dequantize the block at byte `offset` into `out` (quantized types).
    fn get_block(&self, offset: usize, out: &mut Vec<f64>) -> Result<()> {
        let i = self.slot(offset)?;
        let Storage::Blocks(bytes) = &self.storage else {
            return Err(Error::InvalidLayout(format!(
                "{} is not a block type",
                self.dtype
            )));
        };
        let ts = self.dtype.type_size();
        let block = bytes
            .get(i * ts..(i + 1) * ts)
            .ok_or_else(|| Error::OutOfBounds(format!("block at byte {offset}")))?;
        let mut vals = vec![0f32; self.dtype.block_size()];
        quant::to_f32(self.dtype, block, &mut vals)?;
        out.extend(vals.iter().map(|&x| f64::from(x)));
        Ok(())
    }

    /// Quantize `vals` (one block) into the block at byte `offset`.
    fn set_block(&mut self, offset: usize, vals: &[f64]) -> Result<()> {
        let i = self.slot(offset)?;
        let ts = self.dtype.type_size();
        let dtype = self.dtype;
        let Storage::Blocks(bytes) = &mut self.storage else {
            return Err(Error::InvalidLayout(format!("{dtype} is not a block type")));
        };
        let block = bytes
            .get_mut(i * ts..(i + 1) * ts)
            .ok_or_else(|| Error::OutOfBounds(format!("block at byte {offset}")))?;
        let src: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
        quant::from_f32(dtype, &src, block)
    }
}

fn quantized_element(dtype: DType) -> Error {
    Error::InvalidLayout(format!(
        "{dtype} is quantized: elements are read by whole blocks"
    ))
}

/// Byte offset of row `(i1, i2, i3)` of `layout` placed at `base`.
fn row_offset(layout: &Layout, base: usize, i: [usize; 3]) -> Result<usize> {
    let off = (0..3).try_fold(base, |acc, d| {
        i[d].checked_mul(layout.nb[d + 1])
            .and_then(|x| acc.checked_add(x))
    });
    off.ok_or_else(|| Error::Overflow(format!("row offset in {layout}")))
}

/// Check that `layout` at byte `base` stays inside `region` and has its type.
fn check_view(region: &Region, layout: &Layout, base: usize) -> Result<()> {
    if region.dtype != layout.dtype {
        return Err(Error::InvalidLayout(format!(
            "a {} view of {} memory",
            layout.dtype, region.dtype
        )));
    }
    let span = layout.checked_nbytes()?;
    if span > 0 && base.checked_add(span).is_none_or(|e| e > region.nbytes) {
        return Err(Error::OutOfBounds(format!(
            "view {layout} at byte {base} spans past the {} bytes of its memory",
            region.nbytes
        )));
    }
    Ok(())
}

/// Read row `i` of `layout` at `base` into `out`.
fn read_row(
    region: &Region,
    layout: &Layout,
    base: usize,
    i: [usize; 3],
    out: &mut Vec<f64>,
) -> Result<()> {
    let row = row_offset(layout, base, i)?;
    let bs = layout.dtype.block_size();
    for b in 0..layout.ne[0] / bs {
        let off = row + b * layout.nb[0];
        if bs == 1 {
            out.push(region.get(off)?);
        } else {
            region.get_block(off, out)?;
        }
    }
    Ok(())
}

/// Write `vals` (one row) as row `i` of `layout` at `base`.
fn write_row(
    region: &mut Region,
    layout: &Layout,
    base: usize,
    i: [usize; 3],
    vals: &[f64],
) -> Result<()> {
    if vals.len() != layout.ne[0] {
        return Err(Error::InvalidLayout(format!(
            "a row of {} values written to {layout}",
            vals.len()
        )));
    }
    let row = row_offset(layout, base, i)?;
    let bs = layout.dtype.block_size();
    for (b, chunk) in vals.chunks(bs).enumerate() {
        let off = row + b * layout.nb[0];
        if bs == 1 {
            region.set(off, chunk[0])?;
        } else {
            region.set_block(off, chunk)?;
        }
    }
    Ok(())
}

/// All elements of `layout` placed at byte `base` of `region`.
pub fn load_view(region: &Region, layout: &Layout, base: usize) -> Result<Dense> {
    check_view(region, layout, base)?;
    let n = checked_count(layout.ne)?;
    let mut data = Vec::with_capacity(n);
    if n > 0 {
        for i3 in 0..layout.ne[3] {
            for i2 in 0..layout.ne[2] {
                for i1 in 0..layout.ne[1] {
                    read_row(region, layout, base, [i1, i2, i3], &mut data)?;
                }
            }
        }
    }
    Dense::from_vec(layout.ne, data)
}

/// Store `values` (logical order, extents equal to the layout's) through
/// `layout` placed at byte `base` of `region`.
pub fn store_view(region: &mut Region, layout: &Layout, base: usize, values: &Dense) -> Result<()> {
    check_view(region, layout, base)?;
    if values.ne != layout.ne {
        return Err(Error::InvalidLayout(format!(
            "values of extents {:?} stored into {layout}",
            values.ne
        )));
    }
    if values.data.is_empty() {
        return Ok(());
    }
    for i3 in 0..layout.ne[3] {
        for i2 in 0..layout.ne[2] {
            for i1 in 0..layout.ne[1] {
                write_row(region, layout, base, [i1, i2, i3], values.row(i1, i2, i3))?;
            }
        }
    }
    Ok(())
}

/// The memory of every root tensor of one graph.
#[derive(Clone, Debug)]
pub struct RefMemory {
    regions: Vec<Option<Region>>,
}

impl RefMemory {
    /// Zeroed memory for every root (non-view) tensor of `graph`.
    pub fn new(graph: &Graph) -> Result<Self> {
        let mut regions = Vec::with_capacity(graph.len());
        for node in graph.nodes() {
            regions.push(if node.is_view() {
                None
            } else {
                Some(Region::zeroed(
                    node.layout.dtype,
                    node.layout.checked_nbytes()?,
                )?)
            });
        }
        Ok(RefMemory { regions })
    }

    /// The region of root tensor `id`.
    pub fn region(&self, id: TensorId) -> Result<&Region> {
        self.regions
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::InvalidLayout(format!("tensor {id} owns no memory (a view?)")))
    }

    fn region_mut(&mut self, id: TensorId) -> Result<&mut Region> {
        self.regions
            .get_mut(id.index())
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::InvalidLayout(format!("tensor {id} owns no memory (a view?)")))
    }

    /// Replace the memory of root `id` with `bytes` (exactly its `nbytes`).
    pub fn set_bytes(&mut self, id: TensorId, bytes: &[u8]) -> Result<()> {
        let r = self.region_mut(id)?;
        if bytes.len() != r.nbytes {
            return Err(Error::InvalidLayout(format!(
                "{} bytes given for tensor {id} of {} bytes",
                bytes.len(),
                r.nbytes
            )));
        }
        *r = Region::from_bytes(r.dtype, bytes)?;
        Ok(())
    }

    /// The bytes of root `id` as a device would hold them.
    pub fn bytes(&self, id: TensorId) -> Result<Vec<u8>> {
        Ok(self.region(id)?.to_bytes())
    }

    /// The logical values of any tensor `id` (a view reads its root).
    pub fn load(&self, graph: &Graph, id: TensorId) -> Result<Dense> {
        let layout = graph.node(id)?.layout;
        let (root, offs) = graph.memory_root(id)?;
        load_view(self.region(root)?, &layout, offs)
    }

    /// Store `values` through tensor `id`'s layout into its memory.
    pub fn store(&mut self, graph: &Graph, id: TensorId, values: &Dense) -> Result<()> {
        let layout = graph.node(id)?.layout;
        let (root, offs) = graph.memory_root(id)?;
        store_view(self.region_mut(root)?, &layout, offs, values)
    }

    /// Copy the blocks of quantized tensor `src` into `dst` (same type,
    /// same row length and row count), row by row in logical order.
    pub fn copy_blocks(&mut self, graph: &Graph, src: TensorId, dst: TensorId) -> Result<()> {
        let sl = graph.node(src)?.layout;
        let dl = graph.node(dst)?.layout;
        let (sroot, soffs) = graph.memory_root(src)?;
        let (droot, doffs) = graph.memory_root(dst)?;
        let rows = |l: &Layout| l.ne[1] * l.ne[2] * l.ne[3];
        if sl.dtype != dl.dtype || sl.ne[0] != dl.ne[0] || rows(&sl) != rows(&dl) {
            return Err(Error::InvalidLayout(format!(
                "blocks of {sl} copied into {dl}"
            )));
        }
        check_view(self.region(sroot)?, &sl, soffs)?;
        let sbytes = self.region(sroot)?.to_bytes();
        let region = self.region_mut(droot)?;
        check_view(region, &dl, doffs)?;
        let (ts, bs) = (dl.dtype.type_size(), dl.dtype.block_size());
        let Storage::Blocks(dv) = &mut region.storage else {
            return Err(quantized_element(dl.dtype));
        };
        let at = |l: &Layout, k: usize| {
            [
                k % l.ne[1],
                (k / l.ne[1]) % l.ne[2],
                k / (l.ne[1] * l.ne[2]),
            ]
        };
        for k in 0..rows(&sl) {
            let so = row_offset(&sl, soffs, at(&sl, k))?;
            let d0 = row_offset(&dl, doffs, at(&dl, k))?;
            for b in 0..sl.ne[0] / bs {
                let (s, d) = (so + b * sl.nb[0], d0 + b * dl.nb[0]);
                match (sbytes.get(s..s + ts), dv.get_mut(d..d + ts)) {
                    (Some(from), Some(to)) => to.copy_from_slice(from),
                    _ => return Err(Error::OutOfBounds(format!("block {b} of row {k} of {dl}"))),
                }
            }
        }
        Ok(())
    }

    /// Store one row `(i1, i2, i3)` of tensor `id`.
    pub fn store_row(
        &mut self,
        graph: &Graph,
        id: TensorId,
        i: [usize; 3],
        row: &[f64],
    ) -> Result<()> {
        let layout = graph.node(id)?.layout;
        let (root, offs) = graph.memory_root(id)?;
        let region = self.region_mut(root)?;
        check_view(region, &layout, offs)?;
        if (0..3).any(|d| i[d] >= layout.ne[d + 1]) {
            return Err(Error::OutOfBounds(format!("row {i:?} of {layout}")));
        }
        write_row(region, &layout, offs, i, row)
    }
}
