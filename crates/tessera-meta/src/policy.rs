//! The split policy as data: what a tensor *is* (its [`Role`]) and the
//! devices' shares ([`SplitPolicy`]) decide how it is held — no tensor-name
//! patterns here; a model names each of its weights' roles.

use tessera::{Error, Layout, Result};

use crate::state::{Split, SplitState, share};

/// What a tensor is to tensor parallelism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Every device holds it (norms, embeddings, small tensors).
    Mirrored,
    /// Cut along `axis` into `units` equal, indivisible groups shared out
    /// over the devices: a weight `[K, M]` cut on axis 1 is column-parallel
    /// (each device computes some of the `M` outputs), on axis 0
    /// row-parallel (each device a partial sum over some of the `K`
    /// inputs). Units keep attention heads (times their GQA group) and
    /// quantization blocks whole.
    Split {
        /// The axis cut.
        axis: usize,
        /// Indivisible groups along it.
        units: usize,
    },
}

impl Role {
    /// Column-parallel weight `[K, M]`: output rows in `units` groups.
    pub fn column(units: usize) -> Role {
        Role::Split { axis: 1, units }
    }

    /// Row-parallel weight `[K, M]`: inputs in `units` groups.
    pub fn row(units: usize) -> Role {
        Role::Split { axis: 0, units }
    }

    /// A vector or cache cut along its first axis in `units` groups (the
    /// bias of a column-parallel weight, a per-head KV cache).
    pub fn vector(units: usize) -> Role {
        Role::Split { axis: 0, units }
    }
}

/// The devices' shares of every split tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitPolicy {
    ratios: Vec<f64>,
}

impl SplitPolicy {
    /// Shares in proportion to `ratios` (one per device, e.g. their speed
    /// or free memory; 0 leaves a device out of the split tensors).
    pub fn new(ratios: Vec<f64>) -> Result<SplitPolicy> {
        share(1, &ratios, 0)?;
        Ok(SplitPolicy { ratios })
    }

    /// Equal shares over `n` devices.
    pub fn even(n: usize) -> Result<SplitPolicy> {
        SplitPolicy::new(vec![1.0; n])
    }

    /// The ratios.
    pub fn ratios(&self) -> &[f64] {
        &self.ratios
    }

    /// How a tensor of `layout` with `role` is held; `rotate` (e.g. the
    /// layer index) chooses which devices take the units that do not
    /// divide evenly, so no device always gets them.
    pub fn state(&self, layout: &Layout, role: Role, rotate: usize) -> Result<SplitState> {
        let Role::Split { axis, units } = role else {
            return Ok(SplitState::Mirrored);
        };
        let extent = *layout
            .ne
            .get(axis)
            .ok_or_else(|| Error::InvalidLayout(format!("split axis {axis}")))?;
        if units == 0 || !extent.is_multiple_of(units) {
            return Err(Error::InvalidLayout(format!(
                "axis {axis} of {layout} ({extent}) cannot be cut into {units} equal units"
            )));
        }
        let unit = extent / units;
        let shares = share(units, &self.ratios, rotate)?;
        let sizes = shares.iter().map(|s| s * unit).collect();
        Ok(SplitState::Split(Split::new(layout, axis, sizes)?))
    }
}
