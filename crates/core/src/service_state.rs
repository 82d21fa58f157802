//! The state the services keep in [`Fs`](crate::Fs) — counters, a scan
//! cursor, the last scrub's report, the name of the xattr the rules index
//! is rebuilt from. It is declared here, below `fs.rs`, so that `Fs` holds it
//! without importing the services whose code reads and updates it
//! (`space.rs`, `clean.rs`, `log_migrate.rs`, `scrub.rs`, `rules.rs`, `trim.rs`; the
//! migrator's state is `migrate/state.rs`). Plain data, no logic: see
//! docs/design.md §1, "Layers".

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Counters and state of the PM room rules (`space.rs`; for `terrace
/// status`).
#[derive(Debug, Default)]
pub struct SpaceStats {
    /// Operations that waited for migration to free PM.
    pub waits: AtomicU64,
    /// Total time they waited.
    pub wait_ns: AtomicU64,
    /// Waits that ended because PM stopped getting freer.
    pub stalls: AtomicU64,
    /// Cached writes refused because PM could not hold their log entries.
    pub promise_refusals: AtomicU64,
    /// Bytes of PM copies of clean data dropped because a write found no
    /// room ([`Fs::retry_freeing_room`](crate::Fs::retry_freeing_room)).
    pub copies_dropped_for_room: AtomicU64,
    /// Operations refused for room that were tried again.
    pub room_retries: AtomicU64,
    /// Operations that add metadata refused with ENOSPC because the PM
    /// they would take is what dirty cached pages need
    /// ([`Fs::check_metadata_room`](crate::Fs)).
    pub metadata_refused: AtomicU64,
    /// 1 + free PM blocks when the last wait gave up (0: it did not):
    /// operations do not wait again until PM has more free blocks.
    pub stalled_at_free: AtomicU64,
    /// The look of the pool's space (`Fs::space_look`) when the last wait
    /// of a removal for PM room gave up (0: it did not): removals do not
    /// wait again until it changes.
    pub removal_stalled_look: AtomicU64,
    /// Bytes of PM data moved into a block tier's recycling reserve for
    /// removals refused PM room (`migrate/rescue.rs`).
    pub rescued_bytes: AtomicU64,
    /// Bytes of data pinned to PM by rules that migration moved to a block
    /// tier because metadata needed PM (`Fs::yield_pm_pins_to_metadata`).
    pub pins_yielded_bytes: AtomicU64,
    /// Set when a data write was refused for room, until the pool has room
    /// for that request again: the daemon's log says each change once, not
    /// once per refused write.
    pub full: AtomicBool,
    /// Blocks of the request whose refusal set `full`.
    pub full_request_blocks: AtomicU64,
}

/// Extent recycling counters (`clean.rs`).
#[derive(Default)]
pub struct CleanerStats {
    pub(crate) rounds: AtomicU64,
    pub(crate) extents_recycled: AtomicU64,
    pub(crate) moved_blocks: AtomicU64,
    pub(crate) recycled_blocks: AtomicU64,
    /// Rounds of [`Fs::recycle_for_room`](crate::Fs): extents recycled
    /// because data would otherwise have failed for room.
    pub(crate) urgent_rounds: AtomicU64,
    /// A digest of the block tiers' space (free extents, valid blocks,
    /// extents freed, the pool's room) when a `recycle_for_room` freed
    /// nothing (0: none): a call that finds the same does not try again.
    pub(crate) futile_look: AtomicU64,
}

/// Object-tier cleaning state (`object_clean.rs`).
#[derive(Default)]
pub struct ObjectCleaning {
    /// Set while a pass runs (a second one at the same time returns at once).
    pub(crate) running: AtomicBool,
    /// When the last pass started (for `object_clean_interval_ns`).
    pub(crate) last_pass: crate::lock_order::Mutex<Option<std::time::Instant>>,
    /// Counters per object tier id.
    pub(crate) tiers:
        crate::lock_order::Mutex<BTreeMap<terrace_format::TierId, ObjectTierCleaning>>,
}

/// One object tier's cleaning counters (`object_clean.rs`).
#[derive(Debug, Default, Clone)]
pub struct ObjectTierCleaning {
    /// Passes that chose parts to clean.
    pub(crate) passes: u64,
    /// Passes skipped because the store was failing requests.
    pub(crate) skipped_unreachable: u64,
    /// Parts cleaned: chosen, then found dead.
    pub(crate) parts_cleaned: u64,
    /// Live blocks rewritten.
    pub(crate) rewritten_blocks: u64,
    /// Blocks of the parts cleaned.
    pub(crate) reclaimed_blocks: u64,
    /// Parts the last pass chose that still had live blocks after it
    /// (upload number → blocks): a free can wait for a reader; the next pass
    /// counts them if they died meanwhile.
    pub(crate) awaiting: BTreeMap<u64, u64>,
}

/// Online discard's state and counters (`trim.rs`).
#[derive(Default)]
pub struct OnlineDiscard {
    /// When the last background discard started, and the look of the
    /// block tiers' space then (`Fs::tier_space_changes`): a pass is due
    /// only once the interval has passed and the look changed. No look
    /// after a pass that failed: the next is due after the interval.
    pub(crate) last: crate::lock_order::Mutex<Option<(std::time::Instant, Option<u64>)>>,
    /// Background discards run since mount.
    pub(crate) passes: AtomicU64,
    /// Bytes they discarded.
    pub(crate) bytes: AtomicU64,
    /// Background discards a device error stopped.
    pub(crate) errors: AtomicU64,
    /// Tier ids (bit per id) whose device cannot discard: skipped by later
    /// background passes (`fstrim` still asks them).
    pub(crate) unsupported: AtomicU64,
    /// The daemon's log was told that this pool has no block tier to
    /// discard on (said once per mount).
    pub(crate) nothing_to_discard_said: std::sync::atomic::AtomicBool,
}

/// Log migration counters and the scan cursor (`log_migrate.rs`).
#[derive(Default)]
pub struct LogMigration {
    /// The next inode slot a pass looks at.
    pub(crate) cursor: AtomicU64,
    /// Logs moved to a block tier since mount.
    pub(crate) moved: AtomicU64,
    /// PM bytes of log pages those moves freed.
    pub(crate) pm_bytes_freed: AtomicU64,
    /// Blobs the cleaner moved within a tier.
    pub(crate) relocated: AtomicU64,
    /// Scans of the inode table for logs to move since mount.
    pub(crate) scans: AtomicU64,
    /// The back-off of scans that moved no log (`Fs::migrate_logs`).
    pub(crate) idle: crate::lock_order::Mutex<crate::worker::IdleBackoff>,
}

/// What a scrub found and did (the running one, or the last one;
/// `scrub.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubReport {
    /// Still running.
    pub running: bool,
    /// When it started / finished (seconds since the epoch; 0 = not yet).
    pub started_unix: u64,
    /// When it finished.
    pub finished_unix: u64,
    /// Repairs were allowed (read-write mount, not `--no-repair`).
    pub repair: bool,
    /// Block-tier blocks to read (primary locations and copies).
    pub total_blocks: u64,
    /// Blocks read so far.
    pub read_blocks: u64,
    /// Blocks whose checksum matched.
    pub checked_blocks: u64,
    /// Blocks without a checksum (written before format 5).
    pub unverified_blocks: u64,
    /// Blocks that were damaged or could not be read.
    pub bad_blocks: u64,
    /// Damaged blocks repaired from a good copy (or dropped copies).
    pub repaired_blocks: u64,
    /// Damaged blocks with no good copy: "inode N, bytes A..B (tier T block B)".
    pub unrepairable: Vec<String>,
    /// Stopped before the end (unmount).
    pub stopped: bool,
}

/// The placement rule's xattr name (`rules.rs`). Mount rebuilds
/// `Fs::ruled`, the inodes that have a rule, from it.
pub const RULE_XATTR: &[u8] = b"user.terrace.rule";

/// The xattr `fsck` gives a file whose log it could read only in part,
/// when what was lost may have been data (design.md §3.6): its reads fail
/// with EIO while it is there — never a hole of zeros where the lost data
/// was — and its value says what happened. Its owner (or root) accepts
/// what is left by removing it; nobody can set it.
pub const DAMAGED_XATTR: &[u8] = b"user.terrace.damaged";

/// The inodes that have a rule (`Fs::ruled`, `rules.rs`), and when the
/// rule enforcement of migration passes looks at them next.
#[derive(Debug, Default)]
pub(crate) struct Ruled {
    /// Every inode that has a rule (see the invariant in `rules.rs`).
    pub(crate) inos: std::collections::BTreeSet<crate::types::Ino>,
    /// The back-off of passes that moved nothing.
    pub(crate) idle: crate::worker::IdleBackoff,
    /// The back-off of PM's yields to metadata that moved nothing
    /// (`Fs::yield_pm_pins_to_metadata`).
    pub(crate) yield_idle: crate::worker::IdleBackoff,
    /// Walks of `inos` since mount (`terrace status`: the mover's looks).
    pub(crate) walks: u64,
    /// Files whose PM-pinned data left PM to keep room for metadata (a
    /// yield, `Fs::yield_pm_pins_to_metadata`, or a removal's rescue),
    /// with their slot generation then: why their rule is unmet
    /// (`user.terrace.moves`). In DRAM only (a remount forgets it).
    pub(crate) yielded: std::collections::BTreeMap<crate::types::Ino, u32>,
}
