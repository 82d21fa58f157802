//! Where a write goes: PM, or a block tier through the DRAM page cache.
//!
//! A placement policy looks at one [`WriteObservation`] — what the predictors
//! say about the write, how much PM is free, which block tier is first — and
//! returns a [`Placement`]. Policies are unit structs behind the
//! [`PlacementPolicy`] trait, found by name with [`placement_policy`], so the
//! mount option, the config file and `terrace set MOUNTPOINT placement_policy
//! NAME` all select them the same way, and benchmarks compare them on the
//! same workload.
//!
//! # Why writes are steered this way (Ziggurat §3.1, §4)
//!
//! PM is best for small writes (small writes to disk are slow) and synchronous
//! ones (an `fsync` of data on PM costs nothing). Large asynchronous writes are
//! faster through DRAM: copying to the page cache is quicker than to PM, and
//! write-back sends them to disk later in large sequential requests. So:
//! synchronous or small → PM; large and asynchronous → the first (fastest)
//! block tier through the cache.
//!
//! # Keeping PM for the writes that wait (issue 22)
//!
//! A small PM shared by a synchronous writer (a database's WAL: 4 KiB writes,
//! `fsync` after each) and a bulk stream (large asynchronous writes) must go
//! to the synchronous writer: its latency is what PM buys, while the stream
//! goes as fast through the DRAM cache to disk. Two rules, in every
//! automatic policy, for asynchronous writes only:
//!
//! - **Bulk yields to synchronous writers.** While a synchronous writer is
//!   active ([`WriteObservation::sync_writers_active`]: a write predicted
//!   synchronous within the setting `placement_sync_window_ns`, by default
//!   [`SYNC_WRITER_WINDOW_NS`]), a bulk write (at least
//!   [`BULK_WRITE_BYTES`], or predicted large) goes to PM only while PM use is
//!   below the migration threshold — space migration never has to free —
//!   and to the first block tier through the cache above it. The room
//!   between the threshold and full stays for the synchronous writers, and
//!   migration then moves only what is cold. With no synchronous writer
//!   active, a lone stream keeps using PM up to the bulk limit
//!   (`placement_bulk_pm_percent`, default [`DEFAULT_BULK_PM_PERCENT`]:
//!   faster for one sequential writer than going down at the threshold,
//!   docs/benchmarks.md 3b), which leaves room for a synchronous writer that
//!   arrives while migration catches up
//!   ([`WriteObservation::pm_over_bulk_limit`]).
//! - **Load-aware routing** (Orthus, FAST '21: when the fast device is the
//!   bottleneck, send the excess to the slow one rather than queue behind
//!   it): once PM use passes the forced mark, migration is not keeping up,
//!   and every asynchronous write goes to the first block tier through the
//!   cache ([`WriteObservation::pm_saturated`]). Synchronous writes keep PM
//!   until it has no room left for them.
//!
//! # Why a full PM never means ENOSPC
//!
//! When PM lacks room for a write, the write goes to the first block tier
//! anyway: through the cache if it is asynchronous, and written through to the
//! device before the call returns if it is synchronous
//! ([`Placement::BlockSyncWriteThrough`]), since an `fsync` is expected soon and
//! the application should not find dirty pages waiting then. The caller falls
//! back along the tiers if that one is full too.
//!
//! # User rules
//!
//! A per-file [`TierRule`] (set by the user, later by HetFS-style hints)
//! overrides the automatic decision in every policy. A pin to PM is honoured
//! while PM has room for the write and its use is below the forced mark
//! (pinned data cannot be moved away to make room for metadata, so it never
//! takes PM's last few percent); a pin to a block tier writes through when
//! the write is predicted synchronous and goes through the cache otherwise.

use std::fmt;
use terrace_format::TierId;

/// Tier id of the PM tier (tier 0 in the superblock's tier list).
pub const PM_TIER: TierId = TierId::PM;

/// Asynchronous writes of at least this size are bulk: a streaming writer's
/// requests (the write-size predictor only calls a write large once its
/// location was rewritten in large pieces, so new data needs its own test).
pub const BULK_WRITE_BYTES: u64 = 128 << 10;

/// Default PM use (percent) above which bulk writes go to a block tier even
/// with no synchronous writer active (the setting `placement_bulk_pm_percent`).
pub const DEFAULT_BULK_PM_PERCENT: u8 = 80;

/// By default a synchronous writer counts as active for this long after its
/// last synchronous write (10 s: a database committing every few seconds
/// keeps its PM between commits); the setting `placement_sync_window_ns`.
pub const SYNC_WRITER_WINDOW_NS: u64 = 10_000_000_000;

/// Where one write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Persistent memory (tier [`PM_TIER`]).
    Pm,
    /// Block tier `tier`, buffered in the DRAM page cache and written back in
    /// the background (or at `fsync`).
    BlockViaCache {
        /// Tier id.
        tier: TierId,
    },
    /// Block tier `tier`, through the DRAM page cache but written to the device
    /// before the write returns.
    BlockSyncWriteThrough {
        /// Tier id.
        tier: TierId,
    },
}

impl Placement {
    /// The tier id the data lands on.
    pub fn tier(&self) -> TierId {
        match *self {
            Placement::Pm => PM_TIER,
            Placement::BlockViaCache { tier } | Placement::BlockSyncWriteThrough { tier } => tier,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Pm => write!(f, "pm"),
            Placement::BlockViaCache { tier } => write!(f, "tier {tier} via cache"),
            Placement::BlockSyncWriteThrough { tier } => write!(f, "tier {tier} write-through"),
        }
    }
}

/// A user's per-file placement rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierRule {
    /// Keep the file's new data on this tier id ([`PM_TIER`] for PM). The
    /// caller only creates pins to tiers that exist.
    Pin {
        /// Tier id.
        tier: TierId,
    },
}

/// What the file system knows when a write arrives: the input of a placement
/// policy. Cheap to build and `Copy`, as one is made per write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteObservation {
    /// The synchronicity predictor's verdict for this write
    /// ([`SyncPredictor::on_write`](crate::SyncPredictor::on_write)).
    pub synchronous: bool,
    /// The write-size predictor's verdict for this write
    /// ([`is_large`](crate::is_large) of its new counter).
    pub large: bool,
    /// The write overwrites nothing (new data) and is large by its own size
    /// ([`is_large_fresh`](crate::size_predictor::is_large_fresh)).
    pub fresh_large: bool,
    /// PM use has reached its migration threshold.
    pub pm_over_threshold: bool,
    /// PM use has passed the forced mark: migration is not keeping up with
    /// the writes PM takes (load-aware routing sends asynchronous writes
    /// down).
    pub pm_saturated: bool,
    /// A write predicted synchronous reached the file system within the
    /// setting `placement_sync_window_ns` (any file).
    pub sync_writers_active: bool,
    /// PM use has reached the bulk limit (`placement_bulk_pm_percent`).
    pub pm_over_bulk_limit: bool,
    /// Bytes this write needs on its tier (whole blocks).
    pub write_bytes: u64,
    /// Free bytes on PM now.
    pub pm_free_bytes: u64,
    /// Bytes of data PM takes before its use reaches the forced mark: what
    /// data pinned to PM may still take (a pinned write larger than this
    /// spills, [`TierRule::Pin`]).
    pub pm_below_forced_bytes: u64,
    /// PM capacity in bytes (for policies that reason about utilisation).
    pub pm_capacity_bytes: u64,
    /// The fastest block tier, or `None` when the pool is PM only.
    pub first_block_tier: Option<TierId>,
    /// The file's user rule, if any.
    pub rule: Option<TierRule>,
    /// The file's access class from its trace ([`crate::access`]).
    pub access: crate::access::AccessClass,
}

impl WriteObservation {
    /// Whether PM has room for this write.
    pub fn pm_has_room(&self) -> bool {
        self.write_bytes <= self.pm_free_bytes
    }

    /// Whether this is a bulk write: asynchronous, and large by prediction
    /// or by its own size ([`BULK_WRITE_BYTES`]).
    pub fn bulk(&self) -> bool {
        !self.synchronous && (self.large || self.write_bytes >= BULK_WRITE_BYTES)
    }

    /// Whether an asynchronous write must leave PM to others (the rules of
    /// "Keeping PM for the writes that wait" in the module docs): PM is
    /// saturated, or this is bulk and PM is past the bulk limit, or past its
    /// migration threshold while a synchronous writer is active.
    pub fn yields_pm(&self) -> bool {
        !self.synchronous
            && (self.pm_saturated
                || (self.bulk()
                    && (self.pm_over_bulk_limit
                        || (self.sync_writers_active && self.pm_over_threshold))))
    }
}

/// A placement policy: a pure decision from one observation.
pub trait PlacementPolicy: fmt::Debug {
    /// The name it is registered under.
    fn name(&self) -> &'static str;
    /// Where this write goes.
    fn place(&self, obs: &WriteObservation) -> Placement;
}

/// Block placement for a write predicted `synchronous` on block tier `tier`.
fn block(tier: TierId, synchronous: bool) -> Placement {
    if synchronous {
        Placement::BlockSyncWriteThrough { tier }
    } else {
        Placement::BlockViaCache { tier }
    }
}

/// PM if it has room, else the first block tier (if any).
fn pm_or_spill(obs: &WriteObservation) -> Placement {
    match obs.first_block_tier {
        Some(tier) if !obs.pm_has_room() => block(tier, obs.synchronous),
        _ => Placement::Pm,
    }
}

/// The decision a user rule imposes, if the file has one. A pin to PM
/// outranks every automatic limit but the forced mark: pinned data is the
/// data migration may not move, so a pinned write that would take PM past
/// that mark spills to
/// the first block tier (migration brings it up once PM is below the mark),
/// and PM's last room stays for the metadata every file needs.
fn by_rule(obs: &WriteObservation) -> Option<Placement> {
    match obs.rule? {
        TierRule::Pin { tier: PM_TIER } => Some(match obs.first_block_tier {
            Some(tier) if obs.pm_saturated || obs.write_bytes > obs.pm_below_forced_bytes => {
                block(tier, obs.synchronous)
            }
            _ => pm_or_spill(obs),
        }),
        TierRule::Pin { tier } => Some(block(tier, obs.synchronous)),
    }
}

/// Ziggurat's policy: synchronous or small writes to PM, large asynchronous
/// writes to the first block tier through the cache; a full PM spills to the
/// first block tier (written through when synchronous). "Large" is the
/// write-size predictor's verdict on rewrites, or, for new data (no
/// predecessor), the write's own size once PM has passed its migration
/// threshold (Ziggurat §3.2 sends large new asynchronous writes to disk; while
/// PM is below its threshold they may as well use it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ziggurat;

impl PlacementPolicy for Ziggurat {
    fn name(&self) -> &'static str {
        "ziggurat"
    }

    fn place(&self, obs: &WriteObservation) -> Placement {
        if let Some(p) = by_rule(obs) {
            return p;
        }
        let Some(tier) = obs.first_block_tier else {
            return Placement::Pm;
        };
        // Large new data goes down only once PM is past its threshold: until
        // then PM has room to spare and migration moves it later if it cools.
        let large = obs.large || (obs.fresh_large && obs.pm_over_threshold);
        if (large && !obs.synchronous) || obs.yields_pm() {
            Placement::BlockViaCache { tier }
        } else {
            pm_or_spill(obs)
        }
    }
}

/// Every write to PM, whatever PM's free space (Terrace before block tiers).
#[derive(Debug, Clone, Copy, Default)]
pub struct PmOnly;

impl PlacementPolicy for PmOnly {
    fn name(&self) -> &'static str {
        "pm-only"
    }

    fn place(&self, obs: &WriteObservation) -> Placement {
        by_rule(obs).unwrap_or(Placement::Pm)
    }
}

/// Every write to the first block tier through the cache (PM if there is
/// none): a baseline for benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockFirst;

impl PlacementPolicy for BlockFirst {
    fn name(&self) -> &'static str {
        "block-first"
    }

    fn place(&self, obs: &WriteObservation) -> Placement {
        if let Some(p) = by_rule(obs) {
            return p;
        }
        match obs.first_block_tier {
            Some(tier) => Placement::BlockViaCache { tier },
            None => Placement::Pm,
        }
    }
}

/// HetFS-style placement by access class ([`crate::access`]): a file whose
/// trace is sequential streams its asynchronous writes to the first block
/// tier through the cache from its first write (Ziggurat's size predictor
/// only learns that from rewrites, so appends land on PM first); random and
/// byte-granular files keep their writes on PM, where small scattered I/O is
/// cheap; synchronous writes and files not yet classified follow Ziggurat.
/// User rules win, as in every policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct HetFs;

impl PlacementPolicy for HetFs {
    fn name(&self) -> &'static str {
        "hetfs"
    }

    fn place(&self, obs: &WriteObservation) -> Placement {
        use crate::access::AccessClass;
        if let Some(p) = by_rule(obs) {
            return p;
        }
        let Some(tier) = obs.first_block_tier else {
            return Placement::Pm;
        };
        match obs.access {
            AccessClass::Sequential if !obs.synchronous => Placement::BlockViaCache { tier },
            _ if obs.yields_pm() => Placement::BlockViaCache { tier },
            AccessClass::Random | AccessClass::ByteGranular => pm_or_spill(obs),
            _ => Ziggurat.place(obs),
        }
    }
}

const NAMES: &[&str] = &["ziggurat", "pm-only", "block-first", "hetfs"];

/// Names of the registered placement policies, the default first.
pub fn placement_policy_names() -> &'static [&'static str] {
    NAMES
}

/// The placement policy registered as `name`, or `None` if there is none.
pub fn placement_policy(name: &str) -> Option<Box<dyn PlacementPolicy + Send + Sync>> {
    match name {
        "ziggurat" => Some(Box::new(Ziggurat)),
        "pm-only" => Some(Box::new(PmOnly)),
        "block-first" => Some(Box::new(BlockFirst)),
        "hetfs" => Some(Box::new(HetFs)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn obs(synchronous: bool, large: bool) -> WriteObservation {
        WriteObservation {
            synchronous,
            large,
            fresh_large: false,
            pm_over_threshold: false,
            pm_saturated: false,
            sync_writers_active: false,
            pm_over_bulk_limit: false,
            write_bytes: 4096,
            pm_free_bytes: 64 * MIB,
            pm_below_forced_bytes: 56 * MIB,
            pm_capacity_bytes: 128 * MIB,
            first_block_tier: Some(TierId(1)),
            rule: None,
            access: crate::access::AccessClass::Unknown,
        }
    }

    fn full(mut o: WriteObservation) -> WriteObservation {
        o.pm_free_bytes = o.write_bytes - 1;
        o
    }

    fn place(name: &str, o: &WriteObservation) -> Placement {
        placement_policy(name).unwrap().place(o)
    }

    #[test]
    fn registry_finds_every_listed_name_under_its_own_name() {
        for name in placement_policy_names() {
            assert_eq!(placement_policy(name).unwrap().name(), *name);
        }
        assert!(placement_policy("nope").is_none());
    }

    #[test]
    fn ziggurat_sends_sync_or_small_writes_to_pm() {
        assert_eq!(place("ziggurat", &obs(true, false)), Placement::Pm);
        assert_eq!(place("ziggurat", &obs(true, true)), Placement::Pm);
        assert_eq!(place("ziggurat", &obs(false, false)), Placement::Pm);
    }

    #[test]
    fn ziggurat_sends_large_new_async_data_down_only_once_pm_passes_its_threshold() {
        let mut o = obs(false, false);
        o.fresh_large = true;
        assert_eq!(place("ziggurat", &o), Placement::Pm, "PM below threshold");
        o.pm_over_threshold = true;
        assert_eq!(
            place("ziggurat", &o),
            Placement::BlockViaCache { tier: TierId(1) }
        );
        o.synchronous = true;
        assert_eq!(
            place("ziggurat", &o),
            Placement::Pm,
            "synchronous stays on PM"
        );
        let mut small = obs(false, false);
        small.pm_over_threshold = true;
        assert_eq!(
            place("ziggurat", &small),
            Placement::Pm,
            "small new data stays on PM"
        );
    }

    #[test]
    fn ziggurat_sends_large_async_writes_to_first_block_tier_via_cache() {
        assert_eq!(
            place("ziggurat", &obs(false, true)),
            Placement::BlockViaCache { tier: TierId(1) }
        );
    }

    #[test]
    fn ziggurat_with_full_pm_writes_sync_through_and_async_via_cache() {
        assert_eq!(
            place("ziggurat", &full(obs(true, false))),
            Placement::BlockSyncWriteThrough { tier: TierId(1) }
        );
        assert_eq!(
            place("ziggurat", &full(obs(false, false))),
            Placement::BlockViaCache { tier: TierId(1) }
        );
    }

    #[test]
    fn pm_with_exactly_enough_room_takes_the_write() {
        let mut o = obs(true, false);
        o.pm_free_bytes = o.write_bytes;
        assert_eq!(place("ziggurat", &o), Placement::Pm);
    }

    #[test]
    fn without_block_tier_every_policy_uses_pm() {
        for name in placement_policy_names() {
            for (s, l) in [(false, false), (false, true), (true, false), (true, true)] {
                let mut o = full(obs(s, l));
                o.first_block_tier = None;
                assert_eq!(place(name, &o), Placement::Pm, "{name}");
            }
        }
    }

    #[test]
    fn pm_only_always_uses_pm() {
        assert_eq!(place("pm-only", &full(obs(false, true))), Placement::Pm);
    }

    #[test]
    fn block_first_sends_everything_via_cache() {
        assert_eq!(
            place("block-first", &obs(true, false)),
            Placement::BlockViaCache { tier: TierId(1) }
        );
    }

    #[test]
    fn user_pin_overrides_automatic_decision() {
        let mut o = obs(false, true);
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        assert_eq!(place("ziggurat", &o), Placement::Pm);
        assert_eq!(place("block-first", &o), Placement::Pm);

        let mut o = obs(true, false);
        o.rule = Some(TierRule::Pin { tier: TierId(2) });
        for name in placement_policy_names() {
            assert_eq!(
                place(name, &o),
                Placement::BlockSyncWriteThrough { tier: TierId(2) }
            );
        }
        o.synchronous = false;
        assert_eq!(
            place("ziggurat", &o),
            Placement::BlockViaCache { tier: TierId(2) }
        );
    }

    #[test]
    fn hetfs_streams_sequential_async_files_to_disk_and_keeps_random_ones_on_pm() {
        use crate::access::AccessClass;
        let mut o = obs(false, false);
        o.access = AccessClass::Sequential;
        assert_eq!(
            place("hetfs", &o),
            Placement::BlockViaCache { tier: TierId(1) }
        );
        // Synchronous sequential writes (a WAL) stay on PM.
        o.synchronous = true;
        assert_eq!(place("hetfs", &o), Placement::Pm);
        // Random large rewrites stay on PM too (Ziggurat would send them down).
        let mut o = obs(false, true);
        o.access = AccessClass::Random;
        assert_eq!(place("hetfs", &o), Placement::Pm);
        o.access = AccessClass::ByteGranular;
        assert_eq!(
            place("hetfs", &full(o)),
            Placement::BlockViaCache { tier: TierId(1) }
        );
        // Unknown: Ziggurat's decision.
        o.access = AccessClass::Unknown;
        assert_eq!(place("hetfs", &o), place("ziggurat", &o));
        // A user rule wins.
        let mut o = obs(false, false);
        o.access = AccessClass::Sequential;
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        assert_eq!(place("hetfs", &o), Placement::Pm);
    }

    fn bulk(o: WriteObservation) -> WriteObservation {
        WriteObservation {
            write_bytes: BULK_WRITE_BYTES,
            ..o
        }
    }

    #[test]
    fn bulk_writes_leave_pm_past_its_threshold_while_a_synchronous_writer_is_active() {
        for name in ["ziggurat", "hetfs"] {
            let mut o = bulk(obs(false, false));
            o.pm_over_threshold = true;
            assert_eq!(place(name, &o), Placement::Pm, "{name}: no sync writer");
            o.sync_writers_active = true;
            assert_eq!(
                place(name, &o),
                Placement::BlockViaCache { tier: TierId(1) },
                "{name}"
            );
            o.pm_over_threshold = false;
            assert_eq!(place(name, &o), Placement::Pm, "{name}: below threshold");
        }
    }

    #[test]
    fn bulk_writes_leave_pm_past_the_bulk_limit_even_with_no_synchronous_writer() {
        let mut o = bulk(obs(false, false));
        o.pm_over_threshold = true;
        assert_eq!(place("ziggurat", &o), Placement::Pm);
        o.pm_over_bulk_limit = true;
        assert_eq!(
            place("ziggurat", &o),
            Placement::BlockViaCache { tier: TierId(1) }
        );
        let mut small = obs(false, false);
        small.pm_over_bulk_limit = true;
        assert_eq!(place("ziggurat", &small), Placement::Pm, "small stays");
    }

    #[test]
    fn small_and_synchronous_writes_keep_pm_beside_a_synchronous_writer() {
        let mut small = obs(false, false);
        small.sync_writers_active = true;
        small.pm_over_threshold = true;
        assert_eq!(place("ziggurat", &small), Placement::Pm);
        let mut sync = bulk(obs(true, false));
        sync.sync_writers_active = true;
        sync.pm_over_threshold = true;
        assert_eq!(place("ziggurat", &sync), Placement::Pm);
    }

    #[test]
    fn a_saturated_pm_sends_every_asynchronous_write_down_and_keeps_synchronous_ones() {
        for name in ["ziggurat", "hetfs"] {
            let mut o = obs(false, false);
            o.pm_saturated = true;
            o.pm_over_threshold = true;
            assert_eq!(
                place(name, &o),
                Placement::BlockViaCache { tier: TierId(1) },
                "{name}"
            );
            o.access = crate::access::AccessClass::Random;
            assert_eq!(
                place(name, &o),
                Placement::BlockViaCache { tier: TierId(1) },
                "{name}"
            );
            o.synchronous = true;
            assert_eq!(place(name, &o), Placement::Pm, "{name}: sync keeps PM");
            assert_eq!(
                place(name, &full(o)),
                Placement::BlockSyncWriteThrough { tier: TierId(1) },
                "{name}: sync overflows only when PM has no room"
            );
        }
    }

    #[test]
    fn a_pin_to_pm_outranks_the_protection_of_synchronous_writers() {
        let mut o = bulk(obs(false, true));
        o.sync_writers_active = true;
        o.pm_over_threshold = true;
        o.pm_over_bulk_limit = true;
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        for name in placement_policy_names() {
            assert_eq!(place(name, &o), Placement::Pm, "{name}");
        }
    }

    #[test]
    fn a_pin_to_pm_spills_past_the_forced_mark_so_metadata_keeps_its_room() {
        // A write that fits below the mark still goes to PM.
        let mut o = obs(true, false);
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        o.pm_below_forced_bytes = o.write_bytes;
        assert_eq!(place("ziggurat", &o), Placement::Pm);
        // One that would cross it spills, as does any once PM is past it.
        o.pm_below_forced_bytes = o.write_bytes - 1;
        assert_eq!(
            place("ziggurat", &o),
            Placement::BlockSyncWriteThrough { tier: TierId(1) }
        );
        let mut o = obs(true, false);
        o.pm_saturated = true;
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        for name in placement_policy_names() {
            assert_eq!(
                place(name, &o),
                Placement::BlockSyncWriteThrough { tier: TierId(1) },
                "{name}"
            );
            o.synchronous = false;
            assert_eq!(
                place(name, &o),
                Placement::BlockViaCache { tier: TierId(1) },
                "{name}"
            );
            o.synchronous = true;
        }
        // A PM-only pool has nowhere else to put it.
        o.first_block_tier = None;
        assert_eq!(place("ziggurat", &o), Placement::Pm);
    }

    #[test]
    fn pin_to_pm_spills_when_pm_is_full() {
        let mut o = full(obs(false, false));
        o.rule = Some(TierRule::Pin { tier: PM_TIER });
        assert_eq!(
            place("ziggurat", &o),
            Placement::BlockViaCache { tier: TierId(1) }
        );
    }

    #[test]
    fn placement_reports_its_tier() {
        assert_eq!(Placement::Pm.tier(), PM_TIER);
        assert_eq!(
            Placement::BlockViaCache { tier: TierId(3) }.tier(),
            TierId(3)
        );
        assert_eq!(
            Placement::BlockSyncWriteThrough { tier: TierId(2) }.to_string(),
            "tier 2 write-through"
        );
    }
}
