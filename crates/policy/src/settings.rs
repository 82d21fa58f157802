//! Every tunable of the policies in one key/value registry.
//!
//! One table serves the three ways of changing a setting — the command line
//! (`-o key=value`), the config file (TOML, one `key = value` per setting) and
//! run-time changes (`terrace set MOUNTPOINT KEY VALUE`) — so a key means the
//! same thing and accepts the same values everywhere, and the help text lives
//! next to the parser. Values are text in [`Settings::set`] and
//! [`Settings::get`] (sizes like `1M`, durations like `30s`), and `get` returns
//! text that `set` accepts back. In a config file a size or duration may be a
//! plain integer (bytes, ns) or such a string.
//!
//! Settings are values; the components they tune (predictor parameters, the
//! placement and migration policy objects) are built from them with
//! [`Settings::sync_params`], [`Settings::size_params`],
//! [`Settings::placement`], [`Settings::migration_params`],
//! [`Settings::migration`], [`Settings::nvmfs_params`] and
//! [`Settings::cleaner_params`].
//!
//! `set` checks each value on its own, and `nvmfs_dirty_low_percent` against
//! the current `nvmfs_dirty_high_percent` (low < high; raise the high mark
//! first). A config file is not cross-checked; the parameter builders keep
//! the result usable (a low mark above the high mark acts as the high mark).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::cleaner::CleanerParams;
use crate::migration::{
    migration_policy, migration_policy_names, MigrationParams, MigrationPolicy, ThresholdMode,
    BLOCK_BYTES,
};
use crate::nvmfs::{FlushOrder, NvmfsParams, SplitParams};
use crate::placement::{placement_policy, placement_policy_names, PlacementPolicy};
use crate::size_predictor::SizeParams;
use crate::sync_predictor::SyncParams;

/// The policies' tunables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Synchronicity predictor: an interval between `fsync`s shorter than this
    /// (bytes) makes a file synchronous.
    #[serde(deserialize_with = "de_size")]
    pub sync_threshold_bytes: u64,
    /// Synchronicity predictor: quiet time after which a file is asynchronous
    /// again (ns).
    #[serde(deserialize_with = "de_duration")]
    pub sync_idle_reset_ns: u64,
    /// Write-size predictor: a counter larger than this is "large".
    pub size_counter_threshold: u8,
    /// Write-size predictor: writes shorter than this many blocks are small.
    pub size_min_write_blocks: u64,
    /// Write-size predictor: new data written in pieces of at least this many
    /// bytes is large (0 = never).
    #[serde(deserialize_with = "de_size")]
    pub size_fresh_large_bytes: u64,
    /// Name of the placement policy (see
    /// [`placement_policy_names`]).
    pub placement_policy: String,
    /// Bound of the DRAM page cache for block-tier data (bytes).
    #[serde(deserialize_with = "de_size")]
    pub dram_cache_bytes: u64,
    /// Dirty data older than this is written back even when the cache is not
    /// under pressure (ns).
    #[serde(deserialize_with = "de_duration")]
    pub writeback_age_ns: u64,
    /// Write-back starts when dirty data passes this percentage of the cache.
    pub writeback_dirty_percent: u8,
    /// Largest read from a block tier into the cache (bytes): a miss reads the
    /// rest of the write entry it falls in, up to this much.
    #[serde(deserialize_with = "de_size")]
    pub max_read_unit_bytes: u64,
    /// Name of the migration policy (see [`migration_policy_names`]).
    pub migration_policy: String,
    /// When migration down starts: a fixed percentage of the upper tier, or
    /// dynamic from the read/write ratio (in a config file: `"dynamic"` or a
    /// number).
    #[serde(serialize_with = "ser_threshold", deserialize_with = "de_threshold")]
    pub migration_threshold: ThresholdMode,
    /// Above this use (percent) migration is forced and foreground writes go
    /// to the next tier (100 = never).
    pub migration_forced_percent: u8,
    /// A file unmodified for longer than this (ns) migrates whole.
    #[serde(deserialize_with = "de_duration")]
    pub migration_age_ns: u64,
    /// Logs of cold files move to a block tier when PM is short of room
    /// (Ziggurat's log migration).
    pub log_migration: bool,
    /// Largest group of coalesced entries in group migration (bytes).
    #[serde(deserialize_with = "de_size")]
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
    #[serde(deserialize_with = "de_size")]
    pub nvmfs_extent_bytes: u64,
    /// NVMFS: window over which clean and dirty hits are counted (ns).
    #[serde(deserialize_with = "de_duration")]
    pub nvmfs_window_ns: u64,
    /// NVMFS: which dirty data is flushed first ([`FlushOrder::NAMES`]).
    pub nvmfs_flush_order: String,
    /// Cleaner: recycle extents only while free extents are below this share
    /// of all extents (percent; 0 = never).
    pub cleaner_free_percent: u8,
    /// Cleaner: recycle only while extent use (ideal / actual) is below this
    /// percent.
    pub cleaner_fragmentation_percent: u8,
}

impl Default for Settings {
    fn default() -> Self {
        let sync = SyncParams::default();
        let size = SizeParams::default();
        let mig = MigrationParams::default();
        let nvmfs = NvmfsParams::default();
        let cleaner = CleanerParams::default();
        Settings {
            sync_threshold_bytes: sync.threshold_bytes,
            sync_idle_reset_ns: sync.idle_reset_ns,
            size_counter_threshold: size.threshold,
            size_min_write_blocks: size.min_write_blocks,
            size_fresh_large_bytes: size.fresh_large_bytes,
            placement_policy: placement_policy_names()[0].to_string(),
            dram_cache_bytes: 256 << 20,
            writeback_age_ns: 5_000_000_000,
            writeback_dirty_percent: 25,
            max_read_unit_bytes: 1 << 20,
            migration_policy: migration_policy_names()[0].to_string(),
            migration_threshold: mig.threshold,
            migration_forced_percent: mig.forced_percent,
            migration_age_ns: mig.age_ns,
            log_migration: true,
            group_migration_bytes: mig.group_bytes,
            reverse_read_ratio: mig.reverse_read_ratio,
            reverse_pm_low_percent: mig.reverse_pm_low_percent,
            migration_threads: mig.threads,
            nvmfs_dirty_high_percent: nvmfs.dirty_high_percent,
            nvmfs_dirty_low_percent: nvmfs.dirty_low_percent,
            nvmfs_extent_bytes: nvmfs.extent_bytes,
            nvmfs_window_ns: nvmfs.window_ns,
            nvmfs_flush_order: nvmfs.order.name().to_string(),
            cleaner_free_percent: cleaner.free_percent,
            cleaner_fragmentation_percent: cleaner.fragmentation_percent,
        }
    }
}

const KEYS: &[(&str, &str)] = &[
    (
        "sync_threshold_bytes",
        "size; fewer bytes than this between two fsyncs make a file synchronous, its small \
         writes stay on PM (default 1M, the authors' code; the paper used 4M)",
    ),
    (
        "sync_idle_reset_ns",
        "duration; a file quiet this long is predicted asynchronous again (default 30s)",
    ),
    (
        "size_counter_threshold",
        "0-255; a write entry counter larger than this marks rewrites of a range as large \
         and stable, sent to a block tier when asynchronous (default 4, the paper's)",
    ),
    (
        "size_min_write_blocks",
        "blocks; shorter writes are small and reset the counter (default 4, the slides'; \
         0 = no size check)",
    ),
    (
        "size_fresh_large_bytes",
        "size; a write of new data (no earlier write in its range) at least this large is \
         large, and goes to a block tier when asynchronous once PM has passed its migration \
         threshold (Ziggurat §3.2) (default 0 = new data is never large: measured slower \
         here, see docs/benchmarks.md)",
    ),
    (
        "placement_policy",
        "where new writes go: ziggurat (sync or small to PM, large async to disk), \
         pm-only, block-first, hetfs (by each file's access class: sequential async \
         streams to disk, random and byte-granular to PM) (default ziggurat)",
    ),
    (
        "dram_cache_bytes",
        "size; bound of the DRAM page cache in front of the block tiers (default 256M; \
         `terrace mount --dram-cache` sets it at mount; lowering it at run time writes back \
         and evicts down to the new bound)",
    ),
    (
        "writeback_age_ns",
        "duration; dirty cached data older than this is written back (default 5s)",
    ),
    (
        "writeback_dirty_percent",
        "1-100; write-back starts when dirty data passes this share of the cache (default 25)",
    ),
    (
        "max_read_unit_bytes",
        "size; a cache miss reads the rest of the write entry it falls in, up to this much \
         (default 1M); files read at random read only what they ask for",
    ),
    (
        "migration_policy",
        "how data migrates down: default (ziggurat's cold-part choice, PM copy kept clean \
         unless migration is forced), ziggurat (cold part by amtime, PM copy freed), nvmfs \
         (whole file, least recently written first, PM copy kept clean) (default default)",
    ),
    (
        "migration_threshold",
        "dynamic, or 1-99; migration down starts when PM use passes this percentage and runs \
         until it is below it; dynamic rises from 50 to 90 as reads outnumber writes \
         (default dynamic)",
    ),
    (
        "migration_forced_percent",
        "50-100; above this PM use migration is forced and new writes go to the next tier \
         (default 95; 100 = never)",
    ),
    (
        "migration_age_ns",
        "duration; a file not modified for longer than this migrates whole, a more recent one \
         only its entries older than its average mtime (default 30s)",
    ),
    (
        "log_migration",
        "on or off; when PM is over its migration threshold after data moved (or short of \
         room for metadata), the logs of files unchanged for migration_age_ns whose data is \
         all off PM move to the first block tier, and come back at the file's next change \
         (default on)",
    ),
    (
        "group_migration_bytes",
        "size, 4K-1G in whole 4K blocks; adjacent small entries are coalesced into one \
         sequential write of up to this much (default 16M, the paper's best)",
    ),
    (
        "reverse_read_ratio",
        "whole number; data moves back up to PM when reads are at least this many times the \
         writes (default 4; 0 = never)",
    ),
    (
        "reverse_pm_low_percent",
        "1-99; reverse migration only while PM use is below this percentage, and not beyond \
         it (default 50)",
    ),
    (
        "migration_threads",
        "0-1024; migration threads (default 0 = one per core)",
    ),
    (
        "nvmfs_dirty_high_percent",
        "1-100; flushing dirty PM data down starts when the dirty list reaches this share of \
         its target (default 80, NVMFS's); must stay above nvmfs_dirty_low_percent",
    ),
    (
        "nvmfs_dirty_low_percent",
        "0-99; flushing continues until the dirty list is down to this share of its target \
         (default 50, NVMFS's); must stay below nvmfs_dirty_high_percent",
    ),
    (
        "nvmfs_extent_bytes",
        "size, 4K-64M in whole 4K blocks; dirty data is flushed in units of this much, sorted \
         by file position (default 512K, NVMFS's extent)",
    ),
    (
        "nvmfs_window_ns",
        "duration, at least 1ms; clean and dirty hits are counted over this window, then the \
         split between the lists moves toward the one with more hits per page (default 2s)",
    ),
    (
        "nvmfs_flush_order",
        "frequency or lru; which dirty PM data the nvmfs policy flushes first: frequency \
         (default) flushes the lowest ln(writes) - age/30s first, keeping often rewritten \
         blocks on PM; lru is NVMFS's least recently written first",
    ),
    (
        "cleaner_free_percent",
        "0-100; block-tier extents are recycled only while free extents are fewer than this \
         share of all extents (default 10; 0 = never)",
    ),
    (
        "cleaner_fragmentation_percent",
        "1-100; extents are recycled only while extent use (ideal / actual, the fragmentation \
         `terrace status` shows) is below this, and only extents used less than this \
         (default 80)",
    ),
];

impl Settings {
    /// Every key with a one-line help text, in a stable order.
    pub fn keys() -> &'static [(&'static str, &'static str)] {
        KEYS
    }

    /// Sets `key` from its text form. On error nothing changes and the message
    /// names the key and says what is accepted.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let bad = |why: String| format!("bad value {value:?} for {key}: {why}");
        match key {
            "sync_threshold_bytes" => self.sync_threshold_bytes = parse_size(value).map_err(bad)?,
            "sync_idle_reset_ns" => self.sync_idle_reset_ns = parse_duration(value).map_err(bad)?,
            "size_counter_threshold" => {
                self.size_counter_threshold = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number from 0 to 255".into()))?
            }
            "size_fresh_large_bytes" => {
                self.size_fresh_large_bytes = parse_size(value).map_err(bad)?
            }
            "size_min_write_blocks" => {
                self.size_min_write_blocks = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number of blocks".into()))?
            }
            "placement_policy" => {
                let name = value.trim();
                if placement_policy(name).is_none() {
                    return Err(bad(format!(
                        "no such policy; known: {}",
                        placement_policy_names().join(", ")
                    )));
                }
                self.placement_policy = name.to_string();
            }
            "dram_cache_bytes" => {
                let v = parse_size(value).map_err(bad)?;
                if v < 1 << 20 {
                    return Err(bad("the DRAM cache needs at least 1M".into()));
                }
                self.dram_cache_bytes = v;
            }
            "writeback_age_ns" => self.writeback_age_ns = parse_duration(value).map_err(bad)?,
            "writeback_dirty_percent" => {
                let v: u8 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number from 1 to 100".into()))?;
                if !(1..=100).contains(&v) {
                    return Err(bad("expected a whole number from 1 to 100".into()));
                }
                self.writeback_dirty_percent = v;
            }
            "max_read_unit_bytes" => {
                let v = parse_size(value).map_err(bad)?;
                if !(4096..=64 << 20).contains(&v) {
                    return Err(bad("expected a size from 4K to 64M".into()));
                }
                self.max_read_unit_bytes = v;
            }
            "migration_policy" => {
                let name = value.trim();
                if migration_policy(name).is_none() {
                    return Err(bad(format!(
                        "no such policy; known: {}",
                        migration_policy_names().join(", ")
                    )));
                }
                self.migration_policy = name.to_string();
            }
            "migration_threshold" => {
                self.migration_threshold = parse_threshold(value).map_err(bad)?
            }
            "migration_forced_percent" => {
                self.migration_forced_percent = parse_percent(value, 50, 100).map_err(bad)?
            }
            "migration_age_ns" => self.migration_age_ns = parse_duration(value).map_err(bad)?,
            "log_migration" => {
                self.log_migration = match value.trim() {
                    "on" | "true" | "1" | "yes" => true,
                    "off" | "false" | "0" | "no" => false,
                    _ => return Err(bad("on or off".into())),
                }
            }
            "group_migration_bytes" => {
                self.group_migration_bytes = parse_blocks(value, 4 << 10, 1 << 30).map_err(bad)?
            }
            "reverse_read_ratio" => {
                self.reverse_read_ratio = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number (0 = never)".into()))?
            }
            "reverse_pm_low_percent" => {
                self.reverse_pm_low_percent = parse_percent(value, 1, 99).map_err(bad)?
            }
            "migration_threads" => {
                let v: u32 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number from 0 to 1024".into()))?;
                if v > 1024 {
                    return Err(bad("expected a whole number from 0 to 1024".into()));
                }
                self.migration_threads = v;
            }
            "nvmfs_dirty_high_percent" => {
                let v = parse_percent(value, 1, 100).map_err(bad)?;
                if v <= self.nvmfs_dirty_low_percent {
                    return Err(bad(format!(
                        "must be above nvmfs_dirty_low_percent ({})",
                        self.nvmfs_dirty_low_percent
                    )));
                }
                self.nvmfs_dirty_high_percent = v;
            }
            "nvmfs_dirty_low_percent" => {
                let v = parse_percent(value, 0, 99).map_err(bad)?;
                if v >= self.nvmfs_dirty_high_percent {
                    return Err(bad(format!(
                        "must be below nvmfs_dirty_high_percent ({})",
                        self.nvmfs_dirty_high_percent
                    )));
                }
                self.nvmfs_dirty_low_percent = v;
            }
            "nvmfs_extent_bytes" => {
                self.nvmfs_extent_bytes = parse_blocks(value, 4 << 10, 64 << 20).map_err(bad)?
            }
            "nvmfs_window_ns" => {
                let v = parse_duration(value).map_err(bad)?;
                if v < 1_000_000 {
                    return Err(bad("expected a duration of at least 1ms".into()));
                }
                self.nvmfs_window_ns = v;
            }
            "nvmfs_flush_order" => {
                let order = FlushOrder::parse(value).ok_or_else(|| {
                    bad(format!("expected one of: {}", FlushOrder::NAMES.join(", ")))
                })?;
                self.nvmfs_flush_order = order.name().to_string();
            }
            "cleaner_free_percent" => {
                self.cleaner_free_percent = parse_percent(value, 0, 100).map_err(bad)?
            }
            "cleaner_fragmentation_percent" => {
                self.cleaner_fragmentation_percent = parse_percent(value, 1, 100).map_err(bad)?
            }
            _ => return Err(unknown_key(key)),
        }
        Ok(())
    }

    /// The text form of `key`'s value (accepted back by [`set`](Self::set)), or
    /// `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "sync_threshold_bytes" => format_size(self.sync_threshold_bytes),
            "sync_idle_reset_ns" => format_duration(self.sync_idle_reset_ns),
            "size_counter_threshold" => self.size_counter_threshold.to_string(),
            "size_min_write_blocks" => self.size_min_write_blocks.to_string(),
            "size_fresh_large_bytes" => format_size(self.size_fresh_large_bytes),
            "placement_policy" => self.placement_policy.clone(),
            "dram_cache_bytes" => format_size(self.dram_cache_bytes),
            "writeback_age_ns" => format_duration(self.writeback_age_ns),
            "writeback_dirty_percent" => self.writeback_dirty_percent.to_string(),
            "max_read_unit_bytes" => format_size(self.max_read_unit_bytes),
            "migration_policy" => self.migration_policy.clone(),
            "migration_threshold" => self.migration_threshold.to_string(),
            "migration_forced_percent" => self.migration_forced_percent.to_string(),
            "migration_age_ns" => format_duration(self.migration_age_ns),
            "log_migration" => if self.log_migration { "on" } else { "off" }.to_string(),
            "group_migration_bytes" => format_size(self.group_migration_bytes),
            "reverse_read_ratio" => self.reverse_read_ratio.to_string(),
            "reverse_pm_low_percent" => self.reverse_pm_low_percent.to_string(),
            "migration_threads" => self.migration_threads.to_string(),
            "nvmfs_dirty_high_percent" => self.nvmfs_dirty_high_percent.to_string(),
            "nvmfs_dirty_low_percent" => self.nvmfs_dirty_low_percent.to_string(),
            "nvmfs_extent_bytes" => format_size(self.nvmfs_extent_bytes),
            "nvmfs_window_ns" => format_duration(self.nvmfs_window_ns),
            "nvmfs_flush_order" => self.nvmfs_flush_order.clone(),
            "cleaner_free_percent" => self.cleaner_free_percent.to_string(),
            "cleaner_fragmentation_percent" => self.cleaner_fragmentation_percent.to_string(),
            _ => return None,
        })
    }

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
        placement_policy(&self.placement_policy).ok_or_else(|| {
            format!(
                "unknown placement_policy {:?}; known: {}",
                self.placement_policy,
                placement_policy_names().join(", ")
            )
        })
    }

    /// The migration tunables.
    pub fn migration_params(&self) -> MigrationParams {
        MigrationParams {
            threshold: self.migration_threshold,
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
        migration_policy(&self.migration_policy).ok_or_else(|| {
            format!(
                "unknown migration_policy {:?}; known: {}",
                self.migration_policy,
                migration_policy_names().join(", ")
            )
        })
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
}

fn unknown_key(key: &str) -> String {
    let names: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
    format!(
        "unknown setting {key:?}; known settings: {}",
        names.join(", ")
    )
}

/// Parses a whole percentage from `lo` to `hi` (an optional `%` is allowed).
fn parse_percent(s: &str, lo: u8, hi: u8) -> Result<u8, String> {
    let why = || format!("expected a whole number from {lo} to {hi}");
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let v: u8 = t.parse().map_err(|_| why())?;
    if !(lo..=hi).contains(&v) {
        return Err(why());
    }
    Ok(v)
}

/// Parses a size from `lo` to `hi` bytes that is a whole number of blocks.
fn parse_blocks(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let v = parse_size(s)?;
    if !(lo..=hi).contains(&v) || v % BLOCK_BYTES != 0 {
        return Err(format!(
            "expected a size from {} to {} in whole {} blocks",
            format_size(lo),
            format_size(hi),
            format_size(BLOCK_BYTES)
        ));
    }
    Ok(v)
}

/// Parses a migration threshold: `dynamic`, or a whole percentage from 1 to
/// 99 (an optional `%` is allowed).
pub fn parse_threshold(s: &str) -> Result<ThresholdMode, String> {
    if s.trim().eq_ignore_ascii_case("dynamic") {
        return Ok(ThresholdMode::Dynamic);
    }
    parse_percent(s, 1, 99)
        .map(ThresholdMode::Static)
        .map_err(|_| "expected dynamic or a whole number from 1 to 99".to_string())
}

/// Parses a size: a whole number with an optional binary unit `K`, `M`, `G`,
/// `T` (also `KiB`, `KB`, …; all powers of 1024; case-insensitive). No unit
/// means bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s, "a size such as 4096, 64K or 1M")?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown size unit {unit:?} (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| "size is too large".to_string())
}

/// Parses a duration into ns: a whole number with a unit `ns`, `us`, `ms`,
/// `s`, `m` (minutes) or `h`. No unit means seconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s, "a duration such as 30s, 500ms or 2m")?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "unknown duration unit {unit:?} (use ns, us, ms, s, m or h)"
            ))
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| "duration is too long".to_string())
}

/// Splits `"64K"` into `(64, "K")`.
fn split_number<'a>(s: &'a str, example: &str) -> Result<(u64, &'a str), String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(format!("expected {example}"));
    }
    let n = t[..digits]
        .parse()
        .map_err(|_| "number is too large".to_string())?;
    Ok((n, t[digits..].trim()))
}

/// Formats a size in the largest binary unit that divides it exactly (`1M`,
/// `1536K`, `100`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Formats ns in the largest unit that divides them exactly (`30s`, `1500ms`).
pub fn format_duration(ns: u64) -> String {
    for (scale, unit) in [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if ns != 0 && ns % scale == 0 {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// A config-file value that is an integer or a string to parse: a `noun` such
/// as "size", with an `example` of the text form.
fn de_number_or_text<'de, D: Deserializer<'de>>(
    d: D,
    noun: &'static str,
    example: &'static str,
    parse: fn(&str) -> Result<u64, String>,
) -> Result<u64, D::Error> {
    struct V {
        noun: &'static str,
        example: &'static str,
        parse: fn(&str) -> Result<u64, String>,
    }
    impl serde::de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "a {} (an integer, or text such as {:?})",
                self.noun, self.example
            )
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("a {} must not be negative", self.noun)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            (self.parse)(v).map_err(|e| E::custom(format!("bad {} {v:?}: {e}", self.noun)))
        }
    }
    d.deserialize_any(V {
        noun,
        example,
        parse,
    })
}

/// A threshold in a config file: `"dynamic"`, a number, or a number as text.
fn de_threshold<'de, D: Deserializer<'de>>(d: D) -> Result<ThresholdMode, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = ThresholdMode;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "\"dynamic\" or a percentage from 1 to 99")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ThresholdMode, E> {
            parse_threshold(&v.to_string())
                .map_err(|e| E::custom(format!("bad threshold {v}: {e}")))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ThresholdMode, E> {
            parse_threshold(&v.to_string())
                .map_err(|e| E::custom(format!("bad threshold {v}: {e}")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ThresholdMode, E> {
            parse_threshold(v).map_err(|e| E::custom(format!("bad threshold {v:?}: {e}")))
        }
    }
    d.deserialize_any(V)
}

/// A threshold as a number, or the string `"dynamic"`.
fn ser_threshold<S: Serializer>(t: &ThresholdMode, s: S) -> Result<S::Ok, S::Error> {
    match *t {
        ThresholdMode::Static(p) => s.serialize_u8(p),
        ThresholdMode::Dynamic => s.serialize_str("dynamic"),
    }
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_number_or_text(d, "size", "1M", parse_size)
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_number_or_text(d, "duration", "30s", parse_duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error as DeError, MapDeserializer};

    #[test]
    fn defaults_match_the_predictors_defaults() {
        let s = Settings::default();
        assert_eq!(s.sync_params(), SyncParams::default());
        assert_eq!(s.size_params(), SizeParams::default());
        assert_eq!(s.placement().unwrap().name(), "ziggurat");
        assert_eq!(s.get("sync_threshold_bytes").as_deref(), Some("1M"));
        assert_eq!(s.get("sync_idle_reset_ns").as_deref(), Some("30s"));
    }

    #[test]
    fn every_key_gets_and_sets_back_its_own_value() {
        let mut s = Settings::default();
        for (key, help) in Settings::keys() {
            assert!(!help.is_empty());
            let v = s.get(key).unwrap();
            s.set(key, &v).unwrap();
            assert_eq!(s, Settings::default(), "{key}");
        }
    }

    #[test]
    fn set_parses_sizes_and_durations() {
        let mut s = Settings::default();
        s.set("sync_threshold_bytes", "4M").unwrap();
        assert_eq!(s.sync_threshold_bytes, 4 << 20);
        s.set("sync_threshold_bytes", " 64 KiB ").unwrap();
        assert_eq!(s.sync_threshold_bytes, 64 << 10);
        s.set("sync_idle_reset_ns", "500ms").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 500_000_000);
        assert_eq!(s.get("sync_idle_reset_ns").as_deref(), Some("500ms"));
        s.set("sync_idle_reset_ns", "2m").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 120_000_000_000);
        s.set("sync_idle_reset_ns", "10").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 10_000_000_000);
        s.set("size_counter_threshold", "8").unwrap();
        s.set("placement_policy", "block-first").unwrap();
        assert_eq!(s.placement().unwrap().name(), "block-first");
    }

    #[test]
    fn unknown_key_error_lists_known_keys() {
        let mut s = Settings::default();
        let e = s.set("sync_treshold", "1M").unwrap_err();
        assert!(e.contains("unknown setting \"sync_treshold\""), "{e}");
        assert!(e.contains("sync_threshold_bytes"), "{e}");
        assert_eq!(s.get("sync_treshold"), None);
    }

    #[test]
    fn bad_values_are_refused_with_the_reason_and_change_nothing() {
        let mut s = Settings::default();
        let cases = [
            ("sync_threshold_bytes", "lots", "expected a size"),
            ("sync_threshold_bytes", "1X", "unknown size unit"),
            ("sync_threshold_bytes", "99999999999T", "too large"),
            ("sync_idle_reset_ns", "30 days", "unknown duration unit"),
            ("size_counter_threshold", "256", "0 to 255"),
            ("size_min_write_blocks", "-1", "whole number"),
            (
                "placement_policy",
                "fastest",
                "known: ziggurat, pm-only, block-first",
            ),
        ];
        for (key, value, why) in cases {
            let e = s.set(key, value).unwrap_err();
            assert!(
                e.starts_with(&format!("bad value {value:?} for {key}: ")),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn config_file_accepts_numbers_or_text_and_defaults_the_rest() {
        let text = MapDeserializer::<_, DeError>::new(
            [
                ("sync_threshold_bytes", "4M"),
                ("sync_idle_reset_ns", "1m"),
                ("placement_policy", "pm-only"),
            ]
            .into_iter(),
        );
        let s = Settings::deserialize(text).unwrap();
        assert_eq!(s.sync_threshold_bytes, 4 << 20);
        assert_eq!(s.sync_idle_reset_ns, 60_000_000_000);
        assert_eq!(s.placement_policy, "pm-only");
        assert_eq!(s.size_counter_threshold, 4);

        let numbers = MapDeserializer::<_, DeError>::new(
            [
                ("sync_threshold_bytes", 4096u64),
                ("size_min_write_blocks", 8),
            ]
            .into_iter(),
        );
        let s = Settings::deserialize(numbers).unwrap();
        assert_eq!(s.sync_threshold_bytes, 4096);
        assert_eq!(s.size_min_write_blocks, 8);
    }

    #[test]
    fn config_file_refuses_unknown_keys_and_bad_text() {
        let unknown = MapDeserializer::<_, DeError>::new([("sync_treshold", "1M")].into_iter());
        assert!(Settings::deserialize(unknown).is_err());
        let bad = MapDeserializer::<_, DeError>::new([("sync_idle_reset_ns", "soon")].into_iter());
        let e = Settings::deserialize(bad).unwrap_err().to_string();
        assert!(e.contains("bad duration \"soon\""), "{e}");
    }

    #[test]
    fn migration_defaults_match_the_policies_defaults() {
        let s = Settings::default();
        assert_eq!(s.migration_params(), MigrationParams::default());
        assert_eq!(s.nvmfs_params(), NvmfsParams::default());
        assert_eq!(s.cleaner_params(), CleanerParams::default());
        assert_eq!(s.migration().unwrap().name(), "default");
        assert_eq!(s.get("migration_threshold").as_deref(), Some("dynamic"));
        assert_eq!(s.get("group_migration_bytes").as_deref(), Some("16M"));
        assert_eq!(s.get("nvmfs_extent_bytes").as_deref(), Some("512K"));
        assert_eq!(s.get("migration_age_ns").as_deref(), Some("30s"));
    }

    #[test]
    fn migration_keys_set_their_params() {
        let mut s = Settings::default();
        s.set("migration_threshold", "70").unwrap();
        assert_eq!(s.migration_params().threshold, ThresholdMode::Static(70));
        s.set("migration_threshold", " 60% ").unwrap();
        assert_eq!(s.get("migration_threshold").as_deref(), Some("60"));
        s.set("migration_threshold", "Dynamic").unwrap();
        assert_eq!(s.migration_threshold, ThresholdMode::Dynamic);
        s.set("migration_policy", "nvmfs").unwrap();
        assert_eq!(s.migration().unwrap().name(), "nvmfs");
        s.set("group_migration_bytes", "128K").unwrap();
        assert_eq!(s.migration_params().group_blocks(), 32);
        s.set("migration_threads", "0").unwrap();
        assert_eq!(s.migration_params().threads_for(6), 6);
        s.set("nvmfs_dirty_high_percent", "90").unwrap();
        s.set("nvmfs_dirty_low_percent", "85").unwrap();
        assert_eq!(s.nvmfs_params().dirty_low_percent, 85);
        s.set("nvmfs_extent_bytes", "1M").unwrap();
        assert_eq!(s.nvmfs_params().extent_blocks(), 256);
        assert_eq!(s.nvmfs_params().order, FlushOrder::Frequency);
        s.set("nvmfs_flush_order", " lru").unwrap();
        assert_eq!(s.nvmfs_params().order, FlushOrder::Lru);
        assert_eq!(s.get("nvmfs_flush_order").as_deref(), Some("lru"));
        s.set("cleaner_free_percent", "0").unwrap();
        assert_eq!(s.cleaner_params().free_percent, 0);
    }

    #[test]
    fn bad_migration_values_are_refused_with_the_reason() {
        let mut s = Settings::default();
        let cases = [
            (
                "migration_policy",
                "fastest",
                "known: default, ziggurat, nvmfs",
            ),
            (
                "migration_threshold",
                "100",
                "dynamic or a whole number from 1 to 99",
            ),
            (
                "migration_threshold",
                "0",
                "dynamic or a whole number from 1 to 99",
            ),
            ("migration_threshold", "static", "dynamic or a whole number"),
            ("migration_forced_percent", "49", "from 50 to 100"),
            ("group_migration_bytes", "6K", "in whole 4K blocks"),
            ("group_migration_bytes", "2G", "from 4K to 1G"),
            ("reverse_read_ratio", "-1", "whole number"),
            ("reverse_pm_low_percent", "100", "from 1 to 99"),
            ("migration_threads", "1025", "from 0 to 1024"),
            (
                "nvmfs_dirty_high_percent",
                "50",
                "above nvmfs_dirty_low_percent (50)",
            ),
            (
                "nvmfs_dirty_low_percent",
                "80",
                "below nvmfs_dirty_high_percent (80)",
            ),
            ("nvmfs_extent_bytes", "128M", "from 4K to 64M"),
            ("nvmfs_window_ns", "10us", "at least 1ms"),
            ("nvmfs_flush_order", "mru", "one of: frequency, lru"),
            ("cleaner_free_percent", "101", "from 0 to 100"),
            ("cleaner_fragmentation_percent", "0", "from 1 to 100"),
        ];
        for (key, value, why) in cases {
            let e = s.set(key, value).unwrap_err();
            assert!(
                e.starts_with(&format!("bad value {value:?} for {key}: ")),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn config_file_threshold_is_dynamic_or_a_number() {
        let text =
            MapDeserializer::<_, DeError>::new([("migration_threshold", "dynamic")].into_iter());
        let s = Settings::deserialize(text).unwrap();
        assert_eq!(s.migration_threshold, ThresholdMode::Dynamic);
        let num = MapDeserializer::<_, DeError>::new([("migration_threshold", 75u64)].into_iter());
        let s = Settings::deserialize(num).unwrap();
        assert_eq!(s.migration_threshold, ThresholdMode::Static(75));
        let bad = MapDeserializer::<_, DeError>::new([("migration_threshold", 150u64)].into_iter());
        let e = Settings::deserialize(bad).unwrap_err().to_string();
        assert!(e.contains("bad threshold 150"), "{e}");
        let sizes = MapDeserializer::<_, DeError>::new(
            [("group_migration_bytes", "1M"), ("nvmfs_window_ns", "5s")].into_iter(),
        );
        let s = Settings::deserialize(sizes).unwrap();
        assert_eq!(s.group_migration_bytes, 1 << 20);
        assert_eq!(s.nvmfs_window_ns, 5_000_000_000);
    }

    #[test]
    fn formats_use_the_largest_exact_unit() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(4 << 30), "4G");
        assert_eq!(format_duration(0), "0ns");
        assert_eq!(format_duration(7), "7ns");
        assert_eq!(format_duration(1_500_000_000), "1500ms");
        assert_eq!(format_duration(7_200_000_000_000), "2h");
    }
}
