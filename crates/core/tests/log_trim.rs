//! Trimming a directory's log from its head (`log_trim.rs`): the dropped
//! pages' names are gone for good, what they alone held comes back from
//! E, and a crash at any point of a trim leaves the same tree.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_media::{CrashMedia, LossMode, PmMedia};

/// A directory `d` whose log starts with many names since removed, with a
/// few names made early and kept, an xattr and a subdirectory; then many
/// more names, so that the live names keep compaction from rewriting the
/// log (it waits for three times the live entries' room). Returns the
/// directory's inode.
fn directory_with_a_dead_head(fs: &terrace_core::Fs) -> u64 {
    let d = fs.mkdir(1, b"d", 0o750, CTX).unwrap().ino;
    fs.setxattr(d, b"user.kept", b"set before the names", 0)
        .unwrap();
    early_then_late_names(
        fs,
        d,
        |i| i % 100 == 7,
        || {
            fs.mkdir(d, b"sub", 0o700, CTX).unwrap();
        },
    );
    d
}

/// In directory `d`: 600 names, then `between()`, then those names removed
/// but the ones `kept` keeps, then 4,500 more names.
fn early_then_late_names(
    fs: &terrace_core::Fs,
    d: u64,
    kept: impl Fn(u32) -> bool,
    between: impl FnOnce(),
) {
    let early = |i: u32| format!("early-{i:04}-with-a-long-name");
    for i in 0..600u32 {
        fs.mknod(d, early(i).as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
    }
    between();
    for i in (0..600u32).filter(|&i| !kept(i)) {
        fs.unlink(d, early(i).as_bytes()).unwrap();
    }
    for i in 0..4500u32 {
        let name = format!("late-{i}");
        fs.mknod(d, name.as_bytes(), libc::S_IFREG | 0o600, 0, CTX)
            .unwrap();
    }
}

#[test]
fn a_trim_frees_the_pages_of_removed_names_and_the_tree_survives_a_remount() {
    let (m, fs) = pm_pool(16 << 20, 8192);
    let d = directory_with_a_dead_head(&fs);
    let tree = fs_tree(&fs);
    let free_before = fs.space_status().pm_free_bytes;
    assert!(fs.trim_dir_log(d).unwrap(), "nothing to trim");
    let freed = fs.space_status().pm_free_bytes - free_before;
    assert!(freed >= 32 << 10, "the trim freed {freed} bytes");
    assert_same_tree(&fs_tree(&fs), &tree, "after the trim");
    assert!(!fs.trim_dir_log(d).unwrap(), "a second trim found more");
    fs.check_allocator().unwrap();
    // Changes after the trim append to the new chain.
    fs.unlink(d, b"late-3").unwrap();
    fs.setxattr(d, b"user.after", b"x", 0).unwrap();
    let tree = fs_tree(&fs);
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*m, None, Fsck::Metadata, "after the trim");
    let fs = mount(m.clone() as std::sync::Arc<dyn PmMedia>);
    assert_same_tree(&fs_tree(&fs), &tree, "remounted");
    assert_eq!(
        fs.getxattr(d, b"user.kept").unwrap(),
        b"set before the names"
    );
    fs.check_allocator().unwrap();
}

#[test]
fn a_crash_at_any_point_of_a_trim_leaves_the_same_tree() {
    let (media, fs) = pm_pool_on(CrashMedia::new(16 << 20), 8192);
    let d = directory_with_a_dead_head(&fs);
    let tree = fs_tree(&fs);
    media.sync_all().unwrap();
    let (trimmed, trace) = media.trace(|| fs.trim_dir_log(d).unwrap());
    assert!(trimmed);
    let mut rng = StdRng::seed_from_u64(base_seed("log trim crash test"));
    let n = trace.len();
    // The events of the commit (the last few) and a sample of the staging.
    let samples = env_u64("TERRACE_TRIM_CRASH_POINTS", 24) as usize;
    let mut points: Vec<usize> = (0..samples).map(|_| rng.gen_range(0..=n)).collect();
    points.extend(n.saturating_sub(6)..=n);
    points.push(0);
    points.sort_unstable();
    points.dedup();
    for k in points {
        for mode in [
            LossMode::AllUnflushed,
            LossMode::RandomLines(rng.gen()),
            LossMode::RandomWords(rng.gen()),
        ] {
            let what = format!("trim, crash after event {k}/{n} {mode:?}");
            let (m2, fs2) = recover(trace.image_at(k, mode), None, Fsck::Metadata, &what);
            assert_same_tree(&fs_tree(&fs2), &tree, &what);
            fs2.unmount().unwrap();
            assert_fsck_clean(&*m2, None, Fsck::Metadata, &what);
        }
    }
}

/// A directory whose log starts with `kept` names of `len` bytes (kept),
/// then 600 names since removed, then 4,500 more: its inode.
fn directory_keeping_early_names(fs: &terrace_core::Fs, kept: u32, len: usize) -> u64 {
    let d = fs.mkdir(1, b"d", 0o750, CTX).unwrap().ino;
    let long = |i: u32| format!("{i:05}{}", "k".repeat(len - 5));
    for i in 0..kept {
        fs.mknod(d, long(i).as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
    }
    early_then_late_names(fs, d, |_| false, || {});
    d
}

#[test]
fn every_trim_that_reports_success_frees_a_block_so_trims_in_a_row_end() {
    // E's sizes around the ones whose pages (256 B to 4 KiB, growing) a
    // second trim would once replace by the same pages, reporting success
    // each time while freeing nothing: a removal retrying after each trim
    // never ended.
    for (kept, len) in [
        (1, 255),
        (6, 255),
        (10, 255),
        (11, 255),
        (12, 255),
        (13, 255),
        (14, 255),
        (20, 255),
        (64, 29),
        (66, 29),
        (67, 29),
        (70, 29),
    ] {
        let (_m, fs) = pm_pool(16 << 20, 8192);
        let d = directory_keeping_early_names(&fs, kept, len);
        let tree = fs_tree(&fs);
        let mut trims = 0;
        loop {
            let free = fs.space_status().pm_free_bytes;
            if !fs.trim_dir_log(d).unwrap() {
                break;
            }
            trims += 1;
            let gained = fs.space_status().pm_free_bytes as i64 - free as i64;
            assert!(
                gained >= 4096,
                "{kept} names of {len} bytes: trim {trims} reported success but freed {gained} bytes"
            );
            assert!(
                trims <= 3,
                "{kept} names of {len} bytes: {trims} trims in a row"
            );
        }
        assert!(
            trims >= 1,
            "{kept} names of {len} bytes: nothing was trimmed"
        );
        assert_same_tree(&fs_tree(&fs), &tree, "after the trims");
        fs.check_allocator().unwrap();
    }
}
