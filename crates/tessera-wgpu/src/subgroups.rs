//! Subgroup operations (`subgroupAdd` and the like): where the adapter has
//! them, the device is opened with them and the kernels whose time goes
//! into reductions take variants that sum within a subgroup (no
//! workgroup memory, no barrier) instead of trees in workgroup memory,
//! whose barriers cost most where a dispatch has little work (a decoding
//! step's products and norms). `TESSERA_WGPU_SUBGROUPS=0` keeps the trees
//! (and opens the device without the feature), for measuring; the tests
//! run both variants on any adapter that has the feature.
//!
//! A kernel's variant must be right for any subgroup size the device may
//! pick (between the adapter's smallest and largest), any grouping of
//! the invocations into subgroups, and subgroups with inactive
//! invocations: the variants only rely on what a subgroup is (its
//! invocations see the same `subgroup_id`), never on which invocations
//! share one, and count and rank a subgroup's active invocations
//! (`subgroupAdd(1)`, `subgroupExclusiveAdd(1)`) rather than trust
//! `subgroup_size` and `subgroup_invocation_id`.

use crate::device::Core;

env_switch!("TESSERA_WGPU_SUBGROUPS");

/// Whether the device should be opened with subgroup operations:
/// the adapter has them and `TESSERA_WGPU_SUBGROUPS` is not `0`.
pub(crate) fn wanted(adapter: &wgpu::Adapter) -> bool {
    adapter.features().contains(wgpu::Features::SUBGROUP)
        && !std::env::var("TESSERA_WGPU_SUBGROUPS").is_ok_and(|v| v.trim() == "0")
}

/// Whether `core`'s kernels take their subgroup variants: opened with the
/// feature, unless a test turned them off on this thread.
pub(crate) fn on(core: &Core) -> bool {
    core.smallest_subgroup.is_some() && switch_on(|| true)
}

/// Rows a workgroup of `invocations` gives one subgroup each at the
/// device's smallest subgroup (at least 1, at most 32): larger subgroups
/// take several rows each.
pub(crate) fn rows_per_group(core: &Core, invocations: u32) -> u32 {
    #[cfg(test)]
    if let Some(rows) = ROWS.with(std::cell::Cell::get) {
        return rows;
    }
    let smallest = core.smallest_subgroup.unwrap_or(invocations).max(1);
    (invocations / smallest).clamp(1, 32)
}

#[cfg(test)]
thread_local! {
    static ROWS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Make [`rows_per_group`] answer `rows` on this thread (`None`: the
/// device's), so that a test on a device of one subgroup size runs the
/// kernels as a device of another would: more rows than subgroups (each
/// subgroup takes several), or fewer (some subgroups idle).
#[cfg(test)]
pub(crate) fn force_rows(rows: Option<u32>) {
    ROWS.with(|r| r.set(rows));
}
