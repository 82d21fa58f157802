//! Inode flags (`chattr`): what the immutable and append-only flags forbid
//! through the core's API, that a refused operation changes nothing, that
//! the flags survive a remount and are all or nothing at every crash point
//! of their commit, and that flags the pool does not keep are refused.

mod common;
use common::*;
use terrace_core::inode_flags::*;
use terrace_core::{FallocateMode, Fs, RenameFlags, SetAttr, SetTime};
use terrace_media::{CrashMedia, LossMode, MemMedia};

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("an errno")
}

fn eperm<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    assert_eq!(errno_of(r), libc::EPERM, "{what}");
}

#[test]
fn an_immutable_file_refuses_every_change_and_keeps_its_bytes_and_attributes() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", b"frozen");
    fs.setxattr(f, b"user.k", b"v", 0).unwrap();
    // A descriptor opened for writing before the flag is set.
    fs.open(f, libc::O_RDWR).unwrap();
    fs.set_inode_flags(f, ATTR_FLAG_IMMUTABLE).unwrap();
    let before = fs.getattr(f).unwrap();
    eperm(fs.open(f, libc::O_WRONLY), "open for writing");
    eperm(fs.open(f, libc::O_RDONLY | libc::O_TRUNC), "open O_TRUNC");
    eperm(fs.write(f, 0, b"thawed"), "write through an old descriptor");
    eperm(fs.write(f, 6, b"more"), "append");
    eperm(
        fs.fallocate(f, 0, 8192, FallocateMode::Allocate),
        "fallocate",
    );
    eperm(fs.copy_range(f, 0, f, 4096, 6), "copy_file_range into it");
    for s in [
        SetAttr {
            size: Some(0),
            ..SetAttr::default()
        },
        SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        },
        SetAttr {
            uid: Some(7),
            ..SetAttr::default()
        },
        SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..SetAttr::default()
        },
    ] {
        eperm(fs.setattr(f, s), &format!("setattr {s:?}"));
    }
    eperm(fs.setxattr(f, b"user.k", b"w", 0), "setxattr");
    eperm(fs.removexattr(f, b"user.k"), "removexattr");
    eperm(fs.link(f, 1, b"g"), "link");
    eperm(fs.unlink(1, b"f"), "unlink");
    eperm(
        fs.rename(1, b"f", 1, b"g", RenameFlags::default()),
        "rename",
    );
    let other = file_holding(&fs, "other", b"x");
    eperm(
        fs.rename(1, b"other", 1, b"f", RenameFlags::default()),
        "rename over it",
    );
    // Reads work, and update nothing.
    fs.open(f, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"frozen");
    assert_eq!(fs.getattr(f).unwrap(), before, "nothing changed");
    assert_eq!(fs.getxattr(f, b"user.k").unwrap(), b"v");
    assert!(fs.lookup(1, b"other").is_ok_and(|a| a.ino == other));
    // Cleared, the file is ordinary again.
    fs.set_inode_flags(f, 0).unwrap();
    fs.write(f, 0, b"thawed").unwrap();
    fs.unlink(1, b"f").unwrap();
    fs.unmount().unwrap();
}

#[test]
fn pages_the_kernel_held_dirty_are_written_back_after_chattr_i() {
    // A write or mapped store acknowledged before the flag was set, that
    // the kernel writes back only now: refusing it would lose it.
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", b"old bytes");
    fs.set_inode_flags(f, ATTR_FLAG_IMMUTABLE).unwrap();
    eperm(fs.write(f, 0, b"new"), "an application's write now");
    assert_eq!(
        fs.write_back_kernel_pages(f, 0, b"NEW", false, false)
            .unwrap(),
        3
    );
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"NEW bytes");
    fs.unmount().unwrap();
}

#[test]
fn an_append_only_file_grows_only_at_its_end_and_cannot_be_removed() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "log", b"line 1\n");
    fs.set_inode_flags(f, ATTR_FLAG_APPEND).unwrap();
    eperm(
        fs.open(f, libc::O_WRONLY),
        "open for writing without O_APPEND",
    );
    eperm(
        fs.open(f, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC),
        "O_TRUNC",
    );
    fs.open(f, libc::O_WRONLY | libc::O_APPEND).unwrap();
    fs.write(f, 7, b"line 2\n").unwrap();
    fs.fallocate(f, 14, 4096, FallocateMode::AllocateKeepSize)
        .unwrap();
    eperm(
        fs.fallocate(f, 0, 4096, FallocateMode::PunchHole),
        "punch a hole",
    );
    eperm(
        fs.setattr(
            f,
            SetAttr {
                size: Some(0),
                ..SetAttr::default()
            },
        ),
        "truncate",
    );
    eperm(
        fs.setattr(
            f,
            SetAttr {
                mtime: Some(SetTime::At(0)),
                ..SetAttr::default()
            },
        ),
        "set an old mtime",
    );
    // touch (times to now) is allowed.
    fs.setattr(
        f,
        SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..SetAttr::default()
        },
    )
    .unwrap();
    eperm(fs.setxattr(f, b"user.k", b"v", 0), "setxattr");
    eperm(fs.unlink(1, b"log"), "unlink");
    eperm(fs.link(f, 1, b"copy"), "link");
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"line 1\nline 2\n");
    fs.unmount().unwrap();
}

#[test]
fn no_byte_below_the_end_of_an_append_only_file_changes_whatever_path_the_write_takes() {
    // The kernel keeps O_APPEND writes at the end, but not for a FUSE file
    // once an fcntl cleared O_APPEND, nor for a shared writable mapping:
    // those writes reach the core below the end, which must refuse them.
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "log", b"line 1\n");
    let src = file_holding(&fs, "src", b"XXXXXXXXXXXXXXXX");
    fs.set_inode_flags(f, ATTR_FLAG_APPEND).unwrap();
    eperm(fs.write(f, 0, b"X"), "a write at offset 0");
    eperm(fs.write(f, 5, b"X\nmore"), "a write across the end");
    eperm(
        fs.write_back_kernel_pages(f, 0, b"Xine 1\n", false, false),
        "a write-back of a changed mapped page",
    );
    eperm(fs.copy_range(src, 0, f, 0, 4), "a copy over the start");
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"line 1\n");
    // An append through a page the kernel writes back whole starts with
    // the old bytes of that page: it goes through.
    fs.write_back_kernel_pages(f, 0, b"line 1\nline 2\n", false, false)
        .unwrap();
    fs.write(f, 14, b"line 3\n").unwrap();
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"line 1\nline 2\nline 3\n");
    // Without the flag, the same writes change the file.
    fs.set_inode_flags(f, 0).unwrap();
    fs.write(f, 0, b"X").unwrap();
    assert_eq!(fs.read(f, 0, 1).unwrap(), b"X");
}

#[test]
fn privileges_a_modification_would_drop_from_an_append_only_file_refuse_it_as_on_ext4() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "prog", b"#!/bin/sh\n");
    fs.setattr(
        f,
        SetAttr {
            mode: Some(0o6755),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.setxattr(f, b"security.capability", &[1; 20], 0).unwrap();
    fs.set_inode_flags(f, ATTR_FLAG_APPEND).unwrap();
    eperm(
        fs.setattr(
            f,
            SetAttr {
                mode: Some(0o755),
                ..SetAttr::default()
            },
        ),
        "chmod",
    );
    // What a write by a user outside the file's group would drop: ext4
    // refuses (the write then fails), and nothing changes.
    eperm(fs.drop_privileges(f, 0o755), "clearing set-ID bits");
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6755);
    assert!(fs.getxattr(f, b"security.capability").is_ok());
    // A writer who may keep them (root) drops the capability alone.
    assert!(fs.drop_privileges(f, 0o7777).unwrap());
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6755);
    assert_eq!(
        errno_of(fs.getxattr(f, b"security.capability")),
        libc::ENODATA
    );
    // Without the flag the bits go; and it never adds one.
    fs.set_inode_flags(f, 0).unwrap();
    assert!(fs.drop_privileges(f, 0o755).unwrap());
    assert!(!fs.drop_privileges(f, 0o7777).unwrap());
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o755);
    // An immutable file changes in nothing (its writes are refused).
    let g = file_holding(&fs, "frozen", b"x");
    fs.setattr(
        g,
        SetAttr {
            mode: Some(0o4755),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.set_inode_flags(g, ATTR_FLAG_IMMUTABLE).unwrap();
    assert!(!fs.drop_privileges(g, 0o755).unwrap());
    assert_eq!(fs.getattr(g).unwrap().mode & 0o7777, 0o4755);
}

#[test]
fn directory_flags_guard_its_names() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let inside = file(&fs, d, "inside");
    let out = file(&fs, 1, "out");
    fs.set_inode_flags(d, ATTR_FLAG_IMMUTABLE).unwrap();
    eperm(fs.mknod(d, b"new", libc::S_IFREG | 0o644, 0, CTX), "create");
    eperm(fs.mkdir(d, b"sub", 0o755, CTX), "mkdir");
    eperm(fs.symlink(d, b"s", b"t", CTX), "symlink");
    eperm(fs.tmpfile(d, 0o644, libc::O_RDWR, CTX), "O_TMPFILE");
    eperm(fs.link(out, d, b"l"), "link into it");
    eperm(fs.unlink(d, b"inside"), "unlink in it");
    eperm(
        fs.rename(1, b"out", d, b"moved", RenameFlags::default()),
        "rename into it",
    );
    eperm(
        fs.rename(d, b"inside", 1, b"moved", RenameFlags::default()),
        "rename out of it",
    );
    eperm(fs.rmdir(1, b"d0"), "rmdir of it");
    // Its files themselves can still change.
    fs.write(inside, 0, b"data").unwrap();
    // Append-only: names may be added, none removed or moved away.
    fs.set_inode_flags(d, ATTR_FLAG_APPEND).unwrap();
    fs.mknod(d, b"new", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    fs.rename(1, b"out", d, b"moved", RenameFlags::default())
        .unwrap();
    eperm(fs.unlink(d, b"inside"), "unlink in an append-only dir");
    eperm(
        fs.rename(d, b"new", d, b"renamed", RenameFlags::default()),
        "rename within it",
    );
    let mut names: Vec<Vec<u8>> = fs
        .readdir(d, 0, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| !n.starts_with(b"."))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [b"inside".to_vec(), b"moved".to_vec(), b"new".to_vec()]
    );
    fs.unmount().unwrap();
}

#[test]
fn flags_this_pool_does_not_keep_are_refused_and_change_nothing() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", b"x");
    fs.set_inode_flags(f, ATTR_FLAG_NODUMP).unwrap();
    let before = fs.getattr(f).unwrap();
    // FS_COMPR_FL, FS_JOURNAL_DATA_FL, FS_EXTENT_FL.
    for bad in [0x4, 0x4000, 0x8_0000] {
        assert_eq!(
            errno_of(fs.set_inode_flags(f, ATTR_FLAG_NODUMP | bad)),
            libc::EOPNOTSUPP
        );
    }
    assert_eq!(fs.inode_flags(f).unwrap(), ATTR_FLAG_NODUMP);
    assert_eq!(fs.getattr(f).unwrap(), before);
    fs.unmount().unwrap();
}

#[test]
fn setting_flags_moves_ctime_and_no_atime_flags_keep_reads_from_updating_it() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    fs.set_atime_mode(terrace_core::AtimeMode::Strict);
    let f = file_holding(&fs, "f", b"data");
    let a0 = fs.getattr(f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let a1 = fs.set_inode_flags(f, ATTR_FLAG_NOATIME).unwrap();
    assert!(a1.ctime > a0.ctime, "chattr changes ctime");
    fs.read(f, 0, 4).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, a1.atime, "+A: no atime");
    fs.set_inode_flags(f, 0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.read(f, 0, 4).unwrap();
    assert!(
        fs.getattr(f).unwrap().atime > a1.atime,
        "without it, reads do"
    );
    fs.unmount().unwrap();
}

#[test]
fn flags_survive_a_remount() {
    let (m, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", b"x");
    let d = mkdirs(&fs, 1)[0];
    fs.set_inode_flags(f, ATTR_FLAG_IMMUTABLE | ATTR_FLAG_NODUMP)
        .unwrap();
    fs.set_inode_flags(d, ATTR_FLAG_APPEND | ATTR_FLAG_DIRSYNC)
        .unwrap();
    fs.unmount().unwrap();
    let fs = mount(m.clone() as std::sync::Arc<dyn terrace_media::PmMedia>);
    assert_eq!(
        fs.inode_flags(f).unwrap(),
        ATTR_FLAG_IMMUTABLE | ATTR_FLAG_NODUMP
    );
    assert_eq!(
        fs.inode_flags(d).unwrap(),
        ATTR_FLAG_APPEND | ATTR_FLAG_DIRSYNC
    );
    eperm(fs.unlink(1, b"f"), "still immutable");
    fs.unmount().unwrap();
    let _: &MemMedia = &m;
}

#[test]
fn a_crash_while_setting_flags_leaves_the_old_or_the_new_flags() {
    let (media, fs) = pm_pool_on(CrashMedia::new(64 << 20), 64);
    let f = file_holding(&fs, "f", b"x");
    fs.set_inode_flags(f, ATTR_FLAG_NODUMP).unwrap();
    let (r, trace) = media.trace(|| fs.set_inode_flags(f, ATTR_FLAG_IMMUTABLE));
    r.unwrap();
    let n = trace.len();
    assert!(n > 0);
    let mut seen_new = false;
    for k in 0..=n {
        for mode in [
            LossMode::AllUnflushed,
            LossMode::RandomLines(k as u64),
            LossMode::RandomWords(k as u64),
        ] {
            let ctx = format!("crash after event {k}/{n} {mode:?}");
            let (_, fs) = recover(trace.image_at(k, mode), None, Fsck::Metadata, &ctx);
            let got = fs.inode_flags(f).unwrap();
            assert!(
                got == ATTR_FLAG_NODUMP || got == ATTR_FLAG_IMMUTABLE,
                "{ctx}: flags {got:#x}"
            );
            if k == n {
                assert_eq!(got, ATTR_FLAG_IMMUTABLE, "{ctx}: returned, so durable");
            }
            seen_new |= got == ATTR_FLAG_IMMUTABLE;
            drop(fs);
        }
    }
    assert!(seen_new);
    let _: &Fs = &fs;
}
