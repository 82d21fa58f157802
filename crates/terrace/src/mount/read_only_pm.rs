//! [`ReadOnlyPm`]: the PM tier of a read-only mount, which drops (and logs
//! once) any write that reaches it.

use std::io;
use terrace_media::PmFile;

use super::log;

/// The PM tier of a read-only mount: reads pass through, writes never reach
/// the media. The core writes nothing on a read-only mount (no recovery,
/// no superblock update, no commit: the kernel refuses every modifying
/// call with EROFS, the daemon starts no migration or write-back); this
/// guard makes that a property of the mount rather than of every code path
/// — a write that got here anyway is dropped, counted and logged once.
pub(super) struct ReadOnlyPm {
    inner: PmFile,
    dropped: std::sync::atomic::AtomicU64,
}

impl ReadOnlyPm {
    pub(super) fn new(inner: PmFile) -> ReadOnlyPm {
        ReadOnlyPm {
            inner,
            dropped: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn refuse(&self, off: u64, len: u64) {
        if self
            .dropped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            log(format!(
                "bug: a write of {len} bytes at {off} to the PM tier of a read-only mount was dropped (further ones are dropped silently)"
            ));
        }
    }
}

impl terrace_media::PmMedia for ReadOnlyPm {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, buf: &mut [u8]) {
        self.inner.read(off, buf)
    }
    fn write(&self, off: u64, data: &[u8]) {
        self.refuse(off, data.len() as u64)
    }
    fn store_u64(&self, off: u64, _: u64) {
        self.refuse(off, 8)
    }
    fn flush(&self, _: u64, _: u64) {}
    fn fence(&self) {}
    fn load_u64(&self, off: u64) -> u64 {
        self.inner.load_u64(off)
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn fence_is_durable(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        // The PM file is opened read-only, and says so.
        self.inner.describe()
    }
}
