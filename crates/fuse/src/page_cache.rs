//! Which opens go through the kernel's page cache, and when the kernel
//! must drop pages of a file (issue 16).
//!
//! By default, files opened write-only use direct I/O (`FOPEN_DIRECT_IO`): every
//! `write()` of up to 1 MiB is one request and one atomic commit in the core,
//! and the synchronicity and size predictors see the application's own
//! writes (logs, appenders, copies). Files opened for reading — read-only or
//! read-write — use the kernel's page cache (`FOPEN_KEEP_CACHE` while it is
//! still valid), so a re-read of hot data is a memory copy, not a round trip
//! to the daemon. Their writes are write-through (no writeback cache): each
//! reaches the daemon before `write()` returns, and the kernel keeps the
//! bytes in its pages. One page cache per file also makes a shared mapping
//! and `write()` of one descriptor agree: with direct I/O the kernel's
//! invalidation after each direct write could write back a mapped page
//! re-dirtied with stale bytes over the write (xfstests generic/346).
//!
//! Under the kernel's writeback cache (`-o writeback_cache`) every open goes
//! through the page cache, write-only ones too, and writes are not
//! write-through: the kernel keeps them dirty and sends them later as
//! `FUSE_WRITE_CACHE` write-backs. The rules below are the same: pages go
//! stale only through a change that bypassed them (`O_DIRECT` writes —
//! the kernel writes dirty pages of their range back first —, fallocate,
//! copy_file_range, truncate), and an invalidation or an open without
//! `FOPEN_KEEP_CACHE` makes the kernel write dirty pages back before it
//! drops them (`launder_folio`), so it never loses a cached write.
//!
//! The daemon is the pool's only writer and every change of a file's data
//! reaches it through this mount; migration, write-back, scrub and log moves
//! never change a file's bytes. So the kernel's pages of a file can only
//! become stale through a change made here that bypassed them:
//! - a write through a direct-I/O (write-only) open or with `O_DIRECT`,
//!   fallocate, or a size change: the file is marked *stale*, and when cached
//!   opens of it are live, the changed range is invalidated in the kernel
//!   before the change is acknowledged (a reader that had the old bytes
//!   cached sees the new ones as soon as the writer's call returns; the
//!   kernel cuts its pages itself at a truncate);
//! - the next cached open of a stale file is answered without
//!   `FOPEN_KEEP_CACHE`, which makes the kernel drop all of the file's pages
//!   at that open.
//!
//! Writes through a cached open, and writes the kernel sends from its page
//! cache (`FUSE_WRITE_CACHE`: dirty pages of a shared mapping), carry bytes
//! the cache already holds: they mark nothing and invalidate nothing
//! (invalidating pages from inside such a write request would wait on the
//! page locks the kernel holds for it).
//!
//! Invariant: a file whose entry is missing or stale has no page in the
//! kernel that a cached open may keep. Entries are dropped when the kernel
//! forgets the inode (its pages go with it).

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    /// Live cached opens (their reads and writes fill the page cache).
    opens: u32,
    /// The data changed since the pages were cached.
    stale: bool,
}

/// The page-cache state of every file opened through the page cache.
#[derive(Debug, Default)]
pub struct CachedOpens {
    files: Mutex<HashMap<u64, Entry>>,
}

impl CachedOpens {
    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // A panic elsewhere cannot leave an entry half-updated.
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A cached open of `ino`: whether the kernel may keep the pages it
    /// holds (`FOPEN_KEEP_CACHE`) — false the first time and after a change,
    /// and the kernel then drops them at this open.
    pub fn open(&self, ino: u64) -> bool {
        let mut files = self.files();
        let e = files.entry(ino).or_insert(Entry {
            opens: 0,
            stale: true,
        });
        let keep = !e.stale;
        e.opens += 1;
        e.stale = false;
        keep
    }

    /// The release of a cached open of `ino`.
    pub fn release(&self, ino: u64) {
        if let Some(e) = self.files().get_mut(&ino) {
            e.opens = e.opens.saturating_sub(1);
        }
    }

    /// The data of `ino` changed (not from the kernel's own page cache):
    /// true when cached opens are live, so the caller must invalidate the
    /// changed range in the kernel before it replies.
    pub fn changed(&self, ino: u64) -> bool {
        match self.files().get_mut(&ino) {
            Some(e) => {
                e.stale = true;
                e.opens > 0
            }
            None => false,
        }
    }

    /// The kernel forgot `ino`: it holds no page of it any more.
    pub fn forget(&self, ino: u64) {
        self.files().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_kept_only_while_the_data_is_unchanged() {
        let c = CachedOpens::default();
        assert!(!c.open(7), "nothing cached yet: the first open drops");
        c.release(7);
        assert!(c.open(7), "unchanged since: the pages are kept");
        c.release(7);
        assert!(!c.changed(7), "no open is live: nothing to invalidate now");
        assert!(!c.open(7), "changed: the next open drops the pages");
    }

    #[test]
    fn a_change_while_a_reader_is_open_asks_for_invalidation() {
        let c = CachedOpens::default();
        c.open(3);
        assert!(c.changed(3));
        c.release(3);
        assert!(
            !c.open(3),
            "the change also drops the pages at the next open"
        );
    }

    #[test]
    fn files_never_opened_for_reading_need_nothing_and_forget_resets() {
        let c = CachedOpens::default();
        assert!(!c.changed(9));
        c.open(9);
        c.release(9);
        c.forget(9);
        assert!(!c.open(9), "after forget the kernel has no pages to keep");
    }
}
