//! Every tunable of the policies in one key/value registry.
//!
//! One table, [`KEYS`], declares every key once: its name, its kind (the
//! type, the parser and the accepted range), its default and its help text,
//! and how it is read from and stored into [`Settings`]. The three ways of
//! changing settings — the command line (`-o key=value`), the config file
//! (TOML, one `key = value` per setting) and run-time changes (`terrace set
//! MOUNTPOINT KEY VALUE`) — go through it, so a key means the same thing and
//! accepts the same values everywhere. Values are text in [`Settings::set`]
//! and [`Settings::get`] (sizes like `1M`, durations like `30s`), and `get`
//! returns text that `set` accepts back. In a config file a size may be a
//! plain integer (bytes), a duration a plain integer (ns), a switch a
//! boolean; [`Settings::config_text`] turns such a value into the key's text.
//!
//! Checking happens in two steps, whatever the source:
//! 1. each value is parsed and range-checked on its own by its key's kind
//!    ([`Settings::check_value`]);
//! 2. the finished settings — every value given applied, in any order — are
//!    checked as a whole once by [`Settings::validate`]: every value in its
//!    range again, then the rules that tie keys together (see [`RULES`]:
//!    `nvmfs_dirty_low_percent` below `nvmfs_dirty_high_percent`).
//!
//! [`Settings::with`] does both for a batch (a mount's `-o` options and
//! config file together: `-o nvmfs_dirty_low_percent=30,nvmfs_dirty_high_percent=40`
//! is accepted in either order), and [`Settings::set`] for one key (applied to
//! a copy, validated, then swapped in: on error nothing changes).
//!
//! Settings are values; the components they tune (predictor parameters, the
//! placement and migration policy objects) are built from them with
//! [`Settings::sync_params`], [`Settings::size_params`],
//! [`Settings::placement`], [`Settings::migration_params`],
//! [`Settings::migration`], [`Settings::nvmfs_params`] and
//! [`Settings::cleaner_params`].

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
            dram_cache_bytes: 0,
            writeback_age_ns: 0,
            writeback_dirty_percent: 0,
            max_read_unit_bytes: 0,
            migration_policy: String::new(),
            migration_threshold: ThresholdMode::Dynamic,
            migration_forced_percent: 0,
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
        };
        for k in KEYS {
            (k.put)(&mut s, (k.default)());
        }
        s
    }
}

/// A setting's value, typed by its key's [`Kind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A size, duration (ns) or whole number.
    Num(u64),
    /// On or off.
    Switch(bool),
    /// A name from a fixed list.
    Name(String),
    /// A migration threshold.
    Threshold(ThresholdMode),
}

impl Value {
    fn num(&self) -> u64 {
        match self {
            Value::Num(n) => *n,
            _ => unreachable!("a numeric key stores numbers only"),
        }
    }
    fn switch(&self) -> bool {
        match self {
            Value::Switch(b) => *b,
            _ => unreachable!("a switch stores booleans only"),
        }
    }
    fn name(&self) -> String {
        match self {
            Value::Name(n) => n.clone(),
            _ => unreachable!("a name key stores names only"),
        }
    }
    fn threshold(&self) -> ThresholdMode {
        match self {
            Value::Threshold(t) => *t,
            _ => unreachable!("a threshold key stores thresholds only"),
        }
    }
}

/// The type of a key: how its text is parsed, what range it accepts and how
/// its value is written back as text.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A size in bytes (`4096`, `64K`, `1M`; binary units), from `min` to
    /// `max`, in whole 4K blocks when `blocks`.
    Size {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
        /// Must be a multiple of 4K.
        blocks: bool,
    },
    /// A duration in ns (`30s`, `500ms`, `2m`; a bare number is seconds, and
    /// in a config file a bare integer is ns), at least `min`.
    Duration {
        /// Shortest value (ns).
        min: u64,
    },
    /// A whole number from `min` to `max`; with `percent` a trailing `%` is
    /// accepted.
    Number {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
        /// A percentage (`50%` is accepted).
        percent: bool,
    },
    /// `on` or `off` (also true/false, yes/no, 1/0).
    Switch,
    /// One of a list of names (case-insensitive).
    Name {
        /// What a name names, for messages ("policy", "order").
        noun: &'static str,
        /// The accepted names.
        names: fn() -> &'static [&'static str],
    },
    /// `dynamic` or a whole percentage from 1 to 99.
    Threshold,
}

impl Kind {
    /// Parses and range-checks `text`.
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let t = text.trim();
        let v = match *self {
            Kind::Size { .. } => Value::Num(parse_size(t)?),
            Kind::Duration { .. } => Value::Num(parse_duration(t)?),
            Kind::Number { percent, .. } => {
                let t = if percent {
                    t.strip_suffix('%').unwrap_or(t).trim()
                } else {
                    t
                };
                Value::Num(t.parse().map_err(|_| self.expected())?)
            }
            Kind::Switch => Value::Switch(match t.to_ascii_lowercase().as_str() {
                "on" | "true" | "1" | "yes" => true,
                "off" | "false" | "0" | "no" => false,
                _ => return Err(self.expected()),
            }),
            Kind::Name { .. } => Value::Name(t.to_ascii_lowercase()),
            Kind::Threshold => Value::Threshold(parse_threshold(t)?),
        };
        self.check(&v)?;
        Ok(v)
    }

    /// Checks that a value is in this kind's range.
    pub fn check(&self, v: &Value) -> Result<(), String> {
        let ok = match (*self, v) {
            (Kind::Size { min, max, blocks }, Value::Num(n)) => {
                (min..=max).contains(n) && (!blocks || n % BLOCK_BYTES == 0)
            }
            (Kind::Duration { min }, Value::Num(n)) => *n >= min,
            (Kind::Number { min, max, .. }, Value::Num(n)) => (min..=max).contains(n),
            (Kind::Switch, Value::Switch(_)) => true,
            (Kind::Name { names, .. }, Value::Name(n)) => names().contains(&n.as_str()),
            (Kind::Threshold, Value::Threshold(t)) => match t {
                ThresholdMode::Dynamic => true,
                ThresholdMode::Static(p) => (1..=99).contains(p),
            },
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.expected())
        }
    }

    /// The text form of a value of this kind (accepted back by `parse`).
    pub fn format(&self, v: &Value) -> String {
        match (*self, v) {
            (Kind::Size { .. }, Value::Num(n)) => format_size(*n),
            (Kind::Duration { .. }, Value::Num(n)) => format_duration(*n),
            (_, Value::Num(n)) => n.to_string(),
            (_, Value::Switch(b)) => if *b { "on" } else { "off" }.to_string(),
            (_, Value::Name(n)) => n.clone(),
            (_, Value::Threshold(t)) => t.to_string(),
        }
    }

    /// What this kind accepts, for error messages.
    pub fn expected(&self) -> String {
        match *self {
            Kind::Size { min, max, blocks } => {
                let whole = if blocks {
                    format!(" in whole {} blocks", format_size(BLOCK_BYTES))
                } else {
                    String::new()
                };
                match (min, max) {
                    (0, u64::MAX) => format!("expected a size such as 4096, 64K or 1M{whole}"),
                    (min, u64::MAX) => {
                        format!("expected a size of at least {}{whole}", format_size(min))
                    }
                    (min, max) => format!(
                        "expected a size from {} to {}{whole}",
                        format_size(min),
                        format_size(max)
                    ),
                }
            }
            Kind::Duration { min: 0 } => "expected a duration such as 30s, 500ms or 2m".into(),
            Kind::Duration { min } => {
                format!("expected a duration of at least {}", format_duration(min))
            }
            Kind::Number {
                min: 0,
                max: u64::MAX,
                ..
            } => "expected a whole number".into(),
            Kind::Number { min, max, .. } => {
                format!("expected a whole number from {min} to {max}")
            }
            Kind::Switch => "expected on or off".into(),
            Kind::Name { noun, names } => {
                format!("no such {noun}; known: {}", names().join(", "))
            }
            Kind::Threshold => "expected dynamic or a whole number from 1 to 99".into(),
        }
    }
}

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
    get: fn(&Settings) -> Value,
    /// Stores a value of its kind (already range-checked).
    put: fn(&mut Settings, Value),
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

const ANY_SIZE: Kind = Kind::Size {
    min: 0,
    max: u64::MAX,
    blocks: false,
};
const ANY_DURATION: Kind = Kind::Duration { min: 0 };
const fn percent(min: u64, max: u64) -> Kind {
    Kind::Number {
        min,
        max,
        percent: true,
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
        dram_cache_bytes: u64,
        Kind::Size {
            min: 1 << 20,
            max: u64::MAX,
            blocks: false
        },
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
        Kind::Size {
            min: 4 << 10,
            max: 64 << 20,
            blocks: false
        },
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
        migration_forced_percent: u8,
        percent(50, 100),
        MigrationParams::default().forced_percent,
        "50-100; above this PM use migration is forced and new writes go to the next tier \
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
        Kind::Size {
            min: 4 << 10,
            max: 1 << 30,
            blocks: true
        },
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
        Kind::Size {
            min: 4 << 10,
            max: 64 << 20,
            blocks: true
        },
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

/// A value as a config file holds it (TOML or any serde format).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// An integer: bytes for a size, ns for a duration.
    Int(i128),
    /// A boolean (switches).
    Bool(bool),
    /// Text, parsed like `-o` text (`"1M"`, `"30s"`, `"dynamic"`).
    Text(String),
    /// Anything else (a float, an array, a table): refused, with its type.
    Other(&'static str),
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ConfigValue, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ConfigValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a setting's value (an integer, a boolean or text)")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Int(v.into()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Int(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Other("a fractional number"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Text(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                _: A,
            ) -> Result<ConfigValue, A::Error> {
                Ok(ConfigValue::Other("a list"))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                _: A,
            ) -> Result<ConfigValue, A::Error> {
                Ok(ConfigValue::Other("a table"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A config file's settings: a map of key → value, each value checked by
/// its key's parser and the whole validated once ([`Settings::with`]).
impl<'de> Deserialize<'de> for Settings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Settings, D::Error> {
        let map: std::collections::BTreeMap<String, ConfigValue> =
            std::collections::BTreeMap::deserialize(d)?;
        let mut pairs = Vec::with_capacity(map.len());
        for (k, v) in &map {
            pairs.push((
                k.clone(),
                Settings::config_text(k, v).map_err(serde::de::Error::custom)?,
            ));
        }
        Settings::default()
            .with(&pairs)
            .map_err(serde::de::Error::custom)
    }
}

impl Settings {
    /// Every key with its one-line help text, in a stable order.
    pub fn keys() -> Vec<(&'static str, &'static str)> {
        KEYS.iter().map(|k| (k.name, k.help)).collect()
    }

    /// The declaration of `key`.
    pub fn key(key: &str) -> Option<&'static Key> {
        KEYS.iter().find(|k| k.name == key)
    }

    fn known(key: &str) -> Result<&'static Key, String> {
        Settings::key(key).ok_or_else(|| unknown_key(key))
    }

    /// Parses and range-checks one value on its own (no cross-key rule):
    /// `Ok` when [`with`](Self::with) would accept it for `key` — unless a
    /// rule tying it to other keys fails on the finished settings.
    pub fn check_value(key: &str, value: &str) -> Result<(), String> {
        let k = Settings::known(key)?;
        k.kind
            .parse(value)
            .map(|_| ())
            .map_err(|why| format!("bad value {value:?} for {key}: {why}"))
    }

    /// The text form of a config-file value for `key`: an integer is bytes
    /// for a size and ns for a duration, a boolean is a switch, text is as
    /// on the command line. The text still goes through the key's parser.
    pub fn config_text(key: &str, value: &ConfigValue) -> Result<String, String> {
        let k = Settings::known(key)?;
        let text = match value {
            ConfigValue::Text(t) => t.clone(),
            ConfigValue::Bool(b) if matches!(k.kind, Kind::Switch) => {
                if *b { "on" } else { "off" }.to_string()
            }
            ConfigValue::Bool(b) => {
                return Err(format!("bad value {b} for {key}: {}", k.kind.expected()))
            }
            ConfigValue::Int(n) if *n < 0 => {
                return Err(format!("bad value {n} for {key}: must not be negative"))
            }
            ConfigValue::Int(n) if matches!(k.kind, Kind::Duration { .. }) => format!("{n}ns"),
            ConfigValue::Int(n) => n.to_string(),
            ConfigValue::Other(what) => {
                return Err(format!(
                    "bad value for {key}: {what}; {}",
                    k.kind.expected()
                ))
            }
        };
        Settings::check_value(key, &text)?;
        Ok(text)
    }

    /// These settings with every `(key, text)` applied in order (a key given
    /// twice takes its last value), each parsed and range-checked by its key,
    /// then the result validated as a whole ([`validate`](Self::validate)).
    /// `self` is not changed; the first problem is the error.
    pub fn with<K: AsRef<str>, V: AsRef<str>>(&self, pairs: &[(K, V)]) -> Result<Settings, String> {
        let mut next = self.clone();
        for (key, value) in pairs {
            let (key, value) = (key.as_ref(), value.as_ref());
            let k = Settings::known(key)?;
            let v = k
                .kind
                .parse(value)
                .map_err(|why| format!("bad value {value:?} for {key}: {why}"))?;
            (k.put)(&mut next, v);
        }
        next.validate()?;
        Ok(next)
    }

    /// Checks finished settings: every value in its key's range, then every
    /// rule that ties keys together ([`RULES`]).
    pub fn validate(&self) -> Result<(), String> {
        for k in KEYS {
            let v = (k.get)(self);
            k.kind.check(&v).map_err(|why| {
                format!("bad value {:?} for {}: {why}", k.kind.format(&v), k.name)
            })?;
        }
        for r in RULES {
            (r.check)(self)?;
        }
        Ok(())
    }

    /// Sets `key` from its text form: applied to a copy, the copy validated
    /// as a whole, then swapped in. On error nothing changes and the message
    /// names the key and says what is accepted (or which rule the new value
    /// breaks).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        Settings::check_value(key, value)?;
        let next = self
            .with(&[(key, value)])
            .map_err(|why| format!("bad value {value:?} for {key}: {why}"))?;
        *self = next;
        Ok(())
    }

    /// The text form of `key`'s value (accepted back by [`set`](Self::set)), or
    /// `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<String> {
        let k = Settings::key(key)?;
        Some(k.kind.format(&(k.get)(self)))
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
    let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
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

/// A threshold as a number, or the string `"dynamic"`.
fn ser_threshold<S: Serializer>(t: &ThresholdMode, s: S) -> Result<S::Ok, S::Error> {
    match *t {
        ThresholdMode::Static(p) => s.serialize_u8(p),
        ThresholdMode::Dynamic => s.serialize_str("dynamic"),
    }
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
        assert!(
            e.contains("bad value \"soon\" for sync_idle_reset_ns"),
            "{e}"
        );
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
                "nvmfs_dirty_low_percent (50) must be below nvmfs_dirty_high_percent (50)",
            ),
            (
                "nvmfs_dirty_low_percent",
                "80",
                "nvmfs_dirty_low_percent (80) must be below nvmfs_dirty_high_percent (80)",
            ),
            ("nvmfs_extent_bytes", "128M", "from 4K to 64M"),
            ("nvmfs_window_ns", "10us", "at least 1ms"),
            ("nvmfs_flush_order", "mru", "known: frequency, lru"),
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
        assert!(
            e.contains("bad value \"150\" for migration_threshold: expected dynamic"),
            "{e}"
        );
        let sizes = MapDeserializer::<_, DeError>::new(
            [("group_migration_bytes", "1M"), ("nvmfs_window_ns", "5s")].into_iter(),
        );
        let s = Settings::deserialize(sizes).unwrap();
        assert_eq!(s.group_migration_bytes, 1 << 20);
        assert_eq!(s.nvmfs_window_ns, 5_000_000_000);
    }

    fn low_high(first: (&str, &str), second: (&str, &str)) -> Result<Settings, String> {
        Settings::default().with(&[first, second])
    }

    #[test]
    fn cross_key_rules_see_the_finished_settings_whatever_the_order() {
        // Low 30 / high 40 is valid, though each is not against the other's
        // default (low 50, high 80).
        let low = ("nvmfs_dirty_low_percent", "30");
        let high = ("nvmfs_dirty_high_percent", "40");
        let a = low_high(low, high).unwrap();
        let b = low_high(high, low).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            (a.nvmfs_dirty_low_percent, a.nvmfs_dirty_high_percent),
            (30, 40)
        );
        // Low 60 / high 40 is refused in either order, naming both keys.
        for (x, y) in [
            (("nvmfs_dirty_low_percent", "60"), high),
            (high, ("nvmfs_dirty_low_percent", "60")),
        ] {
            let e = low_high(x, y).unwrap_err();
            assert!(
                e.contains(
                    "nvmfs_dirty_low_percent (60) must be below nvmfs_dirty_high_percent (40)"
                ),
                "{e}"
            );
        }
        // One key at a time, `set` checks against the current other key.
        let mut s = a.clone();
        let e = s.set("nvmfs_dirty_high_percent", "20").unwrap_err();
        assert!(
            e.starts_with("bad value \"20\" for nvmfs_dirty_high_percent: "),
            "{e}"
        );
        assert_eq!(s, a, "a refused set changed something");
        s.set("nvmfs_dirty_high_percent", "90").unwrap();
        s.set("nvmfs_dirty_low_percent", "85").unwrap();
        // A key given twice takes its last value.
        let t = Settings::default()
            .with(&[("migration_threads", "3"), ("migration_threads", "5")])
            .unwrap();
        assert_eq!(t.migration_threads, 5);
    }

    #[test]
    fn config_files_go_through_the_same_parsers_ranges_and_rules() {
        let cfg = |pairs: Vec<(&'static str, ConfigValue)>| {
            let m: std::collections::BTreeMap<String, ConfigValue> =
                pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let text: Vec<(String, String)> = m
                .iter()
                .map(|(k, v)| Settings::config_text(k, v).map(|t| (k.clone(), t)))
                .collect::<Result<_, _>>()?;
            Settings::default().with(&text)
        };
        use ConfigValue::*;
        // Ranges: refused from a config file as from `-o`.
        for (key, v, why) in [
            ("migration_threads", Int(5000), "from 0 to 1024"),
            ("writeback_dirty_percent", Int(0), "from 1 to 100"),
            ("size_counter_threshold", Int(300), "from 0 to 255"),
            ("dram_cache_bytes", Int(4096), "at least 1M"),
            ("nvmfs_window_ns", Int(5), "at least 1ms"),
            (
                "placement_policy",
                Text("fastest".into()),
                "known: ziggurat",
            ),
            ("log_migration", Int(3), "on or off"),
            ("log_migration", Text("maybe".into()), "on or off"),
            ("sync_threshold_bytes", Bool(true), "expected a size"),
            ("sync_threshold_bytes", Int(-1), "must not be negative"),
            (
                "sync_threshold_bytes",
                Other("a fractional number"),
                "fractional",
            ),
            ("sync_treshold", Int(1), "unknown setting"),
        ] {
            let e = cfg(vec![(key, v.clone())]).unwrap_err();
            assert!(e.contains(why) && e.contains(key), "{key} = {v:?}: {e}");
        }
        // The same deserializer path (`toml::from_str::<Settings>`) refuses them.
        let bad = MapDeserializer::<_, DeError>::new([("migration_threads", 5000u64)].into_iter());
        let e = Settings::deserialize(bad).unwrap_err().to_string();
        assert!(e.contains("from 0 to 1024"), "{e}");
        // Cross-key rules: on the whole file, whatever the key order.
        let e = cfg(vec![
            ("nvmfs_dirty_high_percent", Int(40)),
            ("nvmfs_dirty_low_percent", Int(60)),
        ])
        .unwrap_err();
        assert!(e.contains("must be below"), "{e}");
        let s = cfg(vec![
            ("nvmfs_dirty_high_percent", Int(40)),
            ("nvmfs_dirty_low_percent", Int(30)),
        ])
        .unwrap();
        assert_eq!(
            (s.nvmfs_dirty_low_percent, s.nvmfs_dirty_high_percent),
            (30, 40)
        );
        // Typed values: integers are bytes and ns, booleans switches.
        let s = cfg(vec![
            ("sync_idle_reset_ns", Int(1500)),
            ("sync_threshold_bytes", Int(8192)),
            ("log_migration", Bool(false)),
            ("migration_threshold", Int(70)),
        ])
        .unwrap();
        assert_eq!(s.sync_idle_reset_ns, 1500);
        assert_eq!(s.sync_threshold_bytes, 8192);
        assert!(!s.log_migration);
        assert_eq!(s.migration_threshold, ThresholdMode::Static(70));
        assert_eq!(
            Settings::config_text("sync_idle_reset_ns", &Int(1500)).unwrap(),
            "1500ns"
        );
    }

    #[test]
    fn every_key_is_declared_once_with_a_valid_default_named_in_its_help() {
        let d = Settings::default();
        d.validate().unwrap();
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len(), "a key is declared twice");
        for k in KEYS {
            let default = (k.default)();
            k.kind.check(&default).unwrap();
            let text = k.kind.format(&default);
            assert_eq!(k.kind.parse(&text).unwrap(), default, "{}", k.name);
            assert!(
                k.help.contains(&format!("default {text}")),
                "{}: the help does not name the default {text:?}",
                k.name
            );
            for r in RULES {
                for key in r.keys {
                    assert!(Settings::key(key).is_some(), "rule names unknown key {key}");
                }
            }
        }
    }

    #[test]
    fn every_range_fits_its_field() {
        // Storing a key's largest and smallest values must not overflow the
        // field (`put` would panic).
        for k in KEYS {
            let bounds = match k.kind {
                Kind::Number { min, max, .. } | Kind::Size { min, max, .. } => [min, max],
                Kind::Duration { min } => [min, u64::MAX],
                _ => continue,
            };
            for b in bounds {
                let mut s = Settings::default();
                (k.put)(&mut s, Value::Num(b));
                assert_eq!((k.get)(&s), Value::Num(b), "{}", k.name);
            }
        }
    }

    #[test]
    fn validate_checks_settings_changed_field_by_field() {
        let s = Settings {
            writeback_dirty_percent: 0,
            ..Settings::default()
        };
        let e = s.validate().unwrap_err();
        assert!(
            e.contains("writeback_dirty_percent") && e.contains("from 1 to 100"),
            "{e}"
        );
        let s = Settings {
            placement_policy: "fastest".into(),
            ..Settings::default()
        };
        assert!(s.validate().unwrap_err().contains("known: ziggurat"));
        let s = Settings {
            nvmfs_dirty_low_percent: 90,
            ..Settings::default()
        };
        assert!(s.validate().unwrap_err().contains("must be below"));
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
