//! Where writes went, per class of write (issue 22): synchronous writes (as
//! the synchronicity predictor saw them), and asynchronous writes, large
//! (at least [`LARGE_WRITE_BYTES`], or predicted large by the write-size
//! predictor) or small, each counted where it landed — PM,
//! a block tier the policy chose, or a block tier because PM had no room for
//! it (an overflow) — so a user can check the placement policy protects what
//! it should (`terrace status`). It also remembers when the last synchronous
//! write arrived, which the placement policies read as "a synchronous writer
//! is active" (`terrace_policy::placement`, keeping PM for the writes that
//! wait).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Asynchronous writes of at least this size count as large: the placement
/// policies' bulk writes ([`terrace_policy::placement::BULK_WRITE_BYTES`]).
pub const LARGE_WRITE_BYTES: u64 = terrace_policy::placement::BULK_WRITE_BYTES;

/// A write's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteClass {
    /// Predicted synchronous (fsync follows, or O_SYNC/O_DSYNC).
    Sync,
    /// Asynchronous and small.
    AsyncSmall,
    /// Asynchronous and large (the size predictor, or a fresh large write).
    AsyncLarge,
}

impl WriteClass {
    /// The class of a write of `bytes` the predictors saw as `synchronous`
    /// and (`predicted_large`) large.
    pub fn of(synchronous: bool, predicted_large: bool, bytes: u64) -> WriteClass {
        match (synchronous, predicted_large || bytes >= LARGE_WRITE_BYTES) {
            (true, _) => WriteClass::Sync,
            (false, false) => WriteClass::AsyncSmall,
            (false, true) => WriteClass::AsyncLarge,
        }
    }
}

/// Where a write landed, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// On PM.
    Pm,
    /// On a block tier the placement policy (or a rule) chose.
    BlockChosen,
    /// On a block tier though the policy chose PM: PM had no room.
    BlockOverflow,
}

#[derive(Default)]
struct ClassCounters {
    writes: [AtomicU64; 3],
    bytes: [AtomicU64; 3],
}

/// The counters of every class.
#[derive(Default)]
pub struct PlacementStats {
    classes: [ClassCounters; 3],
    /// Wall-clock ns of the last write predicted synchronous (0: none yet).
    last_sync_write_ns: AtomicU64,
}

impl PlacementStats {
    /// Remembers that a write predicted synchronous arrived at `now_ns`.
    pub fn note_sync_write(&self, now_ns: u64) {
        self.last_sync_write_ns.fetch_max(now_ns, Ordering::Relaxed);
    }

    /// Whether a synchronous write arrived within `window_ns` before
    /// `now_ns`.
    pub fn sync_writers_active(&self, now_ns: u64, window_ns: u64) -> bool {
        let last = self.last_sync_write_ns.load(Ordering::Relaxed);
        last != 0 && now_ns.saturating_sub(last) < window_ns
    }

    /// Counts a write of `bytes` of `class` that landed as `landing`.
    pub fn note(&self, class: WriteClass, landing: Landing, bytes: u64) {
        let c = &self.classes[class as usize];
        c.writes[landing as usize].fetch_add(1, Ordering::Relaxed);
        c.bytes[landing as usize].fetch_add(bytes, Ordering::Relaxed);
    }

    /// What `terrace status` shows.
    pub fn snapshot(&self) -> PlacementByClass {
        let class = |k: WriteClass| {
            let c = &self.classes[k as usize];
            let w = |l: Landing| c.writes[l as usize].load(Ordering::Relaxed);
            let b = |l: Landing| c.bytes[l as usize].load(Ordering::Relaxed);
            ClassPlacement {
                pm_writes: w(Landing::Pm),
                pm_bytes: b(Landing::Pm),
                block_writes: w(Landing::BlockChosen),
                block_bytes: b(Landing::BlockChosen),
                overflow_writes: w(Landing::BlockOverflow),
                overflow_bytes: b(Landing::BlockOverflow),
            }
        };
        PlacementByClass {
            sync: class(WriteClass::Sync),
            async_small: class(WriteClass::AsyncSmall),
            async_large: class(WriteClass::AsyncLarge),
        }
    }
}

/// Where the writes of one class went since mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassPlacement {
    /// Writes placed on PM, and their bytes.
    pub pm_writes: u64,
    pub pm_bytes: u64,
    /// Writes placed on a block tier by choice (policy or rule).
    pub block_writes: u64,
    pub block_bytes: u64,
    /// Writes the policy sent to PM that went to a block tier (PM full).
    pub overflow_writes: u64,
    pub overflow_bytes: u64,
}

/// Where writes went, per class (`terrace status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementByClass {
    /// Synchronous writes.
    pub sync: ClassPlacement,
    /// Small asynchronous writes.
    pub async_small: ClassPlacement,
    /// Large asynchronous writes.
    pub async_large: ClassPlacement,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_write_counts_once_in_its_class_and_landing() {
        let s = PlacementStats::default();
        s.note(WriteClass::of(true, true, 4096), Landing::Pm, 4096);
        s.note(
            WriteClass::of(false, false, 1 << 20),
            Landing::BlockOverflow,
            1 << 20,
        );
        s.note(WriteClass::of(false, false, 100), Landing::BlockChosen, 100);
        let p = s.snapshot();
        assert_eq!((p.sync.pm_writes, p.sync.pm_bytes), (1, 4096));
        assert_eq!(p.async_large.overflow_bytes, 1 << 20);
        assert_eq!(p.async_small.block_writes, 1);
        assert_eq!(p.sync.block_writes + p.sync.overflow_writes, 0);
    }

    #[test]
    fn a_synchronous_writer_counts_as_active_for_the_window_after_its_last_write() {
        let s = PlacementStats::default();
        assert!(!s.sync_writers_active(1_000, 500), "none seen yet");
        s.note_sync_write(1_000);
        assert!(s.sync_writers_active(1_400, 500));
        assert!(!s.sync_writers_active(1_500, 500));
        // A late note of an earlier write never moves the mark back.
        s.note_sync_write(900);
        assert!(s.sync_writers_active(1_400, 500));
    }
}
