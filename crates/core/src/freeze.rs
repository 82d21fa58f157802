//! Read-only remounts (`mount -o remount,ro`): freezing the pool.
//!
//! FUSE does not tell the daemon about a remount; the daemon watches the
//! mount table (`terrace/src/remount_watch.rs`) and calls [`Fs::freeze`]
//! when its mount turns read-only and [`Fs::thaw`] when it turns read-write
//! again. The kernel refuses a read-only remount while a file is open for
//! writing, and refuses writes after it, so no application write races a
//! freeze.
//!
//! A frozen pool is what a clean unmount leaves: cached data written back,
//! lazy access times stored, the superblock marked clean, every tier synced
//! — so its images can be copied (a backup) or checked with `terrace fsck`
//! while it stays mounted. Until it thaws nothing writes to any tier: the
//! migration and write-back threads are stopped, reads set no access time,
//! and `terrace migrate` fails with EROFS. Thawing marks the superblock
//! dirty again (a crash from then on means recovery) and restarts the
//! threads.

use crate::fs::{AtimeMode, Fs};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Why a tier cannot be added or removed on a read-only pool, in the
    /// words that say how to make it writable: a `-o ro` mount opened the
    /// pool read-only (a `remount,rw` does not change that), a frozen one
    /// thaws with `remount,rw`.
    pub(crate) fn refuse_tier_change_read_only(&self) -> Result<(), String> {
        if self.read_only {
            return Err(
                "the pool is mounted with -o ro; unmount it and mount it without -o ro first"
                    .into(),
            );
        }
        if self.is_frozen() {
            return Err("the pool was remounted read-only; `mount -o remount,rw` it first".into());
        }
        Ok(())
    }

    /// Makes the pool's image clean and stops writing to it (see the module
    /// docs). Nothing to do on a read-only mount or a frozen pool. The pool
    /// counts as frozen only once it is clean on media (so the passes that
    /// a write-back may need while it persists still run). On an error (a
    /// device that fails its write-back) the pool goes on as before and the
    /// error is returned. Called by one thread (the remount watcher).
    pub fn freeze(self: &Arc<Self>) -> std::io::Result<()> {
        if self.read_only || self.is_frozen() {
            return Ok(());
        }
        let atime = *self.atime.read();
        *self.atime.write() = AtimeMode::Never;
        match self.persist_and_mark_clean() {
            Ok(()) => {
                *self.atime_before_freeze.lock() = Some(atime);
                self.frozen.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                *self.atime.write() = atime;
                self.start_writeback();
                self.start_migration();
                Err(e)
            }
        }
    }

    /// Undoes [`Fs::freeze`]: the superblock is marked in use again, access
    /// times and the background threads resume. Nothing to do unless frozen.
    pub fn thaw(self: &Arc<Self>) -> std::io::Result<()> {
        if !self.frozen.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut sb = self.sb.lock();
        sb.clean = false;
        sb.generation += 1;
        crate::mkfs::write_superblock(&*self.media, &sb);
        drop(sb);
        let synced = self.media.sync_all();
        // A copy of PM taken while frozen (a consistent backup) is stale
        // once the pool changes again.
        self.stamp_tiers_or_say_why();
        // Two leaves: the saved mode is taken before `atime` is.
        let saved = self.atime_before_freeze.lock().take();
        if let Some(mode) = saved {
            *self.atime.write() = mode;
        }
        self.frozen.store(false, Ordering::SeqCst);
        self.start_writeback();
        self.start_migration();
        synced
    }
}
