//! [`GgufFile`]: a parsed and validated GGUF file over its bytes (a memory
//! map or an owned vector), with typed metadata access and tensor infos.

#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use tessera::{DType, Error, Result};

use crate::parse::{Cursor, MIN_KV_SIZE, MIN_TENSOR_INFO_SIZE, RawTensorInfo};
use crate::value::{FromValue, Value};

/// The magic at the start of every GGUF file.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// Largest `general.alignment` accepted.
pub const MAX_ALIGNMENT: usize = 1 << 20;
/// The metadata key holding the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The file's bytes, shared with every buffer bound over them.
pub(crate) type Storage = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// One tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Name (unique in the file).
    pub name: String,
    /// Dimensions, ggml order (`ne[0]` is the row length), 1 to 4 of them.
    pub ne: Vec<usize>,
    /// ggml type id as stored.
    pub type_id: u32,
    /// The type, when Tessera knows the id.
    pub dtype: Option<DType>,
    /// Offset of the data relative to the data section, as stored.
    pub offset: u64,
    /// Absolute offset of the data in the file.
    pub file_offset: usize,
    /// Bytes of data, when the type is known.
    pub nbytes: Option<usize>,
}

impl TensorInfo {
    /// The type, or an error naming the tensor and its unknown type id.
    pub fn dtype(&self) -> Result<DType> {
        self.dtype.ok_or_else(|| Error::Unsupported {
            device: "tessera-gguf".into(),
            what: format!("tensor '{}': ggml type id {}", self.name, self.type_id),
        })
    }

    /// Name of the type (`q8_0`), or `type#ID` for an unknown one.
    pub fn type_name(&self) -> String {
        match self.dtype {
            Some(t) => t.name().to_string(),
            None => format!("type#{}", self.type_id),
        }
    }
}

/// A parsed GGUF file.
pub struct GgufFile {
    pub(crate) storage: Storage,
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// For a memory-mapped file: tell the OS a byte range's pages are not
    /// needed now ([`GgufFile::release_tensor`]).
    pub(crate) release: Option<Release>,
}

/// See [`GgufFile::release_tensor`].
pub(crate) type Release = Arc<dyn Fn(usize, usize) + Send + Sync>;

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("len", &self.bytes().len())
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Read `path` into memory and parse it (safe; the file is copied
    /// once, with its size checked before the allocation). For zero-copy
    /// loading, see [`GgufFile::open_mapped`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        let mut file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
        let len = file.metadata().map_err(|e| io_error(path, e))?.len();
        let len = usize::try_from(len)
            .map_err(|_| Error::Malformed(format!("{}: {len} bytes", path.display())))?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|e| Error::OutOfMemory {
                device: "host".into(),
                requested: len,
                detail: format!("reading {}: {e}", path.display()),
            })?;
        file.read_to_end(&mut bytes)
            .map_err(|e| io_error(path, e))?;
        Self::from_bytes(bytes)
    }

    /// Parse bytes held in memory.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        Self::from_storage(Arc::new(bytes.into()))
    }

    pub(crate) fn from_storage(storage: Storage) -> Result<Self> {
        let data = (*storage).as_ref();
        let mut c = Cursor::new(data);
        let magic = c.u32("magic")?.to_le_bytes();
        if &magic != GGUF_MAGIC {
            return Err(Error::Malformed(format!(
                "bad magic {magic:02x?} at byte offset 0 (expected \"GGUF\")"
            )));
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(Error::Malformed(format!(
                "unsupported GGUF version {version} at byte offset 4 (2 and 3 are supported)"
            )));
        }
        let n_tensors = c.count("tensor count", MIN_TENSOR_INFO_SIZE)?;
        let n_kv = c.count("metadata count", MIN_KV_SIZE)?;
        let mut metadata = Vec::with_capacity(n_kv);
        let mut index = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let at = c.pos();
            let (key, value) = c.kv(i)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(Error::Malformed(format!(
                    "duplicate metadata key '{key}' at byte offset {at}"
                )));
            }
            metadata.push((key, value));
        }
        let alignment = match index.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) => {
                let a = *a as usize;
                if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
                    return Err(Error::Malformed(format!(
                        "{ALIGNMENT_KEY} = {a}: must be a power of two from 1 to {MAX_ALIGNMENT}"
                    )));
                }
                a
            }
            Some(v) => {
                return Err(Error::Malformed(format!(
                    "{ALIGNMENT_KEY} has type {}, expected u32",
                    v.type_description()
                )));
            }
        };
        let mut raw = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            raw.push(c.tensor_info(i)?);
        }
        let data_offset = c.pos().div_ceil(alignment).saturating_mul(alignment);
        let tensors = check_tensors(raw, data_offset, alignment, data.len())?;
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            storage,
            version,
            alignment,
            data_offset,
            metadata,
            index,
            tensors,
            tensor_index,
            release: None,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        (*self.storage).as_ref()
    }

    /// Format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The raw value of `key`, if present.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of `key` as `T`: [`Error::NotFound`] naming a missing key,
    /// [`Error::Malformed`] naming the key, the expected and the found type.
    pub fn get<'a, T: FromValue<'a>>(&'a self, key: &str) -> Result<T> {
        let v = self
            .value(key)
            .ok_or_else(|| Error::NotFound(format!("metadata key '{key}'")))?;
        T::from_value(v).ok_or_else(|| {
            Error::Malformed(format!(
                "metadata key '{key}': expected {}, found {}",
                T::expected(),
                v.type_description()
            ))
        })
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, or [`Error::NotFound`].
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::NotFound(format!("tensor '{name}' in the GGUF file")))
    }

    /// Tell the OS that tensor `name`'s bytes in a memory-mapped file are
    /// not needed now (they were copied to a device, or repacked): its pages
    /// leave the process's resident memory (they stay in the page cache,
    /// and are read again if a view of them is used). Nothing for a file
    /// read into memory, or an unknown name.
    pub fn release_tensor(&self, name: &str) {
        if let (Some(release), Ok(t)) = (&self.release, self.tensor_info(name)) {
            release(t.file_offset, t.nbytes.unwrap_or(0));
        }
    }

    /// The bytes of tensor `name` (its type must be known).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let t = self.tensor_info(name)?;
        t.dtype()?;
        let n = t.nbytes.unwrap_or(0);
        // check_tensors proved the range lies in the file.
        Ok(self
            .bytes()
            .get(t.file_offset..t.file_offset + n)
            .unwrap_or(&[]))
    }
}

/// Turn raw infos into checked ones: unique names, aligned offsets, data
/// inside the file, no two tensors sharing a byte.
fn check_tensors(
    raw: Vec<RawTensorInfo>,
    data_offset: usize,
    alignment: usize,
    file_len: usize,
) -> Result<Vec<TensorInfo>> {
    let mut names = HashSet::with_capacity(raw.len());
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        if !names.insert(r.name.clone()) {
            return Err(Error::Malformed(format!(
                "duplicate tensor name '{}' at byte offset {}",
                r.name, r.at
            )));
        }
        if r.offset % alignment as u64 != 0 {
            return Err(Error::Malformed(format!(
                "tensor '{}': data offset {} is not a multiple of the alignment {alignment}",
                r.name, r.offset
            )));
        }
        let file_offset = usize::try_from(r.offset)
            .ok()
            .and_then(|o| o.checked_add(data_offset))
            .filter(|&o| o <= file_len)
            .ok_or_else(|| {
                Error::Malformed(format!(
                    "tensor '{}': data offset {} (+ data section at {data_offset}) is past the end of the {file_len}-byte file",
                    r.name, r.offset
                ))
            })?;
        let dtype = DType::from_ggml_id(r.type_id).ok();
        let nbytes = match dtype {
            None => None,
            Some(t) => Some(tensor_bytes(&r, t)?),
        };
        if let Some(n) = nbytes
            && file_offset.checked_add(n).is_none_or(|end| end > file_len)
        {
            return Err(Error::Malformed(format!(
                "tensor '{}': {n} bytes at file offset {file_offset} run past the end of the {file_len}-byte file",
                r.name
            )));
        }
        out.push(TensorInfo {
            name: r.name,
            ne: r.ne,
            type_id: r.type_id,
            dtype,
            offset: r.offset,
            file_offset,
            nbytes,
        });
    }
    let mut spans: Vec<(usize, usize, &str)> = out
        .iter()
        .filter_map(|t| Some((t.file_offset, t.nbytes?, t.name.as_str())))
        .filter(|&(_, n, _)| n > 0)
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((a, an, aname), (b, _, bname)) = (w[0], w[1]);
        if a + an > b {
            return Err(Error::Malformed(format!(
                "tensors '{aname}' (bytes {a}..{}) and '{bname}' (from byte {b}) overlap",
                a + an
            )));
        }
    }
    Ok(out)
}

/// Bytes of a tensor of type `t`: rows must hold whole blocks.
fn tensor_bytes(r: &RawTensorInfo, t: DType) -> Result<usize> {
    let ne0 = r.ne.first().copied().unwrap_or(1);
    if ne0 % t.block_size() != 0 {
        return Err(Error::Malformed(format!(
            "tensor '{}': row length ne[0] = {ne0} is not a multiple of the {} block size {}",
            r.name,
            t.name(),
            t.block_size()
        )));
    }
    let row = t.row_size(ne0)?;
    r.ne.iter()
        .skip(1)
        .try_fold(row, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| {
            Error::Malformed(format!(
                "tensor '{}': the byte size of {} {:?} overflows",
                r.name,
                t.name(),
                r.ne
            ))
        })
}

/// An I/O error naming the file.
pub(crate) fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}
