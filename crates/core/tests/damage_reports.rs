//! Reports of damaged file data name the file, not only a block: `fsck
//! --data` and a scrub give its path ("inode 43 (/dir/big): ...", "inode
//! 43, bytes A..B of /dir/big"), the daemon's checksum-mismatch line its
//! inode, and a file whose move found damaged data says so in the virtual
//! xattr `user.terrace.moves` (what `terrace where` explains an unmet
//! placement rule by) until its data changes (a new user could not tell
//! which file an "inode 43" was, and `where` blamed room, 2026-12-07).

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::{fsck, Fs};
use terrace_media::{BlockMedia, MemBlock, MemMedia};

const BS: u64 = 4096;

/// A pool with the 1 MiB file `/dir/big` moved to the SSD and one byte of
/// its block 100 flipped there; returns the images (unmounted), the file's
/// inode and the SSD block of that damaged block.
fn pool_with_a_damaged_file_in_a_directory() -> (Arc<MemMedia>, Arc<MemBlock>, u64, u64) {
    let (pm, ssd, fs) = tiered_pool(8 << 20, 32 << 20, 256);
    let dir = fs.mkdir(1, b"dir", 0o755, CTX).unwrap();
    let f = fs
        .mknod(dir.ino, b"big", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    fs.write(f.ino, 0, &pattern(43, 1 << 20)).unwrap();
    fs.migrate_file(f.ino, 1).unwrap();
    let ext = extents(&fs, f.ino);
    let on = ext
        .iter()
        .find(|e| e.0 <= 100 * BS && 100 * BS < e.0 + e.1)
        .unwrap();
    assert_eq!(on.2, "ssd", "the file is on the SSD: {ext:?}");
    let damaged = on.3 + (100 * BS - on.0) / BS;
    fs.unmount().unwrap();
    let mut b = vec![0u8; BS as usize];
    ssd.read_blocks(damaged, &mut b).unwrap();
    b[7] ^= 0x10;
    ssd.write_blocks(damaged, &b).unwrap();
    (pm, ssd, f.ino, damaged)
}

fn mount_damaged() -> (Arc<MemMedia>, Arc<MemBlock>, Fs, u64) {
    let (pm, ssd, ino, _) = pool_with_a_damaged_file_in_a_directory();
    let fs = mount_tiered(pm.clone(), ssd.clone());
    (pm, ssd, fs, ino)
}

#[test]
fn fsck_data_names_the_path_of_a_file_with_damaged_data() {
    let (pm, ssd, ino, block) = pool_with_a_damaged_file_in_a_directory();
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd)];
    let report = fsck::check_data(&*pm, &tiers, &mut |_, _| {}).unwrap();
    assert_eq!(report.data_problems, 1, "{:?}", report.problems);
    let want = format!(
        "inode {ino} (/dir/big): file block 100 on tier 1 block {block}: checksum mismatch"
    );
    assert!(
        report.problems.iter().any(|p| p.starts_with(&want)),
        "{:?}",
        report.problems
    );
}

#[test]
fn scrub_names_the_path_of_a_file_with_damaged_data() {
    let (_pm, _ssd, fs, ino) = mount_damaged();
    let r = fs.scrub(0, true);
    assert_eq!(r.bad_blocks, 1);
    assert_eq!(r.unrepairable.len(), 1, "{:?}", r.unrepairable);
    let want = format!(
        "inode {ino}, bytes {}..{} of /dir/big (data on tier 1",
        100 * BS,
        101 * BS
    );
    assert!(
        r.unrepairable[0].starts_with(&want),
        "{}",
        r.unrepairable[0]
    );
    assert!(
        fs.take_notices().iter().any(|n| n.contains(&want)),
        "the daemon's log names the path too"
    );
}

#[test]
fn the_daemons_checksum_mismatch_line_names_the_inode_read() {
    let (_pm, _ssd, fs, ino) = mount_damaged();
    let _ = fs.take_notices();
    let e = fs.read(ino, 100 * BS, 10).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let lines: Vec<String> = fs
        .take_notices()
        .into_iter()
        .filter(|n| n.contains("checksum mismatch"))
        .collect();
    assert!(!lines.is_empty());
    assert!(
        lines
            .iter()
            .all(|l| l.contains(&format!("data of inode {ino} "))),
        "{lines:?}"
    );
}

#[test]
fn a_file_whose_move_found_damaged_data_says_so_until_its_data_changes() {
    let (_pm, _ssd, fs, ino) = mount_damaged();
    let moves = || String::from_utf8(fs.getxattr(ino, b"user.terrace.moves").unwrap()).unwrap();
    assert_eq!(moves(), "", "no move has found anything yet");
    assert_eq!(
        fs.migrate_file(ino, 0).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    let said = moves();
    assert!(
        said.starts_with("damaged") && said.contains("until the file's data changes"),
        "{said}"
    );
    // A change of its data: the next move is tried again, so nothing stops it.
    fs.write(ino, 0, b"new").unwrap();
    fs.fsync(ino, false).unwrap();
    assert_eq!(moves(), "");
    // A read-only view: it cannot be set.
    let e = fs.setxattr(ino, b"user.terrace.moves", b"", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
}
