//! Migration between tiers (Ziggurat §5): the profiler's cold lists, the
//! migration pass, and the mechanism that moves data.
//!
//! # Profiler
//! Every regular file with data is in the cold lists, keyed by its average
//! modification time (amtime, kept incrementally in [`Inode::amtime`] as write
//! entries apply). The lists are sharded by inode number
//! (`terrace_policy::cold_list`), one mutex per shard, so writers to different
//! files rarely meet on a lock. The lists span all tiers; the pass skips files
//! with nothing on the tier it drains.
//!
//! # Mechanism ([`Fs::migrate_groups`]) — crash-safe at every step
//! 1. Under the inode lock, capture the pieces of the group still on the source
//!    tier (file block, physical block, mtime, counter). Release the lock.
//! 2. Copy the data to freshly allocated, contiguous blocks on the target tier
//!    (one sequential request for a block tier), and make it durable.
//! 3. Under the inode lock again, keep only the pieces whose mapping has not
//!    changed (a foreground write or truncate wins: its pieces are dropped, not
//!    waited for), and append one write entry per piece with the new location
//!    and [`WRITE_FLAG_MOVED`] (size and times unchanged, the piece's mtime
//!    kept). **Commit point: the log tail store**, as for any write.
//! 4. Apply to DRAM; the old blocks are freed after the commit, unused new
//!    blocks are released.
//!
//! A crash before step 3's tail store leaves the old mapping and the new blocks
//! unreferenced (free at the next mount, where allocators are rebuilt from the
//! logs); after it, the new mapping, with the old blocks free. Readers are
//! never blocked by the copy: the lock is held only to capture and to commit.
//!
//! # When ([`Fs::migration_pass`])
//! A pass drains each tier that passes its threshold into the next tier
//! (PM → first block tier → next block tier: cascade), coldest files first,
//! until the tier is below its threshold; a file's chosen entries are grouped
//! into `group_migration_bytes` chunks. When reads dominate and PM is below its
//! low mark, the hottest block-tier files move up to PM (reverse migration).
//! Then block tiers short of free extents are cleaned (`clean`). One
//! coordinating thread runs a pass every 100 ms (and sleeps otherwise); while
//! draining a tier it spreads the coldest files over `migration_threads`
//! workers (default one per core), one whole file per worker at a time.
//!
//! [`Inode::amtime`]: crate::inode::Inode::amtime
//! [`WRITE_FLAG_MOVED`]: terrace_format::WRITE_FLAG_MOVED

use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::lock_order::{Mutex, Rank};
use crate::types::{errno, FileType, FsResult, Ino};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{CopyEntry, CopyOp, Entry, WriteEntry, BLOCK_SIZE, WRITE_FLAG_MOVED};
use terrace_policy::cold_list::{shard_index, Shard};
use terrace_policy::migration::{
    self as mig, EntrySnapshot, FileSnapshot, Group, IoCounters, MigrationNeed,
};

const BS: u64 = BLOCK_SIZE;

mod buffers;
mod cold;
mod files;
mod mover;
mod nvmfs;
mod pass;
mod reverse;
mod status;
#[cfg(test)]
mod tests;
mod thread;

pub(crate) use buffers::PooledBuf;
pub(crate) use mover::MoveBatch;
pub use mover::MOVE_SYNC_WINDOW_BYTES;
use status::snapshot_entries;
pub use status::{MigrationStatus, TierMigration};

/// Migration state and counters (shown by `terrace status`).
#[derive(Default)]
pub struct Migrator {
    /// Cold lists of every regular file with data, by amtime (sharded).
    pub(crate) shards: Vec<Mutex<Shard>>,
    /// The same for the files that have data on PM: draining PM walks these,
    /// so files already moved down never fill a pass's list (before
    /// 2026-11-24 the 256 coldest files of the first list were all on the
    /// SSD after one pass over a burst of small files, and every later pass
    /// moved nothing while PM stayed full).
    /// Index 0: files with PM data that has no copy elsewhere ("dirty" in
    /// NVMFS's terms); index 1: files with PM data that has a clean copy.
    /// Copying drains walk the first, evicting the second, moving both.
    pub(crate) pm_shards: [Vec<Mutex<Shard>>; 2],
    /// Tiers being drained now (bit per tier id), for the hysteresis.
    running: AtomicU64,
    bytes_down: AtomicU64,
    bytes_up: AtomicU64,
    entries_moved: AtomicU64,
    groups: AtomicU64,
    busy_ns: AtomicU64,
    /// Bytes of data actually copied (for the bandwidth).
    data_bytes: AtomicU64,
    bytes_copied: AtomicU64,
    bytes_evicted: AtomicU64,
    /// Target blocks of moves and copies written but not yet committed
    /// (pending in a [`MoveBatch`]): until the commit their data takes room
    /// on two tiers, after it one side is free (a move) or can be dropped for
    /// free (a clean copy), so a write refused for room waits for them
    /// (`Fs::retry_freeing_room`).
    pub(crate) move_blocks_pending: AtomicU64,
    /// Windows of moves committed ([`MoveBatch`] flushes and moves that copy
    /// nothing), so that a waiter sees one end and a write refused for room
    /// sees that room may have come back while it ran.
    pub(crate) move_windows_done: AtomicU64,
    /// PM reads of clean / dirty data (NVMFS's adaptive split).
    pub(crate) clean_hits: AtomicU64,
    pub(crate) dirty_hits: AtomicU64,
    pub(crate) window_clean_hits: AtomicU64,
    pub(crate) window_dirty_hits: AtomicU64,
    split: Mutex<Option<terrace_policy::nvmfs::AdaptiveSplit>>,
    flush_run: Mutex<terrace_policy::nvmfs::FlushRun>,
    passes: AtomicU64,
    /// PM data use the last pass compared with the threshold (percent of
    /// PM's data capacity; clean copies left out when the policy keeps them).
    pm_counted_percent: AtomicU64,
    last_reason: Mutex<String>,
    /// Why the last pass that had to drain a tier moved nothing (empty when
    /// it moved data): shown as "waiting: …" and logged once by the daemon.
    waiting: Mutex<String>,
    /// The error that ended the last failed move, if any since the last
    /// successful pass.
    last_failure: Mutex<Option<String>>,
    /// The last log-migration failure logged (each different one once).
    pub(crate) last_log_failure: Mutex<String>,
    /// Notices for the daemon's log, each said once (see `take_notices`).
    notices: Mutex<Vec<String>>,
    /// The migration thread ([`crate::worker`]).
    pub(crate) worker: crate::worker::Worker,
    /// Copy buffers of finished moves, for reuse (at most
    /// [`BUF_POOL_BYTES`] in all).
    bufs: Mutex<Vec<terrace_media::AlignedBuf>>,
    /// Per target tier: bytes copied there by migration and the time spent
    /// copying and syncing them (ns).
    per_tier: Mutex<std::collections::BTreeMap<u8, (u64, u64)>>,
}

impl Migrator {
    pub(crate) fn new(shards: usize) -> Migrator {
        Migrator {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Rank::leaf("cold-list shard"), Shard::new()))
                .collect(),
            pm_shards: [0, 1].map(|_| {
                (0..shards.max(1))
                    .map(|_| Mutex::new(Rank::leaf("cold-list shard"), Shard::new()))
                    .collect()
            }),
            ..Default::default()
        }
    }
}

/// What [`Fs::move_range`] does with the data it captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Move to the target tier (a clean copy already there is promoted: no
    /// data is copied for it).
    Move,
    /// Write a clean copy to the target tier and keep the data where it is
    /// (NVMFS flush: the page becomes clean).
    Copy,
    /// Drop the source blocks of data whose clean copy is on the target tier
    /// (the copy becomes the only location; no data is copied).
    Evict,
    /// Forget clean copies stored on the source tier (extent recycling).
    DropCopy,
}
