//! The link limit (65,000, ext4's): a directory's link count grows by one
//! per subdirectory, so every way a subdirectory can arrive — mkdir, and a
//! rename that moves a directory in — fails with EMLINK at the limit, as
//! link does for a file's names.

mod common;
use common::*;
use terrace_core::{Fs, Ino, RenameFlags};

/// A pool whose directory "full" holds subdirectories up to the limit,
/// and a directory "other" holding a directory "d" and a file "f".
fn pool_with_a_full_directory() -> (Fs, Ino, Ino) {
    let (_, fs) = pm_pool(256 << 20, 70_000);
    let full = fs.mkdir(1, b"full", 0o755, CTX).unwrap().ino;
    let mut n = 0;
    loop {
        match fs.mkdir(full, format!("s{n}").as_bytes(), 0o755, CTX) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMLINK), "mkdir s{n}: {e}");
                break;
            }
        }
    }
    assert_eq!(fs.getattr(full).unwrap().nlink, 65_000);
    let other = fs.mkdir(1, b"other", 0o755, CTX).unwrap().ino;
    fs.mkdir(other, b"d", 0o755, CTX).unwrap();
    fs.mknod(other, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    (fs, full, other)
}

fn plain() -> RenameFlags {
    RenameFlags::default()
}

#[test]
fn a_directory_is_not_moved_into_a_parent_at_the_link_limit() {
    let (fs, full, other) = pool_with_a_full_directory();
    let e = fs.rename(other, b"d", full, b"d", plain()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    // Nothing moved, no count changed.
    assert!(fs.lookup(other, b"d").is_ok());
    assert!(fs.lookup(full, b"d").is_err());
    assert_eq!(fs.getattr(full).unwrap().nlink, 65_000);
    assert_eq!(fs.getattr(other).unwrap().nlink, 3);
    // A file still moves in: it adds no link to the parent.
    fs.rename(other, b"f", full, b"f", plain()).unwrap();
    // A directory replacing an empty one adds none either.
    fs.rename(other, b"d", full, b"s0", plain()).unwrap();
    assert_eq!(fs.getattr(full).unwrap().nlink, 65_000);
    // Within the full directory, renames go on.
    fs.rename(full, b"s1", full, b"renamed", plain()).unwrap();
    fs.check_allocator().unwrap();
}

#[test]
fn an_exchange_that_would_move_a_directory_into_a_parent_at_the_limit_is_refused() {
    let (fs, full, other) = pool_with_a_full_directory();
    fs.mknod(full, b"file", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    // "other/d" (a directory) for "full/file": full would gain a link.
    let e = fs.rename(other, b"d", full, b"file", exchange).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    let e = fs.rename(full, b"file", other, b"d", exchange).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    // Two directories trade places: no count changes.
    fs.rename(other, b"d", full, b"s0", exchange).unwrap();
    assert_eq!(fs.getattr(full).unwrap().nlink, 65_000);
    assert_eq!(fs.getattr(other).unwrap().nlink, 3);
    fs.check_allocator().unwrap();
}
