//! NVMFS (§III): the adaptive dirty/clean split of PM, the dirty list's
//! flush to clean copies, and the hit counters that drive the split.

use super::*;

impl Fs {
    /// PM blocks holding clean data (with a copy on a block tier) and dirty
    /// data (PM only); (0, 0) on a pool without block tiers. The running
    /// totals, O(1).
    pub(crate) fn pm_clean_dirty(&self) -> (u64, u64) {
        if self.tiers.is_empty() {
            return (0, 0);
        }
        let m = &self.migrator;
        (
            m.pm_clean_blocks.load(Ordering::Relaxed),
            m.pm_dirty_blocks.load(Ordering::Relaxed),
        )
    }

    /// Adds the change of one inode's PM split (`before` → `after`, as its
    /// `ExtentMap::pm_clean_dirty` gives them around a change of its
    /// extents, under its lock) to the pool's totals.
    pub(crate) fn note_pm_split_change(&self, before: (u64, u64), after: (u64, u64)) {
        let m = &self.migrator;
        if after != before {
            // Two's complement: a decrease wraps back, totals never go negative.
            m.pm_clean_blocks
                .fetch_add(after.0.wrapping_sub(before.0), Ordering::Relaxed);
            m.pm_dirty_blocks
                .fetch_add(after.1.wrapping_sub(before.1), Ordering::Relaxed);
        }
    }

    /// Sets the running totals from a scan of the inode table (at mount,
    /// once every inode is in DRAM).
    pub(crate) fn reset_pm_split(&self) {
        let (clean, dirty) = self.scan_pm_clean_dirty();
        self.migrator
            .pm_clean_blocks
            .store(clean, Ordering::Relaxed);
        self.migrator
            .pm_dirty_blocks
            .store(dirty, Ordering::Relaxed);
    }

    /// [`Fs::pm_clean_dirty`]'s totals counted afresh: one lock per inode
    /// slot (whatever the tiers).
    pub(crate) fn scan_pm_clean_dirty(&self) -> (u64, u64) {
        let (mut clean, mut dirty) = (0, 0);
        self.migrator.split_scans.fetch_add(1, Ordering::Relaxed);
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
    pub(super) fn nvmfs_flush(
        &self,
        to: TierId,
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
            // Feed this window's hits (scaled down as they always were; only
            // their ratio matters).
            let mut c = m.window_clean_hits.swap(0, Ordering::Relaxed);
            let mut d = m.window_dirty_hits.swap(0, Ordering::Relaxed);
            while c + d > 10_000 {
                c /= 2;
                d /= 2;
            }
            sp.on_hits(PageKind::Clean, c);
            sp.on_hits(PageKind::Dirty, d);
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
    pub(super) fn pm_dirty_runs(&self) -> Vec<terrace_policy::nvmfs::DirtyRun> {
        let mut out = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            if i.extents.pm_clean_dirty().1 == 0 || self.rule_of(i) == Some(TierId::PM) {
                continue;
            }
            out.extend(
                i.extents
                    .iter()
                    .filter(|(_, e)| e.tier.is_pm() && e.copy.is_none())
                    .map(|(fb, e)| terrace_policy::nvmfs::DirtyRun {
                        ino: i.ino,
                        file_block: fb.get(),
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
    pub(super) fn copy_runs(
        &self,
        runs: &[terrace_policy::nvmfs::PageRun],
        to: TierId,
        unit: u64,
    ) -> u64 {
        let total: u64 = runs.iter().map(|r| r.blocks * BS).sum();
        let window = (total / 4).max(unit * BS).min(MOVE_SYNC_WINDOW_BYTES);
        let mut batch = MoveBatch::new(self, window);
        'files: for file in runs.chunk_by(|a, b| a.ino == b.ino) {
            if self.migrator.worker.stopping() {
                break;
            }
            let entries: Vec<EntrySnapshot> = file
                .iter()
                .map(|r| EntrySnapshot {
                    file_block: r.file_block,
                    blocks: r.blocks,
                    mtime_ns: 0,
                    tier: TierId::PM,
                })
                .collect();
            for group in mig::batch_groups(&mig::group_entries(&entries, unit), unit) {
                let ranges: Vec<(FileBlock, u64)> = group
                    .iter()
                    .map(|g| (FileBlock(g.file_block), g.blocks))
                    .collect();
                if batch
                    .add(file[0].ino, TierId::PM, to, &ranges, Mode::Copy)
                    .is_err()
                {
                    // Target full or failing: try again next pass.
                    break 'files;
                }
            }
        }
        batch.finish().0
    }

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
