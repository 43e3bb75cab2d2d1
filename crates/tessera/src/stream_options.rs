//! Options of a new stream ([`crate::Device::new_stream`]), typed.
//!
//! The thread count is common to every device that has worker threads, so it
//! is a typed field; anything else is a device-specific setting (the CPU's
//! `isa`, say), which the device validates: a key it does not know is an
//! error, never silently ignored. [`StreamOptions::parse`] reads the
//! `key=value,key=value` form used on command lines.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// Most worker threads a stream may ask for (ggml's `GGML_MAX_N_THREADS`).
/// Above this a request is an error rather than an attempt to start them.
pub const MAX_THREADS: usize = 512;

/// What a new stream should be like.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    threads: Option<usize>,
    settings: Vec<(String, String)>,
}

impl StreamOptions {
    /// The device's defaults.
    pub fn new() -> Self {
        StreamOptions::default()
    }

    /// Use `n` worker threads (devices that have threads; others refuse).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// A device-specific setting (replaces an earlier value of `key`).
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.settings.retain(|(k, _)| k != key);
        self.settings.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The thread count asked for, if any, checked: at least 1 and at most
    /// [`MAX_THREADS`].
    pub fn thread_count(&self) -> Result<Option<usize>> {
        match self.threads {
            Some(n) => check_threads(n).map(Some),
            None => Ok(None),
        }
    }

    /// The value of setting `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every device-specific setting, in the order given.
    pub fn settings(&self) -> impl Iterator<Item = (&str, &str)> {
        self.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `Err` naming `device` and the first setting whose key is not in
    /// `known` (devices call it to refuse what they do not understand).
    pub fn only(&self, device: &str, known: &[&str]) -> Result<()> {
        match self.settings().find(|(k, _)| !known.contains(k)) {
            Some((k, v)) => Err(Error::unsupported(
                device,
                format!(
                    "stream setting '{k}={v}' (known: threads{})",
                    known.iter().map(|k| format!(", {k}")).collect::<String>()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Parse `key=value` items separated by commas (spaces around items are
    /// ignored; an empty string is the defaults). `threads` must be a whole
    /// number from 1 to [`MAX_THREADS`].
    pub fn parse(s: &str) -> Result<Self> {
        let mut o = StreamOptions::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |why: &str| Error::InvalidLayout(format!("stream option '{item}': {why}"));
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(bad("empty key"));
            }
            if key == "threads" {
                let n = value
                    .parse::<usize>()
                    .map_err(|_| bad("not a whole number"))?;
                o.threads = Some(check_threads(n)?);
            } else {
                o = o.set(key, value);
            }
        }
        Ok(o)
    }
}

fn check_threads(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_THREADS {
        return Err(Error::unsupported(
            "stream options",
            format!("{n} threads (at least 1, at most {MAX_THREADS}, ggml's GGML_MAX_N_THREADS)"),
        ));
    }
    Ok(n)
}

impl FromStr for StreamOptions {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        StreamOptions::parse(s)
    }
}

impl fmt::Display for StreamOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        if let Some(n) = self.threads {
            items.push(format!("threads={n}"));
        }
        items.extend(self.settings().map(|(k, v)| format!("{k}={v}")));
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parse_round_trips_and_refuses_nonsense() {
        let o = StreamOptions::parse(" isa=scalar , threads=3 ").unwrap();
        assert_eq!(o.thread_count().unwrap(), Some(3));
        assert_eq!(o.get("isa"), Some("scalar"));
        assert_eq!(StreamOptions::parse(&o.to_string()).unwrap(), o);
        assert_eq!(StreamOptions::parse("").unwrap(), StreamOptions::new());
        for bad in [
            "threads=0",
            "threads=x",
            "threads",
            "=3",
            "threads=100000",
            "threads=18446744073709551616",
        ] {
            assert!(StreamOptions::parse(bad).is_err(), "{bad}");
        }
        assert!(StreamOptions::new().threads(0).thread_count().is_err());
        assert!(
            StreamOptions::new()
                .threads(MAX_THREADS + 1)
                .thread_count()
                .is_err()
        );
        let e = StreamOptions::new()
            .set("speed", "9")
            .only("CPU", &["isa"])
            .unwrap_err();
        assert!(e.to_string().contains("speed=9"), "{e}");
    }
}
