//! Reader of the ggml op fixture file (`tests/fixtures/ggml/ops.bin`), made by
//! `scripts/ggml-op-fixtures/generate.sh`; the format is documented at the
//! top of `scripts/ggml-op-fixtures/ggml_ops.c`:
//!
//! ```text
//! "TGOF" u32:version=1 u32:n_cases
//! per case: str:name str:op str:params u32:n_tensors
//!   per tensor: u8:role(0 input, 1 output) str:name u32:ggml_type i64*4:ne u64:nbytes bytes
//! ```
//!
//! (`str` is a u32 length and that many bytes; everything little-endian.)

use std::collections::BTreeMap;

use tessera::DType;

/// One tensor of a case: ggml's type, extents and contiguous bytes.
#[derive(Clone, Debug)]
pub struct FixtureTensor {
    /// Input or output name (`a`, `b`, `mask`, ..., `out`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Extents (ggml's `ne`).
    pub ne: [usize; 4],
    /// Raw bytes, contiguous.
    pub data: Vec<u8>,
}

/// One op computed by ggml.
#[derive(Clone, Debug)]
pub struct Case {
    /// Unique name (`rope_neox_yarn`, ...).
    pub name: String,
    /// Builder key (`rope`, `mul_mat`, ...).
    pub op: String,
    /// `key=value` parameters, as written.
    pub params: BTreeMap<String, String>,
    /// Inputs in creation order (the order the graph's leaves are made in).
    pub inputs: Vec<FixtureTensor>,
    /// ggml's result.
    pub output: FixtureTensor,
}

impl Case {
    /// The input called `name`.
    pub fn input(&self, name: &str) -> &FixtureTensor {
        self.inputs
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{}: no input '{name}'", self.name))
    }

    /// Whether there is an input called `name`.
    pub fn has_input(&self, name: &str) -> bool {
        self.inputs.iter().any(|t| t.name == name)
    }

    /// Parameter `key`, if present.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    fn req(&self, key: &str) -> &str {
        self.param(key)
            .unwrap_or_else(|| panic!("{}: missing parameter '{key}'", self.name))
    }

    /// An f32 parameter (written with `%.9g`, so parsing gives ggml's exact value).
    pub fn f32(&self, key: &str) -> f32 {
        self.req(key)
            .parse()
            .unwrap_or_else(|e| panic!("{}: parameter {key}: {e}", self.name))
    }

    /// An integer parameter.
    pub fn int(&self, key: &str) -> i64 {
        self.req(key)
            .parse()
            .unwrap_or_else(|e| panic!("{}: parameter {key}: {e}", self.name))
    }

    /// A comma-separated list of indices, if present.
    pub fn list(&self, key: &str) -> Option<Vec<usize>> {
        self.param(key).map(|v| {
            v.split(',')
                .map(|x| {
                    x.parse()
                        .unwrap_or_else(|e| panic!("{}: parameter {key}: {e}", self.name))
                })
                .collect()
        })
    }

    /// The parameters as one line, for messages.
    pub fn params_line(&self) -> String {
        let v: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        v.join(" ")
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.unwrap_or_else(|| {
            panic!(
                "fixture file truncated: {n} bytes wanted at offset {} of {}",
                self.pos,
                self.data.len()
            )
        });
        let s = &self.data[self.pos..end];
        self.pos = end;
        s
    }

    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }

    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take(8).try_into().unwrap())
    }

    fn str(&mut self) -> String {
        let n = self.u32() as usize;
        String::from_utf8(self.take(n).to_vec()).expect("fixture strings are UTF-8")
    }

    fn tensor(&mut self) -> (u8, FixtureTensor) {
        let role = self.u8();
        let name = self.str();
        let dtype = DType::from_ggml_id(self.u32()).unwrap();
        let mut ne = [0usize; 4];
        for e in &mut ne {
            *e = usize::try_from(self.i64()).expect("extents are non-negative");
        }
        let n = usize::try_from(self.u64()).unwrap();
        let data = self.take(n).to_vec();
        let want = ne[1..].iter().product::<usize>() * dtype.row_size(ne[0]).unwrap();
        assert_eq!(
            data.len(),
            want,
            "tensor {name}: byte count for {dtype} {ne:?}"
        );
        (
            role,
            FixtureTensor {
                name,
                dtype,
                ne,
                data,
            },
        )
    }
}

/// Parse a whole fixture file.
pub fn parse(data: &[u8]) -> Vec<Case> {
    let mut r = Reader { data, pos: 0 };
    assert_eq!(r.take(4), b"TGOF", "not a ggml op fixture file");
    assert_eq!(r.u32(), 1, "fixture file version");
    let n = r.u32();
    let mut cases = Vec::new();
    for _ in 0..n {
        let name = r.str();
        let op = r.str();
        let params = r
            .str()
            .split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("params are key=value");
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let n_tensors = r.u32();
        let mut inputs = Vec::new();
        let mut output = None;
        for _ in 0..n_tensors {
            match r.tensor() {
                (0, t) => inputs.push(t),
                (1, t) => {
                    assert!(output.is_none(), "{name}: two outputs");
                    output = Some(t);
                }
                (role, t) => panic!("{name}: tensor {} has unknown role {role}", t.name),
            }
        }
        let output = output.unwrap_or_else(|| panic!("{name}: no output"));
        cases.push(Case {
            name,
            op,
            params,
            inputs,
            output,
        });
    }
    assert_eq!(r.pos, data.len(), "trailing bytes after the last case");
    cases
}
