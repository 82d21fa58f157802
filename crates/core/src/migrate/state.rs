//! The migrator's state, held by [`Fs`](crate::Fs): the cold lists (sharded,
//! Ziggurat's profiler), the counters `terrace status` shows, the windows of
//! moves in flight, NVMFS's split state, the copy-buffer pool, the notices
//! for the daemon's log and the migration thread's [`Worker`]. Plain state:
//! the code that uses it is the rest of `migrate/` (a service on top of
//! `fs.rs`, docs/design.md §1 "Layers"), and the fields only that code uses
//! are visible there only.
//!
//! Lock order: every mutex here is a leaf (design.md §4a).

use crate::lock_order::{Mutex, Rank};
use crate::worker::Worker;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};
use terrace_format::MAX_TIERS;
use terrace_policy::cold_list::Shard;

/// Migration state and counters (shown by `terrace status`).
#[derive(Default)]
pub struct Migrator {
    /// Cold lists of each block tier, by tier id (`[0]` unused: PM has its
    /// own below): the regular files with data on that tier, by amtime
    /// (sharded). Draining a tier walks its own list, so files already
    /// moved further down never fill a pass's list. Until 2026-11-27 one
    /// list held every file with data anywhere: once the 256 coldest files
    /// were all on the last tier (a few hundred small files cascaded to
    /// S3), every drain of the SSD moved nothing, the SSD stayed full, PM
    /// filled behind it, and writes failed with ENOSPC while the bucket had
    /// room (`test_s3_cascade.py`; design §5n "The cascade").
    pub(crate) tier_shards: Vec<Vec<Mutex<Shard>>>,
    /// The same for the files that have data on PM (before 2026-11-24 PM's
    /// drain walked the single list above, with the same failure one tier
    /// up: its 256 coldest files all on the SSD after a burst of small
    /// files, and every later pass moved nothing while PM stayed full).
    /// Index 0: files with PM data that has no copy elsewhere ("dirty" in
    /// NVMFS's terms); index 1: files with PM data that has a clean copy.
    /// Copying drains walk the first, evicting the second, moving both.
    pub(crate) pm_shards: [Vec<Mutex<Shard>>; 2],
    /// Tiers being drained now (bit per tier id), for the hysteresis.
    pub(super) running: AtomicU64,
    pub(super) bytes_down: AtomicU64,
    pub(super) bytes_up: AtomicU64,
    pub(super) entries_moved: AtomicU64,
    /// Blocks of other files pointed at a moved copy of blocks they shared
    /// (`reshare.rs`).
    pub(crate) reshared_blocks: AtomicU64,
    pub(super) groups: AtomicU64,
    pub(super) busy_ns: AtomicU64,
    /// Bytes of data actually copied (for the bandwidth).
    pub(super) data_bytes: AtomicU64,
    pub(super) bytes_copied: AtomicU64,
    pub(super) bytes_evicted: AtomicU64,
    /// Target blocks of moves and copies written but not yet committed
    /// (pending in a [`MoveBatch`](super::MoveBatch)): until the commit their data takes room
    /// on two tiers, after it one side is free (a move) or can be dropped for
    /// free (a clean copy), so a write refused for room waits for them
    /// (`Fs::retry_freeing_room`).
    pub(crate) move_blocks_pending: AtomicU64,
    /// Windows of moves committed ([`MoveBatch`](super::MoveBatch) flushes and moves that copy
    /// nothing), so that a waiter sees one end and a write refused for room
    /// sees that room may have come back while it ran.
    pub(crate) move_windows_done: AtomicU64,
    /// PM reads of clean / dirty data (NVMFS's adaptive split).
    pub(crate) clean_hits: AtomicU64,
    pub(crate) dirty_hits: AtomicU64,
    pub(crate) window_clean_hits: AtomicU64,
    pub(crate) window_dirty_hits: AtomicU64,
    /// Files a move found damaged data in (a block that fails its
    /// checksum), by inode: (slot generation, `Inode::data_seq`) then. A
    /// move of such a file fails with EIO at once while neither changed —
    /// its data is the same damaged data — instead of reading it all again:
    /// a rule pinning a damaged file to another tier made every rules pass
    /// re-read it and count its mismatches again, for ever (found by a new
    /// user, 2026-12-07). A write, a punch or a scrub repair of the file
    /// changes its data sequence, and the next move tries again.
    pub(super) damaged_data: Mutex<std::collections::HashMap<crate::types::Ino, (u32, u64)>>,
    pub(super) split: Mutex<Option<terrace_policy::nvmfs::AdaptiveSplit>>,
    pub(super) flush_run: Mutex<terrace_policy::nvmfs::FlushRun>,
    pub(super) passes: AtomicU64,
    /// Scans of the inode table for PM's clean/dirty split
    /// (`Fs::scan_pm_clean_dirty`: at mount and in `check_allocator`): one
    /// lock per inode slot each.
    pub(super) split_scans: AtomicU64,
    /// PM blocks of the pool holding clean data (with a copy on a block
    /// tier) and dirty data: the sums of every live inode's
    /// `ExtentMap::pm_clean_dirty`, kept by each change of an extent map
    /// (`Fs::note_pm_split_change`) so that `Fs::pm_clean_dirty` reads them
    /// instead of locking every inode slot (ten times a second, from the
    /// migration thread, while PM is over its threshold).
    pub(crate) pm_clean_blocks: AtomicU64,
    pub(crate) pm_dirty_blocks: AtomicU64,
    /// Passes that looked at PM (its drain was not waiting out a back-off).
    pub(super) pm_looks: AtomicU64,
    /// PM data use the last pass compared with the threshold (percent of
    /// PM's data capacity; clean copies left out when the policy keeps them
    /// and PM's whole data use is over the threshold — below it, that whole
    /// use, an upper bound).
    pub(super) pm_counted_percent: AtomicU64,
    pub(super) last_reason: Mutex<String>,
    /// The back-off of PM drains that moved nothing (`migration_pass`): PM
    /// over its threshold with nothing migration may move (data pinned to
    /// PM, or only cached) is looked at again after a wait, not every pass.
    pub(super) pm_idle: Mutex<crate::worker::IdleBackoff>,
    /// Why the drains of a tier over its threshold move nothing, and since
    /// when ([`Stall`]; empty when the last one moved data): shown at once
    /// as "waiting: …", logged by the daemon once it has lasted
    /// [`STALL_LOG_AFTER`].
    pub(super) waiting: Mutex<Stall>,
    /// The error that ended the last failed move, if any since the last
    /// successful pass.
    pub(super) last_failure: Mutex<Option<String>>,
    /// Files a `migrate` command is moving now (with how many commands):
    /// the migration thread's drains leave them alone meanwhile
    /// ([`crate::Fs::migrate_files`]).
    pub(super) commanded: Mutex<std::collections::HashMap<crate::types::Ino, u32>>,
    /// The last log-migration failure logged (each different one once).
    pub(crate) last_log_failure: Mutex<String>,
    /// Notices for the daemon's log, each said once (see `take_notices`),
    /// at most `MAX_PENDING_NOTICES` waiting.
    pub(crate) notices: Mutex<Vec<String>>,
    /// Notices dropped because that many were waiting (said, counted, by
    /// the next `take_notices`).
    pub(crate) notices_dropped: AtomicU64,
    /// The migration thread ([`crate::worker`]).
    pub(crate) worker: Worker,
    /// Copy buffers of finished moves, for reuse (at most
    /// `BUF_POOL_BYTES` in all).
    pub(super) bufs: Mutex<Vec<terrace_media::AlignedBuf>>,
    /// Per target tier: bytes copied there by migration and the time spent
    /// copying and syncing them (ns).
    pub(super) per_tier: Mutex<std::collections::BTreeMap<terrace_format::TierId, (u64, u64)>>,
}

impl Migrator {
    pub(crate) fn new(shards: usize) -> Migrator {
        Migrator {
            tier_shards: (0..MAX_TIERS)
                .map(|_| {
                    (0..shards.max(1))
                        .map(|_| Mutex::new(Rank::leaf("cold-list shard"), Shard::new()))
                        .collect()
                })
                .collect(),
            pm_shards: [0, 1].map(|_| {
                (0..shards.max(1))
                    .map(|_| Mutex::new(Rank::leaf("cold-list shard"), Shard::new()))
                    .collect()
            }),
            ..Default::default()
        }
    }

    /// Whether a move found damaged data in inode `ino` while its slot
    /// generation and data sequence were `(generation, data_seq)`: then no
    /// move of it is tried (`damaged_data`), and `terrace where` says so.
    pub(crate) fn found_damaged(&self, ino: crate::types::Ino, data: (u32, u64)) -> bool {
        self.damaged_data.lock().get(&ino) == Some(&data)
    }
}

/// How long drains must have moved nothing before the daemon's log says
/// migration is stalled. Shorter stalls are the normal course of a pool
/// under load — the coldest data is still in the DRAM cache, or a
/// `terrace migrate` command is moving it — and logging each one (with its
/// "moves data again") filled the log with pairs of lines (2026-11-29).
pub(crate) const STALL_LOG_AFTER: Duration = Duration::from_secs(10);

/// Drains of a tier over its threshold that move nothing
/// (`Migrator::waiting`).
#[derive(Debug, Default)]
pub(super) struct Stall {
    /// Why, in words (empty: the last drain moved data).
    pub(super) why: String,
    /// When the drains began to move nothing.
    pub(super) since: Option<Instant>,
    /// Whether the daemon's log was told (then it is told when data moves
    /// again).
    pub(super) logged: bool,
}
