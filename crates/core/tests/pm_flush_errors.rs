//! A PM tier whose flushes can fail: a file-backed PM tier (an ordinary
//! file, not DAX or tmpfs) makes stores durable with an `msync` at each
//! fence, and that msync fails when the disk under it returns EIO.
//!
//! A synchronous write (O_SYNC, O_DSYNC, `chattr +S`) is durable when it
//! returns, so one whose fences failed must fail; and since which stores
//! were lost is unknown, every later synchronous write and fsync fails
//! too, until the pool is mounted again. Before, the failure was kept for
//! the next fsync only, of whichever file: an O_SYNC write returned
//! success for data that was never on disk, and one fsync "used up" the
//! error that another writer's data had suffered.

mod common;
use common::*;
use terrace_media::fault::FaultMedia;
use terrace_media::MemMedia;

fn eio(r: std::io::Result<impl std::fmt::Debug>) {
    let e = r.expect_err("must fail after a failed flush");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
}

#[test]
fn synchronous_writes_and_every_later_fsync_fail_once_a_pm_flush_failed() {
    let (pm, fs) = pm_pool_on(FaultMedia::new(MemMedia::new(64 << 20)), 256);
    let a = fs
        .mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    let b = fs
        .mknod(1, b"b", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    fs.write_hinted(a, 0, b"before", true).unwrap();
    fs.fsync(a, false).unwrap();

    pm.fail_fences();
    // An O_SYNC write whose own fences failed.
    eio(fs.write_hinted(a, 0, b"lost?", true));
    // An ordinary write promises nothing yet; the fsync that would make it
    // durable fails, and so does every later one, of any file.
    fs.write_hinted(b, 0, b"later", false).unwrap();
    eio(fs.fsync(b, false));
    eio(fs.fsync(b, false));
    eio(fs.fsync(a, true));
    // A file with `chattr +S` writes synchronously without O_SYNC.
    fs.set_inode_flags(b, terrace_format::ATTR_FLAG_SYNC)
        .unwrap();
    eio(fs.write_hinted(b, 0, b"sync", false));
}

/// Memory media whose `n`-th `sync_all` (counting from 1) fails once.
struct NthSyncFails {
    inner: MemMedia,
    calls: std::sync::atomic::AtomicU64,
    fail_at: u64,
}

impl terrace_media::PmMedia for NthSyncFails {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, buf: &mut [u8]) {
        self.inner.read(off, buf)
    }
    fn write(&self, off: u64, data: &[u8]) {
        self.inner.write(off, data)
    }
    fn store_u64(&self, off: u64, value: u64) {
        self.inner.store_u64(off, value)
    }
    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        let n = 1 + self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == self.fail_at {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync_all()
    }
    fn describe(&self) -> String {
        "a PM whose n-th sync fails".into()
    }
}

#[test]
fn an_unmount_whose_last_flush_fails_leaves_the_pool_marked_not_clean() {
    // How many syncs an unmount makes, on media that fails none.
    let counting = |fail_at| NthSyncFails {
        inner: MemMedia::new(64 << 20),
        calls: Default::default(),
        fail_at,
    };
    let (pm, fs) = pm_pool_on(counting(u64::MAX), 64);
    let before = pm.calls.load(std::sync::atomic::Ordering::SeqCst);
    fs.unmount().unwrap();
    let last = pm.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(last > before);
    // The same unmount whose last sync — the one after the superblock was
    // marked clean — fails: the pool is still mounted, and not clean.
    let (pm, fs) = pm_pool_on(counting(last), 64);
    fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    eio(fs.unmount());
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    assert!(!sb.clean, "a pool whose unmount failed reads as clean");
    // Later changes keep it so (they copy the superblock in memory).
    fs.mknod(1, b"g", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    assert!(!terrace_core::recovery::read_superblock(&*pm).unwrap().clean);
}
