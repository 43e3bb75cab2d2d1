//! Where the tuning in force comes from: the file `tessera bench tune
//! --save` writes for this CPU type, `TESSERA_CPU_TUNE` over it, and
//! `TESSERA_CPU_TUNE=builtin` without it; a file of another CPU type or
//! with a bad line is ignored with a warning. One test (it sets the
//! process's environment).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tessera::DType;
use tessera_cpu::isa::Isa;
use tessera_cpu::machine::Machine;
use tessera_cpu::tuning::{from_environment, saved_path};

fn set(key: &str, value: Option<&str>) {
    // SAFETY: this test binary has one test, so no other thread reads the
    // environment while it changes.
    unsafe {
        match value {
            Some(v) => std::env::set_var(key, v),
            None => std::env::remove_var(key),
        }
    }
}

#[test]
fn saved_file_then_environment_then_builtin_only() {
    let dir = std::env::temp_dir().join(format!("tessera-tuning-{}", std::process::id()));
    set("TESSERA_CACHE", Some(dir.to_str().unwrap()));
    set("TESSERA_CPU_TUNE", None);
    let machine = Machine::detect();
    let path = saved_path(&machine).unwrap();
    assert!(path.starts_with(&dir) && path.to_str().unwrap().contains(&machine.key()));

    // No file: the built-in layer only.
    let a = from_environment();
    assert_eq!(a.sources.len(), 1, "{:?}", a.sources);
    assert!(a.warnings.is_empty());

    // The saved file of this CPU type.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = format!(
        "machine={}\nq4_K.gemm_from=12\nf16.dot=avx2\n",
        machine.key()
    );
    std::fs::write(&path, text).unwrap();
    let a = from_environment();
    assert_eq!(a.sources.last().unwrap(), &path.display().to_string());
    assert_eq!(a.tuning.get(DType::Q4K).gemm_from, Some(12));
    assert_eq!(a.tuning.get(DType::F16).dot, Some(Isa::Avx2));

    // The environment over it, setting by setting.
    set(
        "TESSERA_CPU_TUNE",
        Some("q4_K.gemm_from=20,q8_0.gemm_int=off,prefetch=256"),
    );
    let a = from_environment();
    assert_eq!(a.sources.last().unwrap(), "TESSERA_CPU_TUNE");
    assert_eq!(a.tuning.prefetch, Some(256));
    assert_eq!(a.tuning.get(DType::Q4K).gemm_from, Some(20));
    assert_eq!(a.tuning.get(DType::F16).dot, Some(Isa::Avx2));
    assert_eq!(a.tuning.get(DType::Q8_0).gemm_int, Some(false));

    // A bad environment setting: ignored, said.
    set("TESSERA_CPU_TUNE", Some("q4_K.gemm_from=zero"));
    let a = from_environment();
    assert_eq!(a.tuning.get(DType::Q4K).gemm_from, Some(12));
    assert!(a.warnings[0].contains("TESSERA_CPU_TUNE") && a.warnings[0].contains("zero"));

    // `builtin`: the file is skipped.
    set("TESSERA_CPU_TUNE", Some("builtin"));
    let a = from_environment();
    assert_eq!(a.sources.len(), 1);
    assert_eq!(a.tuning.get(DType::Q4K).gemm_from, None);
    set("TESSERA_CPU_TUNE", None);

    // A file measured on another CPU type, or with a bad line: ignored.
    // (Another type: never this machine's key, whatever CPU runs the test.)
    let other = format!("machine=other-{}\nq4_K.gemm_from=12\n", machine.key());
    for bad in [other.as_str(), "q4_K.gemm_frm=12\n"] {
        std::fs::write(&path, bad).unwrap();
        let a = from_environment();
        assert_eq!(a.sources.len(), 1, "{bad}");
        assert!(
            a.warnings[0].contains("saved tuning ignored"),
            "{:?}",
            a.warnings
        );
    }
    // An oversized file is not read.
    std::fs::write(&path, vec![b'#'; 100 << 10]).unwrap();
    assert!(from_environment().warnings[0].contains("larger than"));
    std::fs::remove_dir_all(&dir).unwrap();
}
