//! Which machine this is, beyond which instructions it has: the vendor and
//! microarchitecture, read from CPUID.
//!
//! Two CPUs with the same instruction sets can want different kernels: Zen 4
//! runs AVX-512 as two 256-bit halves where Intel's server cores have full
//! 512-bit units, and the best tile widths, vector widths and crossovers
//! follow. [`crate::tuning`] starts from the built-in choices for the
//! machine's class and from what `tessera bench tune` measured on this very
//! CPU; this module names the machine and gives the key the measurements are
//! saved under.

/// The CPU's vendor, from CPUID leaf 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vendor {
    Intel,
    Amd,
    /// Hygon (Zen-derived, reports AMD-like families).
    Hygon,
    /// Another vendor's id string (e.g. a hypervisor's), or none off x86.
    Other(String),
}

impl Vendor {
    fn from_id(id: &str) -> Vendor {
        match id {
            "GenuineIntel" => Vendor::Intel,
            "AuthenticAMD" => Vendor::Amd,
            "HygonGenuine" => Vendor::Hygon,
            other => Vendor::Other(other.to_owned()),
        }
    }
}

/// How wide the vector units execute 512-bit instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width512 {
    /// No AVX-512 (or not x86).
    None,
    /// 512-bit operations split into two 256-bit halves (Zen 4): AVX-512's
    /// instructions help, its width does not double throughput.
    Split,
    /// Full 512-bit execution (Intel's AVX-512 cores, Zen 5 desktop and
    /// server parts), or a width this table does not know.
    Full,
}

/// The machine's class and name, as far as CPUID tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub vendor: Vendor,
    /// Display family and model (base plus extended fields, as the
    /// vendors' manuals define them) and stepping.
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
    /// The microarchitecture, e.g. "Zen 4" or "Sapphire Rapids"; "unknown"
    /// for models this table does not list.
    pub microarch: &'static str,
    pub width512: Width512,
}

impl Machine {
    /// The running CPU.
    pub fn detect() -> Machine {
        let (vendor, leaf1) = cpuid_vendor_and_signature();
        let avx512 = crate::isa::Isa::Avx512.available();
        Machine::from_signature(&vendor, leaf1, avx512).with_amx(cpuid_amx_tile())
    }

    /// Corrects the name where the model number contradicts the features:
    /// hypervisors often report a client model (e.g. Rocket Lake, 0xA7)
    /// for a server core, and only Intel's server cores (Sapphire Rapids
    /// onwards) have AMX tiles. Such a machine is named "server core with
    /// AMX (model as reported)" instead of the client part it is not.
    pub fn with_amx(mut self, amx_tile: bool) -> Machine {
        let server_amx = ["Sapphire Rapids", "Emerald Rapids", "Granite Rapids"];
        if amx_tile && self.vendor == Vendor::Intel && !server_amx.contains(&self.microarch) {
            self.microarch = "server core with AMX (model as reported)";
        }
        self
    }

    /// The machine CPUID leaf 0's vendor string and leaf 1's EAX describe
    /// (`avx512`: the CPU reports the AVX-512 features Tessera uses).
    pub fn from_signature(vendor_id: &str, eax: u32, avx512: bool) -> Machine {
        let vendor = Vendor::from_id(vendor_id);
        let base_family = (eax >> 8) & 0xF;
        let base_model = (eax >> 4) & 0xF;
        let family = if base_family == 0xF {
            base_family + ((eax >> 20) & 0xFF)
        } else {
            base_family
        };
        let model = if base_family == 0x6 || base_family == 0xF {
            (((eax >> 16) & 0xF) << 4) | base_model
        } else {
            base_model
        };
        let microarch = microarch_name(&vendor, family, model);
        let width512 = if !avx512 {
            Width512::None
        } else if matches!(vendor, Vendor::Amd | Vendor::Hygon) && microarch == "Zen 4" {
            Width512::Split
        } else {
            Width512::Full
        };
        Machine {
            vendor,
            family,
            model,
            stepping: eax & 0xF,
            microarch,
            width512,
        }
    }

    /// One line for people: "AMD Zen 4 (family 25, model 17, stepping 1),
    /// 512-bit operations as two 256-bit halves".
    pub fn describe(&self) -> String {
        let vendor = match &self.vendor {
            Vendor::Intel => "Intel",
            Vendor::Amd => "AMD",
            Vendor::Hygon => "Hygon",
            Vendor::Other(s) if s.is_empty() => "unknown vendor",
            Vendor::Other(s) => s.as_str(),
        };
        let width = match self.width512 {
            Width512::None => "no AVX-512",
            Width512::Split => "512-bit operations as two 256-bit halves",
            Width512::Full => "full-width AVX-512",
        };
        format!(
            "{vendor} {} (family {}, model {}, stepping {}), {width}",
            self.microarch, self.family, self.model, self.stepping
        )
    }

    /// A file-name-safe key naming this exact CPU type, for saved tuning:
    /// vendor, family, model, stepping and the instruction families usable.
    pub fn key(&self) -> String {
        let vendor = match &self.vendor {
            Vendor::Intel => "intel".to_owned(),
            Vendor::Amd => "amd".to_owned(),
            Vendor::Hygon => "hygon".to_owned(),
            Vendor::Other(s) => s
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_lowercase(),
        };
        let best = crate::isa::Isa::best().name();
        format!(
            "{}-f{}-m{}-s{}-{best}",
            if vendor.is_empty() { "cpu" } else { &vendor },
            self.family,
            self.model,
            self.stepping
        )
    }
}

/// Microarchitecture names for the families and models of the vendors'
/// manuals (display values). Models not listed are "unknown": the tuning
/// then uses the defaults of the instruction family.
fn microarch_name(vendor: &Vendor, family: u32, model: u32) -> &'static str {
    match (vendor, family) {
        (Vendor::Amd | Vendor::Hygon, 0x17) => match model {
            0x00..=0x2F => "Zen/Zen+",
            _ => "Zen 2",
        },
        (Vendor::Amd, 0x19) => match model {
            0x10..=0x1F | 0x60..=0x7F | 0xA0..=0xAF => "Zen 4",
            _ => "Zen 3",
        },
        (Vendor::Amd, 0x1A) => "Zen 5",
        (Vendor::Intel, 6) => match model {
            0x3C | 0x3F | 0x45 | 0x46 => "Haswell",
            0x3D | 0x47 | 0x4F | 0x56 => "Broadwell",
            0x4E | 0x5E | 0x8E | 0x9E | 0xA5 | 0xA6 => "Skylake (client)",
            0x55 => "Skylake-SP/Cascade Lake",
            0x66 => "Cannon Lake",
            0x6A | 0x6C => "Ice Lake-SP",
            0x7D | 0x7E => "Ice Lake",
            0x8C | 0x8D => "Tiger Lake",
            0xA7 => "Rocket Lake",
            0x97 | 0x9A => "Alder Lake",
            0xB7 | 0xBA | 0xBF => "Raptor Lake",
            0xAA | 0xAC => "Meteor Lake",
            0x8F => "Sapphire Rapids",
            0xCF => "Emerald Rapids",
            0xAD | 0xAE => "Granite Rapids",
            0xAF => "Sierra Forest",
            _ => "unknown",
        },
        _ => "unknown",
    }
}

/// CPUID leaf 0's vendor string and leaf 1's EAX (family/model/stepping).
#[cfg(target_arch = "x86_64")]
fn cpuid_vendor_and_signature() -> (String, u32) {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU; leaves 0 and 1 are defined
    // on all of them and only read identification registers.
    #[allow(unused_unsafe)]
    let (l0, l1) = unsafe { (__cpuid(0), __cpuid(1)) };
    let mut id = Vec::with_capacity(12);
    for r in [l0.ebx, l0.edx, l0.ecx] {
        id.extend_from_slice(&r.to_le_bytes());
    }
    (String::from_utf8_lossy(&id).into_owned(), l1.eax)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_vendor_and_signature() -> (String, u32) {
    (String::new(), 0)
}

/// Whether CPUID reports AMX tiles (leaf 7, sub-leaf 0, EDX bit 24). Only
/// names the machine: Tessera runs no AMX code.
#[cfg(target_arch = "x86_64")]
fn cpuid_amx_tile() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 gives the highest
    // leaf, and leaf 7 is read only when it is within it. Both only read
    // identification registers.
    unsafe {
        __cpuid(0).eax >= 7 && (__cpuid_count(7, 0).edx >> 24) & 1 == 1
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_amx_tile() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EAX of CPUID leaf 1 from family/model/stepping as the manuals encode
    /// them (extended fields where the base family is 6 or 15).
    fn eax(family: u32, model: u32, stepping: u32) -> u32 {
        let (base_fam, ext_fam) = if family >= 0xF {
            (0xF, family - 0xF)
        } else {
            (family, 0)
        };
        (ext_fam << 20) | ((model >> 4) << 16) | (base_fam << 8) | ((model & 0xF) << 4) | stepping
    }

    #[test]
    fn families_and_models_decode_as_the_manuals_say() {
        // Zen 4 (EPYC 9004 "Genoa": family 0x19, model 0x11).
        let m = Machine::from_signature("AuthenticAMD", eax(0x19, 0x11, 1), true);
        assert_eq!((m.family, m.model, m.stepping), (25, 17, 1));
        assert_eq!(m.microarch, "Zen 4");
        assert_eq!(m.width512, Width512::Split);
        assert_eq!(
            m.key(),
            format!("amd-f25-m17-s1-{}", crate::isa::Isa::best().name())
        );
        // Zen 3 (EPYC 7003 "Milan": family 0x19, model 0x01), no AVX-512.
        let m = Machine::from_signature("AuthenticAMD", eax(0x19, 0x01, 1), false);
        assert_eq!((m.microarch, m.width512), ("Zen 3", Width512::None));
        // Zen 2 and Zen 5.
        let z2 = Machine::from_signature("AuthenticAMD", eax(0x17, 0x31, 0), false);
        assert_eq!(z2.microarch, "Zen 2");
        let z5 = Machine::from_signature("AuthenticAMD", eax(0x1A, 0x02, 0), true);
        assert_eq!((z5.microarch, z5.width512), ("Zen 5", Width512::Full));
        // Intel: Emerald Rapids is family 6 model 207 (0xCF), Sapphire
        // Rapids 0x8F, Ice Lake-SP 0x6A; a Skylake client has no AVX-512.
        let e = Machine::from_signature("GenuineIntel", eax(6, 0xCF, 2), true);
        assert_eq!((e.family, e.model, e.microarch), (6, 207, "Emerald Rapids"));
        assert_eq!(e.width512, Width512::Full);
        let s = Machine::from_signature("GenuineIntel", eax(6, 0x8F, 8), true);
        assert_eq!(s.microarch, "Sapphire Rapids");
        let sky = Machine::from_signature("GenuineIntel", eax(6, 0x9E, 10), false);
        assert_eq!(
            (sky.microarch, sky.width512),
            ("Skylake (client)", Width512::None)
        );
        // A hypervisor reporting a client model (Rocket Lake, 0xA7) for a
        // core with AMX tiles: named as a server core, key unchanged.
        let vm = Machine::from_signature("GenuineIntel", eax(6, 0xA7, 1), true);
        assert_eq!(vm.microarch, "Rocket Lake");
        let key = vm.key();
        let vm = vm.with_amx(true);
        assert_eq!(vm.microarch, "server core with AMX (model as reported)");
        assert_eq!(vm.key(), key);
        assert!(vm.describe().starts_with("Intel server core with AMX"));
        // Real AMX parts keep their names; AMD is never relabelled.
        assert_eq!(e.clone().with_amx(true).microarch, "Emerald Rapids");
        let zen = Machine::from_signature("AuthenticAMD", eax(0x19, 0x11, 1), true);
        assert_eq!(zen.with_amx(true).microarch, "Zen 4");
        // Unknown models and vendors say so; their keys stay file-name safe.
        let u = Machine::from_signature("Weird Vendor/1", eax(6, 0x01, 0), false);
        assert_eq!(u.microarch, "unknown");
        assert!(u.key().starts_with("weirdvendor1-f6-m1-s0-"), "{}", u.key());
        assert!(
            u.describe()
                .contains("Weird Vendor/1 unknown (family 6, model 1")
        );
    }

    #[test]
    fn the_running_cpu_is_described() {
        let m = Machine::detect();
        let d = m.describe();
        assert!(d.contains(&format!("family {}", m.family)), "{d}");
        assert!(
            m.key()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{}",
            m.key()
        );
        // The width follows what the instruction check says.
        assert_eq!(
            m.width512 == Width512::None,
            !crate::isa::Isa::Avx512.available()
        );
    }
}
