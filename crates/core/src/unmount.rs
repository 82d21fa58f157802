//! Unmount: cached data written back (retrying while migration frees PM),
//! the background threads stopped, lazy access times stored, PM synced and
//! the superblock marked clean — in that order, so a pool marked clean holds
//! everything acknowledged. A freeze (`freeze.rs`) makes the
//! image clean the same way ([`Fs::persist_and_mark_clean`]) while the pool
//! stays mounted.

use crate::fs::Fs;
use std::sync::atomic::Ordering;

/// Passes of [`Fs::persist_cached`] that may fail with an error other
/// than ENOSPC before it gives up.
const PERSIST_TRIES: u32 = 3;

impl Fs {
    /// Persists everything and marks the pool cleanly unmounted. Idempotent.
    ///
    /// Cached data is written back first, while migration still runs (it
    /// may have to free PM for the commits: [`Fs::persist_cached`]). When
    /// that fails, nothing is marked and the error is returned: the pool is
    /// still mounted as far as the core is concerned, its cached data kept,
    /// and a later call tries again. Only a pool with nothing cached left is
    /// marked clean.
    pub fn unmount(&self) -> std::io::Result<()> {
        if self.unmounted.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.read_only || self.is_frozen() {
            // Nothing was written since mount (or since a freeze made the
            // pool clean) and nothing is: the pool stays as clean as it was.
            self.stop_migration();
            self.stop_writeback();
            self.unmounted.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.persist_and_mark_clean()?;
        self.unmounted.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// What a clean unmount (and a freeze, `freeze.rs`) persists: cached
    /// data, lazy access times, then the superblock marked clean, with the
    /// background threads stopped.
    pub(crate) fn persist_and_mark_clean(&self) -> std::io::Result<()> {
        self.persist_cached()?;
        self.stop_migration();
        self.stop_writeback();
        self.reclaim_reachable_object_tiers();
        self.persist_lazy_atimes();
        // Anything cached since (a last request in flight) goes too.
        self.flush_all()?;
        // And any file with dirty pages the cache's list of dirty files
        // does not name (it must name them all: a miss is a bug, said in
        // the log), so a clean mark never leaves acknowledged data behind.
        for ino in self.files_with_dirty_pages() {
            if !self.cache.dirty_files().contains(&ino) {
                self.notice(format!(
                    "BUG: inode {ino} had dirty pages the cache did not list; written back at unmount"
                ));
            }
            self.flush_inode(ino)?;
        }
        self.media.fence();
        self.media.sync_all()?;
        // A copy of PM taken while mounted is stale from here on. A header
        // that cannot be written does not keep the pool from being marked
        // clean: the epoch stays pending, which every header accepts.
        self.stamp_tiers_or_say_why();
        let mut sb = self.sb.lock();
        sb.clean = true;
        sb.generation += 1;
        crate::mkfs::write_superblock(&*self.media, &sb);
        drop(sb);
        if let Err(e) = self.media.sync_all() {
            // The pool stays mounted: not clean, on media as in memory
            // (the superblock's next writes copy it), so a crash later is
            // recovered as one.
            let mut sb = self.sb.lock();
            sb.clean = false;
            sb.generation += 1;
            crate::mkfs::write_superblock(&*self.media, &sb);
            return Err(e);
        }
        Ok(())
    }

    /// Every inode holding dirty pages (a walk of the inode table).
    fn files_with_dirty_pages(&self) -> Vec<crate::types::Ino> {
        self.table
            .iter()
            .filter_map(|slot| {
                slot.lock()
                    .as_ref()
                    .filter(|i| !i.dirty.is_empty())
                    .map(|i| i.ino)
            })
            .collect()
    }

    /// Deletes the dead parts of object tiers (their frees are committed),
    /// so that a clean pool leaves none for fsck to report as orphans —
    /// unless the store is failing requests: then unmount does not wait
    /// for it, and the next mount's sweep deletes them.
    fn reclaim_reachable_object_tiers(&self) {
        for t in &self.tiers {
            if t.media
                .object_tier_stats()
                .is_some_and(|s| s.dead_parts > 0 && s.failing.is_none())
            {
                let _ = t.media.sync();
            }
        }
    }

    /// Stops the migration and write-back threads and persists nothing: the
    /// state a crash leaves (for tests that drop the `Fs` and mount again).
    pub fn stop_background_for_crash_test(&self) {
        self.stop_migration();
        self.stop_writeback();
    }

    /// Writes back every dirty cached page (what an unmount must persist).
    /// A write-back that finds no room retries while migration frees PM —
    /// up to a minute without progress — so a pool that filled PM in a burst
    /// still persists everything it acknowledged.
    ///
    /// Any other error is tried again, up to [`PERSIST_TRIES`] passes in
    /// all: the pages stay dirty in the cache after a failed write-back, so
    /// a pass that succeeds has them on the device. A thread whose sync
    /// failed once gets one more failed sync after the device recovered
    /// (`terrace_media::PerWriterSync`: it may hold writes that failure
    /// lost), and an unmount that gave up on it left a healthy pool
    /// unclean (fault campaign, seed 1312148721675261396).
    pub fn persist_cached(&self) -> std::io::Result<()> {
        let mut other_errors = 0;
        let mut last_left = u64::MAX;
        let mut progress_at = std::time::Instant::now();
        let device_full = self.counters.device_full_errors.load(Ordering::Relaxed);
        loop {
            match self.flush_all() {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    let left = self.cache.dirty_blocks();
                    // A full device is not helped by migration (it moves
                    // data *to* the block tiers): give up soon. (One known
                    // full is not even tried within its back-off wait,
                    // `device_full.rs`, so it adds no error here.)
                    let full = self.tiers.iter().any(|t| t.full.is_full())
                        || self.counters.device_full_errors.load(Ordering::Relaxed) > device_full;
                    let limit = if full {
                        std::time::Duration::from_secs(2)
                    } else {
                        std::time::Duration::from_secs(60)
                    };
                    if left < last_left {
                        last_left = left;
                        progress_at = std::time::Instant::now();
                    } else if progress_at.elapsed() > limit {
                        return Err(e);
                    }
                    if self.migration_thread_running() {
                        self.kick_migration();
                    } else if self.migration_pass() == 0 {
                        return Err(e);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => {
                    other_errors += 1;
                    if other_errors >= PERSIST_TRIES {
                        return Err(e);
                    }
                }
            }
        }
    }
}
