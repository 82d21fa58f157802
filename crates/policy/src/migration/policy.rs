//! The [`MigrationPolicy`] trait — which data of the coldest file moves and
//! whether its PM copy is kept — what a policy observes when deciding, and
//! the registry that finds a policy by name. Grouping, thresholds and reverse
//! migration are the same for every policy (the other files of this folder).
//!
//! **To add a policy**: a `policy_NAME.rs` of its own implementing the
//! trait, and one line in [`migration_policy`] and the names list. Core
//! reaches a policy's particular behaviour through trait methods only
//! (no name checks).

use std::fmt;

use super::cold::{cold_entries_with, ColdChoice, FileSnapshot};
use super::params::MigrationParams;
use super::policy_default::DefaultMigration;
use super::policy_nvmfs::NvmfsMigration;
use super::policy_ziggurat::ZigguratMigration;
use super::threshold::MigrationNeed;

/// Whether a migrated entry keeps a copy in the DRAM page cache (Ziggurat
/// §5.2: when the cache is less than half full, to speed up later reads and
/// unaligned writes).
pub fn keep_cache_copy(cache_used: u64, cache_capacity: u64) -> bool {
    u128::from(cache_used) * 2 < u128::from(cache_capacity)
}

/// What a policy knows when deciding whether migrated data keeps its PM copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyObservation {
    /// Why migration runs ([`should_migrate`](super::should_migrate)'s answer).
    pub need: MigrationNeed,
    /// PM use in bytes, clean copies excluded.
    pub pm_used: u64,
    /// PM capacity in bytes.
    pub pm_capacity: u64,
}

/// A migration policy: which data of the coldest file moves, and what happens
/// to its PM copy afterwards. Grouping, thresholds and reverse migration are
/// the same for every policy (the free functions of this module).
pub trait MigrationPolicy: fmt::Debug {
    /// The name it is registered under.
    fn name(&self) -> &'static str;
    /// The data of `file` on `from_tier` to move down, at `now_ns`. By
    /// default Ziggurat's choice (§5.1): the cold part by amtime
    /// ([`cold_entries_with`]); a policy that moves other data overrides it.
    fn choose(
        &self,
        file: &FileSnapshot,
        from_tier: terrace_format::TierId,
        now_ns: u64,
        params: &MigrationParams,
    ) -> ColdChoice {
        cold_entries_with(file, from_tier, now_ns, params)
    }
    /// Whether the PM blocks of data just migrated down stay as a clean copy
    /// (evictable at no cost, [`crate::nvmfs`]) instead of being freed.
    fn keep_clean_copy(&self, obs: &CopyObservation) -> bool;
    /// Whether PM's dirty data is kept between the NVMFS dirty list's own
    /// marks by its flush ([`crate::nvmfs::FlushRun`]) instead of the
    /// migration threshold, which then applies only when migration is
    /// forced. False unless a policy opts in.
    fn flushes_dirty_list(&self) -> bool {
        false
    }
}

const NAMES: &[&str] = &["default", "ziggurat", "nvmfs"];

/// Names of the registered migration policies, the default first.
pub fn migration_policy_names() -> &'static [&'static str] {
    NAMES
}

/// The migration policy registered as `name`, or `None` if there is none.
pub fn migration_policy(name: &str) -> Option<Box<dyn MigrationPolicy + Send + Sync>> {
    match name {
        "default" => Some(Box::new(DefaultMigration)),
        "ziggurat" => Some(Box::new(ZigguratMigration)),
        "nvmfs" => Some(Box::new(NvmfsMigration)),
        _ => None,
    }
}
