//! Test data for the tokenizer tests: llama.cpp's vocabulary files with
//! their test vectors (`models/ggml-vocab-*.gguf{,.inp,.out}`) and the Gemma 3
//! GGUF. Too big to commit, they are looked up, and fetched into a cache on
//! first use:
//!
//! - llama.cpp `models/`: `$TESSERA_LLAMA_SRC` (a llama.cpp source tree, its
//!   `models/` folder, or a llama-cpp-python source tree), else
//!   `<cache>/llama-cpp-python-0.3.36/models` (the cache: `$TESSERA_CACHE`,
//!   else `${XDG_CACHE_HOME:-~/.cache}/tessera`),
//!   fetched with `pip download --no-deps --no-binary llama-cpp-python
//!   llama-cpp-python==0.3.36` (the source archive; only
//!   `*/vendor/llama.cpp/models/*` kept). Not `--no-binary :all:`: that
//!   makes pip build the archive's build backends (cmake, ninja) from source
//!   just to read its metadata.
//! - Gemma 3 270M: `$TESSERA_GEMMA_GGUF`, else the default model of
//!   `tessera run`, fetched by the same code (`tessera_llm::fetch`).
//!
//! Both are written to a temporary folder and renamed into place. When the
//! data can be neither found nor fetched the test fails, saying how to
//! provide it.
#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod tiny;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

const LLAMA_PY: &str = "llama-cpp-python-0.3.36";

/// One fetch at a time in this process, and one try: the outcome is kept.
static FETCH: Mutex<()> = Mutex::new(());
static LLAMA: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static GEMMA: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Tessera's cache folder (`tessera_llm::fetch::cache_dir`).
fn cache_root() -> PathBuf {
    tessera_llm::fetch::cache_dir().expect("a cache folder (set TESSERA_CACHE or HOME)")
}

fn has_vocab(dir: &Path) -> bool {
    dir.join("ggml-vocab-llama-spm.gguf").is_file()
}

/// A fresh temporary folder beside `target` (same file system, for rename).
fn temp_beside(target: &Path) -> PathBuf {
    let parent = target.parent().unwrap_or(Path::new("."));
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("x");
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("creating {}: {e}", tmp.display()));
    tmp
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ))
    }
}

fn pip_download(dest: &Path, args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(dest)
        .args(args);
    run(&mut cmd)
}

/// llama.cpp's `models/` folder with the `ggml-vocab-*` files.
pub fn llama_models_dir() -> PathBuf {
    if let Some(src) = std::env::var_os("TESSERA_LLAMA_SRC") {
        let src = PathBuf::from(src);
        for dir in [
            src.join("models"),
            src.join("vendor/llama.cpp/models"),
            src.clone(),
        ] {
            if has_vocab(&dir) {
                return dir;
            }
        }
        panic!(
            "TESSERA_LLAMA_SRC={} holds no ggml-vocab-llama-spm.gguf (in models/, \
             vendor/llama.cpp/models/ or itself)",
            src.display()
        );
    }
    let found = LLAMA.get_or_init(|| {
        let root = cache_root().join(LLAMA_PY);
        let models = root.join("models");
        let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
        if has_vocab(&models) {
            return Ok(models);
        }
        fetch_llama(&root).map(|()| models.clone()).map_err(|e| {
            format!(
                "llama.cpp's vocabulary test files are missing and could not be fetched: {e}\n\
                 Provide them: set TESSERA_LLAMA_SRC to a llama.cpp source tree (its models/ \
                 folder has ggml-vocab-*.gguf with .inp/.out), or put that models/ folder at {}",
                models.display()
            )
        })
    });
    match found {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn fetch_llama(root: &Path) -> Result<(), String> {
    std::fs::create_dir_all(root.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    let tmp = temp_beside(root);
    let r = fetch_llama_into(&tmp, root);
    if r.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    r
}

fn fetch_llama_into(tmp: &Path, root: &Path) -> Result<(), String> {
    let dl = tmp.join("download");
    pip_download(
        &dl,
        &[
            "--no-binary",
            "llama-cpp-python",
            "llama-cpp-python==0.3.36",
        ],
    )?;
    let script = r#"
import sys, tarfile, pathlib, shutil
dl, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
archives = [p for p in dl.iterdir() if p.name.endswith(('.tar.gz', '.tgz'))]
if not archives: sys.exit('no source archive downloaded')
n = 0
with tarfile.open(archives[0]) as t:
    for m in t:
        parts = m.name.split('/')
        if not m.isfile() or len(parts) < 5 or parts[1:4] != ['vendor', 'llama.cpp', 'models']:
            continue
        rel = pathlib.Path(*parts[4:])
        if '..' in rel.parts: continue
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        with t.extractfile(m) as src, open(dst, 'wb') as f:
            shutil.copyfileobj(src, f)
        n += 1
if n == 0: sys.exit('no vendor/llama.cpp/models files in the archive')
shutil.rmtree(dl)
"#;
    let models_tmp = tmp.join("models");
    run(Command::new("python3")
        .args(["-c", script])
        .arg(&dl)
        .arg(&models_tmp))?;
    if !has_vocab(&models_tmp) {
        return Err("the archive's models/ has no ggml-vocab-llama-spm.gguf".into());
    }
    publish(tmp, root)
}

/// Rename `tmp` to `target`, unless another process got there first.
fn publish(tmp: &Path, target: &Path) -> Result<(), String> {
    match std::fs::rename(tmp, target) {
        Ok(()) => Ok(()),
        Err(e) if target.exists() => {
            let _ = std::fs::remove_dir_all(tmp);
            let _ = e;
            Ok(())
        }
        Err(e) => Err(format!(
            "renaming {} to {}: {e}",
            tmp.display(),
            target.display()
        )),
    }
}

/// The Gemma 3 270M GGUF (its vocabulary: 262,144 SentencePiece tokens).
pub fn gemma_gguf() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_GEMMA_GGUF") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "TESSERA_GEMMA_GGUF={} is not a file",
            p.display()
        );
        return p;
    }
    let found = GEMMA.get_or_init(|| {
        let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
        let model = tessera_llm::fetch::DEFAULT_MODEL;
        tessera_llm::fetch::ensure(&model, &mut |l| eprintln!("{l}")).map_err(|e| {
            format!(
                "the Gemma 3 GGUF is missing and could not be fetched: {e}\n\
                 Provide it: set TESSERA_GEMMA_GGUF to gemma-3-270m-q4_k_m.gguf (SHA-256 {})",
                model.sha256
            )
        })
    });
    match found {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The test vectors of `ggml-vocab-NAME.gguf`, read as llama.cpp's
/// `test-tokenizer-0` does: inputs split on `\n__ggml_vocab_test__\n`, one
/// line of ids per input; a repeated input keeps its last ids.
pub fn read_vectors(models: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let base = models.join(format!("ggml-vocab-{name}.gguf"));
    let inp = std::fs::read(base.with_extension("gguf.inp"))
        .unwrap_or_else(|e| panic!("{}.inp: {e}", base.display()));
    let out = std::fs::read_to_string(base.with_extension("gguf.out"))
        .unwrap_or_else(|e| panic!("{}.out: {e}", base.display()));
    let inp = String::from_utf8(inp).unwrap_or_else(|e| panic!("{}.inp: {e}", base.display()));
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].find(sep) {
            Some(i) => {
                inputs.push(inp[pos..pos + i].to_string());
                pos += i + sep.len();
            }
            None => {
                inputs.push(inp[pos..].to_string());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| {
                    t.parse()
                        .unwrap_or_else(|e| panic!("{name}.out: {t:?}: {e}"))
                })
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: inputs and outputs differ in count"
    );
    let mut map = std::collections::BTreeMap::new();
    for (i, o) in inputs.into_iter().zip(outputs) {
        map.insert(i, o);
    }
    map.into_iter().collect()
}

/// One reference case of a `tests/data/*.txt` file made with llama-tokenize.
#[derive(Debug)]
pub struct RefCase {
    /// The vocabulary (`V NAME` line before it), if the file names one.
    pub vocab: Option<String>,
    pub text: String,
    pub add_special: bool,
    pub parse_special: bool,
    pub ids: Vec<u32>,
}

/// Undo the escapes of the data files: `\\ \n \t \r \u{hex}`.
pub fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some('u') => {
                assert_eq!(it.next(), Some('{'), "bad escape in {s:?}");
                let hex: String = it.by_ref().take_while(|&c| c != '}').collect();
                let cp = u32::from_str_radix(&hex, 16).unwrap();
                out.push(char::from_u32(cp).unwrap());
            }
            other => panic!("bad escape \\{other:?} in {s:?}"),
        }
    }
    out
}

/// Parse a reference file: `# comments`, `V NAME`, then pairs of
/// `T <add_special><parse_special> <escaped text>` and `I <ids>` lines.
pub fn reference_cases(data: &str) -> Vec<RefCase> {
    let mut cases = Vec::new();
    let mut vocab = None;
    let mut lines = data
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    while let Some(line) = lines.next() {
        if let Some(name) = line.strip_prefix("V ") {
            vocab = Some(name.to_string());
            continue;
        }
        let rest = line
            .strip_prefix("T ")
            .unwrap_or_else(|| panic!("expected a T line: {line:?}"));
        let flags = rest.get(..2).unwrap();
        let text = unescape(rest.get(3..).unwrap_or(""));
        let ids = lines.next().and_then(|l| l.strip_prefix('I')).unwrap();
        let ids = ids.split_whitespace().map(|x| x.parse().unwrap()).collect();
        cases.push(RefCase {
            vocab: vocab.clone(),
            text,
            add_special: &flags[..1] == "1",
            parse_special: &flags[1..] == "1",
            ids,
        });
    }
    cases
}
