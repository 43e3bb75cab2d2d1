//! Measuring ggml live: run upstream `test-backend-ops perf` for one op and
//! read back its per-case time, so Tessera's figures can be compared with
//! ggml on the same machine in the same sitting (these shared machines drift
//! by 10-30 % between runs; only interleaved ratios are trustworthy).
//!
//! Works with a stock `test-backend-ops` (cases it happens to share with
//! Tessera are matched) and best with the one `scripts/ggml-bench/build.sh`
//! builds, which runs exactly Tessera's cases (`TESSERA_CASES=1`) with the
//! thread count in `GGML_N_THREADS`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use tessera::{Error, Result};

/// One case of ggml's perf output.
#[derive(Clone, Debug)]
pub struct GgmlCase {
    /// Op name, e.g. `MUL_MAT`.
    pub op: String,
    /// Its `key=value` parameters.
    pub params: BTreeMap<String, String>,
    /// Microseconds per op.
    pub us_per_run: f64,
}

/// Run `binary perf -b backend -o op` with `threads` threads, only the cases
/// matching one of Tessera's `keys` (`-p`, a params regex: a stock binary
/// runs the few cases it shares with Tessera instead of its whole perf
/// list), and parse them.
pub fn measure(
    binary: &Path,
    backend: &str,
    op: &str,
    threads: usize,
    keys: &[&str],
) -> Result<Vec<GgmlCase>> {
    let filter = params_regex(keys);
    let out = Command::new(binary)
        .args(["perf", "-b", backend, "-o", op, "-p", &filter])
        .env("GGML_N_THREADS", threads.to_string())
        .env("TESSERA_CASES", "1")
        .output()
        .map_err(|e| Error::NotFound(format!("running {}: {e}", binary.display())))?;
    if !out.status.success() {
        return Err(Error::Malformed(format!(
            "{} perf -o {op} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(parse_line)
        .collect())
}

/// An ECMAScript regex (test-backend-ops' `-p`, `std::regex`) matching the
/// params of a case exactly when every `k=v` pair of one of `keys` is among
/// them: per key, one lookahead per pair, anchored at a pair boundary.
pub fn params_regex(keys: &[&str]) -> String {
    let escape = |s: &str| {
        let mut o = String::with_capacity(s.len() * 2);
        for c in s.chars() {
            if "\\^$.|?*+()[]{}".contains(c) {
                o.push('\\');
            }
            o.push(c);
        }
        o
    };
    let alts: Vec<String> = keys
        .iter()
        .map(|key| {
            let pairs = key.split_once('|').map_or("", |(_, p)| p);
            let mut r = String::from("^");
            for (k, v) in split_params(pairs) {
                r.push_str(&format!(
                    "(?=(?:.*,)?{}(?:,|$))",
                    escape(&format!("{k}={v}"))
                ));
            }
            r
        })
        .collect();
    format!("(?:{})", alts.join("|"))
}

/// `  OP(k=v,...):   N runs -   X us/run - ...` → the case.
fn parse_line(line: &str) -> Option<GgmlCase> {
    let line = line.trim();
    let (head, rest) = line.split_once("):")?;
    let (op, vars) = head.split_once('(')?;
    if op.is_empty()
        || !op
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
    {
        return None;
    }
    let before = rest.split(" us/run").next()?;
    let us_per_run = before.rsplit('-').next()?.trim().parse().ok()?;
    Some(GgmlCase {
        op: op.to_string(),
        params: split_params(vars),
        us_per_run,
    })
}

/// `a=1,b=[2,3],c=x` → `{a: 1, b: [2,3], c: x}` (commas inside brackets kept).
fn split_params(vars: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let bytes = vars.as_bytes();
    for i in 0..=bytes.len() {
        let c = bytes.get(i).copied().unwrap_or(b',');
        match c {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                if let Some((k, v)) = vars.get(start..i).and_then(|p| p.split_once('=')) {
                    out.insert(k.to_string(), v.to_string());
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// The ggml case matching Tessera's key `OP|k=v,...` (every pair present).
pub fn find<'a>(cases: &'a [GgmlCase], key: &str) -> Option<&'a GgmlCase> {
    let (op, pairs) = key.split_once('|')?;
    let want = split_params(pairs);
    cases
        .iter()
        .find(|c| c.op == op && want.iter().all(|(k, v)| c.params.get(k) == Some(v)))
}

/// The op name of a key (`MUL_MAT|...` → `MUL_MAT`).
pub fn op_of(key: &str) -> &str {
    key.split('|').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ggml_perf_lines_and_matches_keys() {
        let l = "  MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1):                 414 runs -  2423.85 us/run - 117.44 MFLOP/run -  48.45 GFLOPS";
        let c = parse_line(l).unwrap();
        assert_eq!(c.op, "MUL_MAT");
        assert_eq!(c.us_per_run, 2423.85);
        assert_eq!(c.params["bs"], "[1,1]");
        assert_eq!(c.params["per"], "[0,1,2,3]");
        let cases = vec![c];
        assert!(find(&cases, "MUL_MAT|type_a=q4_0,n=1,bs=[1,1]").is_some());
        assert!(find(&cases, "MUL_MAT|type_a=q4_0,n=8").is_none());
        assert!(find(&cases, "ADD|type_a=q4_0").is_none());
        assert!(parse_line("Testing 1 devices").is_none());
        assert!(parse_line("  Backend CPU: OK").is_none());
        let b = parse_line("  ADD(type=f32,ne=[4096,1,1,1],nr=[1,512,1,1],nf=1):  1710 runs -   595.04 us/run -  24576 kB/run -   39.39 GB/s").unwrap();
        assert_eq!(b.us_per_run, 595.04);
        assert_eq!(op_of("ADD|type=f32"), "ADD");
    }

    #[test]
    fn the_params_filter_names_every_pair_escaped() {
        let r = params_regex(&["MUL_MAT|type_a=q4_0,n=1,bs=[1,1]", "ADD|ne=[4096,1,1,1]"]);
        assert_eq!(
            r,
            "(?:^(?=(?:.*,)?bs=\\[1,1\\](?:,|$))(?=(?:.*,)?n=1(?:,|$))(?=(?:.*,)?type_a=q4_0(?:,|$))\
             |^(?=(?:.*,)?ne=\\[4096,1,1,1\\](?:,|$)))"
        );
    }
}
