//! The typed [`Settings`] struct: one field per key of [`KEYS`], its
//! defaults taken from the table, and the component parameters built from it
//! (predictors, placement and migration policies, NVMFS, cleaner).
//!
//! Invariant: every field is written by exactly one row of [`KEYS`] (checked
//! by the unit tests); a struct changed field by field is checked with
//! [`Settings::validate`].

use serde::Serialize;

use super::keys::KEYS;
use super::units::ser_threshold;
use crate::cleaner::CleanerParams;
use crate::migration::{
    migration_policy, migration_policy_names, MigrationParams, MigrationPolicy, ThresholdMode,
};
use crate::nvmfs::{FlushOrder, NvmfsParams, SplitParams};
use crate::object_cleaner::ObjectCleanParams;
use crate::placement::{placement_policy, placement_policy_names, PlacementPolicy};
use crate::size_predictor::SizeParams;
use crate::sync_predictor::SyncParams;

/// The policies' tunables. Build them with [`Settings::default`] and change
/// them with [`Settings::set`] or [`Settings::with`], which keep them valid;
/// a struct changed field by field can be checked with
/// [`Settings::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Synchronicity predictor: an interval between `fsync`s shorter than this
    /// (bytes) makes a file synchronous.
    pub sync_threshold_bytes: u64,
    /// Synchronicity predictor: quiet time after which a file is asynchronous
    /// again (ns).
    pub sync_idle_reset_ns: u64,
    /// Write-size predictor: a counter larger than this is "large".
    pub size_counter_threshold: u8,
    /// Write-size predictor: writes shorter than this many blocks are small.
    pub size_min_write_blocks: u64,
    /// Write-size predictor: new data written in pieces of at least this many
    /// bytes is large (0 = never).
    pub size_fresh_large_bytes: u64,
    /// Name of the placement policy (see
    /// [`placement_policy_names`]).
    pub placement_policy: String,
    /// A synchronous writer counts as active this long after its last
    /// synchronous write; while one is, bulk writes yield PM past the
    /// migration threshold (ns; 0 = never, PM is not protected).
    pub placement_sync_window_ns: u64,
    /// Bulk asynchronous writes take PM only while its use is below this
    /// percentage, synchronous writer or not (room kept for one arriving).
    pub placement_bulk_pm_percent: u8,
    /// The inode table's slots past the base table take at most this
    /// percentage of PM's page pool (design.md §3.7).
    pub inode_max_percent: u8,
    /// Bound of the DRAM page cache for block-tier data (bytes).
    pub dram_cache_bytes: u64,
    /// Dirty data older than this is written back even when the cache is not
    /// under pressure (ns).
    pub writeback_age_ns: u64,
    /// Write-back starts when dirty data passes this percentage of the cache.
    pub writeback_dirty_percent: u8,
    /// Largest read from a block tier into the cache (bytes): a miss reads the
    /// rest of the write entry it falls in, up to this much.
    pub max_read_unit_bytes: u64,
    /// Name of the migration policy (see [`migration_policy_names`]).
    pub migration_policy: String,
    /// When migration down starts: a fixed percentage of the upper tier, or
    /// dynamic from the read/write ratio (in a config file: `"dynamic"` or a
    /// number).
    #[serde(serialize_with = "ser_threshold")]
    pub migration_threshold: ThresholdMode,
    /// Above this use (percent) migration is forced and foreground writes go
    /// to the next tier (100 = never).
    pub migration_forced_percent: u8,
    /// A block tier with a tier below it drains into it past this use
    /// (percent, 1-99).
    pub migration_block_threshold: u8,
    /// A file unmodified for longer than this (ns) migrates whole.
    pub migration_age_ns: u64,
    /// Logs of cold files move to a block tier when PM is short of room
    /// (Ziggurat's log migration).
    pub log_migration: bool,
    /// Largest group of coalesced entries in group migration (bytes).
    pub group_migration_bytes: u64,
    /// Reverse migration when reads are at least this many times the writes
    /// (0 = never).
    pub reverse_read_ratio: u64,
    /// Reverse migration only while PM use is below this percentage.
    pub reverse_pm_low_percent: u8,
    /// Migration threads (0 = one per core).
    pub migration_threads: u32,
    /// NVMFS: flushing of dirty PM data starts at this share of the dirty
    /// list's target (percent).
    pub nvmfs_dirty_high_percent: u8,
    /// NVMFS: flushing continues down to this share (percent).
    pub nvmfs_dirty_low_percent: u8,
    /// NVMFS: flush unit (bytes).
    pub nvmfs_extent_bytes: u64,
    /// NVMFS: window over which clean and dirty hits are counted (ns).
    pub nvmfs_window_ns: u64,
    /// NVMFS: which dirty data is flushed first ([`FlushOrder::NAMES`]).
    pub nvmfs_flush_order: String,
    /// Cleaner: recycle extents only while free extents are below this share
    /// of all extents (percent; 0 = never).
    pub cleaner_free_percent: u8,
    /// Cleaner: recycle only while extent use (ideal / actual) is below this
    /// percent.
    pub cleaner_fragmentation_percent: u8,
    /// Object cleaning: parts less live than this percentage are rewritten
    /// (0 = never).
    pub object_clean_live_percent: u8,
    /// Object cleaning: most live bytes rewritten per pass (0 = never).
    pub object_clean_bytes_per_pass: u64,
    /// Object cleaning: least time between two passes (ns).
    pub object_clean_interval_ns: u64,
    /// Online discard: least time between two background discards of the
    /// block tiers' free extents (ns; 0 = off, `-o discard` sets 10 s).
    pub discard_interval_ns: u64,
    /// Object tiers: retries of a failed request (0 = none).
    pub s3_retries: u32,
    /// Object tiers: no retry starts later than this after a request's first
    /// try (ns).
    pub s3_timeout_ns: u64,
    /// Object tiers: time limit of one try of a request (ns).
    pub s3_request_timeout_ns: u64,
    /// Object tiers: the first wait before a retry (ns); later waits grow.
    pub s3_backoff_ns: u64,
}

impl Default for Settings {
    /// Every key's default from [`KEYS`].
    fn default() -> Self {
        let mut s = Settings {
            sync_threshold_bytes: 0,
            sync_idle_reset_ns: 0,
            size_counter_threshold: 0,
            size_min_write_blocks: 0,
            size_fresh_large_bytes: 0,
            placement_policy: String::new(),
            placement_sync_window_ns: 0,
            placement_bulk_pm_percent: 0,
            inode_max_percent: 0,
            dram_cache_bytes: 0,
            writeback_age_ns: 0,
            writeback_dirty_percent: 0,
            max_read_unit_bytes: 0,
            migration_policy: String::new(),
            migration_threshold: ThresholdMode::Dynamic,
            migration_forced_percent: 0,
            migration_block_threshold: 0,
            migration_age_ns: 0,
            log_migration: false,
            group_migration_bytes: 0,
            reverse_read_ratio: 0,
            reverse_pm_low_percent: 0,
            migration_threads: 0,
            nvmfs_dirty_high_percent: 0,
            nvmfs_dirty_low_percent: 0,
            nvmfs_extent_bytes: 0,
            nvmfs_window_ns: 0,
            nvmfs_flush_order: String::new(),
            cleaner_free_percent: 0,
            cleaner_fragmentation_percent: 0,
            object_clean_live_percent: 0,
            object_clean_bytes_per_pass: 0,
            object_clean_interval_ns: 0,
            discard_interval_ns: 0,
            s3_retries: 0,
            s3_timeout_ns: 0,
            s3_request_timeout_ns: 0,
            s3_backoff_ns: 0,
        };
        for k in KEYS {
            (k.put)(&mut s, (k.default)());
        }
        s
    }
}

impl Settings {
    /// The synchronicity predictor's parameters.
    pub fn sync_params(&self) -> SyncParams {
        SyncParams {
            threshold_bytes: self.sync_threshold_bytes,
            idle_reset_ns: self.sync_idle_reset_ns,
        }
    }

    /// The write-size predictor's parameters.
    pub fn size_params(&self) -> SizeParams {
        SizeParams {
            threshold: self.size_counter_threshold,
            min_write_blocks: self.size_min_write_blocks,
            fresh_large_bytes: self.size_fresh_large_bytes,
        }
    }

    /// The placement policy named by `placement_policy`, or an error if the
    /// name is unknown (possible after deserializing a config file).
    pub fn placement(&self) -> Result<Box<dyn PlacementPolicy + Send + Sync>, String> {
        registered(
            "placement_policy",
            &self.placement_policy,
            placement_policy,
            placement_policy_names(),
        )
    }

    /// The migration tunables.
    pub fn migration_params(&self) -> MigrationParams {
        MigrationParams {
            threshold: self.migration_threshold,
            block_threshold: self.migration_block_threshold,
            forced_percent: self.migration_forced_percent,
            age_ns: self.migration_age_ns,
            group_bytes: self.group_migration_bytes,
            reverse_read_ratio: self.reverse_read_ratio,
            reverse_pm_low_percent: self.reverse_pm_low_percent,
            threads: self.migration_threads,
            whole_when_uniform: false,
        }
    }

    /// The migration policy named by `migration_policy`, or an error if the
    /// name is unknown (possible after deserializing a config file).
    pub fn migration(&self) -> Result<Box<dyn MigrationPolicy + Send + Sync>, String> {
        registered(
            "migration_policy",
            &self.migration_policy,
            migration_policy,
            migration_policy_names(),
        )
    }

    /// NVMFS's tunables (the adaptive split's bounds are fixed defaults; a low
    /// mark above the high mark is lowered to it).
    pub fn nvmfs_params(&self) -> NvmfsParams {
        NvmfsParams {
            dirty_high_percent: self.nvmfs_dirty_high_percent,
            dirty_low_percent: self
                .nvmfs_dirty_low_percent
                .min(self.nvmfs_dirty_high_percent),
            extent_bytes: self.nvmfs_extent_bytes,
            window_ns: self.nvmfs_window_ns,
            split: SplitParams::default(),
            order: FlushOrder::parse(&self.nvmfs_flush_order).unwrap_or(FlushOrder::Frequency),
            ..NvmfsParams::default()
        }
    }

    /// The cleaner's tunables (the batch size is the fixed default).
    pub fn cleaner_params(&self) -> CleanerParams {
        CleanerParams {
            free_percent: self.cleaner_free_percent,
            fragmentation_percent: self.cleaner_fragmentation_percent,
            ..CleanerParams::default()
        }
    }

    /// The object cleaner's tunables.
    pub fn object_clean_params(&self) -> ObjectCleanParams {
        ObjectCleanParams {
            live_percent: self.object_clean_live_percent,
            bytes_per_pass: self.object_clean_bytes_per_pass,
            interval_ns: self.object_clean_interval_ns,
        }
    }
}

/// The policy `find` has under `name`, or an error naming the `key` and the
/// `known` names (possible after deserializing a config file).
fn registered<P>(
    key: &str,
    name: &str,
    find: fn(&str) -> Option<P>,
    known: &[&str],
) -> Result<P, String> {
    find(name).ok_or_else(|| format!("unknown {key} {name:?}; known: {}", known.join(", ")))
}
