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
use crate::types::{errno, FileType, FsResult, Ino};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use terrace_format::{CopyEntry, CopyOp, Entry, WriteEntry, BLOCK_SIZE, WRITE_FLAG_MOVED};
use terrace_policy::cold_list::{shard_index, Shard};
use terrace_policy::migration::{
    self as mig, EntrySnapshot, FileSnapshot, Group, IoCounters, MigrationNeed,
};

const BS: u64 = BLOCK_SIZE;

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
    pub(crate) stop: AtomicBool,
    /// Copy buffers of finished moves, for reuse (at most
    /// [`BUF_POOL_BYTES`] in all).
    bufs: Mutex<Vec<terrace_media::AlignedBuf>>,
    /// Per target tier: bytes copied there by migration and the time spent
    /// copying and syncing them (ns).
    per_tier: Mutex<std::collections::BTreeMap<u8, (u64, u64)>>,
    wake: parking_lot::Condvar,
    wake_lock: Mutex<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What `terrace status` shows about migration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationStatus {
    /// The migration policy.
    pub policy: String,
    /// Whether some tier is being drained now.
    pub running: bool,
    /// Why the last pass moved data (or why not).
    pub reason: String,
    /// PM's migration threshold now (percent of capacity).
    pub pm_threshold_percent: u8,
    /// PM data use the last pass compared with that threshold (percent of
    /// PM's capacity for data: logs left out, and clean copies too when the
    /// policy keeps them).
    pub pm_counted_percent: u64,
    /// Non-empty while a tier is over its threshold and the last pass could
    /// move nothing: why, in words.
    pub waiting: String,
    /// Bytes moved to a lower tier.
    pub bytes_down: u64,
    /// Bytes moved up to PM.
    pub bytes_up: u64,
    /// Write entries written by migration.
    pub entries_moved: u64,
    /// Groups copied.
    pub groups: u64,
    /// Bytes written to a lower tier as clean copies (NVMFS flush; the PM
    /// copy stays).
    pub bytes_copied: u64,
    /// PM bytes freed by dropping the PM side of clean data (no copy needed).
    pub bytes_evicted: u64,
    /// PM blocks that hold data with a clean copy on a block tier.
    pub clean_pm_blocks: u64,
    /// PM reads that hit clean data / all PM reads (NVMFS hit ratio).
    pub clean_hit_ratio: Option<f64>,
    /// Migration throughput while copying (bytes/s), 0 before any migration.
    pub bandwidth_bytes_per_sec: u64,
    /// Per target tier: bytes written there by migration and the throughput
    /// while copying to it.
    pub per_tier: Vec<TierMigration>,
}

/// Migration into one tier (`terrace status`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierMigration {
    /// Target tier id.
    pub tier: u8,
    /// Bytes migration copied to it.
    pub bytes: u64,
    /// Bytes per second while copying to it (copy, device sync and commit).
    pub bandwidth_bytes_per_sec: u64,
}

/// A copy buffer that returns to the migrator's pool when dropped.
struct PooledBuf<'a>(&'a Migrator, Option<terrace_media::AlignedBuf>);

impl Drop for PooledBuf<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.1.take() {
            self.0.give_buf(b);
        }
    }
}

/// Bytes of copy buffers the migrator keeps for reuse.
const BUF_POOL_BYTES: usize = 128 << 20;

impl Migrator {
    /// A block-aligned buffer of at least `len` bytes (contents unspecified):
    /// a pooled one when one is large enough, else a new one rounded up to
    /// 2 MiB, so that every copy and write-back buffer is backed by huge
    /// pages where the kernel allows it (large device requests, see
    /// [`terrace_media::AlignedBuf`]).
    pub(crate) fn take_buf(&self, len: usize) -> terrace_media::AlignedBuf {
        if len <= SMALL_BUF_BYTES {
            // A small file's blocks: a heap buffer of their size. A pooled
            // buffer is 2 MiB on huge pages, and moves keep theirs until the
            // sync window commits, so each 4 KiB file took (faulted and
            // zeroed) a fresh 2 MiB mapping: small-file migration and
            // write-back ran at about 5 MiB/s (issue 15's bursts).
            return terrace_media::AlignedBuf::zeroed(len.max(1).next_multiple_of(BS as usize));
        }
        let mut pool = self.bufs.lock();
        if let Some(k) = pool.iter().position(|b| b.len() >= len) {
            return pool.swap_remove(k);
        }
        drop(pool);
        let huge = terrace_media::HUGE_BUF_BYTES;
        terrace_media::AlignedBuf::zeroed(len.div_ceil(huge).max(1) * huge)
    }

    /// Returns a buffer to the pool (dropped when the pool is full).
    pub(crate) fn give_buf(&self, b: terrace_media::AlignedBuf) {
        if b.len() <= SMALL_BUF_BYTES {
            return;
        }
        let mut pool = self.bufs.lock();
        if pool.iter().map(|b| b.len()).sum::<usize>() + b.len() <= BUF_POOL_BYTES {
            pool.push(b);
        }
    }

    pub(crate) fn new(shards: usize) -> Migrator {
        Migrator {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Shard::new()))
                .collect(),
            pm_shards: [0, 1].map(|_| {
                (0..shards.max(1))
                    .map(|_| Mutex::new(Shard::new()))
                    .collect()
            }),
            ..Default::default()
        }
    }

    fn kick(&self) {
        *self.wake_lock.lock() = true;
        self.wake.notify_one();
    }
}

/// One piece of a group still on the source tier.
#[derive(Clone, Copy)]
struct Piece {
    file_block: u64,
    blocks: u64,
    tier: u8,
    block: u64,
    counter: u8,
    mtime: i64,
    seq: u64,
    copy: Option<(u8, u64)>,
}

/// A move whose data is written to the target but not yet committed
/// ([`Fs::prepare_move`] → sync → [`Fs::commit_move`]).
struct Prepared {
    ino: Ino,
    /// The inode's generation when the pieces were captured: a slot freed
    /// and reused by another file before the commit has a newer one.
    generation: u32,
    from: u8,
    to: u8,
    mode: Mode,
    pieces: Vec<Piece>,
    d: crate::data::DataRuns,
    /// New block of each data block, in piece order.
    phys: Vec<u64>,
    /// The copied data (its first `total` blocks; for the DRAM cache copy
    /// at commit). Returned to the migrator's buffer pool after the commit.
    buf: terrace_media::AlignedBuf,
    /// Blocks copied.
    total: u64,
}

/// Counts [`Migrator::move_blocks_pending`] down by its blocks, and one
/// more window done, when dropped.
struct PendingMoves<'a>(&'a Migrator, u64);

impl Drop for PendingMoves<'_> {
    fn drop(&mut self) {
        self.0
            .move_blocks_pending
            .fetch_sub(self.1, Ordering::Relaxed);
        self.0.move_windows_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Copies up to this size use a heap buffer of their own size instead of a
/// pooled huge-page buffer ([`Migrator::take_buf`]).
const SMALL_BUF_BYTES: usize = 512 << 10;

/// Bytes of prepared moves after which a [`MoveBatch`] syncs and commits.
pub const MOVE_SYNC_WINDOW_BYTES: u64 = 64 << 20;

/// Moves collected so that one device sync covers many of them: each
/// [`MoveBatch::add`] copies a batch of pieces (one sequential request) and
/// keeps it uncommitted; once `window` bytes are pending, or at
/// [`MoveBatch::finish`], every target tier is synced once and then each move
/// commits. A crash before a move's commit leaves its old mapping (the new
/// blocks are free at the next mount); no committed entry ever points at
/// data that is not durable.
pub(crate) struct MoveBatch<'a> {
    fs: &'a Fs,
    pending: Vec<Prepared>,
    pending_bytes: u64,
    window: u64,
    started: Option<Instant>,
    moved: u64,
}

impl<'a> MoveBatch<'a> {
    /// A batch that syncs after `window` bytes (0: after every move).
    pub(crate) fn new(fs: &'a Fs, window: u64) -> MoveBatch<'a> {
        MoveBatch {
            fs,
            pending: Vec::new(),
            pending_bytes: 0,
            window,
            started: None,
            moved: 0,
        }
    }

    /// Prepares a move of the pieces of `ranges` (see [`Fs::move_ranges`]);
    /// moves without data to copy commit at once. An error (target full or
    /// failing) leaves the moves prepared so far pending: `finish` still
    /// commits them.
    pub(crate) fn add(
        &mut self,
        ino: Ino,
        from: u8,
        to: u8,
        ranges: &[(u64, u64)],
        mode: Mode,
    ) -> FsResult<()> {
        self.started.get_or_insert_with(Instant::now);
        let Some(p) = self.fs.prepare_move(ino, from, to, ranges, mode)? else {
            return Ok(());
        };
        if p.total == 0 {
            // Promotions and drops commit at once; they still free room.
            let r = self.fs.commit_move(p);
            self.fs
                .migrator
                .move_windows_done
                .fetch_add(1, Ordering::Relaxed);
            self.moved += r?;
            return Ok(());
        }
        self.pending_bytes += p.total * BS;
        self.pending.push(p);
        if self.pending_bytes >= self.window {
            self.flush()?;
        }
        Ok(())
    }

    /// Syncs the target tiers of the pending moves once, then commits them.
    fn flush(&mut self) -> FsResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        // Counted down once every pending move is committed or released.
        let blocks: u64 = pending.iter().map(|p| p.total).sum();
        let _done = PendingMoves(&self.fs.migrator, blocks);
        let mut copied: std::collections::BTreeMap<u8, u64> = Default::default();
        for p in &pending {
            *copied.entry(p.d.tier).or_default() += p.total * BS;
        }
        let mut tiers: Vec<u8> = pending.iter().map(|p| p.d.tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        let mut synced = Ok(());
        for t in tiers.into_iter().filter(|&t| t != 0) {
            synced = synced.and_then(|()| self.fs.sync_tier(t));
        }
        if let Err(e) = synced {
            for p in pending {
                self.fs.release_data(p.d);
            }
            return Err(e);
        }
        let mut first_err = None;
        for p in pending {
            match self.fs.commit_move(p) {
                Ok(b) => self.moved += b,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(t0) = self.started.take() {
            let m = &self.fs.migrator;
            let ns = t0.elapsed().as_nanos() as u64;
            m.busy_ns.fetch_add(ns, Ordering::Relaxed);
            let total: u64 = copied.values().sum();
            let mut per = m.per_tier.lock();
            for (tier, bytes) in copied {
                // The window's time, shared among its target tiers by bytes.
                let share = (u128::from(ns) * u128::from(bytes) / u128::from(total.max(1))) as u64;
                let e = per.entry(tier).or_default();
                e.0 += bytes;
                e.1 += share;
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Syncs and commits everything pending; returns the bytes moved by all
    /// of this batch's committed moves, and whether the last window failed
    /// (then none of its moves committed).
    pub(crate) fn finish(mut self) -> (u64, FsResult<()>) {
        let r = self.flush();
        (self.moved, r)
    }

    /// Bytes moved by the moves committed so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved
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

impl Fs {
    /// Puts a file in (or takes it out of) the cold lists after its amtime
    /// changed. Called with the inode locked.
    pub(crate) fn relist(&self, i: &mut Inode) {
        let listed = i.kind == FileType::Regular && !i.zombie && i.attr.nlink > 0;
        let new = if listed { i.amtime.value() } else { None };
        let (clean, dirty) = i.extents.pm_clean_dirty();
        let new_pm = [new.filter(|_| dirty > 0), new.filter(|_| clean > 0)];
        let m = &self.migrator;
        let k = shard_index(i.ino, m.shards.len());
        if new != i.cold_key {
            m.shards[k].lock().update(i.ino, i.cold_key, new);
            i.cold_key = new;
        }
        for (list, key) in new_pm.into_iter().enumerate() {
            if key != i.pm_cold_keys[list] {
                m.pm_shards[list][k]
                    .lock()
                    .update(i.ino, i.pm_cold_keys[list], key);
                i.pm_cold_keys[list] = key;
            }
        }
    }

    /// Takes a file out of the cold lists (it is being freed).
    pub(crate) fn unlist(&self, i: &mut Inode) {
        let m = &self.migrator;
        let k = shard_index(i.ino, m.shards.len());
        if let Some(old) = i.cold_key.take() {
            m.shards[k].lock().update(i.ino, Some(old), None);
        }
        for list in 0..2 {
            if let Some(old) = i.pm_cold_keys[list].take() {
                m.pm_shards[list][k].lock().update(i.ino, Some(old), None);
            }
        }
    }

    /// Up to `n` coldest files `(amtime, ino)` that a drain of tier `from`
    /// in `mode` can work on, coldest first: on PM, files with data that has
    /// no copy (copying), with a clean copy (evicting), or either (moving);
    /// on other tiers, files with data anywhere.
    pub(crate) fn coldest_files(&self, from: u8, mode: Mode, n: usize) -> Vec<(u64, Ino)> {
        let m = &self.migrator;
        let lists: Vec<&Vec<Mutex<Shard>>> = match (from, mode) {
            (0, Mode::Copy) => vec![&m.pm_shards[0]],
            (0, Mode::Evict) => vec![&m.pm_shards[1]],
            (0, _) => vec![&m.pm_shards[0], &m.pm_shards[1]],
            _ => vec![&m.shards],
        };
        let mut all: Vec<(u64, Ino)> = Vec::new();
        for list in lists {
            for s in list {
                all.extend(s.lock().iter().take(n));
            }
        }
        all.sort_unstable();
        all.dedup();
        all.truncate(n);
        all
    }

    /// Used and total data bytes of tier `id`. On PM both leave out the
    /// blocks that hold logs: migration moves data, and logs stay on PM, so
    /// a PM that metadata fills beyond the threshold must not keep migration
    /// running with nothing to move (status shows metadata on its own line).
    pub(crate) fn tier_use(&self, id: u8) -> (u64, u64) {
        if id == 0 {
            let total = self.alloc.total();
            let meta = self.log_space.blocks().min(total);
            let used = (total - self.alloc.free()).saturating_sub(meta);
            (used * BS, (total - meta) * BS)
        } else if let Some(t) = self.tiers.iter().find(|t| t.id == id) {
            let st = t.space.stats();
            (
                st.valid_blocks * BS,
                (st.extents * t.space.extent_blocks()) * BS,
            )
        } else {
            (0, 0)
        }
    }

    /// PM use has reached its migration threshold now (dynamic or static).
    pub(crate) fn pm_over_threshold(&self) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let params = self.settings.read().migration_params();
        let threshold = mig::migration_threshold(params.threshold, self.io_counters());
        let (used, cap) = self.tier_use(0);
        cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(threshold)
    }

    /// PM use passes the forced mark: foreground writes go straight down.
    pub(crate) fn pm_forced(&self) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let forced = self.settings.read().migration_params().forced_percent;
        let (used, cap) = self.tier_use(0);
        cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(forced)
    }

    /// Moves the pieces of `groups` (of file `ino`) that are still on tier
    /// `from` to tier `to`, one group at a time. Returns the bytes moved.
    pub fn migrate_groups(&self, ino: Ino, from: u8, to: u8, groups: &[Group]) -> FsResult<u64> {
        let mut moved = 0;
        for g in groups {
            if self.migrator.stop.load(Ordering::Relaxed) {
                break;
            }
            moved += self.migrate_range(ino, from, to, g.file_block, g.blocks)?;
        }
        Ok(moved)
    }

    /// Moves the data of file blocks `[start, start + n)` that is on tier
    /// `from` to tier `to` (see the module doc for the steps).
    pub(crate) fn migrate_range(
        &self,
        ino: Ino,
        from: u8,
        to: u8,
        start: u64,
        n: u64,
    ) -> FsResult<u64> {
        self.move_range(ino, from, to, start, n, Mode::Move)
    }

    /// The mechanism behind every data movement (module doc, steps 1–4), in
    /// one of four [`Mode`]s. Returns the bytes it moved, copied, evicted or
    /// dropped.
    pub(crate) fn move_range(
        &self,
        ino: Ino,
        from: u8,
        to: u8,
        start: u64,
        n: u64,
        mode: Mode,
    ) -> FsResult<u64> {
        self.move_ranges(ino, from, to, &[(start, n)], mode)
    }

    /// [`Fs::move_range`] over several disjoint ranges of file blocks
    /// (`(first block, blocks)`, in file order) at once: their pieces are
    /// copied to one contiguous run of the target — one sequential request on
    /// a block tier — and committed together, one entry per run that is
    /// contiguous both in the file and on the target.
    pub(crate) fn move_ranges(
        &self,
        ino: Ino,
        from: u8,
        to: u8,
        ranges: &[(u64, u64)],
        mode: Mode,
    ) -> FsResult<u64> {
        let mut batch = MoveBatch::new(self, 0);
        let r = batch.add(ino, from, to, ranges, mode);
        let (moved, done) = batch.finish();
        r.and(done).map(|()| moved)
    }

    /// Steps 1 and 2 of the mechanism: captures the pieces of `ranges` and
    /// writes their data to fresh blocks of `to` — not yet made durable on a
    /// block tier (the caller syncs the tier before [`Fs::commit_move`]).
    /// `None` when nothing in the ranges qualifies.
    fn prepare_move(
        &self,
        ino: Ino,
        from: u8,
        to: u8,
        ranges: &[(u64, u64)],
        mode: Mode,
    ) -> FsResult<Option<Prepared>> {
        // 1. Capture.
        let (generation, mut pieces): (u32, Vec<Piece>) = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            let pieces = ranges
                .iter()
                .flat_map(|&(start, n)| i.extents.overlaps(start, n))
                .filter(|(_, e)| match mode {
                    Mode::Move => e.tier == from,
                    Mode::Copy => e.tier == from && e.copy.is_none(),
                    Mode::Evict => e.tier == from && e.copy.map(|c| c.0) == Some(to),
                    Mode::DropCopy => e.copy.map(|c| c.0) == Some(from),
                })
                .map(|(fb, e)| Piece {
                    file_block: fb,
                    blocks: e.blocks,
                    tier: e.tier,
                    block: e.block,
                    counter: e.counter,
                    mtime: e.mtime,
                    seq: e.seq,
                    copy: e.copy,
                })
                .collect();
            (i.generation, pieces)
        };
        // A clean copy is promoted without copying data (an eviction, or a
        // move to the copy's tier) only when it reads back intact: else the
        // move copies the data, and an eviction leaves the piece alone (the
        // PM side may be the only good data; scrub drops the damaged copy).
        if matches!(mode, Mode::Move | Mode::Evict) {
            pieces.retain_mut(|p| match p.copy {
                Some((t, b)) if t == to && !self.blocks_intact(t, b, p.blocks, true) => {
                    p.copy = None;
                    mode == Mode::Move
                }
                _ => true,
            });
        }
        // Pieces whose data must be copied; the others only need an entry
        // (a clean copy already on `to` is promoted, a copy is dropped).
        let needs_data = |p: &Piece| match mode {
            Mode::Move => p.copy.map(|c| c.0) != Some(to),
            Mode::Copy => true,
            Mode::Evict | Mode::DropCopy => false,
        };
        let total: u64 = pieces
            .iter()
            .filter(|p| needs_data(p))
            .map(|p| p.blocks)
            .sum();
        if pieces.is_empty() {
            return Ok(None);
        }
        // 2. Room on the target first: a full target costs no buffer and no
        // copy (a pass over a full pool stays cheap). The target blocks count
        // as pending from just before their allocation until committed or
        // released (`MoveBatch::flush`; the error paths below), so a write
        // refused for room meanwhile knows to wait for them.
        let copying = total;
        self.migrator
            .move_blocks_pending
            .fetch_add(copying, Ordering::Relaxed);
        let not_pending = || {
            self.migrator
                .move_blocks_pending
                .fetch_sub(copying, Ordering::Relaxed);
        };
        let d = if total == 0 {
            crate::data::DataRuns {
                tier: to,
                runs: Vec::new(),
            }
        } else if to == 0 {
            match self.alloc.alloc(total) {
                Some(runs) => crate::data::DataRuns { tier: 0, runs },
                None => {
                    not_pending();
                    return Err(errno(libc::ENOSPC));
                }
            }
        } else {
            let t = match self.tier(to) {
                Ok(t) => t,
                Err(e) => {
                    not_pending();
                    return Err(e);
                }
            };
            // A copy keeps its source: it may take only room that no dirty
            // cached page was promised (a move gives its source back at the
            // commit; a write-back short of room waits for it).
            let _room = (mode == Mode::Copy).then(|| self.room_lock.lock());
            if mode == Mode::Copy && self.data_room_blocks() < total {
                not_pending();
                return Err(errno(libc::ENOSPC));
            }
            match t.space.alloc(total) {
                Some(runs) => crate::data::DataRuns { tier: to, runs },
                None => {
                    not_pending();
                    return Err(errno(libc::ENOSPC));
                }
            }
        };
        let release = |d| {
            self.release_data(d);
            not_pending();
        };
        // 3. Copy. Blocks read here may be freed and reused by a concurrent
        // write; the commit then drops the piece, so stale bytes never commit.
        // A block-aligned buffer (O_DIRECT takes it without a bounce copy),
        // reused across moves so its pages are not faulted in each time.
        let mut buf = self.migrator.take_buf((total * BS) as usize);
        let mut at = 0usize;
        for p in pieces.iter().filter(|p| needs_data(p)) {
            let len = (p.blocks * BS) as usize;
            if p.tier == 0 {
                self.media.read(p.block * BS, &mut buf[at..at + len]);
            } else {
                let read = self
                    .tier(p.tier)
                    .and_then(|t| t.media.read_blocks(p.block, &mut buf[at..at + len]))
                    .and_then(|()| self.verify_read(p.tier, p.block, &buf[at..at + len]));
                if let Err(e) = read {
                    release(d);
                    self.migrator.give_buf(buf);
                    return Err(e);
                }
            }
            at += len;
        }
        if total > 0 {
            if let Err(e) = self.write_data_unsynced(&d, &buf[..(total * BS) as usize]) {
                release(d);
                self.migrator.give_buf(buf);
                return Err(e);
            }
        }
        let mut phys = Vec::with_capacity(total as usize);
        for &(b, k) in &d.runs {
            phys.extend(b..b + k);
        }
        Ok(Some(Prepared {
            ino,
            generation,
            from,
            to,
            mode,
            pieces,
            d,
            phys,
            buf,
            total,
        }))
    }

    /// Steps 3 and 4: commits the prepared pieces whose mapping is unchanged
    /// (their new data must be durable by now) and frees what is not used.
    /// Returns the bytes moved, copied, evicted or dropped.
    fn commit_move(&self, p: Prepared) -> FsResult<u64> {
        let Prepared {
            ino,
            generation,
            from,
            to,
            mode,
            pieces,
            d,
            phys,
            buf,
            total,
        } = p;
        // The buffer goes back to the pool whichever way this returns.
        let pooled = PooledBuf(&self.migrator, Some(buf));
        let buf: &[u8] = pooled.1.as_deref().expect("set above");
        let needs_data = |p: &Piece| match mode {
            Mode::Move => p.copy.map(|c| c.0) != Some(to),
            Mode::Copy => true,
            Mode::Evict | Mode::DropCopy => false,
        };
        // 3. Commit the pieces whose mapping is unchanged.
        let mut g = match self.lock(ino) {
            Ok(g) => g,
            Err(_) => {
                self.release_data(d);
                return Ok(0);
            }
        };
        let i = g.as_mut().expect("live");
        if i.generation != generation {
            // The file was deleted and its slot reused by another file since
            // the capture: its mappings (even ones with the same blocks and
            // sequence numbers — both restart per file) are not ours.
            drop(g);
            self.release_data(d);
            return Ok(0);
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut unused: Vec<(u8, u64, u64)> = Vec::new();
        let mut kept = 0u64;
        let mut kept_data: Vec<(usize, u64)> = Vec::new(); // (index in phys, blocks)
        let mut k = 0usize;
        for p in &pieces {
            let data = needs_data(p);
            // Unchanged: same mapping *and* same sequence number (a rewrite
            // that reused the same blocks has a newer one).
            let still = i.extents.find(p.file_block).is_some_and(|(s, e)| {
                e.seq == p.seq
                    && e.tier == p.tier
                    && e.block + (p.file_block - s) == p.block
                    && s + e.blocks >= p.file_block + p.blocks
            });
            if !still {
                if data {
                    for b in &phys[k..k + p.blocks as usize] {
                        unused.push((d.tier, *b, 1));
                    }
                    k += p.blocks as usize;
                }
                continue;
            }
            kept += p.blocks;
            if !data {
                let (ctier, cblock) = p.copy.expect("filtered on its copy");
                entries.push(Entry::Copy(CopyEntry {
                    file_block: p.file_block,
                    blocks: p.blocks as u32,
                    tier: ctier,
                    op: if mode == Mode::DropCopy {
                        CopyOp::Drop
                    } else {
                        CopyOp::Promote
                    },
                    block: cblock,
                }));
                continue;
            }
            kept_data.push((k, p.blocks));
            for off in 0..p.blocks {
                let fb = p.file_block + off;
                let b = phys[k + off as usize];
                // Extend the previous entry when file and new blocks both
                // continue it: a group becomes one entry (its newest mtime).
                match (mode, entries.last_mut()) {
                    (Mode::Move, Some(Entry::Write(w)))
                        if w.file_block + w.blocks as u64 == fb
                            && w.block + w.blocks as u64 == b
                            && w.blocks < u32::MAX =>
                    {
                        w.blocks += 1;
                        w.mtime = w.mtime.max(p.mtime);
                        w.size_counter = w.size_counter.max(p.counter);
                        continue;
                    }
                    (Mode::Copy, Some(Entry::Copy(c)))
                        if c.file_block + c.blocks as u64 == fb
                            && c.block + c.blocks as u64 == b
                            && c.blocks < u32::MAX =>
                    {
                        c.blocks += 1;
                        continue;
                    }
                    _ => {}
                }
                entries.push(if mode == Mode::Copy {
                    Entry::Copy(CopyEntry {
                        file_block: fb,
                        blocks: 1,
                        tier: d.tier,
                        op: CopyOp::Add,
                        block: b,
                    })
                } else {
                    Entry::Write(WriteEntry {
                        file_block: fb,
                        blocks: 1,
                        tier: d.tier,
                        size_counter: p.counter,
                        wflags: WRITE_FLAG_MOVED,
                        block: b,
                        size_after: i.attr.size,
                        mtime: p.mtime,
                    })
                });
            }
            k += p.blocks as usize;
        }
        if entries.is_empty() {
            drop(g);
            self.free_runs(unused);
            return Ok(0);
        }
        let n_entries = entries.len() as u64;
        // Moves down free a PM block for each one they log: they may use
        // the blocks promised to write-back. Moves up take PM like any write.
        if let Err(e) = self.commit_one_in(i, entries, to != 0) {
            drop(g);
            self.release_data(d);
            return Err(e);
        }
        // Keep a DRAM copy of data moved down while the cache is under half
        // full — under the inode lock, so the blocks cannot be freed first.
        if to != 0 && mode == Mode::Move {
            let c = self.cache.stats();
            if mig::keep_cache_copy(c.dirty_bytes + c.clean_bytes, c.bound_bytes) {
                for &(first, blocks) in &kept_data {
                    let src = &buf[first * BS as usize..(first + blocks as usize) * BS as usize];
                    let pages: Vec<Arc<[u8]>> = src.chunks(BS as usize).map(Arc::from).collect();
                    let mut j = 0usize;
                    while j < pages.len() {
                        let mut run = 1usize;
                        while j + run < pages.len()
                            && phys[first + j + run] == phys[first + j] + run as u64
                        {
                            run += 1;
                        }
                        self.cache
                            .put_clean(to, phys[first + j], pages[j..j + run].to_vec());
                        j += run;
                    }
                }
            }
        }
        drop(g);
        // 4. The old blocks were freed by the commit; free what was not used.
        self.free_runs(unused);
        let bytes = kept * BS;
        let m = &self.migrator;
        match mode {
            Mode::Move if from == to => {} // extent recycling: the cleaner counts
            Mode::Move if to == 0 => {
                m.bytes_up.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Move => {
                m.bytes_down.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Copy => {
                m.bytes_copied.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Evict => {
                m.bytes_evicted.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::DropCopy => {}
        }
        m.groups.fetch_add(1, Ordering::Relaxed);
        m.entries_moved.fetch_add(n_entries, Ordering::Relaxed);
        if total > 0 {
            m.data_bytes.fetch_add(total * BS, Ordering::Relaxed);
        }
        Ok(bytes)
    }

    /// Moves all of a file's data that is not on tier `to` there (`terrace
    /// migrate`), in groups of `group_migration_bytes`. Returns bytes moved.
    pub fn migrate_file(&self, ino: Ino, to: u8) -> FsResult<u64> {
        let (moved, mut errors) = self.migrate_files(&[ino], to)?;
        match errors.pop() {
            Some((_, e)) => Err(e),
            None => Ok(moved),
        }
    }

    /// [`Fs::migrate_file`] for several files at once: their groups share
    /// sync windows ([`MoveBatch`]), so many small files cost one device sync
    /// per window rather than one each, and `migration_threads` workers move
    /// files in parallel (each file by one worker), so the target device has
    /// more than one request in flight. Returns the bytes moved and the files
    /// that failed (a file that fails does not stop the others); `Err` only
    /// for a bad target tier.
    pub fn migrate_files(
        &self,
        inos: &[Ino],
        to: u8,
    ) -> FsResult<(u64, Vec<(Ino, std::io::Error)>)> {
        if to != 0 && !self.tiers.iter().any(|t| t.id == to) {
            return Err(errno(libc::EINVAL));
        }
        let params = self.settings.read().migration_params();
        let gb = params.group_blocks();
        let window = MOVE_SYNC_WINDOW_BYTES.max(gb * BS);
        let tiers: Vec<u8> = std::iter::once(0)
            .chain(self.tiers.iter().map(|t| t.id))
            .filter(|&t| t != to)
            .collect();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = params.threads_for(cpus).clamp(1, inos.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || -> (u64, Vec<(Ino, std::io::Error)>) {
            let mut batch = MoveBatch::new(self, window);
            let mut errors = Vec::new();
            let mut last = None;
            while !self.migrator.stop.load(Ordering::Relaxed) {
                let Some(&ino) = inos.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                last = Some(ino);
                if let Err(e) = self.add_file_to_batch(&mut batch, ino, to, &tiers, gb) {
                    errors.push((ino, e));
                }
            }
            let (moved, r) = batch.finish();
            if let (Err(e), Some(ino)) = (r, last) {
                // The last window's sync failed: none of it committed.
                errors.push((ino, e));
            }
            (moved, errors)
        };
        if workers == 1 {
            return Ok(work());
        }
        let results: Vec<(u64, Vec<(Ino, std::io::Error)>)> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..workers).map(|_| sc.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a migration worker panicked"))
                .collect()
        });
        let mut moved = 0;
        let mut errors = Vec::new();
        for (m, e) in results {
            moved += m;
            errors.extend(e);
        }
        Ok((moved, errors))
    }

    /// Adds every group of file `ino` that is not on tier `to` (from each of
    /// `tiers`) to `batch`, after writing back its cached writes so that what
    /// moves is the file's current data.
    fn add_file_to_batch(
        &self,
        batch: &mut MoveBatch<'_>,
        ino: Ino,
        to: u8,
        tiers: &[u8],
        gb: u64,
    ) -> FsResult<()> {
        // This thread's uncommitted moves may hold the room the write-back
        // needs: commit them before waiting for room.
        if let Err(e) = self.write_back_part(ino, u64::MAX) {
            if e.raw_os_error() != Some(libc::ENOSPC) {
                return Err(e);
            }
            batch.flush()?;
            self.flush_inode(ino)?;
        }
        let entries: Vec<EntrySnapshot> = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            if i.kind != FileType::Regular {
                return Ok(());
            }
            snapshot_entries(i)
        };
        for &from in tiers {
            let mine: Vec<EntrySnapshot> =
                entries.iter().filter(|e| e.tier == from).copied().collect();
            for group in mig::batch_groups(&mig::group_entries(&mine, gb), gb) {
                let ranges: Vec<(u64, u64)> =
                    group.iter().map(|g| (g.file_block, g.blocks)).collect();
                batch.add(ino, from, to, &ranges, Mode::Move)?;
            }
        }
        Ok(())
    }

    /// One migration pass: drain each tier above its threshold into the next
    /// one, then reverse-migrate read-hot data when reads dominate. Returns
    /// the bytes moved.
    pub fn migration_pass(&self) -> u64 {
        let (params, policy, np) = {
            let st = self.settings.read();
            (st.migration_params(), st.migration(), st.nvmfs_params())
        };
        let Ok(policy) = policy else { return 0 };
        let io = self.io_counters();
        let mut chain: Vec<u8> = vec![0];
        chain.extend(self.tiers.iter().map(|t| t.id));
        let mut moved = 0;
        let mut pm_split = (0, 0);
        for w in chain.windows(2) {
            let (from, to) = (w[0], w[1]);
            let threshold = mig::migration_threshold(params.threshold, io);
            let bit = 1u64 << from;
            let running = self.migrator.running.load(Ordering::Relaxed) & bit != 0;
            let (mut used, cap) = self.tier_use(from);
            let mut counted = used;
            if from == 0 {
                // One scan of the inode table per pass (and one more after
                // evicting): the split is only needed to pass's precision.
                pm_split = self.pm_clean_dirty();
                let clean = pm_split.0 * BS;
                // Room for foreground writes: dropping the PM side of clean
                // data costs no copy, so it goes first once PM passes the
                // eviction mark (halfway between threshold and full).
                let evict_mark = u64::from(threshold) + (100 - u64::from(threshold)) / 2;
                if clean > 0 && u128::from(used) * 100 > u128::from(cap) * u128::from(evict_mark) {
                    let goal = used.saturating_sub(cap / 100 * u64::from(threshold));
                    let freed = self.drain(from, to, goal, &params, &*policy, Mode::Evict);
                    moved += freed;
                    used = self.tier_use(0).0;
                    if freed > 0 {
                        pm_split = self.pm_clean_dirty();
                    }
                }
                // With clean copies kept, only dirty data counts toward the
                // threshold: the rest can be dropped at any time.
                let probe = mig::CopyObservation {
                    need: MigrationNeed::Background { bytes_to_free: 0 },
                    pm_used: used,
                    pm_capacity: cap,
                };
                if policy.keep_clean_copy(&probe) {
                    counted = used.saturating_sub(pm_split.0 * BS);
                }
            }
            if from == 0 {
                self.migrator
                    .pm_counted_percent
                    .store(counted * 100 / cap.max(1), Ordering::Relaxed);
            }
            let need = mig::should_migrate(counted, cap, threshold, params.forced_percent, running);
            // NVMFS keeps PM's dirty data between its own marks (the flush
            // below); the migration threshold applies to it only when forced.
            let own_marks = from == 0 && policy.name() == "nvmfs" && !need.is_forced();
            if need.is_needed() && !own_marks {
                self.migrator.running.fetch_or(bit, Ordering::Relaxed);
                let obs = mig::CopyObservation {
                    need,
                    pm_used: used,
                    pm_capacity: cap,
                };
                let mode = if from == 0 && policy.keep_clean_copy(&obs) {
                    Mode::Copy
                } else {
                    Mode::Move
                };
                *self.migrator.last_reason.lock() = format!(
                    "tier {from} at {}% of capacity, threshold {threshold}%{}{}",
                    counted * 100 / cap.max(1),
                    if need.is_forced() { " (forced)" } else { "" },
                    if mode == Mode::Copy {
                        " (clean copies kept on PM)"
                    } else {
                        ""
                    }
                );
                let here = self.drain(from, to, need.bytes_to_free(), &params, &*policy, mode);
                moved += here;
                self.note_drain_result(from, to, here);
            } else {
                self.migrator.running.fetch_and(!bit, Ordering::Relaxed);
                if from == 0 {
                    self.migrator.waiting.lock().clear();
                }
            }
            if from == 0 && policy.name() == "nvmfs" {
                moved += self.nvmfs_flush(to, cap, pm_split, &np);
            }
        }
        // Logs of cold files leave PM when data moving was not enough.
        let need = self.log_migration_need(mig::migration_threshold(params.threshold, io));
        moved += self.migrate_logs(need);
        moved += self.reverse_pass(io, &params);
        if !self.ruled.lock().is_empty() {
            moved += self.enforce_rules();
        }
        self.clean_pass();
        moved
    }

    /// PM blocks holding clean data (with a copy on a block tier) and dirty
    /// data (PM only).
    pub(crate) fn pm_clean_dirty(&self) -> (u64, u64) {
        let (mut clean, mut dirty) = (0, 0);
        if self.tiers.is_empty() {
            return (0, 0);
        }
        for slot in &self.table {
            if let Some(i) = slot.lock().as_ref() {
                let (c, d) = i.extents.pm_clean_dirty();
                clean += c;
                dirty += d;
            }
        }
        (clean, dirty)
    }

    /// NVMFS's dirty list: when dirty PM data passes the high mark of its
    /// target share (which the adaptive split moves toward the list with more
    /// hits per page), write clean copies of the dirty data that least
    /// deserves PM (`nvmfs_flush_order`, over every file) to the block tier in
    /// `nvmfs_extent_bytes` requests, down to the low mark. The PM copies stay
    /// and serve reads.
    fn nvmfs_flush(
        &self,
        to: u8,
        cap: u64,
        (clean, dirty): (u64, u64),
        np: &terrace_policy::nvmfs::NvmfsParams,
    ) -> u64 {
        use terrace_policy::nvmfs::{self, AdaptiveSplit, PageKind};
        let m = &self.migrator;
        let now = now_ns().max(0) as u64;
        let target = {
            let mut g = m.split.lock();
            let sp = g.get_or_insert_with(|| AdaptiveSplit::new(&np.split, now));
            // Feed this window's hits (scaled down to bound the work; only
            // their ratio matters).
            let mut c = m.window_clean_hits.swap(0, Ordering::Relaxed);
            let mut d = m.window_dirty_hits.swap(0, Ordering::Relaxed);
            while c + d > 10_000 {
                c /= 2;
                d /= 2;
            }
            for _ in 0..c {
                sp.on_hit(PageKind::Clean);
            }
            for _ in 0..d {
                sp.on_hit(PageKind::Dirty);
            }
            if sp.window_over(now, np.window_ns) {
                sp.on_window_end(clean, dirty, now, &np.split);
            }
            sp.dirty_target_pages(cap / BS)
        };
        let pages = m.flush_run.lock().next_pass(dirty, target, np);
        if pages == 0 {
            return 0;
        }
        let runs = nvmfs::flush_choice(&self.pm_dirty_runs(), pages, now, np.order, np.decay_ns);
        self.copy_runs(&runs, to, np.extent_blocks())
    }

    /// Every run of dirty PM data (no clean copy), except of files pinned
    /// to PM by a rule.
    fn pm_dirty_runs(&self) -> Vec<terrace_policy::nvmfs::DirtyRun> {
        let mut out = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            if i.extents.pm_clean_dirty().1 == 0 || self.rule_of(i) == Some(0) {
                continue;
            }
            out.extend(
                i.extents
                    .iter()
                    .filter(|(_, e)| e.tier == 0 && e.copy.is_none())
                    .map(|(fb, e)| terrace_policy::nvmfs::DirtyRun {
                        ino: i.ino,
                        file_block: fb,
                        blocks: e.blocks,
                        mtime_ns: e.mtime.max(0) as u64,
                        writes: e.writes,
                    }),
            );
        }
        out
    }

    /// Writes clean copies of `runs` (per inode, in file order) to tier `to`,
    /// in requests of at most `unit` blocks; returns the bytes copied.
    fn copy_runs(&self, runs: &[terrace_policy::nvmfs::PageRun], to: u8, unit: u64) -> u64 {
        let total: u64 = runs.iter().map(|r| r.blocks * BS).sum();
        let window = (total / 4).max(unit * BS).min(MOVE_SYNC_WINDOW_BYTES);
        let mut batch = MoveBatch::new(self, window);
        'files: for file in runs.chunk_by(|a, b| a.ino == b.ino) {
            if self.migrator.stop.load(Ordering::Relaxed) {
                break;
            }
            let entries: Vec<EntrySnapshot> = file
                .iter()
                .map(|r| EntrySnapshot {
                    file_block: r.file_block,
                    blocks: r.blocks,
                    mtime_ns: 0,
                    tier: 0,
                })
                .collect();
            for group in mig::batch_groups(&mig::group_entries(&entries, unit), unit) {
                let ranges: Vec<(u64, u64)> =
                    group.iter().map(|g| (g.file_block, g.blocks)).collect();
                if batch.add(file[0].ino, 0, to, &ranges, Mode::Copy).is_err() {
                    // Target full or failing: try again next pass.
                    break 'files;
                }
            }
        }
        batch.finish().0
    }

    fn io_counters(&self) -> IoCounters {
        IoCounters {
            reads: self.counters.reads.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
        }
    }

    /// Moves cold data from `from` to `to` until `goal` bytes moved or no
    /// candidate is left.
    pub(crate) fn drain(
        &self,
        from: u8,
        to: u8,
        goal: u64,
        params: &mig::MigrationParams,
        policy: &(dyn mig::MigrationPolicy + Send + Sync),
        mode: Mode,
    ) -> u64 {
        let files = self.coldest_files(from, mode, 256);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = params.threads_for(cpus).clamp(1, files.len().max(1));
        // Files are handed out coldest first; each worker moves whole files,
        // so two workers never work on the same file. The picker (next file,
        // bytes claimed so far) is one lock: files are chosen and claimed in
        // coldness order, and none once the claims reach the goal, so
        // parallel workers move exactly the files one worker would.
        let picker = Mutex::new((0usize, 0u64));
        let moved = AtomicU64::new(0);
        let failed = AtomicBool::new(false);
        // Moves are synced and committed in windows (see `MoveBatch`): a
        // quarter of the goal, so space on the source is freed as the pass
        // goes, at least one group and at most MOVE_SYNC_WINDOW_BYTES.
        let window = (goal / 4)
            .max(params.group_blocks() * BS)
            .min(MOVE_SYNC_WINDOW_BYTES);
        let work = || {
            let mut batch = MoveBatch::new(self, window);
            let mut counted = 0u64;
            self.drain_files(
                &mut batch,
                &mut counted,
                (from, to, goal, mode),
                params,
                policy,
                (&files, &picker, &moved, &failed),
            );
            let (total, r) = batch.finish();
            moved.fetch_add(total - counted, Ordering::Relaxed);
            if let Err(e) = r {
                *self.migrator.last_failure.lock() = Some(crate::types::describe(&e));
                failed.store(true, Ordering::Relaxed);
            }
        };
        if workers == 1 {
            work();
        } else {
            std::thread::scope(|sc| {
                for _ in 0..workers {
                    sc.spawn(work);
                }
            });
        }
        let claimed = picker.into_inner().1;
        let moved = moved.into_inner();
        if moved == 0
            && claimed == 0
            && mode != Mode::Evict
            && !failed.into_inner()
            && !params.whole_when_uniform
        {
            // Nothing among the coldest files had a cold part: a second
            // round takes files written at one time whole
            // (`MigrationParams::whole_when_uniform`).
            let second = mig::MigrationParams {
                whole_when_uniform: true,
                ..*params
            };
            return self.drain(from, to, goal, &second, policy, mode);
        }
        moved
    }

    /// One drain worker's loop: takes the next coldest file until the goal is
    /// claimed or met, and adds its chosen data to `batch`.
    #[allow(clippy::type_complexity)]
    fn drain_files(
        &self,
        batch: &mut MoveBatch<'_>,
        counted: &mut u64,
        (from, to, goal, mode): (u8, u8, u64, Mode),
        params: &mig::MigrationParams,
        policy: &(dyn mig::MigrationPolicy + Send + Sync),
        (files, picker, moved, failed): (
            &[(u64, Ino)],
            &Mutex<(usize, u64)>,
            &AtomicU64,
            &AtomicBool,
        ),
    ) {
        let now = now_ns().max(0) as u64;
        // Publishes what the batch committed so far.
        let publish = |batch: &MoveBatch<'_>, counted: &mut u64| {
            let m = batch.moved();
            moved.fetch_add(m - *counted, Ordering::Relaxed);
            *counted = m;
        };
        loop {
            if moved.load(Ordering::Relaxed) >= goal
                || failed.load(Ordering::Relaxed)
                || self.migrator.stop.load(Ordering::Relaxed)
            {
                return;
            }
            // Pick the next file with something to move, and claim it.
            let (ino, entries) = {
                let mut pk = picker.lock();
                loop {
                    let k = pk.0;
                    pk.0 += 1;
                    let Some(&(_, ino)) = files.get(k) else {
                        return;
                    };
                    let file = {
                        let Ok(g) = self.lock(ino) else { continue };
                        let i = g.as_ref().expect("live");
                        if self.rule_of(i) == Some(from) {
                            // Pinned to this tier by its rule: it stays.
                            continue;
                        }
                        FileSnapshot {
                            ino,
                            mtime_ns: i.attr.mtime.max(0) as u64,
                            amtime_ns: i.amtime.value(),
                            entries: snapshot_entries(i),
                        }
                    };
                    let entries: Vec<EntrySnapshot> = if mode == Mode::Evict {
                        // Clean data is evicted wherever it is in the file:
                        // it costs nothing and its copy serves later reads.
                        file.entries
                            .iter()
                            .filter(|e| e.tier == from)
                            .copied()
                            .collect()
                    } else {
                        policy.choose(&file, from, now, params).entries
                    };
                    let bytes: u64 = entries.iter().map(|e| e.blocks * BS).sum();
                    if bytes == 0 {
                        continue;
                    }
                    if mode != Mode::Evict {
                        if pk.1 >= goal {
                            return;
                        }
                        pk.1 += bytes;
                    }
                    break (ino, entries);
                }
            };
            let gb = params.group_blocks();
            for group in mig::batch_groups(&mig::group_entries(&entries, gb), gb) {
                if mode == Mode::Evict && moved.load(Ordering::Relaxed) >= goal {
                    break;
                }
                let ranges: Vec<(u64, u64)> =
                    group.iter().map(|g| (g.file_block, g.blocks)).collect();
                let r = batch.add(ino, from, to, &ranges, mode);
                publish(batch, counted);
                if let Err(e) = r {
                    // Target full or failing: try again next pass.
                    *self.migrator.last_failure.lock() = Some(crate::types::describe(&e));
                    failed.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }

    /// Reverse migration: read-hot block-tier files move up to PM.
    fn reverse_pass(&self, io: IoCounters, params: &mig::MigrationParams) -> u64 {
        if self.tiers.is_empty() || !io.reads_dominate(params.reverse_read_ratio) {
            return 0;
        }
        let (used, cap) = self.tier_use(0);
        let mut files = Vec::new();
        for slot in &self.table {
            if let Some(i) = slot.lock().as_ref() {
                // A file pinned to a block tier stays there (rules).
                let pinned_down = self.rule_of(i).is_some_and(|t| t != 0);
                if i.block_reads > 0 && i.kind == FileType::Regular && !pinned_down {
                    let (clean, dirty) = i.extents.pm_clean_dirty();
                    let on_block = i.extents.mapped_blocks() - clean - dirty;
                    files.push(mig::FileReads {
                        ino: i.ino,
                        block_tier_blocks: on_block,
                        reads: i.block_reads,
                    });
                }
            }
        }
        let mut moved = 0;
        for f in mig::reverse_candidates(io, used, cap, &files, params) {
            let entries: Vec<EntrySnapshot> = {
                let Ok(mut g) = self.lock(f.ino) else {
                    continue;
                };
                let i = g.as_mut().expect("live");
                i.block_reads = 0;
                snapshot_entries(i)
            };
            for from in self.tiers.iter().map(|t| t.id) {
                // Basic migration: one write entry at a time, no grouping.
                let groups: Vec<Group> = entries
                    .iter()
                    .filter(|e| e.tier == from)
                    .map(|e| Group {
                        file_block: e.file_block,
                        blocks: e.blocks,
                        sources: vec![*e],
                    })
                    .collect();
                match self.migrate_groups(f.ino, from, 0, &groups) {
                    Ok(b) => moved += b,
                    Err(_) => return moved,
                }
            }
        }
        if moved > 0 {
            *self.migrator.last_reason.lock() = format!(
                "reads dominate: {} bytes of read-hot data moved up to PM",
                moved
            );
        }
        moved
    }

    /// Starts the migration thread: a pass every 100 ms (or when kicked),
    /// sleeping when there is nothing to do; stops at [`Fs::unmount`].
    pub fn start_migration(self: &Arc<Self>) {
        let weak: Weak<Fs> = Arc::downgrade(self);
        let h = std::thread::Builder::new()
            .name("terrace-migrate".into())
            .spawn(move || {
                let mut idle = false;
                loop {
                    let Some(fs) = weak.upgrade() else { return };
                    let m = &fs.migrator;
                    if m.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    {
                        let mut woke = m.wake_lock.lock();
                        if !*woke || idle {
                            // After a pass that moved nothing (target full, or
                            // nothing qualifies), kicks wait for the next tick:
                            // the thread never spins on them.
                            let until = Instant::now() + Duration::from_millis(100);
                            loop {
                                let timed_out = m.wake.wait_until(&mut woke, until).timed_out();
                                if timed_out || !idle || m.stop.load(Ordering::Relaxed) {
                                    break;
                                }
                            }
                        }
                        *woke = false;
                    }
                    if m.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    m.passes.fetch_add(1, Ordering::Relaxed);
                    idle = fs.migration_pass() == 0;
                }
            })
            .expect("spawn the migration thread");
        *self.migrator.thread.lock() = Some(h);
    }

    /// Records what a drain of `from` achieved: nothing moved while the tier
    /// is over its threshold is a stall, said in words (status) and queued
    /// once for the daemon's log; moving again clears it.
    fn note_drain_result(&self, from: u8, to: u8, moved: u64) {
        let m = &self.migrator;
        let failure = m.last_failure.lock().take();
        let mut waiting = m.waiting.lock();
        if moved > 0 {
            if !waiting.is_empty() {
                m.notices
                    .lock()
                    .push(format!("migration from tier {from} moves data again"));
            }
            waiting.clear();
            return;
        }
        let why = match failure {
            Some(e) => format!("moves from tier {from} to tier {to} fail: {e}"),
            None => format!(
                "nothing on tier {from} can move to tier {to} (data pinned there by rules, or only in the DRAM cache)"
            ),
        };
        if *waiting != why {
            m.notices.lock().push(format!("migration stalled: {why}"));
            *waiting = why;
        }
    }

    /// Queues a message for the daemon's log.
    pub(crate) fn notice(&self, msg: String) {
        self.migrator.notices.lock().push(msg);
    }

    /// Messages for the daemon's log (each returned once).
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.migrator.notices.lock())
    }

    /// Whether the migration thread runs (so waiting for it can help).
    pub(crate) fn migration_thread_running(&self) -> bool {
        self.migrator.thread.lock().is_some() && !self.migrator.stop.load(Ordering::Relaxed)
    }

    /// Wakes the migration thread (PM passed its threshold).
    pub(crate) fn kick_migration(&self) {
        self.migrator.kick();
    }

    /// Stops the migration thread (if running) and waits for it.
    pub(crate) fn stop_migration(&self) {
        self.migrator.stop.store(true, Ordering::Relaxed);
        self.migrator.kick();
        let h = self.migrator.thread.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Migration state for `terrace status`.
    pub fn migration_status(&self) -> MigrationStatus {
        let m = &self.migrator;
        let st = self.settings.read();
        let params = st.migration_params();
        let busy = m.busy_ns.load(Ordering::Relaxed);
        let moved = m.data_bytes.load(Ordering::Relaxed);
        MigrationStatus {
            policy: st.migration_policy.clone(),
            running: m.running.load(Ordering::Relaxed) != 0,
            reason: m.last_reason.lock().clone(),
            pm_threshold_percent: mig::migration_threshold(params.threshold, self.io_counters()),
            pm_counted_percent: m.pm_counted_percent.load(Ordering::Relaxed),
            waiting: m.waiting.lock().clone(),
            bytes_down: m.bytes_down.load(Ordering::Relaxed),
            bytes_up: m.bytes_up.load(Ordering::Relaxed),
            entries_moved: m.entries_moved.load(Ordering::Relaxed),
            groups: m.groups.load(Ordering::Relaxed),
            bytes_copied: m.bytes_copied.load(Ordering::Relaxed),
            bytes_evicted: m.bytes_evicted.load(Ordering::Relaxed),
            clean_pm_blocks: self.pm_clean_dirty().0,
            clean_hit_ratio: {
                let c = m.clean_hits.load(Ordering::Relaxed);
                let d = m.dirty_hits.load(Ordering::Relaxed);
                (c + d > 0).then(|| c as f64 / (c + d) as f64)
            },
            bandwidth_bytes_per_sec: if busy == 0 {
                0
            } else {
                (u128::from(moved) * 1_000_000_000 / u128::from(busy)) as u64
            },
            per_tier: m
                .per_tier
                .lock()
                .iter()
                .map(|(&tier, &(bytes, ns))| TierMigration {
                    tier,
                    bytes,
                    bandwidth_bytes_per_sec: (u128::from(bytes) * 1_000_000_000
                        / u128::from(ns.max(1)))
                        as u64,
                })
                .collect(),
        }
    }
}

/// The file's extents as the migration policies see them.
fn snapshot_entries(i: &Inode) -> Vec<EntrySnapshot> {
    i.extents
        .iter()
        .map(|(fb, e)| EntrySnapshot {
            file_block: fb,
            blocks: e.blocks,
            mtime_ns: e.mtime.max(0) as u64,
            tier: e.tier,
        })
        .collect()
}

impl Fs {
    /// Counts writes over PM data for the adaptive split only (the hit ratio
    /// in `terrace status` counts reads). Every such write is a hit of the
    /// *dirty* list, also over clean data: the write makes that data dirty
    /// (its copy is freed), so it shows the data is written, and the clean
    /// list — which exists to serve reads from PM of data that is also on
    /// disk — gains nothing from it. Counting it for the clean list would
    /// shrink the dirty target under rewrites, flushing more of exactly the
    /// data that is rewritten next.
    pub(crate) fn note_pm_write_hits(&self, clean: u64, dirty: u64) {
        let n = clean + dirty;
        if n > 0 {
            self.migrator
                .window_dirty_hits
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts PM reads of clean and dirty data (NVMFS's hit counters).
    pub(crate) fn note_pm_hits(&self, clean: u64, dirty: u64) {
        let m = &self.migrator;
        if clean > 0 {
            m.clean_hits.fetch_add(clean, Ordering::Relaxed);
            m.window_clean_hits.fetch_add(clean, Ordering::Relaxed);
        }
        if dirty > 0 {
            m.dirty_hits.fetch_add(dirty, Ordering::Relaxed);
            m.window_dirty_hits.fetch_add(dirty, Ordering::Relaxed);
        }
    }
}

impl Fs {
    /// Drops the PM side of clean data (data with a copy on the first block
    /// tier), coldest files first, until `goal` bytes are freed. No data is
    /// copied. Returns the bytes freed.
    pub fn evict_clean(&self, goal: u64) -> u64 {
        let Some(to) = self.tiers.first().map(|t| t.id) else {
            return 0;
        };
        let (params, policy) = {
            let st = self.settings.read();
            (st.migration_params(), st.migration())
        };
        let Ok(policy) = policy else { return 0 };
        self.drain(0, to, goal, &params, &*policy, Mode::Evict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{format, FormatParams};
    use terrace_format::{TierKind, TierRecord, DEFAULT_EXTENT_SIZE};
    use terrace_media::{MemBlock, MemMedia};

    fn pool() -> Fs {
        let pm = Arc::new(MemMedia::new(16 << 20));
        let tier = |id, kind, size, extent_size| TierRecord {
            id,
            kind,
            size,
            extent_size,
            path: "t".into(),
        };
        format(
            &*pm,
            &FormatParams {
                uuid: [3; 16],
                inode_count: 16,
                tiers: vec![
                    tier(0, TierKind::Pm, 16 << 20, 0),
                    tier(1, TierKind::Ssd, 32 << 20, DEFAULT_EXTENT_SIZE),
                ],
                root_uid: 0,
                root_gid: 0,
            },
        )
        .unwrap();
        Fs::mount_with_tiers(pm, vec![(1, Arc::new(MemBlock::new(32 << 20)))]).unwrap()
    }

    fn first_extent(fs: &Fs, ino: Ino) -> crate::inode::Extent {
        let g = fs.lock(ino).unwrap();
        g.as_ref().unwrap().extents.find(0).unwrap().1
    }

    #[test]
    fn rewrites_of_clean_pm_data_count_for_the_dirty_list_and_reads_for_the_clean_one() {
        let fs = pool();
        let ctx = crate::Ctx { uid: 0, gid: 0 };
        let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        fs.write(f.ino, 0, &[1u8; 8 * 4096]).unwrap();
        // Clean copies of all 8 blocks on the SSD tier; the PM side stays.
        fs.move_ranges(f.ino, 0, 1, &[(0, 8)], Mode::Copy).unwrap();
        assert!(first_extent(&fs, f.ino).copy.is_some());
        let m = &fs.migrator;
        let hits = || {
            (
                m.window_clean_hits.load(Ordering::Relaxed),
                m.window_dirty_hits.load(Ordering::Relaxed),
            )
        };
        let before = hits();
        fs.read(f.ino, 0, 4096).unwrap();
        let after_read = hits();
        assert!(
            after_read.0 > before.0,
            "a read of clean data is a clean hit"
        );
        // Rewriting clean data shows that it is written: a dirty-list hit.
        fs.write(f.ino, 4096, &[2u8; 2 * 4096]).unwrap();
        let after_write = hits();
        assert_eq!(
            after_write.0, after_read.0,
            "a rewrite counted for the clean list"
        );
        assert_eq!(after_write.1, after_read.1 + 2);
    }

    #[test]
    fn a_move_prepared_before_a_collapse_or_insert_never_lands_on_the_shifted_blocks() {
        let ctx = crate::Ctx { uid: 0, gid: 0 };
        for mode in [
            crate::FallocateMode::CollapseRange,
            crate::FallocateMode::InsertRange,
        ] {
            let fs = pool();
            let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ctx).unwrap();
            let data: Vec<u8> = (0..8 * 4096u32).map(|i| (i / 4096 + 1) as u8).collect();
            fs.write(f.ino, 0, &data).unwrap();
            // A move of file blocks 2..6 to the SSD is copied, not committed ...
            let mut batch = MoveBatch::new(&fs, u64::MAX);
            batch.add(f.ino, 0, 1, &[(2, 4)], Mode::Move).unwrap();
            // ... while the file's blocks shift by one.
            fs.fallocate(f.ino, 4096, 4096, mode).unwrap();
            let mut want = data.clone();
            if mode == crate::FallocateMode::CollapseRange {
                want.drain(4096..8192);
            } else {
                want.splice(4096..4096, std::iter::repeat(0).take(4096));
            }
            let (moved, r) = batch.finish();
            r.unwrap();
            assert_eq!(moved, 0, "{mode:?}: a stale move committed");
            assert_eq!(fs.read(f.ino, 0, want.len() + 1).unwrap(), want, "{mode:?}");
            fs.check_allocator().unwrap();
        }
    }

    #[test]
    fn a_move_prepared_for_a_deleted_file_never_lands_in_the_file_reusing_its_slot() {
        let fs = pool();
        let ctx = crate::Ctx { uid: 0, gid: 0 };
        let d = fs.mkdir(1, b"d", 0o755, ctx).unwrap().ino;
        let f = fs.mknod(d, b"old", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        fs.write(f.ino, 0, &[1u8; 4096]).unwrap();
        let old_block = first_extent(&fs, f.ino);
        // The move is copied but not committed (a large sync window) ...
        let mut batch = MoveBatch::new(&fs, u64::MAX);
        batch.add(f.ino, 0, 1, &[(0, 1)], Mode::Move).unwrap();
        // ... while the file is deleted and a new file takes its slot, its
        // first write landing on the same PM block with the same per-file
        // sequence number: everything the old checks compared is equal.
        fs.unlink(d, b"old").unwrap();
        fs.forget(f.ino, 1);
        let g = fs.mknod(d, b"new", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        // Log pages (whole or in slabs) come from the same allocator, which
        // starts each allocation in the next shard: turn it to the shard of
        // the old block, where first fit finds that block again.
        for _ in 0..fs.alloc.shard_count() {
            if fs.alloc.next_shard_holds(old_block.block) {
                break;
            }
            let b = fs.alloc.alloc_one().unwrap();
            fs.alloc.free_run(b, 1);
        }
        fs.write(g.ino, 0, &[2u8; 4096]).unwrap();
        let new_block = first_extent(&fs, g.ino);
        assert_eq!(
            g.ino, f.ino,
            "the slot was not reused: the test proves nothing"
        );
        assert_eq!(
            (new_block.block, new_block.seq),
            (old_block.block, old_block.seq)
        );
        let (moved, r) = batch.finish();
        r.unwrap();
        assert_eq!(moved, 0);
        assert_eq!(fs.read(g.ino, 0, 4096).unwrap(), vec![2u8; 4096]);
        fs.check_allocator().unwrap();
    }
}
