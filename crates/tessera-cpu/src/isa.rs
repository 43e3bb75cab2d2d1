//! Instruction-set selection for CPU kernels, decided at run time.
//!
//! A release binary built for plain x86-64 must still use AVX2/FMA/F16C
//! where the machine has them, so kernels are chosen when a stream starts,
//! not when the crate compiles. `TESSERA_CPU_ISA=scalar|avx2` forces a path
//! (to test each one on the same machine); asking for one the CPU lacks falls
//! back to the best available.

/// A kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust, any CPU.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
}

impl Isa {
    /// Name, as accepted by `TESSERA_CPU_ISA`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
        }
    }

    /// Is this family usable on the running CPU?
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => avx2_available(),
        }
    }

    /// The best family of the running CPU.
    pub fn best() -> Isa {
        if Isa::Avx2.available() {
            Isa::Avx2
        } else {
            Isa::Scalar
        }
    }

    /// `TESSERA_CPU_ISA` if set and available, else [`Isa::best`].
    pub fn from_env() -> Isa {
        match std::env::var("TESSERA_CPU_ISA").ok().as_deref() {
            Some("scalar") => Isa::Scalar,
            Some("avx2") if Isa::Avx2.available() => Isa::Avx2,
            _ => Isa::best(),
        }
    }

    /// Every family usable here (for tests that run each path).
    pub fn all_available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2]
            .into_iter()
            .filter(|i| i.available())
            .collect()
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}
