//! The DRAM page cache in front of the block tiers (Ziggurat §3, NVMFS §III-D).
//!
//! Two kinds of pages share one byte bound (`dram_cache_bytes`):
//!
//! - **Dirty pages** belong to a file: writes the placement policy steers to a
//!   block tier (large and asynchronous, or any asynchronous write while PM is
//!   full) are copied into 4 KiB pages kept in the inode ([`Inode::dirty`]),
//!   keyed by file page. They are the newest content of those pages and are not
//!   yet in the file's log. Write-back ([`Fs::flush_inode`]) allocates fresh,
//!   consecutive blocks on the block tier for all of a file's dirty pages,
//!   writes each physically contiguous run as one request (so random page
//!   writes become one sequential request, as NVMFS's non-overwrite extents
//!   intend), syncs the device, and only then commits the write entries — one
//!   commit for the whole batch.
//! - **Clean pages** are copies of block-tier blocks, keyed by physical address
//!   `(tier, block)`. Block tiers are written non-overwrite, so a block's
//!   content never changes while it is allocated: a clean page never goes stale,
//!   and it is dropped when its block is freed ([`Fs::free_runs`]). Reads that
//!   miss read the rest of the write entry they fall in, up to
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
//!   The write-back commits only if the inode's generation is unchanged: a
//!   file deleted during its write-back may have its slot reused by another.

use crate::data::DataRuns;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::types::{errno, FsResult, Ino};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{Entry, WriteEntry, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;
const WB_STRIPES: usize = 64;

/// One dirty page of a file.
#[derive(Clone)]
pub struct DirtyPage {
    /// The page's bytes (`BLOCK_SIZE`); replaced, never changed in place.
    pub data: Arc<[u8]>,
    /// Global sequence number of the write that produced this content.
    pub seq: u64,
    /// Sequence number of the oldest write whose bytes this page holds (the
    /// page absorbed every cached write to it from `first_seq` to `seq`).
    pub first_seq: u64,
    /// End offset (bytes) of the furthest-reaching write this page absorbed:
    /// the file size those writes imply.
    pub end: u64,
    /// Time of the newest write this page absorbed.
    pub mtime: i64,
    /// Write-size predictor counter of that write.
    pub counter: u8,
}

impl std::fmt::Debug for DirtyPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DirtyPage(seq {}, counter {})", self.seq, self.counter)
    }
}

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
    pages: BTreeMap<(u8, u64), CleanPage>,
    /// LRU order of clean pages.
    lru: BTreeMap<u64, (u8, u64)>,
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
    fn touch(&mut self, key: (u8, u64)) -> Option<Arc<[u8]>> {
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
    /// The write-back thread ([`crate::worker`]).
    worker: crate::worker::Worker,
}

impl PageCache {
    /// An empty cache of `bound` bytes.
    pub fn new(bound: u64) -> PageCache {
        PageCache {
            state: Mutex::new(State::default()),
            promise_bytes: AtomicU64::new(0),
            bound: AtomicU64::new(bound),
            seq: AtomicU64::new(1),
            wb_locks: (0..WB_STRIPES).map(|_| Mutex::new(())).collect(),
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

    /// Clean copy of block `(tier, block)`, if cached.
    pub(crate) fn get_clean(&self, tier: u8, block: u64) -> Option<Arc<[u8]>> {
        let mut s = self.state.lock();
        let r = s.touch((tier, block));
        if r.is_some() {
            s.stats.hits += 1;
        }
        r
    }

    /// Inserts clean copies of consecutive blocks from `first`, evicting LRU
    /// clean pages for room; pages that do not fit are not cached.
    pub(crate) fn put_clean(&self, tier: u8, first: u64, pages: Vec<Arc<[u8]>>) {
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
    pub(crate) fn invalidate(&self, tier: u8, block: u64, n: u64) {
        let mut s = self.state.lock();
        if s.pages.is_empty() {
            return;
        }
        let keys: Vec<((u8, u64), u64)> = s
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

    /// Turns `reserved` reserved bytes into dirty bytes of `ino`: `added` new
    /// dirty pages, `replaced` dirty pages overwritten.
    fn commit_reservation(&self, ino: Ino, reserved: u64, added: u64) {
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
    fn drop_dirty(&self, ino: Ino, n: u64, all: bool) {
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

/// Most bytes a write-back under cache pressure writes at a time
/// ([`Fs::flush_inode_part`]); parts are an eighth of the cache bound, at
/// least 64 KiB, at most this.
pub const WRITEBACK_PART_BYTES: u64 = 16 << 20;

/// The dirty pages of the oldest cached writes of a file, in page order:
/// at least `max_pages` pages when the file has that many, and exactly the
/// pages of every write up to some sequence number `c` — a page is taken iff
/// the oldest write it holds is at most `c`, and then every write it holds is
/// at most `c` too. Committing them therefore applies a prefix of the file's
/// cached writes, each write whole (a crash shows a prefix of its writes).
fn oldest_writes(dirty: &BTreeMap<u64, DirtyPage>, max_pages: u64) -> Vec<(u64, DirtyPage)> {
    if dirty.len() as u64 <= max_pages {
        return dirty.iter().map(|(k, v)| (*k, v.clone())).collect();
    }
    let mut by_age: Vec<(u64, &DirtyPage)> = dirty.iter().map(|(k, v)| (*k, v)).collect();
    by_age.sort_by_key(|(fb, p)| (p.first_seq, *fb));
    let mut cut = 0u64;
    let mut taken = 0usize;
    for (k, (_, p)) in by_age.iter().enumerate() {
        if k as u64 >= max_pages && p.first_seq > cut {
            break;
        }
        cut = cut.max(p.seq);
        taken = k + 1;
    }
    let mut out: Vec<(u64, DirtyPage)> = by_age[..taken]
        .iter()
        .map(|(fb, p)| (*fb, (*p).clone()))
        .collect();
    out.sort_by_key(|(fb, _)| *fb);
    out
}

/// Pages written back to consecutive blocks of one tier: (tier, first block,
/// page contents), kept as clean copies.
type CleanRun = (u8, u64, Vec<Arc<[u8]>>);

/// Blocks a write-back holds for pages still counted dirty; released when
/// the write-back ends (its pages committed and dropped, or it failed).
struct InflightBlocks<'a> {
    counter: &'a std::sync::atomic::AtomicU64,
    n: u64,
}

impl<'a> InflightBlocks<'a> {
    fn new(counter: &'a std::sync::atomic::AtomicU64, n: u64) -> Self {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        InflightBlocks { counter, n }
    }
}

impl Drop for InflightBlocks<'_> {
    fn drop(&mut self) {
        self.counter
            .fetch_sub(self.n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Fs {
    /// The page cache.
    pub fn cache(&self) -> &PageCache {
        &self.cache
    }

    /// Reserves room for `bytes` of dirty pages, writing back and evicting
    /// until it fits. `false` when the data can never fit (larger than the
    /// bound): the caller writes it through instead.
    pub(crate) fn cache_reserve(&self, bytes: u64) -> FsResult<bool> {
        let mut tries = 0u32;
        loop {
            let bound = self.cache.bound();
            if bytes > bound / 2 {
                self.cache.state.lock().stats.bypassed_writes += 1;
                return Ok(false);
            }
            let victim = {
                let mut s = self.cache.state.lock();
                while s.used() + bytes > bound && s.evict_one() {}
                if s.used() + bytes <= bound {
                    s.reserved += bytes;
                    s.note_peak();
                    return Ok(true);
                }
                // Only dirty pages (and other writers' reservations) are left:
                // write back the file dirty longest, ours included.
                s.dirty_files
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(i, _)| *i)
            };
            match victim {
                Some(v) => {
                    // A write-back that fails (device error, every tier
                    // full) fails this write too rather than overfill the
                    // cache.
                    self.flush_inode_part(v, self.writeback_part())?;
                }
                None => {
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            if tries > 50_000 {
                // Ten seconds without room: other writers hold it all.
                return Err(errno(libc::EAGAIN));
            }
        }
    }

    /// Returns a reservation that was not used.
    pub(crate) fn cache_unreserve(&self, bytes: u64) {
        self.cache.state.lock().reserved -= bytes;
    }

    /// Copies `data` at `off` into dirty pages of the locked inode `i` (the
    /// caller reserved `reserved` bytes, enough for every page of the range).
    pub(crate) fn write_cached(
        &self,
        i: &mut Inode,
        off: u64,
        data: &[u8],
        counter: u8,
        now: i64,
        reserved: u64,
    ) -> FsResult<()> {
        // A file whose log migration moved to a block tier gets it back on
        // PM first, so the promise below is for an ordinary PM log and the
        // write-back commit never has to recall (ENOSPC here, not later).
        self.recall_log(i, false)?;
        let end = off + data.len() as u64;
        let fb0 = off / BS;
        let fb1 = (end - 1) / BS;
        let seq = self.cache.next_seq();
        let mut added = 0u64;
        let mut fresh: Vec<(u64, DirtyPage)> = Vec::with_capacity((fb1 - fb0 + 1) as usize);
        for fb in fb0..=fb1 {
            let pstart = fb * BS;
            let from = off.max(pstart);
            let to = end.min(pstart + BS);
            let mut page: Vec<u8> = if from == pstart && to == pstart + BS {
                Vec::with_capacity(BS as usize)
            } else {
                let mut old = self.read_locked(i, pstart, BS as usize)?;
                old.resize(BS as usize, 0);
                old
            };
            let src = &data[(from - off) as usize..(to - off) as usize];
            if page.is_empty() {
                page.extend_from_slice(src);
            } else {
                page[(from - pstart) as usize..(to - pstart) as usize].copy_from_slice(src);
            }
            fresh.push((
                fb,
                DirtyPage {
                    data: page.into(),
                    seq,
                    first_seq: seq,
                    end,
                    mtime: now,
                    counter,
                },
            ));
        }
        // Each page not already dirty will need a block at write-back: claim
        // the room now (ENOSPC here, not a lost write later).
        let new_pages = fresh
            .iter()
            .filter(|(fb, _)| !i.dirty.contains_key(fb))
            .count() as u64;
        if i.dirty.is_empty() {
            i.dirty_runs = 0;
        }
        let runs = if new_pages > 0 {
            i.dirty_runs + 1
        } else {
            i.dirty_runs
        };
        let promise =
            crate::space::writeback_log_bytes(&i.log, runs, i.dirty.len() as u64 + new_pages);
        let _room = self.room_lock.lock();
        self.check_room(new_pages)?;
        self.check_log_promise(i.ino, promise)?;
        self.cache.set_log_promise(i.ino, promise);
        i.dirty_runs = runs;
        // Nothing fails from here on: the write is all in, or not at all.
        let visible = i.size();
        for (fb, mut p) in fresh {
            match i.dirty.get(&fb) {
                Some(old) => {
                    // The page absorbs this write: it now carries every
                    // cached write to it since the oldest.
                    p.first_seq = old.first_seq;
                    p.end = p.end.max(old.end);
                    i.dirty.insert(fb, p);
                }
                None => {
                    i.dirty.insert(fb, p);
                    added += 1;
                }
            }
        }
        i.cached_size = visible.max(end);
        i.cached_mtime = now;
        self.cache.commit_reservation(i.ino, reserved, added);
        Ok(())
    }

    /// Locks `ino` with no dirty pages, writing them back first if needed.
    pub(crate) fn lock_clean(&self, ino: Ino) -> FsResult<crate::fs::Slot<'_>> {
        loop {
            let g = self.lock(ino)?;
            if g.as_ref().map_or(true, |i| i.dirty.is_empty()) {
                return Ok(g);
            }
            drop(g);
            self.flush_inode(ino)?;
        }
    }

    /// Writes back all dirty pages of `ino` and commits them (one commit). A
    /// no-op for a file without dirty pages.
    pub fn flush_inode(&self, ino: Ino) -> FsResult<()> {
        self.flush_inode_part(ino, u64::MAX)
    }

    /// Bytes of one write-back part (see [`WRITEBACK_PART_BYTES`]).
    fn writeback_part(&self) -> u64 {
        (self.cache.bound() / 8).clamp(64 << 10, WRITEBACK_PART_BYTES)
    }

    /// Writes back the oldest writes of `ino` — about `max_bytes` of pages,
    /// more when needed to keep whole writes (see [`oldest_writes`]) — with
    /// one request per contiguous run, one sync and one commit. Write-back
    /// under cache pressure goes in such parts, so a writer that waits for
    /// room waits for one part, not for the whole file, and the device works
    /// while the writer fills the cache again.
    ///
    /// The pages were promised their blocks ([`Fs::data_room_blocks`]), but a
    /// move in flight holds blocks on two tiers until its commit and may
    /// hold some of them: a write-back short of room waits for such moves
    /// and drops clean PM copies, then tries again
    /// ([`Fs::retry_freeing_room`]), rather than fail an fsync with ENOSPC.
    /// Called with no lock held; not by a thread that holds uncommitted
    /// moves of its own (it would wait for itself): that one calls
    /// [`Fs::write_back_part`] and commits its moves first.
    pub(crate) fn flush_inode_part(&self, ino: Ino, max_bytes: u64) -> FsResult<()> {
        let blocks = (max_bytes / BS).min(self.cache.dirty_blocks()).max(1);
        self.retry_freeing_room(blocks, || self.write_back_part(ino, max_bytes))
    }

    /// Writes `buf` (the pages of a write-back, in page order) to the blocks
    /// of `pieces`, unsynced. When the device fails, the pages go to PM
    /// instead if it has room; else the error goes to the caller and the
    /// pages stay dirty. Returns where the pages are; every block not kept
    /// is released.
    fn store_write_back(&self, pieces: Vec<DataRuns>, buf: &[u8]) -> FsResult<Vec<DataRuns>> {
        let n = buf.len() as u64 / BS;
        let e = match self.store_pieces(&pieces, buf) {
            Ok(()) => return Ok(pieces),
            Err(e) => e,
        };
        let only_pm = pieces.iter().all(|d| d.tier == 0);
        for d in pieces {
            self.release_data(d);
        }
        if only_pm || self.pm_data_free_bytes() < n * BS {
            return Err(e);
        }
        let d = self.alloc_data_on(0, n)?;
        if d.tier != 0 {
            self.release_data(d);
            return Err(e);
        }
        if let Err(e) = self.store_data(&d, buf) {
            self.release_data(d);
            return Err(e);
        }
        Ok(vec![d])
    }

    /// One try of [`Fs::flush_inode_part`]: ENOSPC when the tiers lack the
    /// blocks right now.
    pub(crate) fn write_back_part(&self, ino: Ino, max_bytes: u64) -> FsResult<()> {
        let wb = self.cache.wb_locks[ino as usize % WB_STRIPES].lock();
        let (pages, size, mtime, rule, generation, whole) = {
            let Ok(g) = self.lock(ino) else {
                self.cache.drop_dirty(ino, 0, true);
                return Ok(());
            };
            let i = g.as_ref().expect("live");
            if i.dirty.is_empty() {
                self.cache.drop_dirty(ino, 0, true);
                return Ok(());
            }
            let pages = oldest_writes(&i.dirty, max_bytes / BS);
            let size = pages.iter().map(|(_, p)| p.end).max().unwrap_or(0);
            let mtime = pages.iter().map(|(_, p)| p.mtime).max().unwrap_or(0);
            let whole = pages.len() == i.dirty.len();
            (pages, size, mtime, self.rule_of(i), i.generation, whole)
        };
        let n = pages.len() as u64;
        // The file's pinned block tier (rules), else the first block tier.
        let want = match rule {
            Some(t) if t != 0 => t,
            _ => self.tiers.first().map(|t| t.id).unwrap_or(0),
        };
        // One block-aligned buffer in page order (O_DIRECT takes it without a
        // bounce copy; pooled with migration's); `store_data` writes each run
        // in one request.
        let mut pooled = self.migrator.take_pooled((n * BS) as usize);
        for (k, (_, p)) in pages.iter().enumerate() {
            pooled[k * BS as usize..(k + 1) * BS as usize].copy_from_slice(&p.data);
        }
        // These pages hold their room while dirty; the blocks taken for them
        // now must not count twice until the commit drops them from the cache.
        let _inflight = InflightBlocks::new(&self.wb_inflight_blocks, n);
        // Usually one piece on `want`; near a full pool the pages may be
        // spread over several tiers (each page was promised a block, not a
        // tier). They all commit together, so the writes stay whole.
        let pieces = self.alloc_data_spread(want, n)?;
        let pieces = self.store_write_back(pieces, &pooled[..(n * BS) as usize])?;
        let release = |pieces: Vec<DataRuns>| {
            for d in pieces {
                self.release_data(d);
            }
        };
        drop(pooled);
        // Tier and physical block of each page, in page order.
        let mut phys: Vec<(u8, u64)> = Vec::with_capacity(n as usize);
        for d in &pieces {
            for &(b, k) in &d.runs {
                phys.extend((b..b + k).map(|x| (d.tier, x)));
            }
        }
        let mut g = match self.lock(ino) {
            Ok(g) => g,
            Err(_) => {
                release(pieces);
                return Ok(());
            }
        };
        let i = g.as_mut().expect("live");
        if i.generation != generation {
            // The file was deleted (its pages discarded) and its slot reused
            // by another file during the write-back: nothing here is its.
            drop(g);
            release(pieces);
            return Ok(());
        }
        let size_after = i.attr.size.max(size);
        let mut entries: Vec<Entry> = Vec::new();
        let mut k = 0usize;
        while k < pages.len() {
            let (fb, ref p) = pages[k];
            let (tier, block) = phys[k];
            let mut len = 1usize;
            while k + len < pages.len()
                && pages[k + len].0 == fb + len as u64
                && phys[k + len] == (tier, block + len as u64)
                && pages[k + len].1.counter == p.counter
            {
                len += 1;
            }
            entries.push(Entry::Write(WriteEntry {
                file_block: fb,
                blocks: len as u32,
                tier,
                size_counter: p.counter,
                wflags: 0,
                block,
                size_after,
                mtime,
            }));
            k += len;
        }
        // The log room promised to this file covers a commit of all its
        // dirty pages (`space.rs`); a part of them may have more runs than
        // the whole, so a part may not take promised blocks. When it finds
        // no other room, the whole file goes in one commit instead.
        let committed_runs = entries.len() as u64;
        if let Err(e) = self.commit_one_in(i, entries, whole) {
            drop(g);
            release(pieces);
            if !whole && e.raw_os_error() == Some(libc::ENOSPC) {
                drop(wb);
                return self.write_back_part(ino, u64::MAX);
            }
            return Err(e);
        }
        // The commit point has passed: the pages are in the log.
        let mut done = 0u64;
        let mut clean_runs: Vec<CleanRun> = Vec::new();
        for (k, (fb, p)) in pages.into_iter().enumerate() {
            if i.dirty.get(&fb).is_some_and(|q| q.seq == p.seq) {
                i.dirty.remove(&fb);
                done += 1;
            }
            let (tier, block) = phys[k];
            if tier != 0 {
                match clean_runs.last_mut() {
                    Some((t, first, v)) if *t == tier && *first + v.len() as u64 == block => {
                        v.push(p.data)
                    }
                    _ => clean_runs.push((tier, block, vec![p.data])),
                }
            }
        }
        let all = i.dirty.is_empty();
        if !all {
            // Taking a part out of the dirty pages can split each remaining
            // run they touched in two: the file's run bound, and with it the
            // log room promised to its next write-back commit, grow by the
            // runs just committed (else, after many parts, the final commit
            // could need more room than was promised).
            i.dirty_runs += committed_runs;
            let promise =
                crate::space::writeback_log_bytes(&i.log, i.dirty_runs, i.dirty.len() as u64);
            let _room = self.room_lock.lock();
            self.cache.set_log_promise(ino, promise);
        }
        // Still under the inode lock: once it is released a rewrite may free
        // these blocks, and a clean copy inserted after that would outlive them.
        for (tier, first, v) in clean_runs {
            self.cache.put_clean(tier, first, v);
        }
        drop(g);
        self.cache.drop_dirty(ino, done, all);
        {
            let requests: u64 = pieces.iter().map(|d| d.runs.len() as u64).sum();
            let mut s = self.cache.state.lock();
            s.stats.writebacks += 1;
            s.stats.writeback_bytes += n * BS;
            s.stats.writeback_requests += requests;
        }
        Ok(())
    }

    /// Writes each piece's share of `buf` (in piece order) and syncs every
    /// block tier written, before anything may reference the blocks.
    pub(crate) fn store_pieces(&self, pieces: &[DataRuns], buf: &[u8]) -> FsResult<()> {
        let mut at = 0usize;
        for d in pieces {
            let len = (d.runs.iter().map(|r| r.1).sum::<u64>() * BS) as usize;
            self.write_data_unsynced(d, &buf[at..at + len])?;
            at += len;
        }
        let mut synced: Vec<u8> = Vec::new();
        for d in pieces {
            if d.tier != 0 && !synced.contains(&d.tier) {
                self.sync_tier(d.tier)?;
                synced.push(d.tier);
            }
        }
        Ok(())
    }

    /// Discards the dirty pages of an inode being freed.
    pub(crate) fn discard_dirty(&self, i: &mut Inode) {
        if i.dirty.is_empty() {
            return;
        }
        let n = i.dirty.len() as u64;
        i.dirty.clear();
        self.cache.drop_dirty(i.ino, n, true);
    }

    /// Writes back every file with dirty pages.
    pub fn flush_all(&self) -> FsResult<()> {
        let files: Vec<Ino> = self
            .cache
            .state
            .lock()
            .dirty_files
            .keys()
            .copied()
            .collect();
        let mut first_err = None;
        for ino in files {
            if let Err(e) = self.flush_inode(ino) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One pass of the write-back thread: write back files dirty longer than
    /// `writeback_age_ns`, and the oldest files while dirty data exceeds
    /// `writeback_dirty_percent` of the bound (down to half of that).
    pub fn writeback_pass(&self) {
        let (age, pct) = {
            let st = self.settings.read();
            (st.writeback_age_ns, st.writeback_dirty_percent as u64)
        };
        let high = self.cache.bound() * pct / 100;
        let low = high / 2;
        let mut over = self.cache.state.lock().dirty > high;
        loop {
            let victim = {
                let s = self.cache.state.lock();
                if s.dirty <= low {
                    over = false;
                }
                let oldest = s.dirty_files.iter().min_by_key(|(_, t)| **t);
                match oldest {
                    Some((ino, t)) if over || t.elapsed() >= Duration::from_nanos(age) => {
                        Some(*ino)
                    }
                    _ => None,
                }
            };
            let Some(ino) = victim else { break };
            // In parts while over the mark (writers keep filling meanwhile);
            // whole files when they are only old.
            let part = if over {
                self.writeback_part()
            } else {
                u64::MAX
            };
            if self.flush_inode_part(ino, part).is_err() {
                // Leave it dirty (the error reaches the application at fsync);
                // try again on a later pass rather than spin.
                break;
            }
            if self.cache.worker.stopping() {
                break;
            }
        }
    }

    /// Starts the write-back thread: a pass every 100 ms, or at once when
    /// dirty data passes the threshold; stops at [`Fs::unmount`].
    pub fn start_writeback(self: &Arc<Self>) {
        crate::worker::Worker::start(
            self,
            "terrace-writeback",
            Duration::from_millis(100),
            |fs| &fs.cache.worker,
            |fs| {
                fs.writeback_pass();
                // Never idle: a kick means dirty data passed the threshold.
                true
            },
        );
    }

    /// Stops the write-back thread (if running) and waits for it.
    pub(crate) fn stop_writeback(&self) {
        self.cache.worker.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(first_seq: u64, seq: u64) -> DirtyPage {
        DirtyPage {
            data: Arc::from(vec![0u8; BS as usize]),
            seq,
            first_seq,
            end: 0,
            mtime: 0,
            counter: 0,
        }
    }

    fn blocks(v: &[(u64, DirtyPage)]) -> Vec<u64> {
        v.iter().map(|(fb, _)| *fb).collect()
    }

    #[test]
    fn a_part_of_a_sequential_stream_is_its_oldest_writes() {
        // Ten one-page writes, page k by write k + 1.
        let dirty: BTreeMap<u64, DirtyPage> = (0..10).map(|k| (k, page(k + 1, k + 1))).collect();
        assert_eq!(blocks(&oldest_writes(&dirty, 4)), vec![0, 1, 2, 3]);
        assert_eq!(oldest_writes(&dirty, 100).len(), 10);
    }

    #[test]
    fn a_write_is_never_split_across_parts() {
        // Write 1 covers pages 5..8; a part of two pages takes all four.
        let dirty: BTreeMap<u64, DirtyPage> = (5..9)
            .map(|k| (k, page(1, 1)))
            .chain([(0, page(2, 2))])
            .collect();
        assert_eq!(blocks(&oldest_writes(&dirty, 2)), vec![5, 6, 7, 8]);
    }

    #[test]
    fn a_page_rewritten_later_pulls_the_later_writes_in() {
        // Page 0 holds writes 1 and 5; pages 1..4 hold writes 2..5 (page 4:
        // write 5 too); page 9 holds write 6. The oldest write forces
        // everything up to write 5 into the part, but not write 6.
        let mut dirty: BTreeMap<u64, DirtyPage> = BTreeMap::new();
        dirty.insert(0, page(1, 5));
        for k in 1..4 {
            dirty.insert(k, page(k + 1, k + 1));
        }
        dirty.insert(4, page(5, 5));
        dirty.insert(9, page(6, 6));
        assert_eq!(blocks(&oldest_writes(&dirty, 1)), vec![0, 1, 2, 3, 4]);
        // Every taken page holds only writes up to the cut; no page left
        // behind holds a write at or below it.
        let taken = oldest_writes(&dirty, 1);
        let cut = taken.iter().map(|(_, p)| p.seq).max().unwrap();
        assert!(dirty
            .iter()
            .filter(|(fb, _)| !taken.iter().any(|(t, _)| t == *fb))
            .all(|(_, p)| p.first_seq > cut));
    }
}
