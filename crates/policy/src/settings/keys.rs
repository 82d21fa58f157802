//! The declarative table of settings: every key once in [`KEYS`] (name,
//! kind, default, help, and how it is read from and stored into
//! [`Settings`]), and every rule tying keys together in [`RULES`].
//!
//! **A new setting is declared here** (plus its field in `typed.rs`; see the
//! module docs of `settings`). Invariants, checked by unit tests: a name is
//! declared once and equals its field's name; a default is in its kind's
//! range; every kind's range fits its field's type.

use std::fmt;

use super::kind::{Kind, Value};
use super::typed::Settings;
use crate::cleaner::CleanerParams;
use crate::migration::{migration_policy_names, MigrationParams};
use crate::nvmfs::{FlushOrder, NvmfsParams};
use crate::object_cleaner::ObjectCleanParams;
use crate::placement::placement_policy_names;
use crate::size_predictor::SizeParams;
use crate::sync_predictor::SyncParams;

/// One setting, declared once: everything the parsers, the checks, the
/// defaults and `terrace set`'s listing need.
pub struct Key {
    /// Its name (`-o NAME=…`, `NAME = …` in a config file, `terrace set`).
    pub name: &'static str,
    /// Type, parser and range.
    pub kind: Kind,
    /// Its default value.
    pub default: fn() -> Value,
    /// One-line help (`terrace set MOUNTPOINT`).
    pub help: &'static str,
    /// Reads it from settings.
    pub(super) get: fn(&Settings) -> Value,
    /// Stores a value of its kind (already range-checked).
    pub(super) put: fn(&mut Settings, Value),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// A key stored in a numeric field of type `$t` (the kind's range fits it:
/// checked by a unit test).
macro_rules! num_key {
    ($field:ident: $t:ty, $kind:expr, $default:expr, $help:expr) => {
        Key {
            name: stringify!($field),
            kind: $kind,
            default: || Value::Num(u64::from($default)),
            help: $help,
            get: |s| Value::Num(u64::from(s.$field)),
            put: |s, v| {
                s.$field = <$t>::try_from(v.num()).expect("the kind's range fits the field")
            },
        }
    };
}

/// A key stored in a `String` field (a name from a list).
macro_rules! name_key {
    ($field:ident, $noun:expr, $names:expr, $default:expr, $help:expr) => {
        Key {
            name: stringify!($field),
            kind: Kind::Name {
                noun: $noun,
                names: $names,
            },
            default: || Value::Name(String::from($default)),
            help: $help,
            get: |s| Value::Name(s.$field.clone()),
            put: |s, v| s.$field = v.name(),
        }
    };
}

const ANY_SIZE: Kind = size(0, u64::MAX);
const ANY_DURATION: Kind = Kind::Duration { min: 0 };
const fn percent(min: u64, max: u64) -> Kind {
    Kind::Number {
        min,
        max,
        percent: true,
    }
}
const fn size(min: u64, max: u64) -> Kind {
    Kind::Size {
        min,
        max,
        blocks: false,
    }
}
/// A size in whole 4K blocks.
const fn block_size(min: u64, max: u64) -> Kind {
    Kind::Size {
        min,
        max,
        blocks: true,
    }
}
const fn number(min: u64, max: u64) -> Kind {
    Kind::Number {
        min,
        max,
        percent: false,
    }
}
fn flush_order_names() -> &'static [&'static str] {
    FlushOrder::NAMES
}

/// Every key, in a stable order (the order `terrace set` lists them).
pub static KEYS: &[Key] = &[
    num_key!(
        sync_threshold_bytes: u64,
        ANY_SIZE,
        SyncParams::default().threshold_bytes,
        "size; fewer bytes than this between two fsyncs make a file synchronous, its small \
         writes stay on PM (default 1M, the authors' code; the paper used 4M)"
    ),
    num_key!(
        sync_idle_reset_ns: u64,
        ANY_DURATION,
        SyncParams::default().idle_reset_ns,
        "duration; a file quiet this long is predicted asynchronous again (default 30s)"
    ),
    num_key!(
        size_counter_threshold: u8,
        number(0, 255),
        SizeParams::default().threshold,
        "0-255; a write entry counter larger than this marks rewrites of a range as large \
         and stable, sent to a block tier when asynchronous (default 4, the paper's)"
    ),
    num_key!(
        size_min_write_blocks: u64,
        number(0, u64::MAX),
        SizeParams::default().min_write_blocks,
        "blocks; shorter writes are small and reset the counter (default 4, the slides'; \
         0 = no size check)"
    ),
    num_key!(
        size_fresh_large_bytes: u64,
        ANY_SIZE,
        SizeParams::default().fresh_large_bytes,
        "size; a write of new data (no earlier write in its range) at least this large is \
         large, and goes to a block tier when asynchronous once PM has passed its migration \
         threshold (Ziggurat §3.2) (default 0 = new data is never large: measured slower \
         here, see docs/benchmarks.md)"
    ),
    name_key!(
        placement_policy,
        "policy",
        placement_policy_names,
        placement_policy_names()[0],
        "where new writes go: ziggurat (sync or small to PM, large async to disk), \
         pm-only, block-first, hetfs (by each file's access class: sequential async \
         streams to disk, random and byte-granular to PM) (default ziggurat)"
    ),
    num_key!(
        placement_sync_window_ns: u64,
        ANY_DURATION,
        crate::placement::SYNC_WRITER_WINDOW_NS,
        "duration; a synchronous writer (fsync after its writes, or O_SYNC) counts as active \
         this long after its last synchronous write, and while one is, large asynchronous \
         writes leave PM to it once PM is past its migration threshold (0 = never; default 10s)"
    ),
    num_key!(
        placement_bulk_pm_percent: u8,
        percent(1, 100),
        crate::placement::DEFAULT_BULK_PM_PERCENT,
        "1-100; large asynchronous writes take PM only while its use is below this, so that a \
         synchronous writer arriving later finds room while migration catches up (default 80; \
         100 = up to the forced mark)"
    ),
    num_key!(
        inode_max_percent: u8,
        percent(1, 90),
        25u8,
        "1-90; the inode table grows (128 bytes of PM per file) while all its slots past \
         the base table mkfs made take at most this share of PM's page pool, as XFS's \
         imaxpct (default 25: about 260,000 files per 1 GiB of PM); raise it for \
         millions of small files on a small PM tier (`df -i` shows the room); lowering it \
         stops growth, it never shrinks the table"
    ),
    num_key!(
        dram_cache_bytes: u64,
        size(1 << 20, u64::MAX),
        256u64 << 20,
        "size, at least 1M; bound of the DRAM page cache in front of the block tiers \
         (default 256M; `terrace mount --dram-cache` sets it at mount; lowering it at run \
         time writes back and evicts down to the new bound)"
    ),
    num_key!(
        writeback_age_ns: u64,
        ANY_DURATION,
        5_000_000_000u64,
        "duration; dirty cached data older than this is written back (default 5s)"
    ),
    num_key!(
        writeback_dirty_percent: u8,
        percent(1, 100),
        25u8,
        "1-100; write-back starts when dirty data passes this share of the cache (default 25)"
    ),
    num_key!(
        max_read_unit_bytes: u64,
        size(4 << 10, 64 << 20),
        1u64 << 20,
        "size, 4K-64M; a cache miss reads the rest of the write entry it falls in, up to \
         this much (default 1M); files read at random read only what they ask for"
    ),
    name_key!(
        migration_policy,
        "policy",
        migration_policy_names,
        migration_policy_names()[0],
        "how data migrates down: default (ziggurat's cold-part choice, PM copy kept clean \
         unless migration is forced), ziggurat (cold part by amtime, PM copy freed), nvmfs \
         (whole file, least recently written first, PM copy kept clean) (default default)"
    ),
    Key {
        name: "migration_threshold",
        kind: Kind::Threshold,
        default: || Value::Threshold(MigrationParams::default().threshold),
        help: "dynamic, or 1-99; migration down starts when PM use passes this percentage \
               and runs until it is below it; dynamic rises from 50 to 90 as reads \
               outnumber writes (default dynamic)",
        get: |s| Value::Threshold(s.migration_threshold),
        put: |s, v| s.migration_threshold = v.threshold(),
    },
    num_key!(
        migration_block_threshold: u8,
        percent(1, 99),
        MigrationParams::default().block_threshold,
        "1-99; a block tier (SSD) with a tier below it (HDD, S3) drains into it when its use \
         passes this percentage, and until it is below it; migration_threshold is PM's \
         (default 90)"
    ),
    num_key!(
        migration_forced_percent: u8,
        percent(50, 100),
        MigrationParams::default().forced_percent,
        "50-100; above this PM use migration is forced and new asynchronous writes go to the next tier \
         (default 95; 100 = never)"
    ),
    num_key!(
        migration_age_ns: u64,
        ANY_DURATION,
        MigrationParams::default().age_ns,
        "duration; a file not modified for longer than this migrates whole, a more recent one \
         only its entries older than its average mtime (default 30s)"
    ),
    Key {
        name: "log_migration",
        kind: Kind::Switch,
        default: || Value::Switch(true),
        help: "on or off; when PM is over its migration threshold after data moved (or short \
               of room for metadata), the logs of files unchanged for migration_age_ns whose \
               data is all off PM move to the first block tier, and come back at the file's \
               next change (default on)",
        get: |s| Value::Switch(s.log_migration),
        put: |s, v| s.log_migration = v.switch(),
    },
    num_key!(
        group_migration_bytes: u64,
        block_size(4 << 10, 1 << 30),
        MigrationParams::default().group_bytes,
        "size, 4K-1G in whole 4K blocks; adjacent small entries are coalesced into one \
         sequential write of up to this much (default 16M, the paper's best)"
    ),
    num_key!(
        reverse_read_ratio: u64,
        number(0, u64::MAX),
        MigrationParams::default().reverse_read_ratio,
        "whole number; data moves back up to PM when reads are at least this many times the \
         writes (default 4; 0 = never)"
    ),
    num_key!(
        reverse_pm_low_percent: u8,
        percent(1, 99),
        MigrationParams::default().reverse_pm_low_percent,
        "1-99; reverse migration only while PM use is below this percentage, and not beyond \
         it (default 50)"
    ),
    num_key!(
        migration_threads: u32,
        number(0, 1024),
        MigrationParams::default().threads,
        "0-1024; migration threads (default 0 = one per core)"
    ),
    num_key!(
        nvmfs_dirty_high_percent: u8,
        percent(1, 100),
        NvmfsParams::default().dirty_high_percent,
        "1-100; flushing dirty PM data down starts when the dirty list reaches this share of \
         its target (default 80, NVMFS's); must stay above nvmfs_dirty_low_percent"
    ),
    num_key!(
        nvmfs_dirty_low_percent: u8,
        percent(0, 99),
        NvmfsParams::default().dirty_low_percent,
        "0-99; flushing continues until the dirty list is down to this share of its target \
         (default 50, NVMFS's); must stay below nvmfs_dirty_high_percent"
    ),
    num_key!(
        nvmfs_extent_bytes: u64,
        block_size(4 << 10, 64 << 20),
        NvmfsParams::default().extent_bytes,
        "size, 4K-64M in whole 4K blocks; dirty data is flushed in units of this much, sorted \
         by file position (default 512K, NVMFS's extent)"
    ),
    num_key!(
        nvmfs_window_ns: u64,
        Kind::Duration { min: 1_000_000 },
        NvmfsParams::default().window_ns,
        "duration, at least 1ms; clean and dirty hits are counted over this window, then the \
         split between the lists moves toward the one with more hits per page (default 2s)"
    ),
    name_key!(
        nvmfs_flush_order,
        "order",
        flush_order_names,
        NvmfsParams::default().order.name(),
        "frequency or lru; which dirty PM data the nvmfs policy flushes first: frequency \
         flushes the lowest ln(writes) - age/30s first, keeping often rewritten blocks on \
         PM; lru is NVMFS's least recently written first (default frequency)"
    ),
    num_key!(
        cleaner_free_percent: u8,
        percent(0, 100),
        CleanerParams::default().free_percent,
        "0-100; block-tier extents are recycled only while free extents are fewer than this \
         share of all extents (default 10; 0 = never)"
    ),
    num_key!(
        cleaner_fragmentation_percent: u8,
        percent(1, 100),
        CleanerParams::default().fragmentation_percent,
        "1-100; extents are recycled only while extent use (ideal / actual, the fragmentation \
         `terrace status` shows) is below this, and only extents used less than this \
         (default 80)"
    ),
    num_key!(
        object_clean_live_percent: u8,
        percent(0, 100),
        ObjectCleanParams::default().live_percent,
        "0-100; an object tier's parts less live than this are rewritten (their live blocks \
         move to new parts, then the old object is deleted): at 50 every byte rewritten wins \
         at least one byte back, and the bucket holds at most about twice the live data \
         (default 50; 0 = never)"
    ),
    num_key!(
        object_clean_bytes_per_pass: u64,
        ANY_SIZE,
        ObjectCleanParams::default().bytes_per_pass,
        "size; most live data one object-cleaning pass rewrites (default 64M; 0 = never)"
    ),
    num_key!(
        object_clean_interval_ns: u64,
        ANY_DURATION,
        ObjectCleanParams::default().interval_ns,
        "duration; least time between two object-cleaning passes, so cleaning takes at most \
         object_clean_bytes_per_pass per this of the store (default 5s: about 13 MB/s, a \
         tenth of MinIO's PUT rate here)"
    ),
    num_key!(
        discard_interval_ns: u64,
        ANY_DURATION,
        0u64,
        "duration; online discard: the block tiers' free extents freed since the last pass \
         are discarded in the background (as fstrim does: BLKDISCARD on a device, a punched \
         hole in a tier file) at most this often (default 0ns = off; -o discard sets 10s, \
         -o nodiscard 0)"
    ),
    num_key!(
        s3_retries: u32,
        number(0, 100),
        100u32,
        "0-100; an object-tier (S3) request that fails with a 5xx or 429 answer, a refused or \
         reset connection or a time-out is retried up to this often, while s3_timeout_ns \
         lasts; by default the time, not the count, ends the retries (the jittered waits of \
         10 retries may add up to under 5 s) (default 100; 0 = never: a read of object data \
         then fails with EIO at the first error)"
    ),
    num_key!(
        s3_timeout_ns: u64,
        ANY_DURATION,
        180_000_000_000u64,
        "duration; no retry of an object-tier request starts later than this after its first \
         try, so a store that does not answer fails a read with EIO after at most this plus \
         min(15s, this) plus s3_request_timeout_ns (default 3m; TERRACE_S3_TIMEOUT=SECONDS \
         in the environment changes the default)"
    ),
    num_key!(
        s3_request_timeout_ns: u64,
        Kind::Duration { min: 100_000_000 },
        30_000_000_000u64,
        "duration, at least 100ms; time limit of one try of an object-tier request: connect, \
         send and the whole answer, so it must exceed the upload time of one part (16M) \
         (default 30s)"
    ),
    num_key!(
        s3_backoff_ns: u64,
        Kind::Duration { min: 1_000_000 },
        100_000_000u64,
        "duration, at least 1ms; the wait before the first retry of an object-tier request; \
         each later wait is random, from this up to 4 times the one before (twice on \
         average), at most min(15s, s3_timeout_ns) (default 100ms)"
    ),
];

/// A rule that ties keys together, checked on the finished settings by
/// [`Settings::validate`] (after every value has been applied, so the order
/// in which keys are given does not matter).
pub struct Rule {
    /// The keys it concerns.
    pub keys: &'static [&'static str],
    /// `Err(why)` when the settings break it.
    pub check: fn(&Settings) -> Result<(), String>,
}

/// Every cross-key rule.
pub static RULES: &[Rule] = &[Rule {
    keys: &["nvmfs_dirty_low_percent", "nvmfs_dirty_high_percent"],
    check: |s| {
        if s.nvmfs_dirty_low_percent < s.nvmfs_dirty_high_percent {
            Ok(())
        } else {
            Err(format!(
                "nvmfs_dirty_low_percent ({}) must be below nvmfs_dirty_high_percent ({})",
                s.nvmfs_dirty_low_percent, s.nvmfs_dirty_high_percent
            ))
        }
    },
}];
