//! Terrace's policies: where a write goes, how hot a file is, and the settings
//! that tune them.
//!
//! Every policy here is a pure function of a *snapshot of observations*: the
//! caller (the core file system) gathers what it knows — how much data was
//! written since the last `fsync`, the counter of the write entry being
//! overwritten, how much PM is free, which block tiers exist — into plain
//! values, and the policy returns a decision. Nothing in this crate does I/O,
//! reads a clock (times are passed in, in nanoseconds), takes a lock or keeps
//! global state, so each policy is unit-tested on synthetic snapshots without a
//! mount, and two policies can be compared on the same snapshot.
//!
//! The modules, one per concern (in the spirit of mergerfs' one-file-per-policy
//! layout):
//!
//! - [`sync_predictor`]: Ziggurat's synchronicity predictor (§4): is this file
//!   about to be `fsync`ed? Per-file state, plus the accuracy counters the paper
//!   reports.
//! - [`size_predictor`]: Ziggurat's write-size predictor (§4): the counter kept
//!   in each write entry, and whether a write is "large and stable".
//! - [`placement`]: the placement decision (PM, a block tier through the DRAM
//!   cache, or a block tier written through) and the policies that make it,
//!   looked up by name with [`placement_policy`].
//! - [`amtime`]: a file's average modification time over its blocks (Ziggurat
//!   §5.1), updated incrementally; the migration profiler sorts files by it.
//! - [`cold_list`]: the sharded cold lists of files ordered by amtime (Ziggurat
//!   §5.1) from which migration picks the coldest file.
//! - [`migration`]: when to migrate (static or dynamic threshold, forced mark),
//!   which data of the coldest file moves, group migration, reverse migration,
//!   and the migration policies looked up by name with [`migration_policy`]
//!   (Ziggurat §5, NVMFS §III-C).
//! - [`nvmfs`]: NVMFS's dirty and clean LRU lists with an adaptive split,
//!   flushing in whole extents, and cost-free eviction of clean copies
//!   (NVMFS §III-C, §III-D).
//! - [`cleaner`]: NVMFS's extent recycling on block tiers: when, which
//!   extents, and how efficient (NVMFS §III-D).
//! - [`object_cleaner`]: which partly dead parts of an object tier to rewrite
//!   and how much per pass (LFS's cost-benefit choice, adapted to objects).
//! - [`access`]: HetFS's per-file access tracing and classification
//!   (sequential, random, byte-granular), used by the `hetfs` placement policy.
//! - [`settings`]: every tunable in one key/value registry serving the command
//!   line, the config file and run-time changes.
//!
//! Where the papers (Ziggurat, FAST'19, and its slides; NVMFS, MSST'13) and
//! the authors' code disagree, or where a paper leaves a choice open, each
//! module says which one it follows and why.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod access;
pub mod amtime;
pub mod cleaner;
pub mod cold_list;
pub mod log_migration;
pub mod migration;
pub mod nvmfs;
pub mod object_cleaner;
pub mod placement;
pub mod settings;
pub mod size_predictor;
pub mod sync_predictor;

pub use access::{AccessClass, AccessTrace};
pub use amtime::Amtime;
pub use cleaner::{CleanerParams, CleaningPlan, ExtentInfo};
pub use cold_list::{ColdLists, Shard};
pub use migration::{
    migration_policy, migration_policy_names, ColdChoice, EntrySnapshot, FileSnapshot, Group,
    IoCounters, MigrationNeed, MigrationParams, MigrationPolicy, ThresholdMode,
};
pub use nvmfs::{AdaptiveSplit, FlushRun, NvmfsParams, PageKind, SplitParams};
pub use object_cleaner::{ObjectCleanParams, ObjectCleanPlan, PartUsage};
pub use placement::{
    placement_policy, placement_policy_names, Placement, PlacementPolicy, TierRule,
    WriteObservation, PM_TIER,
};
pub use settings::Settings;
pub use size_predictor::{is_large, next_counter, predecessor, SizeParams};
pub use sync_predictor::{SyncAccuracy, SyncParams, SyncPredictor};
