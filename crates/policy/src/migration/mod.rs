//! Migration between tiers (Ziggurat §5): when to migrate, which data of the
//! coldest file moves, how small entries are grouped into large sequential
//! writes, when data comes back up to PM, and the policies that combine these
//! choices, looked up by name with [`migration_policy`].
//!
//! Every function here is a decision over a snapshot the caller gathered (tier
//! use, read/write counters, one file's write entries); the caller does the
//! copying, the log appends and the freeing.
//!
//! # When to migrate: the threshold
//!
//! Migration down starts when the use of the upper tier passes a threshold and
//! continues until it is below the threshold again (§5.2: "the migration
//! process repeats until the usage of the upper tier is below the threshold
//! again"). The caller keeps whether migration is running and passes it to
//! [`should_migrate`]: a tier not being migrated starts only when its use is
//! *above* the threshold; one being migrated keeps going until its use is
//! *below* it. The hysteresis between stopping and starting again is the
//! granularity of migration: the migrator moves whole entries or groups, so it
//! overshoots the threshold by up to one group.
//!
//! The threshold is either static ([`ThresholdMode::Static`]) or dynamic
//! ([`ThresholdMode::Dynamic`], the default). The paper: "the migration
//! threshold rises from 50% to 90% as the read-write ratio of the system
//! changes" — a write-dominated workload needs free PM for incoming writes, a
//! read-dominated one wants as much data on PM as possible. It gives no
//! formula; this follows the formula the project notes attribute to the
//! authors' code, `50 + 10 · (log2 reads − log2 writes)` clamped to `[50, 90]`
//! ([`dynamic_threshold`]; log2 rounded down, a zero count taken as 1). So an
//! equal mix gives 50%, twice as many reads 60%, and 16 times as many or more
//! 90%.
//!
//! Above a second, *forced* mark (default 95%, [`MigrationParams::forced_percent`])
//! the tier is nearly full: [`should_migrate`] answers [`MigrationNeed::Forced`]
//! and asynchronous foreground writes should go straight to the next tier
//! rather than wait for migration to free room (Ziggurat: writes "have to
//! either stall before the migration threads clean up enough space in NVMM,
//! or write to disk"); synchronous ones keep PM while it has room
//! ([`crate::placement`], load-aware routing).
//!
//! Bytes counted as *used* are the caller's to choose; with the NVMFS
//! behaviour (clean copies, [`MigrationPolicy::keep_clean_copy`]), PM blocks
//! that only hold a clean copy of data already on a block tier should not be
//! counted, since evicting them is free (see [`crate::nvmfs`]).
//!
//! # Which data moves
//!
//! The coldest file is the head of the cold lists ([`crate::cold_list`]).
//! If its mtime is older than [`MigrationParams::age_ns`] (30 s, §5.1), the
//! whole file is cold and all of its entries on the tier move; otherwise only
//! the entries whose mtime is earlier than the file's amtime, the cold part
//! ([`cold_entries`]). A recently written file whose entries all share one
//! mtime has no cold part: the answer is empty and the caller moves on to the
//! next coldest file.
//!
//! Terrace's addition: the paper's amtime spans all of a file's blocks, on
//! every tier. A large file whose bulk went to disk long ago and whose hot
//! region keeps being rewritten on PM has an amtime older than every one of
//! its PM entries, so the rule picks nothing on PM — and with a few such
//! files (databases, the Zipf benchmark) migration would stall with PM full.
//! When the file-wide amtime picks nothing on the tier, the average mtime of
//! the file's blocks *on that tier* is used instead: the older part of what
//! is there moves, the recently rewritten part stays.
//!
//! # Group migration
//!
//! Small entries adjacent in the file are coalesced into one group of at most
//! [`MigrationParams::group_bytes`] (16 MiB by default, the best average in
//! §6.7), written with one sequential write and committed as one new write
//! entry ([`group_entries`]). An entry larger than the group size is cut into
//! group-size pieces, so no group ever exceeds the group size (the migrated
//! data becomes new entries anyway, so cutting loses nothing). Entries that are
//! not adjacent in the file, or that come from different tiers, are never in
//! one group.
//!
//! # Reverse migration
//!
//! When reads dominate and PM is little used, PM space would otherwise idle
//! while block-tier data contends for DRAM (§5.2). [`reverse_candidates`]
//! picks the files with the most reads on block tiers, hottest first, as long
//! as moving them keeps PM use under the low mark. Reverse migration is not
//! grouped (PM handles random writes well). It also serves `mmap`, which the
//! caller decides without this policy.
//!
//! # Policies
//!
//! - `ziggurat`: the paper. Cold-part selection by amtime; migrated PM blocks
//!   are freed at once (a DRAM page-cache copy is kept while the cache is less
//!   than half full, [`keep_cache_copy`]).
//! - `nvmfs`: NVMFS §III-C. No hot/cold split inside a file: all of the file's
//!   entries on the tier move, least recently written first; the PM copy stays
//!   as a *clean copy* (two valid versions) and is evicted for free when space
//!   is needed.
//! - `default`: Ziggurat's selection (it keeps a file's hot part where writes
//!   land) with NVMFS's clean copies (reads of migrated data still hit PM until
//!   the space is wanted), except under [`MigrationNeed::Forced`], when the
//!   space is needed now and the PM copy is freed at once. This combination is
//!   the starting point; measurements will decide.
//!
//! # Files
//!
//! - `threshold.rs`: when to migrate — [`ThresholdMode`], the dynamic
//!   threshold, [`should_migrate`] and its hysteresis.
//! - `params.rs`: the tunables, [`MigrationParams`].
//! - `cold.rs`: which data of a file is cold — the snapshots a policy sees
//!   ([`FileSnapshot`], [`EntrySnapshot`]) and [`cold_entries`].
//! - `group.rs`: group migration — [`group_entries`], [`batch_groups`].
//! - `reverse.rs`: reverse migration — [`reverse_candidates`].
//! - `policy.rs`: the [`MigrationPolicy`] trait, what it observes, and the
//!   registry by name ([`migration_policy`]).
//! - `policy_default.rs`, `policy_ziggurat.rs`, `policy_nvmfs.rs`: one file
//!   per policy. A new policy is a file of its own plus one line in the
//!   registry.

mod cold;
mod group;
mod object_batch;
mod params;
mod policy;
mod policy_default;
mod policy_nvmfs;
mod policy_ziggurat;
mod reverse;
mod threshold;

/// Bytes per file-system block.
pub const BLOCK_BYTES: u64 = 4096;

pub use cold::{
    cold_entries, cold_entries_with, is_old, tier_amtime, ColdChoice, EntrySnapshot, FileSnapshot,
};
pub use group::{batch_groups, group_entries, Group};
pub use object_batch::{object_drain_goal, object_drain_window, ObjectWindow};
pub use params::MigrationParams;
pub use policy::{
    keep_cache_copy, migration_policy, migration_policy_names, CopyObservation, MigrationPolicy,
};
pub use policy_default::DefaultMigration;
pub use policy_nvmfs::NvmfsMigration;
pub use policy_ziggurat::ZigguratMigration;
pub use reverse::{reverse_candidates, FileReads};
pub use threshold::{
    dynamic_threshold, migration_threshold, should_migrate, IoCounters, MigrationNeed,
    ThresholdMode, DEFAULT_BLOCK_THRESHOLD_PERCENT, DEFAULT_FORCED_PERCENT, DYNAMIC_MAX_PERCENT,
    DYNAMIC_MIN_PERCENT,
};

#[cfg(test)]
mod tests;
