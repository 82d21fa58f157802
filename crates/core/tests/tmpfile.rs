//! Unnamed files (O_TMPFILE, `Fs::tmpfile`): created open with link count 0
//! in no directory, readable and writable, freed (space and inode) by their
//! last release, named by `link` (then ordinary files that survive a
//! remount) unless created with O_EXCL; ownership as create's. Crashes:
//! crash_images.rs.

mod common;
use common::*;
use terrace_core::{Ctx, Fs, SetAttr};

/// Space and inodes the pool has free.
fn free(fs: &Fs) -> (u64, u64) {
    let s = fs.statfs();
    (s.bfree, s.ffree)
}

/// The errno of a failed call.
fn err<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("an errno")
}

fn names(fs: &Fs, dir: u64) -> Vec<String> {
    fs.readdir(dir, 0, 100)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect()
}

#[test]
fn an_unnamed_file_is_written_read_and_freed_by_its_last_release() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let dir_before = fs.getattr(d).unwrap();
    let empty = free(&fs);
    let (a, fh) = fs.tmpfile(d, 0o640, libc::O_RDWR, CTX).unwrap();
    assert!(fh > 0);
    assert_eq!(a.nlink, 0);
    assert_eq!(a.mode, libc::S_IFREG | 0o640);
    assert_eq!(a.size, 0);
    assert!(names(&fs, d).is_empty(), "an unnamed file has no entry");
    // The directory is not changed by a file it does not name.
    assert_eq!(fs.getattr(d).unwrap().mtime, dir_before.mtime);
    let data: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.write(a.ino, 0, &data).unwrap(), data.len());
    assert_eq!(fs.read(a.ino, 0, data.len() + 10).unwrap(), data);
    fs.setattr(
        a.ino,
        SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let during = free(&fs);
    assert!(during.0 + 768 <= empty.0, "3 MiB of data uses space");
    assert_eq!(during.1, empty.1 - 1, "the file holds an inode");
    // A second handle (the kernel's dup/reopen through /proc/self/fd).
    fs.open(a.ino, libc::O_RDONLY).unwrap();
    fs.release(a.ino).unwrap();
    assert_eq!(free(&fs), during, "still open: still there");
    fs.release(a.ino).unwrap();
    assert_eq!(free(&fs).0, empty.0, "the last release frees the data");
    fs.forget(a.ino, 1);
    assert_eq!(free(&fs), empty, "the kernel's forget frees the inode slot");
    assert!(fs.getattr(a.ino).is_err());
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn link_names_an_unnamed_file_which_then_survives_a_remount() {
    let (m, fs) = pm_pool(64 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let (a, _) = fs.tmpfile(d, 0o644, libc::O_WRONLY, CTX).unwrap();
    fs.write(a.ino, 0, b"made in the dark").unwrap();
    let linked = fs.link(a.ino, d, b"named").unwrap();
    assert_eq!(linked.ino, a.ino);
    assert_eq!(linked.nlink, 1);
    assert_eq!(names(&fs, d), ["named"]);
    // Named once, it takes more names like any file.
    assert_eq!(fs.link(a.ino, 1, b"again").unwrap().nlink, 2);
    fs.unlink(1, b"again").unwrap();
    fs.release(a.ino).unwrap();
    fs.forget(a.ino, 3);
    let used = free(&fs);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(m);
    assert_eq!(fs.mount_report().orphans_freed, 0);
    assert_eq!(free(&fs), used);
    let b = fs.lookup(d, b"named").unwrap();
    assert_eq!(b.ino, a.ino);
    assert_eq!(b.nlink, 1);
    assert_eq!(fs.read(b.ino, 0, 100).unwrap(), b"made in the dark");
    fs.check_allocator().unwrap();
}

#[test]
fn a_file_linked_then_unlinked_while_open_is_freed_at_close_and_cannot_be_relinked() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let empty = free(&fs);
    let (a, _) = fs.tmpfile(d, 0o644, libc::O_RDWR, CTX).unwrap();
    fs.write(a.ino, 0, &[7u8; 100_000]).unwrap();
    fs.link(a.ino, d, b"x").unwrap();
    fs.unlink(d, b"x").unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 0);
    // Only the first name of an unnamed file may come from link (as the
    // kernel's I_LINKABLE, cleared by the first link).
    assert_eq!(err(fs.link(a.ino, d, b"y")), libc::ENOENT);
    fs.release(a.ino).unwrap();
    fs.forget(a.ino, 2);
    assert_eq!(free(&fs), empty);
    fs.check_allocator().unwrap();
}

#[test]
fn o_excl_makes_an_unnamed_file_that_link_refuses() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let empty = free(&fs);
    let (a, _) = fs
        .tmpfile(d, 0o600, libc::O_RDWR | libc::O_EXCL, CTX)
        .unwrap();
    fs.write(a.ino, 0, b"private").unwrap();
    assert_eq!(err(fs.link(a.ino, d, b"n")), libc::ENOENT);
    assert!(names(&fs, d).is_empty());
    fs.release(a.ino).unwrap();
    fs.forget(a.ino, 1);
    assert_eq!(free(&fs), empty);
}

#[test]
fn ownership_and_errors_are_creates() {
    let (_m, fs) = pm_pool(64 << 20, 64);
    let user = Ctx {
        uid: 1000,
        gid: 1000,
        umask: 0,
    };
    // A set-group-ID directory gives its group (and not its bit) to files.
    let g = fs.mkdir(1, b"shared", 0o2777, CTX).unwrap().ino;
    fs.setattr(
        g,
        SetAttr {
            gid: Some(50),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let (a, _) = fs.tmpfile(g, 0o644, libc::O_RDWR, user).unwrap();
    assert_eq!((a.uid, a.gid), (1000, 50));
    assert_eq!(a.mode & 0o7777, 0o644);
    let (b, _) = fs.tmpfile(1, 0o644, libc::O_RDWR, user).unwrap();
    assert_eq!((b.uid, b.gid), (1000, 1000));
    // Only regular files; only in directories; not in a removed directory.
    let f = file(&fs, 1, "f");
    assert_eq!(err(fs.tmpfile(f, 0o644, libc::O_RDWR, CTX)), libc::ENOTDIR);
    let dir_mode = libc::S_IFDIR | 0o755;
    assert_eq!(
        err(fs.tmpfile(1, dir_mode, libc::O_RDWR, CTX)),
        libc::EINVAL
    );
    let gone = fs.mkdir(1, b"gone", 0o755, CTX).unwrap().ino;
    fs.rmdir(1, b"gone").unwrap();
    assert_eq!(
        err(fs.tmpfile(gone, 0o644, libc::O_RDWR, CTX)),
        libc::ENOENT
    );
}

#[test]
fn an_unnamed_file_on_a_tiered_pool_returns_its_block_space_at_close() {
    let (_pm, _ssd, fs) = tiered_pool(64 << 20, 256 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    let empty = free(&fs);
    let (a, _) = fs.tmpfile(d, 0o644, libc::O_RDWR, CTX).unwrap();
    // Large asynchronous writes: block tier and DRAM cache.
    let chunk = vec![0x5au8; 1 << 20];
    for i in 0..16u64 {
        fs.write(a.ino, i << 20, &chunk).unwrap();
    }
    fs.persist_cached().unwrap();
    assert!(free(&fs).0 + 4096 <= empty.0);
    assert_eq!(fs.read(a.ino, 5 << 20, 10).unwrap(), vec![0x5a; 10]);
    fs.release(a.ino).unwrap();
    fs.forget(a.ino, 1);
    assert_eq!(free(&fs), empty);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// Found in review 2026-12-07: an unnamed file closed for the last time is
/// freed on PM, but the kernel may still hold it (an `O_PATH` open of
/// `/proc/self/fd/N` keeps a reference without a FUSE open) and send a
/// `linkat` for it. `link` named the freed slot: the next mount refused
/// the pool (a name pointing to a free slot). It is ENOENT now, as for
/// any file whose last name and open are gone.
#[test]
fn a_link_of_an_unnamed_file_freed_by_its_last_close_is_refused() {
    let (pm, fs) = pm_pool(8 << 20, 64);
    let d = mkdirs(&fs, 1)[0];
    // The lookup the tmpfile counts stands for the kernel's O_PATH reference.
    let (a, _) = fs.tmpfile(d, 0o644, libc::O_RDWR, CTX).unwrap();
    fs.write(a.ino, 0, b"gone at close").unwrap();
    fs.release(a.ino).unwrap();
    assert_eq!(err(fs.link(a.ino, d, b"x")), libc::ENOENT);
    assert!(names(&fs, d).is_empty());
    fs.forget(a.ino, 1);
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, None, Fsck::Metadata, "after the refused link");
}
