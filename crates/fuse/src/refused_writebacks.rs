//! Write-backs the pool refused for room, under the kernel's writeback cache
//! (`-o writeback_cache`), and the `write()` calls that then fail with
//! ENOSPC as on ext4.
//!
//! With the writeback cache a `write()` is a copy into the kernel's pages:
//! the daemon sees the bytes only when the kernel writes the pages back, and
//! a write-back refused with ENOSPC reaches the application at its next
//! `fsync` or `close` (the mapping's error), not at a `write()`. A writer
//! that never syncs would go on for ever while every page it writes is
//! dropped: `dd if=/dev/zero of=F bs=1M` on a full pool grew F to 340 GB
//! (xfstests generic/015 with `-o writeback_cache`, 2026-11-30).
//!
//! What the kernel does ask before each cached write is the file's size and
//! mode, when its attributes are not valid: a GETATTR carrying the open's
//! handle (`fuse_update_attributes` in `fuse_cache_write_iter`). So when a
//! write-back of a file is refused with ENOSPC, the adapter notes the file
//! here and invalidates its attributes (attributes only: no page is
//! touched), and a GETATTR with a handle of that file is answered ENOSPC
//! while the pool has less room than the refused write-back asked for: the
//! writer's next `write()` fails. `stat` and `fstat` send no handle and are
//! answered as always; a read past the end of such a file or an
//! `lseek(SEEK_END)` (the other requests that carry one) fails too, while
//! the pool is full. Once the pool has the room, the file is forgotten here
//! (an inode number used again meanwhile is refused only while the pool is
//! full, when its writes would be refused anyway).
//!
//! Pages the kernel accepted before the refusal are still lost and reported
//! at `fsync`/`close`, as the writeback cache has always done (README).
//!
//! Lock order: the map's mutex is a leaf; the room is read before it is
//! taken. A GETATTR while no file is noted takes no lock: `noted` mirrors
//! the map's length, changed under the mutex (a GETATTR racing the first
//! refusal may miss it; the kernel asks again before its next write).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Files whose write-back was refused with ENOSPC, with the bytes refused.
#[derive(Debug, Default)]
pub(crate) struct RefusedWritebacks {
    files: Mutex<HashMap<u64, u64>>,
    /// How many files `files` holds.
    noted: AtomicUsize,
}

impl RefusedWritebacks {
    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write-back of `bytes` of file `ino` was refused with ENOSPC.
    pub(crate) fn refused(&self, ino: u64, bytes: u64) {
        let mut f = self.files();
        let e = f.entry(ino).or_default();
        *e = (*e).max(bytes.max(1));
        self.noted.store(f.len(), Ordering::Release);
    }

    /// Whether a GETATTR with a handle of `ino` is to fail with ENOSPC:
    /// its write-back was refused and the pool has less room than that
    /// asked for (`room` is called only for such a file). A file with room
    /// again is forgotten.
    pub(crate) fn still_refused(&self, ino: u64, room: impl FnOnce() -> u64) -> bool {
        if self.noted.load(Ordering::Acquire) == 0 {
            return false;
        }
        let Some(wanted) = self.files().get(&ino).copied() else {
            return false;
        };
        if room() >= wanted {
            let mut f = self.files();
            f.remove(&ino);
            self.noted.store(f.len(), Ordering::Release);
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_file_fails_until_the_pool_has_the_room_it_asked_for() {
        let r = RefusedWritebacks::default();
        let mut asked = 0;
        assert!(!r.still_refused(7, || {
            asked += 1;
            0
        }));
        assert_eq!(asked, 0, "the room is not read for a file never refused");
        r.refused(7, 1 << 20);
        r.refused(7, 4096);
        assert!(
            r.still_refused(7, || 8192),
            "less room than the 1 MiB refused"
        );
        assert!(!r.still_refused(8, || 0), "another file");
        assert!(!r.still_refused(7, || 1 << 20), "room again");
        assert!(!r.still_refused(7, || 0), "forgotten once it had room");
        assert_eq!(
            r.noted.load(Ordering::Relaxed),
            0,
            "nothing noted: no lock taken"
        );
    }
}
