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
