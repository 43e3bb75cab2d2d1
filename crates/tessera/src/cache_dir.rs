//! Tessera's cache folder, shared by everything that keeps files between
//! runs (downloaded models, the CPU tuning measured on a machine).

use std::path::PathBuf;

use crate::{Error, Result};

/// Tessera's cache folder: `$TESSERA_CACHE`, else
/// `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("TESSERA_CACHE") {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(d).join("tessera"));
    }
    match std::env::var_os("HOME") {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("tessera")),
        None => Err(Error::NotFound(
            "a cache folder: set TESSERA_CACHE, XDG_CACHE_HOME or HOME".into(),
        )),
    }
}
