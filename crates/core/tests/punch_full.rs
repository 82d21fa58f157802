//! Punching holes in a full pool frees space instead of failing (xfstests
//! generic/256: a full file system, a non-root user punches block-aligned
//! holes).

mod common;
use common::*;
use terrace_core::FallocateMode;

#[test]
fn block_aligned_holes_can_be_punched_in_a_full_pool_and_free_space() {
    let (_, fs) = pm_pool(16 << 20, 64);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o666, 0, CTX).unwrap();
    fs.write(f.ino, 0, &vec![7u8; 1 << 20]).unwrap();
    fs.fsync(f.ino, false).unwrap();
    let fill = fs.mknod(1, b"fill", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let mut off = 0u64;
    loop {
        match fs.write(fill.ino, off, &[1u8; 4096]) {
            Ok(_) => off += 4096,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
                break;
            }
        }
    }
    for k in 0..60u64 {
        let at = k * 3 * 4096;
        fs.fallocate(f.ino, at, 2 * 4096, FallocateMode::PunchHole)
            .unwrap_or_else(|e| panic!("punch {k} in a full pool: {e}"));
        // What the punch freed can be used again.
        fs.write(fill.ino, off, &[1u8; 4096]).unwrap();
        off += 4096;
    }
}
