//! `tessera gguf info FILE [--json]`: what a GGUF file holds, like
//! gguf-dump — version, metadata (arrays summarised by type, length and
//! first elements) and a tensor table (name, type, dims, offset, bytes).
//! The JSON form carries the same fields, written by hand with escaping.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tessera::Result;
use tessera_gguf::{GgufFile, TensorInfo, Value};

/// Elements of an array shown before `...`.
const ARRAY_PREVIEW: usize = 8;

/// Arguments of `tessera gguf info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The GGUF file.
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run `gguf info`.
pub fn run_info(args: &InfoArgs) -> Result<ExitCode> {
    // SAFETY: the command maps the file only while it prints its metadata;
    // the user runs it on a file nothing is rewriting meanwhile, the same
    // assumption as every tool that maps model files (llama.cpp's included).
    // (`GgufFile::open` would read a multi-gigabyte file just to list it.)
    let f = unsafe { GgufFile::open_mapped(&args.file) }?;
    let out = if args.json { json(&f) } else { text(&f) };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The text report.
pub fn text(f: &GgufFile) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GGUF version {}, {} metadata entries, {} tensors, alignment {}, data at byte {}",
        f.version(),
        f.metadata().len(),
        f.tensors().len(),
        f.alignment(),
        f.data_offset()
    );
    let _ = writeln!(s, "\nMetadata:");
    for (i, (k, v)) in f.metadata().iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:>4}: {:<14} {k} = {}",
            i + 1,
            v.type_description(),
            show(v)
        );
    }
    let _ = writeln!(s, "\nTensors:");
    let w = f
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "  {:>4}  {:<w$}  {:<7}  {:<24}  {:>12}  {:>12}",
        "#", "name", "type", "dims", "offset", "bytes"
    );
    for (i, t) in f.tensors().iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:>4}  {:<w$}  {:<7}  {:<24}  {:>12}  {:>12}",
            i + 1,
            t.name,
            t.type_name(),
            dims(t),
            t.offset,
            t.nbytes.map_or("?".to_string(), |n| n.to_string())
        );
    }
    s
}

fn dims(t: &TensorInfo) -> String {
    let d: Vec<String> = t.ne.iter().map(ToString::to_string).collect();
    format!("[{}]", d.join(", "))
}

/// A value for the text report: strings quoted, arrays as
/// `[len] first, elements, ...`.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(_, items) => {
            let first: Vec<String> = items.iter().take(ARRAY_PREVIEW).map(show).collect();
            let more = if items.len() > ARRAY_PREVIEW {
                ", ..."
            } else {
                ""
            };
            format!("[{}] {}{more}", items.len(), first.join(", "))
        }
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::F32(x) => x.to_string(),
        Value::Bool(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F64(x) => x.to_string(),
    }
}

/// The JSON report (the same fields as the text one).
pub fn json(f: &GgufFile) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"version\":{},\"alignment\":{},\"data_offset\":{},\"metadata\":[",
        f.version(),
        f.alignment(),
        f.data_offset()
    );
    for (i, (k, v)) in f.metadata().iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"key\":{},\"type\":{}",
            json_str(k),
            json_str(&v.type_description())
        );
        match v {
            Value::Array(_, items) => {
                let first: Vec<String> = items.iter().take(ARRAY_PREVIEW).map(json_value).collect();
                let _ = write!(
                    s,
                    ",\"length\":{},\"first\":[{}]",
                    items.len(),
                    first.join(",")
                );
            }
            v => {
                let _ = write!(s, ",\"value\":{}", json_value(v));
            }
        }
        s.push('}');
    }
    s.push_str("],\"tensors\":[");
    for (i, t) in f.tensors().iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let ne: Vec<String> = t.ne.iter().map(ToString::to_string).collect();
        let _ = write!(
            s,
            "{{\"name\":{},\"type\":{},\"type_id\":{},\"dims\":[{}],\"offset\":{},\"file_offset\":{},\"bytes\":{}}}",
            json_str(&t.name),
            json_str(&t.type_name()),
            t.type_id,
            ne.join(","),
            t.offset,
            t.file_offset,
            t.nbytes.map_or("null".to_string(), |n| n.to_string())
        );
    }
    s.push_str("]}\n");
    s
}

/// A value as JSON; arrays nested in arrays are shown in full up to the
/// preview length; non-finite floats are strings.
fn json_value(v: &Value) -> String {
    match v {
        Value::String(x) => json_str(x),
        Value::Bool(x) => x.to_string(),
        Value::F32(x) => json_f64(f64::from(*x)),
        Value::F64(x) => json_f64(*x),
        Value::Array(_, items) => {
            let first: Vec<String> = items.iter().take(ARRAY_PREVIEW).map(json_value).collect();
            format!("[{}]", first.join(","))
        }
        v => show(v),
    }
}

fn json_f64(x: f64) -> String {
    if x.is_finite() {
        format!("{x:?}")
    } else {
        json_str(&x.to_string())
    }
}

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tessera::DType;
    use tessera_gguf::{GgufWriter, ValueType};

    fn sample() -> GgufFile {
        let mut w = GgufWriter::new();
        w.add("general.name", "a \"q\"\n\\ \u{1}");
        w.add("n", 7u32);
        w.add("inf", f32::INFINITY);
        w.add("xs", Value::array(ValueType::I32, 0..20));
        w.add_tensor("w", DType::F32, &[2, 3], &[0; 24]).unwrap();
        w.add_tensor_raw("odd", 1000, &[32], &[0; 20]);
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn text_lists_metadata_and_tensors() {
        let t = text(&sample());
        assert!(
            t.contains("GGUF version 3, 4 metadata entries, 2 tensors"),
            "{t}"
        );
        assert!(t.contains("u32            n = 7"), "{t}");
        assert!(t.contains("xs = [20] 0, 1, 2, 3, 4, 5, 6, 7, ..."), "{t}");
        assert!(t.contains("type#1000"), "{t}");
        assert!(
            t.lines().any(|l| l.contains(" w ")
                && l.contains("f32")
                && l.contains("[2, 3]")
                && l.trim_end().ends_with("24")),
            "{t}"
        );
    }

    #[test]
    fn json_escapes_and_summarises() {
        let j = json(&sample());
        assert!(j.contains(r#""value":"a \"q\"\n\\ \u0001""#), "{j}");
        assert!(j.contains(r#"{"key":"n","type":"u32","value":7}"#), "{j}");
        assert!(j.contains(r#""value":"inf""#), "{j}");
        assert!(
            j.contains(r#""type":"array<i32>","length":20,"first":[0,1,2,3,4,5,6,7]"#),
            "{j}"
        );
        assert!(
            j.contains(r#"{"name":"w","type":"f32","type_id":0,"dims":[2,3],"offset":0,"#),
            "{j}"
        );
        assert!(
            j.contains(r#""type":"type#1000","type_id":1000,"dims":[32],"offset":32,"#)
                && j.contains(r#""bytes":null"#),
            "{j}"
        );
        assert!(j.starts_with('{') && j.ends_with("]}\n"), "{j}");
    }
}
