//! Writable opens that write through while the pool is short of room,
//! under the kernel's writeback cache (`-o writeback_cache`).
//!
//! With the writeback cache a `write()` is a copy into the kernel's pages,
//! and the daemon sees the bytes only at write-back. On a pool without the
//! room for them the write-back is refused, and the `write()` that was
//! acknowledged loses its data; the error reaches the application at
//! `fsync` or `close`, which many writers do not check (xfstests generic/027
//! under this option: `xfs_io -f -c "pwrite 0 1k"` of thousands of new
//! files on a full pool succeeded, every byte dropped, until the inode
//! table was full). [`crate::refused_writebacks`] covers a file whose
//! write-back was refused already; a file opened afterwards would lose its
//! first writes the same way.
//!
//! So a writable open made while the pool's room for new data is under
//! [`WRITE_THROUGH_BELOW_BYTES`] is opened with direct I/O: its writes
//! reach the daemon, which refuses them with ENOSPC at `write()` when they
//! do not fit, as ext4 does. Such opens are known by their handle (the
//! kernel's release and write carry the open's flags, which cannot say
//! it); the page-cache bookkeeping counts them as direct writers
//! ([`crate::page_cache`]), as write-only opens without the writeback
//! cache. Opens made while the pool has room stay cached.
//!
//! Lock order: the set's mutex is a leaf.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Room for new data below which writable opens write through.
pub(crate) const WRITE_THROUGH_BELOW_BYTES: u64 = 32 << 20;

/// The handles of the opens that write through.
#[derive(Debug, Default)]
pub(crate) struct WriteThroughOpens {
    handles: Mutex<HashSet<u64>>,
    /// How many handles `handles` holds: a write of a cached open looks at
    /// no lock while it is 0.
    count: AtomicUsize,
}

impl WriteThroughOpens {
    fn handles(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open `fh` writes through.
    pub(crate) fn add(&self, fh: u64) {
        let mut h = self.handles();
        h.insert(fh);
        self.count.store(h.len(), Ordering::Release);
    }

    /// Whether the open `fh` writes through.
    pub(crate) fn contains(&self, fh: u64) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.handles().contains(&fh)
    }

    /// The release of `fh`: whether it was an open that writes through.
    pub(crate) fn remove(&self, fh: u64) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut h = self.handles();
        let was = h.remove(&fh);
        self.count.store(h.len(), Ordering::Release);
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_writes_through_from_its_open_to_its_release() {
        let w = WriteThroughOpens::default();
        assert!(!w.contains(3));
        w.add(3);
        w.add(4);
        assert!(w.contains(3) && w.contains(4) && !w.contains(5));
        assert!(w.remove(3));
        assert!(!w.remove(3), "released once");
        assert!(!w.contains(3) && w.contains(4));
        assert!(w.remove(4));
        assert_eq!(w.count.load(Ordering::Relaxed), 0, "empty: no lock taken");
    }
}
