//! Instruction-set selection for CPU kernels, decided at run time.
//!
//! A release binary built for plain x86-64 must still use AVX2/FMA/F16C
//! where the machine has them, so kernels are chosen when a stream starts,
//! not when the crate compiles. `TESSERA_CPU_ISA=scalar|avx2|avx512` (or a
//! stream's `isa=` parameter) forces a path, to test each one on the same
//! machine; asking for one the CPU lacks falls back to the best available.
//! The families nest: `Avx512` uses the AVX2 kernels for the ops that have
//! no AVX-512 kernel, and every family falls back to the portable kernels.

/// A kernel family (ordered: each nests the ones before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, any CPU.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// [`Isa::Avx2`] plus AVX-512 F, BW, VL and VNNI (Ice Lake, Sapphire
    /// Rapids, Zen 4 and later): wider GEMM and gemv kernels, `vpdpbusd`
    /// for the 8-bit products.
    Avx512,
}

impl Isa {
    /// Name, as accepted by `TESSERA_CPU_ISA`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Is this family usable on the running CPU?
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => avx2_available(),
            Isa::Avx512 => avx2_available() && avx512_available(),
        }
    }

    /// May kernels of this family use AVX2/FMA/F16C here (`Avx2` or
    /// `Avx512`, and the CPU has it)?
    #[inline]
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512) && self.available()
    }

    /// May kernels of this family use AVX-512 (F/BW/VL/VNNI) here?
    #[inline]
    pub fn has_avx512(self) -> bool {
        self == Isa::Avx512 && self.available()
    }

    /// The best family of the running CPU.
    pub fn best() -> Isa {
        if Isa::Avx512.available() {
            Isa::Avx512
        } else if Isa::Avx2.available() {
            Isa::Avx2
        } else {
            Isa::Scalar
        }
    }

    /// `TESSERA_CPU_ISA` if set (falling back as [`Isa::at_most_available`]),
    /// else [`Isa::best`].
    pub fn from_env() -> Isa {
        std::env::var("TESSERA_CPU_ISA")
            .ok()
            .and_then(|v| Isa::from_name(&v))
            .map_or_else(Isa::best, Isa::at_most_available)
    }

    /// The family named `name` (`scalar`, `avx2`, `avx512`), available or not.
    pub fn from_name(name: &str) -> Option<Isa> {
        match name {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// This family if the CPU has it, else the best it has below it (the
    /// families nest: AVX-512 falls back to AVX2, AVX2 to portable code).
    pub fn at_most_available(self) -> Isa {
        if self.available() {
            self
        } else {
            Isa::best().min(self)
        }
    }

    /// Every family usable here (for tests that run each path).
    pub fn all_available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
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

#[cfg(target_arch = "x86_64")]
fn avx512_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_available() -> bool {
    false
}
