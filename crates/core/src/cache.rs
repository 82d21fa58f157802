//! The DRAM page cache in front of the block tiers (Ziggurat §3, NVMFS §III-D):
//! the bound, the clean pages and the accounting of dirty ones. It knows
//! nothing of the file system: writes enter it through `cache_write.rs`,
//! its write-back transaction and thread are in [`crate::writeback`].
//!
//! Two kinds of pages share one byte bound (`dram_cache_bytes`):
//!
//! - **Dirty pages** belong to a file: writes the placement policy steers to a
//!   block tier (large and asynchronous, or any asynchronous write while PM is
//!   full) are copied into 4 KiB pages kept in the inode ([`Inode::dirty`]),
//!   keyed by file page ([`DirtyPage`]); the cache counts their bytes. They
//!   are the newest content of those pages and are not yet in the file's log.
//!   Write-back ([`Fs::flush_inode`]) allocates fresh, consecutive blocks on
//!   the block tier for all of a file's dirty pages, writes each physically
//!   contiguous run as one request (so random page writes become one
//!   sequential request, as NVMFS's non-overwrite extents intend), syncs the
//!   device, and only then commits the write entries — one commit for the
//!   whole batch.
//! - **Clean pages** are copies of block-tier blocks, keyed by physical address
//!   `(tier, block)`. Block tiers are written non-overwrite, so a block's
//!   content never changes while it is allocated: a clean page never goes stale,
//!   and it is dropped when its block is freed ([`Fs::free_runs`]). Reads
//!   that miss read the rest of the write entry they fall in, up to
//!   `max_read_unit_bytes`, into clean pages. Clean pages are evicted in LRU
//!   order; flushed pages stay as clean pages of their new blocks.
//!
//! # Invariants
//! - `dirty + clean + reserved <= bound` at every moment the state lock is
//!   released (the bound may be lowered at run time; the cache then shrinks
//!   before it grows again). [`CacheStats::peak_bytes`] records the largest
//!   value ever reached, so tests check the bound from the outside.
//! - A writer reserves room *before* it takes its inode lock (making room may
//!   write back other files, which takes their locks), and turns the
//!   reservation into dirty pages under its inode lock.
//! - While a file has dirty pages, only cached writes change its data; every
//!   other change (a PM write, truncate, fallocate, setattr) first writes the
//!   dirty pages back ([`Fs::lock_clean`]). So, after a crash, each file shows
//!   a prefix of its writes (whole writes: a write's pages are inserted under
//!   the inode lock and a write-back snapshot is taken under the same lock).
//! - Write-back of one file runs under that file's write-back lock (striped by
//!   inode number), taken before the inode lock; the device I/O runs without
//!   the inode lock, so reads and writes of the file continue meanwhile. A page
//!   rewritten during its write-back stays dirty (its sequence number moved on).
//!   The write-back commits only if the inode's generation is unchanged and
//!   it is not a zombie: a file deleted during its write-back may have its
//!   slot reused by another, or be kept for the kernel's references with its
//!   space already released (blocks committed to it would never be freed).
//!
//! [`Inode::dirty`]: crate::inode::Inode::dirty
//! [`DirtyPage`]: crate::inode::DirtyPage
//! [`Fs::flush_inode`]: crate::Fs::flush_inode
//! [`Fs::free_runs`]: crate::Fs::free_runs
//! [`Fs::lock_clean`]: crate::Fs::lock_clean

use crate::lock_order::{Mutex, MutexGuard, Rank};
use crate::types::Ino;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{PhysBlock, TierId, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;
const WB_STRIPES: usize = 64;
/// The last fetch of a stripe of `PageCache::fetch_locks` that failed: a
/// reader that waited for it fails at once instead of trying again (each
/// try may last the whole retry budget of a dead store).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailedFetch {
    pub tier: TierId,
    pub window: u64,
    pub at: Instant,
}

/// Fetch locks, striped by (tier, read-ahead window): readers of different
/// data rarely share one, so a fetch that waits on a dead store holds up
/// only readers of the same window.
const FETCH_STRIPES: usize = 64;

/// Counters of the cache, shown by `terrace status`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// The bound (bytes).
    pub bound_bytes: u64,
    /// Dirty bytes now.
    pub dirty_bytes: u64,
    /// Clean bytes now.
    pub clean_bytes: u64,
    /// Largest `dirty + clean + reserved` ever reached.
    pub peak_bytes: u64,
    /// Block reads served from the cache.
    pub hits: u64,
    /// Block reads that went to a device.
    pub misses: u64,
    /// Files written back.
    pub writebacks: u64,
    /// Bytes written back.
    pub writeback_bytes: u64,
    /// Device write requests issued by write-back.
    pub writeback_requests: u64,
    /// Clean pages evicted.
    pub evictions: u64,
    /// Writes that bypassed the cache because they were larger than it.
    pub bypassed_writes: u64,
}

/// A clean page: its bytes and its LRU tick.
type CleanPage = (Arc<[u8]>, u64);

#[derive(Default)]
struct State {
    dirty: u64,
    clean: u64,
    reserved: u64,
    /// Clean pages by physical address: data and LRU tick.
    pages: BTreeMap<(TierId, PhysBlock), CleanPage>,
    /// LRU order of clean pages.
    lru: BTreeMap<u64, (TierId, PhysBlock)>,
    tick: u64,
    /// Files with dirty pages and when they first became dirty.
    dirty_files: HashMap<Ino, Instant>,
    /// Log bytes promised to each dirty file's write-back commit (`space.rs`);
    /// their sum is `PageCache::promise_bytes`.
    log_promise: HashMap<Ino, u64>,
    stats: CacheStats,
}

impl State {
    fn used(&self) -> u64 {
        self.dirty + self.clean + self.reserved
    }
    fn note_peak(&mut self) {
        let u = self.used();
        if u > self.stats.peak_bytes {
            self.stats.peak_bytes = u;
        }
    }
    fn evict_one(&mut self) -> bool {
        let Some((_, key)) = self.lru.pop_first() else {
            return false;
        };
        if self.pages.remove(&key).is_some() {
            self.clean -= BS;
            self.stats.evictions += 1;
        }
        true
    }
    fn touch(&mut self, key: (TierId, PhysBlock)) -> Option<Arc<[u8]>> {
        self.tick += 1;
        let tick = self.tick;
        let (data, old) = {
            let e = self.pages.get_mut(&key)?;
            let old = e.1;
            e.1 = tick;
            (e.0.clone(), old)
        };
        self.lru.remove(&old);
        self.lru.insert(tick, key);
        Some(data)
    }
}

/// The DRAM page cache (one per mounted pool).
pub struct PageCache {
    state: Mutex<State>,
    /// Sum of `State::log_promise`, changed under the state lock and read
    /// without it (every modifying operation checks PM room first:
    /// `Fs::wait_for_pm_room`).
    promise_bytes: AtomicU64,
    bound: AtomicU64,
    seq: AtomicU64,
    wb_locks: Vec<Mutex<()>>,
    /// Held by a sequential reader while it fetches a miss of one
    /// read-ahead window of an object tier, so readers of the same window
    /// wait for the fetch and find it cached instead of fetching it again.
    fetch_locks: Vec<Mutex<Option<FailedFetch>>>,
    /// The write-back thread ([`crate::worker`]).
    pub(crate) worker: crate::worker::Worker,
}

impl PageCache {
    /// An empty cache of `bound` bytes.
    pub fn new(bound: u64) -> PageCache {
        PageCache {
            state: Mutex::new(Rank::leaf("page-cache state"), State::default()),
            promise_bytes: AtomicU64::new(0),
            bound: AtomicU64::new(bound),
            seq: AtomicU64::new(1),
            wb_locks: (0..WB_STRIPES)
                .map(|_| Mutex::new(Rank::Writeback, ()))
                .collect(),
            fetch_locks: (0..FETCH_STRIPES)
                .map(|_| Mutex::new(Rank::ObjectFetch, None))
                .collect(),
            worker: crate::worker::Worker::default(),
        }
    }

    /// The bound now (bytes).
    pub fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }

    pub(crate) fn set_bound(&self, bytes: u64) {
        self.bound.store(bytes, Ordering::Relaxed);
        let mut s = self.state.lock();
        while s.used() > bytes && s.evict_one() {}
        drop(s);
        self.kick();
    }

    /// Dirty pages in the cache: each needs a new block at write-back.
    pub(crate) fn dirty_blocks(&self) -> u64 {
        self.state.lock().dirty / BS
    }

    /// Log bytes promised to the write-back commits of all dirty files, and
    /// what file `ino` holds of them.
    pub(crate) fn log_promise(&self, ino: Ino) -> (u64, u64) {
        let s = self.state.lock();
        (
            self.promise_bytes.load(Ordering::Relaxed),
            s.log_promise.get(&ino).copied().unwrap_or(0),
        )
    }

    /// Sets the log bytes promised to `ino`'s write-back commit.
    pub(crate) fn set_log_promise(&self, ino: Ino, bytes: u64) {
        let mut s = self.state.lock();
        let old = s.log_promise.insert(ino, bytes).unwrap_or(0);
        // Under the state lock, so the sum always matches the map.
        self.promise_bytes.store(
            self.promise_bytes.load(Ordering::Relaxed) - old + bytes,
            Ordering::Relaxed,
        );
    }

    /// Log bytes promised to all dirty files' write-back commits, without
    /// taking the state lock.
    pub(crate) fn log_promise_total(&self) -> u64 {
        self.promise_bytes.load(Ordering::Relaxed)
    }

    /// Counters now.
    pub fn stats(&self) -> CacheStats {
        let s = self.state.lock();
        let mut st = s.stats;
        st.bound_bytes = self.bound();
        st.dirty_bytes = s.dirty;
        st.clean_bytes = s.clean;
        st
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Wakes the write-back thread.
    pub(crate) fn wake_writeback(&self) {
        self.kick();
    }

    fn kick(&self) {
        self.worker.kick();
    }

    /// The write-back lock of `ino` (striped by inode number): taken before
    /// the inode lock for the whole of one write-back of the file.
    pub(crate) fn writeback_lock(&self, ino: Ino) -> MutexGuard<'_, ()> {
        self.wb_locks[ino as usize % WB_STRIPES].lock()
    }

    /// Counts one write-back of `bytes` in `requests` device requests.
    pub(crate) fn note_writeback(&self, bytes: u64, requests: u64) {
        let mut s = self.state.lock();
        s.stats.writebacks += 1;
        s.stats.writeback_bytes += bytes;
        s.stats.writeback_requests += requests;
    }

    /// Files with dirty pages.
    pub(crate) fn dirty_files(&self) -> Vec<Ino> {
        self.state.lock().dirty_files.keys().copied().collect()
    }

    /// Bytes of dirty pages.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.state.lock().dirty
    }

    /// The file dirty longest, leaving out `skip`, and for how long, with
    /// the dirty bytes of the whole cache (one look under the state lock).
    pub(crate) fn oldest_dirty_file(&self, skip: &[Ino]) -> (Option<(Ino, Duration)>, u64) {
        let s = self.state.lock();
        let oldest = s
            .dirty_files
            .iter()
            .filter(|(ino, _)| !skip.contains(ino))
            .min_by_key(|(_, t)| **t)
            .map(|(ino, t)| (*ino, t.elapsed()));
        (oldest, s.dirty)
    }

    /// Clean copies of the consecutive blocks `first..first + max` of
    /// `tier`, as far as they are cached: the first block not cached ends the
    /// run. One lock for the whole run, so a read of many cached blocks
    /// takes the state lock once, not once per 4 KiB block.
    pub(crate) fn get_clean_run(&self, tier: TierId, first: PhysBlock, max: u64) -> Vec<Arc<[u8]>> {
        let mut s = self.state.lock();
        let mut run = Vec::new();
        for block in (first.get()..first.get().saturating_add(max)).map(PhysBlock) {
            match s.touch((tier, block)) {
                Some(p) => run.push(p),
                None => break,
            }
        }
        s.stats.hits += run.len() as u64;
        run
    }

    /// Whether a clean copy of `(tier, block)` is cached (no LRU touch, no
    /// hit counted).
    pub(crate) fn has_clean(&self, tier: TierId, block: PhysBlock) -> bool {
        self.state.lock().pages.contains_key(&(tier, block))
    }

    /// How many of the `max` blocks from `first` on are not cached, counted
    /// up to the first cached one (no LRU touch, no hit counted).
    pub(crate) fn uncached_run(&self, tier: TierId, first: PhysBlock, max: u64) -> u64 {
        let s = self.state.lock();
        match s
            .pages
            .range((tier, first)..(tier, first.saturating_add(max)))
            .next()
        {
            Some((&(_, b), _)) => b - first,
            None => max,
        }
    }

    /// The fetch lock of read-ahead window `window` of object tier `tier`
    /// (see `fetch_locks`).
    pub(crate) fn object_fetch_lock(
        &self,
        tier: TierId,
        window: u64,
    ) -> MutexGuard<'_, Option<FailedFetch>> {
        let h = window
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(tier.get()));
        self.fetch_locks[(h >> 32) as usize % FETCH_STRIPES].lock()
    }

    /// Inserts clean copies of consecutive blocks from `first`, evicting LRU
    /// clean pages for room; pages that do not fit are not cached.
    pub(crate) fn put_clean(&self, tier: TierId, first: PhysBlock, pages: Vec<Arc<[u8]>>) {
        let bound = self.bound();
        let mut s = self.state.lock();
        for (k, data) in pages.into_iter().enumerate() {
            let key = (tier, first + k as u64);
            if s.pages.contains_key(&key) {
                s.touch(key);
                continue;
            }
            while s.used() + BS > bound {
                if !s.evict_one() {
                    return;
                }
            }
            s.tick += 1;
            let tick = s.tick;
            s.pages.insert(key, (data, tick));
            s.lru.insert(tick, key);
            s.clean += BS;
            s.note_peak();
        }
    }

    pub(crate) fn note_misses(&self, n: u64) {
        self.state.lock().stats.misses += n;
    }

    /// Drops clean copies of freed blocks.
    pub(crate) fn invalidate(&self, tier: TierId, block: PhysBlock, n: u64) {
        let mut s = self.state.lock();
        if s.pages.is_empty() {
            return;
        }
        let keys: Vec<((TierId, PhysBlock), u64)> = s
            .pages
            .range((tier, block)..(tier, block.saturating_add(n)))
            .map(|(k, v)| (*k, v.1))
            .collect();
        for (k, tick) in keys {
            s.pages.remove(&k);
            s.lru.remove(&tick);
            s.clean -= BS;
        }
    }

    /// Reserves room for `bytes` of dirty pages under `bound`, evicting clean
    /// pages for it. When only dirty pages (and other writers'
    /// reservations) are left, returns the file dirty longest, to write
    /// back (`None`: no file is dirty).
    pub(crate) fn try_reserve(&self, bytes: u64, bound: u64) -> Result<(), Option<Ino>> {
        let mut s = self.state.lock();
        while s.used() + bytes > bound && s.evict_one() {}
        if s.used() + bytes <= bound {
            s.reserved += bytes;
            s.note_peak();
            return Ok(());
        }
        Err(s
            .dirty_files
            .iter()
            .min_by_key(|(_, t)| **t)
            .map(|(i, _)| *i))
    }

    /// Returns a reservation that was not used.
    pub(crate) fn unreserve(&self, bytes: u64) {
        self.state.lock().reserved -= bytes;
    }

    /// Counts a write that bypassed the cache (larger than half its bound).
    pub(crate) fn note_bypassed_write(&self) {
        self.state.lock().stats.bypassed_writes += 1;
    }

    /// Turns `reserved` reserved bytes into dirty bytes of `ino`: `added` new
    /// dirty pages, `replaced` dirty pages overwritten.
    pub(crate) fn commit_reservation(&self, ino: Ino, reserved: u64, added: u64) {
        let mut s = self.state.lock();
        s.reserved -= reserved;
        s.dirty += added * BS;
        if added > 0 || reserved > 0 {
            s.dirty_files.entry(ino).or_insert_with(Instant::now);
        }
        s.note_peak();
        let threshold = self.dirty_threshold();
        if s.dirty > threshold {
            drop(s);
            self.kick();
        }
    }

    fn dirty_threshold(&self) -> u64 {
        // Set by the file system from its settings; see `Fs::writeback_pass`.
        self.bound() / 4
    }

    /// Forgets `n` dirty pages of `ino` (written back or discarded); `all`
    /// when the file has none left.
    pub(crate) fn drop_dirty(&self, ino: Ino, n: u64, all: bool) {
        let mut s = self.state.lock();
        s.dirty -= n * BS;
        if all {
            s.dirty_files.remove(&ino);
            if let Some(b) = s.log_promise.remove(&ino) {
                self.promise_bytes.fetch_sub(b, Ordering::Relaxed);
            }
        } else if let Some(t) = s.dirty_files.get_mut(&ino) {
            // Rewritten during its write-back: its age starts again.
            *t = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(v: u8) -> Arc<[u8]> {
        Arc::from(vec![v; BS as usize])
    }

    #[test]
    fn an_uncached_run_ends_at_the_first_cached_block_of_the_same_tier() {
        let c = PageCache::new(1 << 20);
        c.put_clean(TierId(1), PhysBlock(10), vec![page(1)]);
        c.put_clean(TierId(2), PhysBlock(5), vec![page(2)]);
        assert_eq!(c.uncached_run(TierId(1), PhysBlock(4), 100), 6);
        assert_eq!(c.uncached_run(TierId(1), PhysBlock(4), 3), 3);
        assert_eq!(c.uncached_run(TierId(1), PhysBlock(11), 50), 50);
        assert_eq!(c.uncached_run(TierId(2), PhysBlock(0), 50), 5);
        assert_eq!(c.uncached_run(TierId(1), PhysBlock(10), 4), 0);
    }

    #[test]
    fn a_run_of_cached_blocks_ends_at_the_first_block_not_cached_and_counts_its_hits() {
        let c = PageCache::new(1 << 20);
        c.put_clean(TierId(1), PhysBlock(10), vec![page(1), page(2), page(3)]);
        c.put_clean(TierId(1), PhysBlock(14), vec![page(5)]);
        let run = c.get_clean_run(TierId(1), PhysBlock(10), 8);
        assert_eq!(run.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(
            c.get_clean_run(TierId(1), PhysBlock(11), 1).len(),
            1,
            "max bounds the run"
        );
        assert!(
            c.get_clean_run(TierId(1), PhysBlock(13), 4).is_empty(),
            "a miss first: nothing"
        );
        assert!(
            c.get_clean_run(TierId(2), PhysBlock(10), 4).is_empty(),
            "another tier's blocks"
        );
        assert_eq!(c.stats().hits, 4);
    }
}
