//! The inode table grows while mounted (design.md §3.7): a pool whose slots
//! ran out takes PM blocks for more instead of failing creates with ENOSPC
//! while it has room, keeps them across remounts, and a crash at any point
//! of a growth recovers to the state before the create or after it.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::{CrashMedia, LossMode, MemMedia, PmMedia};

/// Creates `n` files `f<k>` holding `k` as text in the root; returns them.
fn create_files(fs: &Fs, from: u64, n: u64) -> Vec<(u64, Vec<u8>)> {
    (from..from + n)
        .map(|k| {
            let data = k.to_string().into_bytes();
            (write_file(fs, &format!("f{k}"), &data), data)
        })
        .collect()
}

#[test]
fn a_pool_creates_far_more_files_than_its_first_inode_table_holds() {
    // 4 KiB of PM data a file.
    let (pm, fs) = pm_pool(64 << 20, 64);
    let before = fs.statfs();
    assert_eq!(before.files - before.ffree, 1, "the root");
    assert!(
        before.ffree > 64 * 100,
        "statfs counts the slots the table can grow by: {before:?}"
    );
    // 63 slots at mkfs; three growths of 4,096.
    let files = create_files(&fs, 0, 10_000);
    let after = fs.statfs();
    assert_eq!(after.files - after.ffree, 10_001, "{after:?}");
    assert_files(&fs, &files, "after growing");
    fs.check_allocator().unwrap();
    let notices = fs.take_notices().join("\n");
    assert!(notices.contains("inode table grew"), "{notices}");
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, None, Fsck::Metadata, "after unmount");
    let fs = mount(pm.clone());
    assert_files(&fs, &files, "after a remount");
    fs.check_allocator().unwrap();
    // Deletes give the slots back; they are used again, not grown anew.
    let grown = fs.status().inodes_total;
    for k in 0..5_000 {
        fs.unlink(1, format!("f{k}").as_bytes()).unwrap();
    }
    let again = create_files(&fs, 20_000, 5_000);
    assert_eq!(fs.status().inodes_total, grown);
    assert_files(&fs, &again, "slots used again");
    fs.unmount().unwrap();
}

/// Creates empty files `<prefix><k>` until a create fails; returns how many
/// were made and the error.
fn create_until_refused(fs: &Fs, prefix: &str) -> (u64, std::io::Error) {
    let mut k = 0u64;
    loop {
        match fs.mknod(
            1,
            format!("{prefix}{k}").as_bytes(),
            libc::S_IFREG | 0o644,
            0,
            CTX,
        ) {
            Ok(_) => k += 1,
            Err(e) => return (k, e),
        }
        assert!(k < 1_000_000, "the cap never stopped the table");
    }
}

#[test]
fn raising_inode_max_percent_lets_a_table_stopped_by_its_cap_grow_again() {
    let (_pm, fs) = pm_pool(16 << 20, 64);
    fs.set_setting("inode_max_percent", "5").unwrap();
    let (first, err) = create_until_refused(&fs, "a");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let st = fs.statfs();
    assert_eq!(st.ffree, 0, "df -i shows the table full: {st:?}");
    assert!(
        st.bfree > st.blocks / 2,
        "stopped by the cap, not by PM: {st:?}"
    );
    let notices = fs.take_notices().join("\n");
    assert_eq!(
        notices.matches("inode table full").count(),
        1,
        "said once, naming the setting: {notices}"
    );
    assert!(notices.contains("inode_max_percent=5"), "{notices}");
    assert!(fs.mknod(1, b"x", libc::S_IFREG | 0o644, 0, CTX).is_err());
    assert!(
        !fs.take_notices().join("").contains("inode table full"),
        "not again"
    );
    // The cap is a setting: raised, the table grows again at once.
    fs.set_setting("inode_max_percent", "20").unwrap();
    assert!(fs.statfs().ffree > 2 * first, "{:?}", fs.statfs());
    let (more, _) = create_until_refused(&fs, "b");
    assert!(
        more > 2 * first,
        "5 % gave {first} files, 20 % only {more} more"
    );
    // Lowered, it stops growth but takes nothing back.
    fs.set_setting("inode_max_percent", "1").unwrap();
    assert_eq!(fs.statfs().ffree, 0);
    let a0 = fs.lookup(1, b"a0").unwrap().ino;
    fs.unlink(1, b"a0").unwrap();
    // The kernel's references (the create's and the lookup's) go with it.
    fs.forget(a0, 2);
    fs.mknod(1, b"again", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    assert!(fs.set_setting("inode_max_percent", "91").is_err());
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_pool_whose_pm_is_full_refuses_creates_with_enospc_and_keeps_what_it_has() {
    // 1 MiB of PM: the table cannot grow far; creates end with ENOSPC.
    let (pm, fs) = pm_pool(1 << 20, 64);
    let mut files = Vec::new();
    let err = loop {
        let k = files.len() as u64;
        match fs.mknod(1, format!("f{k}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX) {
            Ok(a) => {
                let data = k.to_string().into_bytes();
                match fs.write(a.ino, 0, &data) {
                    Ok(_) => files.push((a.ino, data)),
                    Err(e) => break e,
                }
            }
            Err(e) => break e,
        }
        assert!(files.len() < 100_000, "1 MiB of PM cannot hold this many");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(files.len() > 64, "the table grew first: {}", files.len());
    assert_files(&fs, &files, "when full");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, None, Fsck::Metadata, "full pool");
    let fs = mount(pm);
    assert_files(&fs, &files, "after a remount");
}

#[test]
fn a_crash_anywhere_in_a_growth_recovers_to_before_or_after_the_create() {
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 16);
    let mut rng = StdRng::seed_from_u64(base_seed("inode growth crash"));
    for round in 0..2 {
        // Blocks that held data, freed: what the growth takes next may hold
        // old bytes, which a slot must never show.
        let junk = file_holding(&fs, "junk", &pattern(round + 7, 1 << 20));
        fs.fsync(junk, false).unwrap();
        fs.unlink(1, b"junk").unwrap();
        fs.forget(junk, 1);
        // Take every free slot (empty files: PM is small); the next create
        // grows the table.
        let st = fs.status();
        for k in 0..st.inodes_total - st.inodes_used {
            file(&fs, 1, &format!("e{round}-{k}"));
        }
        let before = fs_tree(&fs);
        let name = format!("grow{round}");
        let (got, trace) =
            media.trace(|| fs.mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX));
        got.unwrap();
        let after = fs_tree(&fs);
        let n = trace.len();
        assert!(n > 100, "a growth persists many stores: {n}");
        let mut points: Vec<usize> = (0..30).map(|_| rng.gen_range(0..=n)).collect();
        points.extend([0, n]);
        for k in points {
            for mode in [
                LossMode::AllUnflushed,
                LossMode::RandomLines(rng.gen()),
                LossMode::RandomWords(rng.gen()),
            ] {
                let ctx = format!("round {round}: crash after event {k}/{n} {mode:?}");
                let (pm, fs2) = recover(trace.image_at(k, mode), None, Fsck::Metadata, &ctx);
                assert_before_or_after(&fs_tree(&fs2), &before, &after, k == n, &ctx);
                // The recovered pool grows again where it must.
                let more = create_files(&fs2, 1_000, 40);
                assert_files(&fs2, &more, &ctx);
                fs2.check_allocator()
                    .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
                fs2.unmount().unwrap();
                assert_fsck_clean(&*pm, None, Fsck::Metadata, &ctx);
            }
        }
    }
    fs.unmount().unwrap();
}

#[test]
fn a_corrupt_inode_map_entry_refuses_the_mount_with_a_clear_error() {
    let pm = Arc::new(MemMedia::new(8 << 20));
    mkfs(&*pm, 64);
    let fs = mount(pm.clone());
    create_files(&fs, 0, 200);
    fs.unmount().unwrap();
    drop(fs);
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    let map = sb.inode_map_blocks[0];
    // The second entry names block 1 (superblock copy B).
    pm.store_u64(map * 4096 + 8, 1);
    pm.persist(map * 4096 + 8, 8);
    let err = Fs::mount(pm.clone()).err().expect("refused").to_string();
    assert!(
        err.contains("inode map block") && err.contains("outside the page pool"),
        "{err}"
    );
}
