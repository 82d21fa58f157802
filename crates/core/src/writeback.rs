//! Write-back of the DRAM cache's dirty pages (see [`crate::cache`] for the
//! invariants): which pages go together (whole writes, oldest first), the
//! transaction that writes them to fresh blocks, syncs and commits them, and
//! the write-back thread.

use crate::data::DataRuns;
use crate::fs::Fs;
use crate::inode::DirtyPage;
use crate::types::{FsResult, Ino};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{Entry, FileBlock, PhysBlock, TierId, WriteEntry, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

/// Bytes of a write-back's pages copied and written at a time
/// ([`Fs::store_pages`]): four huge pages, so the pooled buffer is reused
/// by every write-back, and each device request is still large.
const WRITEBACK_WINDOW_BYTES: usize = 8 << 20;

/// Most bytes a write-back under cache pressure writes at a time
/// ([`Fs::flush_inode_part`]); parts are an eighth of the cache bound, at
/// least 64 KiB, at most this.
pub const WRITEBACK_PART_BYTES: u64 = 16 << 20;

/// Longest a write-back waits for migration to make room above an object
/// tier before its pages spill into one ([`Fs::alloc_write_back`]).
pub const OBJECT_SPILL_WAIT: Duration = Duration::from_secs(1);

/// The dirty pages of the oldest cached writes of a file, in page order:
/// at least `max_pages` pages when the file has that many, and exactly the
/// pages of every write up to some sequence number `c` — a page is taken iff
/// the oldest write it holds is at most `c`, and then every write it holds is
/// at most `c` too. Committing them therefore applies a prefix of the file's
/// cached writes, each write whole (a crash shows a prefix of its writes).
fn oldest_writes(
    dirty: &BTreeMap<FileBlock, DirtyPage>,
    max_pages: u64,
) -> Vec<(FileBlock, DirtyPage)> {
    if dirty.len() as u64 <= max_pages {
        return dirty.iter().map(|(k, v)| (*k, v.clone())).collect();
    }
    let mut by_age: Vec<(FileBlock, &DirtyPage)> = dirty.iter().map(|(k, v)| (*k, v)).collect();
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
    let mut out: Vec<(FileBlock, DirtyPage)> = by_age[..taken]
        .iter()
        .map(|(fb, p)| (*fb, (*p).clone()))
        .collect();
    out.sort_by_key(|(fb, _)| *fb);
    out
}

/// Pages written back to consecutive blocks of one tier: (tier, first block,
/// page contents), kept as clean copies.
type CleanRun = (TierId, PhysBlock, Vec<Arc<[u8]>>);

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
    /// Locks `ino` with no dirty pages, writing them back first if needed.
    pub(crate) fn lock_clean(&self, ino: Ino) -> FsResult<crate::table::Slot<'_>> {
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
    pub(crate) fn writeback_part(&self) -> u64 {
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

    /// Writes `pages` (a write-back's, in page order) to the blocks of
    /// `pieces` and syncs their block tiers. When the device fails, the
    /// pages go to PM instead if it has room; else the error goes to the
    /// caller and the pages stay dirty. Returns where the pages are; every
    /// block not kept is released.
    fn store_write_back(
        &self,
        pieces: Vec<DataRuns>,
        pages: &[(FileBlock, DirtyPage)],
    ) -> FsResult<Vec<DataRuns>> {
        let n = pages.len() as u64;
        let e = match self.store_pages(&pieces, pages) {
            Ok(()) => return Ok(pieces),
            Err(e) => e,
        };
        let only_pm = pieces.iter().all(|d| d.tier.is_pm());
        for d in pieces {
            self.release_data(d);
        }
        if only_pm || self.pm_data_free_bytes() < n * BS {
            return Err(e);
        }
        let d = self.alloc_data_on(TierId::PM, n)?;
        if !d.tier.is_pm() {
            self.release_data(d);
            return Err(e);
        }
        let d = vec![d];
        if let Err(e) = self.store_pages(&d, pages) {
            for d in d {
                self.release_data(d);
            }
            return Err(e);
        }
        Ok(d)
    }

    /// [`Fs::store_pieces`] for the pages of a write-back: the k-th page
    /// goes to the k-th block of `pieces`. The pages are copied into one
    /// pooled, block-aligned buffer (O_DIRECT takes it without a bounce
    /// copy) at most [`WRITEBACK_WINDOW_BYTES`] at a time, each window
    /// written with one request per run in it. A buffer of the whole
    /// write-back was a fresh mapping, faulted in and zeroed, whenever it
    /// was larger than any pooled one: an `fsync` after a 1.5 GiB `dd`
    /// spent more time zeroing it than writing. An object tier's piece
    /// still goes in one buffer: each write to it makes an object.
    fn store_pages(&self, pieces: &[DataRuns], pages: &[(FileBlock, DirtyPage)]) -> FsResult<()> {
        let copy = |buf: &mut [u8], from: &[(FileBlock, DirtyPage)]| {
            for (k, (_, p)) in from.iter().enumerate() {
                buf[k * BS as usize..(k + 1) * BS as usize].copy_from_slice(&p.data);
            }
        };
        let window = WRITEBACK_WINDOW_BYTES as u64 / BS;
        let mut at = 0usize;
        for d in pieces {
            let blocks: u64 = d.runs.iter().map(|r| r.1).sum();
            let len = (blocks * BS) as usize;
            if self.is_object_tier(d.tier) {
                let mut buf = self.migrator.take_pooled(len);
                copy(&mut buf, &pages[at..at + blocks as usize]);
                self.write_data_unsynced(d, &buf[..len])?;
                at += blocks as usize;
                continue;
            }
            let mut buf = self
                .migrator
                .take_pooled((blocks.min(window) * BS) as usize);
            for &(b, n) in &d.runs {
                let mut done = 0u64;
                while done < n {
                    let m = (n - done).min(window);
                    let bytes = (m * BS) as usize;
                    copy(&mut buf, &pages[at..at + m as usize]);
                    let part = DataRuns {
                        tier: d.tier,
                        runs: vec![(b + done, m)],
                    };
                    self.write_data_unsynced(&part, &buf[..bytes])?;
                    at += m as usize;
                    done += m;
                }
            }
        }
        self.sync_tiers_of(pieces)
    }

    /// Blocks for a write-back of `n` pages that want tier `want`
    /// ([`Fs::alloc_data_spread`]). Pages that would spill into an object
    /// tier because the block tiers are short of room make an upload — an
    /// object — of their own, usually far smaller than a migration's
    /// (measured: a quarter of a cascade's bytes in objects of ~0.7 MiB).
    /// While migration drains into the object tier, room above it is on its
    /// way: this waits for windows of moves to end, up to
    /// [`OBJECT_SPILL_WAIT`], and then spreads whatever the tiers hold.
    fn alloc_write_back(&self, want: TierId, n: u64) -> FsResult<Vec<DataRuns>> {
        let deadline = Instant::now() + OBJECT_SPILL_WAIT;
        loop {
            if self.block_room_blocks() >= n
                || self.is_object_tier(want)
                || Instant::now() >= deadline
                || !self.draining_into_object_tier()
            {
                // Pages accepted into the cache were promised their blocks,
                // but foreground log pages take PM blocks without asking
                // (down to the reserve), so a promise counted on PM can come
                // up short by a few blocks: acknowledged data then goes into
                // the metadata reserve rather than fail its write-back.
                let floor = self.pm_reserve_blocks();
                return self
                    .alloc_data_spread(want, n, floor)
                    .or_else(|_| self.alloc_data_spread(want, n, 0));
            }
            let before = self.migrator.move_windows_done.load(Ordering::Relaxed);
            self.kick_migration();
            let waited = Instant::now();
            while self.migrator.move_windows_done.load(Ordering::Relaxed) == before
                && waited.elapsed() < Duration::from_millis(50)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Tells the cache that `ino` has no dirty pages (any more), checked
    /// under its slot's lock: a file created in the slot since the caller
    /// looked, and written, must stay known as dirty.
    fn forget_dirty_file_if_clean(&self, ino: Ino) {
        let Some(slot) = self.table.get(ino) else {
            self.cache.drop_dirty(ino, 0, true);
            return;
        };
        let g = slot.lock();
        if g.as_ref().map_or(true, |i| i.dirty.is_empty()) {
            self.cache.drop_dirty(ino, 0, true);
        }
    }

    /// One try of [`Fs::flush_inode_part`]: ENOSPC when the tiers lack the
    /// blocks right now.
    pub(crate) fn write_back_part(&self, ino: Ino, max_bytes: u64) -> FsResult<()> {
        let wb = self.cache.writeback_lock(ino);
        let (pages, size, mtime, rule, generation, whole) = {
            let Ok(mut g) = self.lock(ino) else {
                // Deleted: its pages went with it — unless its slot holds a
                // new file already, with pages of its own.
                self.forget_dirty_file_if_clean(ino);
                return Ok(());
            };
            let i = g.as_mut().expect("live");
            if i.dirty.is_empty() {
                self.cache.drop_dirty(ino, 0, true);
                return Ok(());
            }
            let pages = oldest_writes(&i.dirty, max_bytes / BS);
            let size = pages.iter().map(|(_, p)| p.end).max().unwrap_or(0);
            let mtime = pages.iter().map(|(_, p)| p.mtime).max().unwrap_or(0);
            let whole = pages.len() == i.dirty.len();
            i.wb_in_flight = pages.iter().map(|(fb, p)| (*fb, p.seq)).collect();
            (pages, size, mtime, self.rule_of(i), i.generation, whole)
        };
        // Until the commit, any end of this write-back gives the in-flight
        // pages back (`Inode::wb_in_flight`).
        let in_flight = InFlightPages {
            fs: self,
            ino,
            generation,
            armed: true,
        };
        let n = pages.len() as u64;
        // The file's pinned block tier (rules), else the first block tier.
        let want = match rule {
            Some(t) if !t.is_pm() => t,
            _ => self.tiers.first().map_or(TierId::PM, |t| t.id),
        };
        // These pages hold their room while dirty; the blocks taken for them
        // now must not count twice until the commit drops them from the cache.
        let _inflight = InflightBlocks::new(&self.wb_inflight_blocks, n);
        // Usually one piece on `want`; near a full pool the pages may be
        // spread over several tiers (each page was promised a block, not a
        // tier). They all commit together, so the writes stay whole. Blocks
        // first, pages copied after: a write-back that finds none (a full
        // device waiting, `device_full.rs`) costs no copy.
        let pieces = self.alloc_write_back(want, n)?;
        let pieces = self.store_write_back(pieces, &pages)?;
        let release = |pieces: Vec<DataRuns>| {
            for d in pieces {
                self.release_data(d);
            }
        };
        // Tier and physical block of each page, in page order.
        let mut phys: Vec<(TierId, PhysBlock)> = Vec::with_capacity(n as usize);
        for d in &pieces {
            for &(b, k) in &d.runs {
                phys.extend((0..k).map(|x| (d.tier, b + x)));
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
        if i.generation != generation || i.zombie {
            // The file was deleted (its pages discarded) during the
            // write-back: its slot reused by another file, or kept only for
            // the kernel's references (a zombie, whose space was released
            // already: blocks committed to it now would never be freed).
            // Nothing here is its.
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
            in_flight.give_back();
            if !whole && e.raw_os_error() == Some(libc::ENOSPC) {
                drop(wb);
                return self.write_back_part(ino, u64::MAX);
            }
            return Err(e);
        }
        // The commit point has passed: the pages are in the log. Pages
        // rewritten since they were taken stay dirty; the older content
        // each was counted for now holds its block.
        let mut in_flight = in_flight;
        in_flight.armed = false;
        let mut done = std::mem::take(&mut i.dirty_extra);
        i.wb_in_flight.clear();
        let mut clean_runs: Vec<CleanRun> = Vec::new();
        for (k, (fb, p)) in pages.into_iter().enumerate() {
            if i.dirty.get(&fb).is_some_and(|q| q.seq == p.seq) {
                i.dirty.remove(&fb);
                done += 1;
            }
            let (tier, block) = phys[k];
            if !tier.is_pm() {
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
        // Under the inode lock too: a write that takes the lock after this
        // one adds pages the cache must know of, and "none left" said after
        // it would make them never written back — not even at unmount.
        self.cache.drop_dirty(ino, done, all);
        drop(g);
        let requests: u64 = pieces.iter().map(|d| d.runs.len() as u64).sum();
        self.cache.note_writeback(n * BS, requests);
        Ok(())
    }

    /// Syncs each block tier `pieces` were written to, once.
    fn sync_tiers_of(&self, pieces: &[DataRuns]) -> FsResult<()> {
        let mut synced: Vec<TierId> = Vec::new();
        for d in pieces {
            if !d.tier.is_pm() && !synced.contains(&d.tier) {
                self.sync_tier(d.tier)?;
                synced.push(d.tier);
            }
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
        self.sync_tiers_of(pieces)
    }

    /// `terrace sync`: writes back every file with dirty pages
    /// ([`Fs::flush_all`]); returns the bytes of cached data that were dirty
    /// when it began.
    pub fn sync_cached(&self) -> FsResult<u64> {
        let dirty = self.cache.dirty_bytes();
        self.flush_all().map(|()| dirty)
    }

    /// Writes back every file with dirty pages.
    pub fn flush_all(&self) -> FsResult<()> {
        let files = self.cache.dirty_files();
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
        if self.is_frozen() {
            return;
        }
        self.recheck_full_devices();
        let (age, pct) = {
            let st = self.settings.read();
            (st.writeback_age_ns, st.writeback_dirty_percent as u64)
        };
        let high = self.cache.bound() * pct / 100;
        let low = high / 2;
        let mut over = self.cache.dirty_bytes() > high;
        // Files whose write-back failed in this pass: left dirty (the error
        // reaches their applications at fsync) and passed over, so one file
        // that cannot be written back (a device error, its rule's tier
        // full) does not stop every other file's write-back behind it.
        let mut failed: Vec<Ino> = Vec::new();
        loop {
            let victim = {
                let (oldest, dirty) = self.cache.oldest_dirty_file(&failed);
                if dirty <= low {
                    over = false;
                }
                match oldest {
                    Some((ino, t))
                        if over
                            || t >= Duration::from_nanos(age)
                            || self.promises_hold_metadata_room() =>
                    {
                        Some(ino)
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
                // Tried again on a later pass, not in this one (no spin).
                failed.push(ino);
            }
            if self.cache.worker.stopping() {
                break;
            }
        }
    }

    /// Whether the log room promised to dirty cached pages is what keeps PM
    /// short of room for metadata (free blocks beyond the promises under
    /// the metadata reserve, `space.rs`): then young dirty files are written
    /// back too, oldest first, since each one written back whole gives its
    /// promise back. Without it, creates of small files on a PM that holds
    /// only data migration may not move (pinned to PM) waited for the
    /// write-back age, seconds each.
    fn promises_hold_metadata_room(&self) -> bool {
        !self.tiers.is_empty()
            && self.promised_blocks() > 0
            && self.pm_free_unpromised() < self.pm_reserve_blocks()
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

/// The pages a write-back took (`Inode::wb_in_flight`), given back when it
/// ends without its commit: the marks go, and each page rewritten
/// meanwhile, counted twice in the cache (`Inode::dirty_extra`), once
/// again — unless the file was freed meanwhile, which dropped them all.
struct InFlightPages<'a> {
    fs: &'a Fs,
    ino: Ino,
    generation: u32,
    armed: bool,
}

impl InFlightPages<'_> {
    /// Gives the pages back now (before a write-back tried again).
    fn give_back(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        let Ok(mut g) = self.fs.lock(self.ino) else {
            return;
        };
        let Some(i) = g.as_mut() else { return };
        if i.generation != self.generation {
            return;
        }
        i.wb_in_flight.clear();
        let extra = std::mem::take(&mut i.dirty_extra);
        if extra > 0 {
            self.fs.cache.drop_dirty(self.ino, extra, false);
        }
    }
}

impl Drop for InFlightPages<'_> {
    fn drop(&mut self) {
        self.release();
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

    fn blocks(v: &[(FileBlock, DirtyPage)]) -> Vec<u64> {
        v.iter().map(|(fb, _)| fb.get()).collect()
    }

    #[test]
    fn a_part_of_a_sequential_stream_is_its_oldest_writes() {
        // Ten one-page writes, page k by write k + 1.
        let dirty: BTreeMap<FileBlock, DirtyPage> = (0..10)
            .map(|k| (FileBlock(k), page(k + 1, k + 1)))
            .collect();
        assert_eq!(blocks(&oldest_writes(&dirty, 4)), vec![0, 1, 2, 3]);
        assert_eq!(oldest_writes(&dirty, 100).len(), 10);
    }

    #[test]
    fn a_write_is_never_split_across_parts() {
        // Write 1 covers pages 5..8; a part of two pages takes all four.
        let dirty: BTreeMap<FileBlock, DirtyPage> = (5..9)
            .map(|k| (FileBlock(k), page(1, 1)))
            .chain([(FileBlock(0), page(2, 2))])
            .collect();
        assert_eq!(blocks(&oldest_writes(&dirty, 2)), vec![5, 6, 7, 8]);
    }

    #[test]
    fn a_page_rewritten_later_pulls_the_later_writes_in() {
        // Page 0 holds writes 1 and 5; pages 1..4 hold writes 2..5 (page 4:
        // write 5 too); page 9 holds write 6. The oldest write forces
        // everything up to write 5 into the part, but not write 6.
        let mut dirty: BTreeMap<FileBlock, DirtyPage> = BTreeMap::new();
        dirty.insert(FileBlock(0), page(1, 5));
        for k in 1..4 {
            dirty.insert(FileBlock(k), page(k + 1, k + 1));
        }
        dirty.insert(FileBlock(4), page(5, 5));
        dirty.insert(FileBlock(9), page(6, 6));
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
