//! When to migrate (Ziggurat §5.2): the threshold of the upper tier's use,
//! static or dynamic from the read/write ratio, the forced mark, and
//! [`should_migrate`]'s hysteresis (a running migration continues until use
//! is below the threshold, a stopped one starts when use is above it).
//!
//! Invariants are stated on [`should_migrate`]; the dynamic threshold is
//! monotone in reads and writes and stays within
//! [`DYNAMIC_MIN_PERCENT`]..=[`DYNAMIC_MAX_PERCENT`].

use std::fmt;

/// Default percentage above which migration is forced and asynchronous
/// foreground writes go straight down (synchronous ones keep PM while it has
/// room: `crate::placement`).
pub const DEFAULT_FORCED_PERCENT: u8 = 95;

/// Default threshold of a block tier (percent): a fixed utilization
/// threshold, as the tiered systems Ziggurat compares with use (§5.1). The
/// dynamic threshold is PM's: it keeps PM room for the writes that wait on
/// it, a reason that does not apply to an SSD, and at its low end (50 %) an
/// SSD in front of an HDD was half unused.
pub const DEFAULT_BLOCK_THRESHOLD_PERCENT: u8 = 90;

/// Lower bound of the dynamic threshold (percent).
pub const DYNAMIC_MIN_PERCENT: u8 = 50;

/// Upper bound of the dynamic threshold (percent).
pub const DYNAMIC_MAX_PERCENT: u8 = 90;

/// How the migration threshold is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThresholdMode {
    /// A fixed percentage of the tier (1-99).
    Static(u8),
    /// From the read/write ratio, 50% to 90% ([`dynamic_threshold`]).
    Dynamic,
}

impl fmt::Display for ThresholdMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThresholdMode::Static(p) => write!(f, "{p}"),
            ThresholdMode::Dynamic => write!(f, "dynamic"),
        }
    }
}

/// Reads and writes the file system served recently (operations or bytes,
/// as long as both count the same thing), the input of the dynamic threshold
/// and of reverse migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoCounters {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
}

impl IoCounters {
    /// Whether reads are at least `ratio` times the writes (and there are
    /// reads at all). `ratio == 0` never holds: it turns the test off.
    pub fn reads_dominate(&self, ratio: u64) -> bool {
        ratio != 0
            && self.reads > 0
            && u128::from(self.reads) >= u128::from(ratio) * u128::from(self.writes)
    }
}

/// `floor(log2(max(n, 1)))`.
fn log2_floor(n: u64) -> i64 {
    i64::from(n.max(1).ilog2())
}

/// Ziggurat's dynamic threshold: `50 + 10 · (log2 reads − log2 writes)`,
/// clamped to `[50, 90]`. Monotone: more reads never lower it, more writes
/// never raise it.
pub fn dynamic_threshold(io: IoCounters) -> u8 {
    let t = 50 + 10 * (log2_floor(io.reads) - log2_floor(io.writes));
    t.clamp(
        i64::from(DYNAMIC_MIN_PERCENT),
        i64::from(DYNAMIC_MAX_PERCENT),
    ) as u8
}

/// The migration threshold (percent of the tier) for this mode and these
/// counters.
pub fn migration_threshold(mode: ThresholdMode, io: IoCounters) -> u8 {
    match mode {
        ThresholdMode::Static(p) => p,
        ThresholdMode::Dynamic => dynamic_threshold(io),
    }
}

/// What [`should_migrate`] asks of the migrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MigrationNeed {
    /// Nothing to do (or stop).
    None,
    /// Migrate in the background until this many more bytes are free.
    Background {
        /// Bytes to free to get strictly below the threshold.
        bytes_to_free: u64,
    },
    /// The tier is nearly full: migrate, and send foreground writes to the
    /// next tier meanwhile.
    Forced {
        /// Bytes to free to get strictly below the threshold.
        bytes_to_free: u64,
    },
}

impl MigrationNeed {
    /// Whether any migration is asked for.
    pub fn is_needed(&self) -> bool {
        !matches!(self, MigrationNeed::None)
    }

    /// Whether foreground writes should go to the next tier.
    pub fn is_forced(&self) -> bool {
        matches!(self, MigrationNeed::Forced { .. })
    }

    /// Bytes to free (0 for [`MigrationNeed::None`]).
    pub fn bytes_to_free(&self) -> u64 {
        match *self {
            MigrationNeed::None => 0,
            MigrationNeed::Background { bytes_to_free }
            | MigrationNeed::Forced { bytes_to_free } => bytes_to_free,
        }
    }
}

/// `capacity · percent / 100`, rounded down.
pub(super) fn share(capacity: u64, percent: u8) -> u64 {
    (u128::from(capacity) * u128::from(percent) / 100) as u64
}

/// Whether the tier (`used` of `capacity` bytes) must migrate, with the
/// threshold `threshold_percent` ([`migration_threshold`]) and the forced mark
/// `forced_percent`. `running` says whether migration of this tier is under
/// way (the caller's state): a running migration continues until use is below
/// the threshold, a stopped one starts when use is above it.
///
/// Invariants: `Forced` exactly when use is above the forced mark; the bytes
/// to free bring use strictly below `min(threshold, forced)` (to 0 if that
/// share is 0 bytes) and never exceed `used`; never asks anything of an empty
/// or zero-capacity tier.
pub fn should_migrate(
    used: u64,
    capacity: u64,
    threshold_percent: u8,
    forced_percent: u8,
    running: bool,
) -> MigrationNeed {
    if capacity == 0 || used == 0 {
        return MigrationNeed::None;
    }
    let limit = share(capacity, threshold_percent.min(forced_percent));
    let forced = used > share(capacity, forced_percent);
    let go = forced || used > limit || (running && used >= limit);
    if !go {
        return MigrationNeed::None;
    }
    // Strictly below the limit; all of it when the limit is 0.
    let bytes_to_free = (used - limit).saturating_add(1).min(used);
    if forced {
        MigrationNeed::Forced { bytes_to_free }
    } else {
        MigrationNeed::Background { bytes_to_free }
    }
}
