use super::*;

fn pool() -> Fs {
    crate::test_pools::tiered_pool(16).2
}

/// Makes clean copies of the first 8 blocks of `ino` on the SSD tier (the
/// PM side stays); returns where the copy is.
fn copy_to_ssd(fs: &Fs, ino: Ino) -> (TierId, PhysBlock) {
    fs.move_ranges(ino, TierId::PM, TierId(1), &[(FileBlock(0), 8)], Mode::Copy)
        .unwrap();
    first_extent(fs, ino).copy.expect("a clean copy")
}

/// Root, no umask: who creates the tests' files.
const ROOT: crate::Ctx = crate::Ctx {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn first_extent(fs: &Fs, ino: Ino) -> crate::extent_map::Extent {
    let g = fs.lock(ino).unwrap();
    g.as_ref().unwrap().extents.find(FileBlock(0)).unwrap().1
}

#[test]
fn rewrites_of_clean_pm_data_count_for_the_dirty_list_and_reads_for_the_clean_one() {
    let fs = pool();
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    fs.write(f.ino, 0, &[1u8; 8 * 4096]).unwrap();
    // Clean copies of all 8 blocks on the SSD tier; the PM side stays.
    copy_to_ssd(&fs, f.ino);
    let m = &fs.migrator;
    let hits = || {
        (
            m.window_clean_hits.load(Ordering::Relaxed),
            m.window_dirty_hits.load(Ordering::Relaxed),
        )
    };
    let before = hits();
    fs.read(f.ino, 0, 4096).unwrap();
    let after_read = hits();
    assert!(
        after_read.0 > before.0,
        "a read of clean data is a clean hit"
    );
    // Rewriting clean data shows that it is written: a dirty-list hit.
    fs.write(f.ino, 4096, &[2u8; 2 * 4096]).unwrap();
    let after_write = hits();
    assert_eq!(
        after_write.0, after_read.0,
        "a rewrite counted for the clean list"
    );
    assert_eq!(after_write.1, after_read.1 + 2);
}

#[test]
fn a_move_prepared_before_a_collapse_or_insert_never_lands_on_the_shifted_blocks() {
    for mode in [
        crate::FallocateMode::CollapseRange,
        crate::FallocateMode::InsertRange,
    ] {
        let fs = pool();
        let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
        let data: Vec<u8> = (0..8 * 4096u32).map(|i| (i / 4096 + 1) as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        // A move of file blocks 2..6 to the SSD is copied, not committed ...
        let mut batch = MoveBatch::new(&fs, u64::MAX);
        batch
            .add(
                f.ino,
                TierId::PM,
                TierId(1),
                &[(FileBlock(2), 4)],
                Mode::Move,
            )
            .unwrap();
        // ... while the file's blocks shift by one.
        fs.fallocate(f.ino, 4096, 4096, mode).unwrap();
        let mut want = data.clone();
        if mode == crate::FallocateMode::CollapseRange {
            want.drain(4096..8192);
        } else {
            want.splice(4096..4096, std::iter::repeat(0).take(4096));
        }
        let (moved, r) = batch.finish();
        r.unwrap();
        assert_eq!(moved, 0, "{mode:?}: a stale move committed");
        assert_eq!(fs.read(f.ino, 0, want.len() + 1).unwrap(), want, "{mode:?}");
        fs.check_allocator().unwrap();
    }
}

#[test]
fn a_move_prepared_for_a_deleted_file_never_lands_in_the_file_reusing_its_slot() {
    let fs = pool();
    let d = fs.mkdir(1, b"d", 0o755, ROOT).unwrap().ino;
    let f = fs.mknod(d, b"old", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    fs.write(f.ino, 0, &[1u8; 4096]).unwrap();
    let old_block = first_extent(&fs, f.ino);
    // The move is copied but not committed (a large sync window) ...
    let mut batch = MoveBatch::new(&fs, u64::MAX);
    batch
        .add(
            f.ino,
            TierId::PM,
            TierId(1),
            &[(FileBlock(0), 1)],
            Mode::Move,
        )
        .unwrap();
    // ... while the file is deleted and a new file takes its slot, its
    // first write landing on the same PM block with the same per-file
    // sequence number: everything the old checks compared is equal.
    fs.unlink(d, b"old").unwrap();
    fs.forget(f.ino, 1);
    let g = fs.mknod(d, b"new", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    // Log pages (whole or in slabs) come from the same allocator, which
    // starts each allocation in the next shard: turn it to the shard of
    // the old block, where first fit finds that block again.
    for _ in 0..fs.alloc.shard_count() {
        if fs.alloc.next_shard_holds(old_block.block) {
            break;
        }
        let b = fs.alloc.alloc_one().unwrap();
        fs.alloc.free_run(b, 1);
    }
    fs.write(g.ino, 0, &[2u8; 4096]).unwrap();
    let new_block = first_extent(&fs, g.ino);
    assert_eq!(
        g.ino, f.ino,
        "the slot was not reused: the test proves nothing"
    );
    assert_eq!(
        (new_block.block, new_block.seq),
        (old_block.block, old_block.seq)
    );
    let (moved, r) = batch.finish();
    r.unwrap();
    assert_eq!(moved, 0);
    assert_eq!(fs.read(g.ino, 0, 4096).unwrap(), vec![2u8; 4096]);
    fs.check_allocator().unwrap();
}

#[test]
fn migration_passes_read_pms_split_from_running_totals_and_never_scan_the_inode_table() {
    let fs = pool();
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    fs.write(f.ino, 0, &[1u8; 64 << 10]).unwrap();
    let scans = || fs.migrator.split_scans.load(Ordering::Relaxed);
    let before = scans();
    for _ in 0..5 {
        fs.migration_pass();
    }
    assert_eq!(scans(), before, "an idle pass scanned the inode table");
    // PM past its threshold: the split decides what counts; it comes from
    // the running totals, which match a scan after the pass moved data.
    let g = fs.mknod(1, b"g", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    fs.write(g.ino, 0, &vec![2u8; 13 << 20]).unwrap();
    assert!(fs.migration_pass() > 0, "nothing moved over the threshold");
    assert_eq!(scans(), before, "a pass scanned the inode table");
    assert_eq!(fs.pm_clean_dirty(), fs.scan_pm_clean_dirty());
    fs.check_allocator().unwrap();
}

#[test]
fn a_copy_drop_prepared_before_the_copy_was_replaced_commits_nothing_and_keeps_the_new_copy() {
    let fs = pool();
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    fs.write(f.ino, 0, &[7u8; 8 * 4096]).unwrap();
    let old = copy_to_ssd(&fs, f.ino);
    // A drop of that copy is prepared (a tier removal, a cleaner) ...
    let mut batch = MoveBatch::new(&fs, u64::MAX);
    batch
        .add(
            f.ino,
            TierId(1),
            TierId::PM,
            &[(FileBlock(0), 8)],
            Mode::DropCopy,
        )
        .unwrap();
    // ... while another drop takes it and a new copy lands elsewhere. The
    // primary's blocks never changed; each copy entry gives the extent a
    // new sequence number, which is what the commit sees.
    fs.move_ranges(
        f.ino,
        TierId(1),
        TierId::PM,
        &[(FileBlock(0), 8)],
        Mode::DropCopy,
    )
    .unwrap();
    // Keep the old copy's blocks taken, so the new copy lands elsewhere.
    let hold = fs.tier(TierId(1)).unwrap().space.alloc(8);
    let new = copy_to_ssd(&fs, f.ino);
    assert_ne!(
        new, old,
        "the new copy reused the old blocks: the test proves nothing"
    );
    let (_, r) = batch.finish();
    r.unwrap();
    assert_eq!(
        first_extent(&fs, f.ino).copy,
        Some(new),
        "the new copy was dropped"
    );
    if let Some(runs) = hold {
        for (b, n) in runs {
            fs.tier(TierId(1)).unwrap().free(b, n);
        }
    }
    fs.check_allocator().unwrap();
    assert_eq!(fs.read(f.ino, 0, 8 * 4096).unwrap(), vec![7u8; 8 * 4096]);
}

#[test]
fn evicting_data_whose_clean_copy_a_clone_could_share_leaves_one_copy() {
    let fs = pool();
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    let data: Vec<u8> = (0..8 * 4096u32).map(|k| (k % 251) as u8).collect();
    fs.write(f.ino, 0, &data).unwrap();
    let g = fs.mknod(1, b"g", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
    assert_eq!(
        fs.copy_range(f.ino, 0, g.ino, 0, 8 * 4096).unwrap(),
        8 * 4096
    );
    // Each file gets a clean copy of the shared PM blocks of its own.
    copy_to_ssd(&fs, f.ino);
    copy_to_ssd(&fs, g.ino);
    let ssd_used = |fs: &Fs| fs.status().tiers[1].used;
    assert_eq!(ssd_used(&fs), 16 * 4096);
    // Dropping the PM side promotes one file's copy; the other file follows
    // it, and its own copy is freed.
    assert!(fs.evict_clean(u64::MAX) > 0);
    for ino in [f.ino, g.ino] {
        let e = first_extent(&fs, ino);
        assert_eq!(e.tier, TierId(1));
        assert_eq!(e.copy, None);
        assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    }
    assert_eq!(
        first_extent(&fs, f.ino).block,
        first_extent(&fs, g.ino).block
    );
    assert_eq!(ssd_used(&fs), 8 * 4096, "one copy is left");
    assert_eq!(fs.shared_block_stats().get(&1).copied(), Some((8, 8)));
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// A PM over its threshold that holds only data pinned there has nothing a
/// drain may move: the pass that finds that out makes the next ones skip
/// PM's look (split and drain) for a while ([`crate::worker::IdleBackoff`]),
/// instead of walking the inode table every 100 ms for ever (a mover that
/// spins). Once the data may move again, it moves.
#[test]
fn a_pm_full_of_pinned_data_is_looked_at_again_after_a_wait_not_every_pass() {
    let fs = pool();
    let db = fs.mkdir(1, b"db", 0o755, ROOT).unwrap().ino;
    fs.setxattr(db, b"user.terrace.rule", b"pm", 0).unwrap();
    let mut files = Vec::new();
    for k in 0..12u8 {
        let f = fs
            .mknod(
                db,
                format!("t{k}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                ROOT,
            )
            .unwrap();
        fs.write(f.ino, 0, &vec![k; 1 << 20]).unwrap();
        files.push(f.ino);
    }
    let looks = || fs.migrator.pm_looks.load(Ordering::Relaxed);
    // The first pass looks, and finds nothing it may move.
    assert_eq!(fs.migration_pass(), 0);
    let before = looks();
    assert!(before > 0, "PM over its threshold was not looked at");
    let start = Instant::now();
    for _ in 0..20 {
        assert_eq!(fs.migration_pass(), 0);
    }
    // Each due look doubles the next wait (from 200 ms): whatever the
    // machine's speed, far fewer looks than passes.
    let allowed = 1 + (start.elapsed().as_millis() / 200) as u64;
    assert!(
        looks() - before <= allowed,
        "{} looks at PM in 20 passes over {:?}",
        looks() - before,
        start.elapsed()
    );
    // Without the rule the data may move: a pass after the wait moves it.
    fs.removexattr(db, b"user.terrace.rule").unwrap();
    for &f in &files {
        fs.removexattr(f, b"user.terrace.rule").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut moved = 0;
    while moved == 0 && Instant::now() < deadline {
        moved += fs.migration_pass();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(moved > 0, "unpinned data never moved after the back-off");
}

/// A drain that moves nothing is said at once in the status, but the
/// daemon's log hears of it only once it has lasted `STALL_LOG_AFTER`
/// (short stalls — data still cached, files a `migrate` command is moving —
/// are the normal course of a busy pool and filled the log with pairs of
/// lines), once per stall, and then hears when data moves again.
#[test]
fn a_stall_reaches_the_log_only_once_it_has_lasted_and_then_once() {
    let fs = pool();
    let stalls = |fs: &Fs| {
        fs.take_notices()
            .into_iter()
            .filter(|n| n.contains("migration stalled") || n.contains("moves data again"))
            .collect::<Vec<_>>()
    };
    // A short stall and its end: nothing for the log.
    fs.note_drain_result(TierId::PM, TierId(1), 0);
    assert!(fs
        .migration_status()
        .waiting
        .starts_with("nothing on tier 0"));
    fs.note_drain_result(TierId::PM, TierId(1), 4096);
    assert!(fs.migration_status().waiting.is_empty());
    assert_eq!(stalls(&fs), Vec::<String>::new());
    // A stall that lasts: one line, however many drains it spans.
    fs.note_drain_result(TierId::PM, TierId(1), 0);
    fs.migrator.waiting.lock().since = Instant::now().checked_sub(STALL_LOG_AFTER);
    for _ in 0..5 {
        fs.note_drain_result(TierId::PM, TierId(1), 0);
    }
    let got = stalls(&fs);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("migration stalled: nothing on tier 0 can move to tier 1"));
    fs.note_drain_result(TierId::PM, TierId(1), 4096);
    assert_eq!(stalls(&fs), vec!["migration from tier 0 moves data again"]);
}

/// While tier 1 is being removed (retiring: its evacuation may run for
/// hours, `tier_evacuate.rs`) PM keeps draining, into the tier below it:
/// the drain still aims at the next tier, but its allocation passes over a
/// retiring one. (A review of the evacuation feared PM would stop draining
/// and fill; this pins down that it does not.)
#[test]
fn pm_drains_past_a_tier_being_removed_into_the_one_below() {
    use terrace_format::{TierKind, TierRecord, DEFAULT_EXTENT_SIZE};
    use terrace_media::{BlockMedia, MemBlock, MemMedia, PmMedia};
    let pm = Arc::new(MemMedia::new(16 << 20));
    let (ssd, hdd) = (
        Arc::new(MemBlock::new(32 << 20)),
        Arc::new(MemBlock::new(64 << 20)),
    );
    let tier = |id, kind, size, extent_size| TierRecord {
        id,
        kind,
        size,
        extent_size,
        path: "t".into(),
        epoch: 0,
    };
    let params = crate::FormatParams {
        uuid: [3; 16],
        inode_count: 64,
        tiers: vec![
            tier(0, TierKind::Pm, pm.len(), 0),
            tier(1, TierKind::Ssd, ssd.len(), DEFAULT_EXTENT_SIZE),
            tier(2, TierKind::Hdd, hdd.len(), DEFAULT_EXTENT_SIZE),
        ],
        root_uid: 0,
        root_gid: 0,
    };
    crate::format(&*pm, &params).unwrap();
    let fs = Fs::mount_with_tiers(
        pm.clone() as Arc<dyn PmMedia>,
        vec![
            (1, ssd.clone() as Arc<dyn BlockMedia>),
            (2, hdd.clone() as Arc<dyn BlockMedia>),
        ],
    )
    .unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("migration_threshold", "20").unwrap();
    fs.set_setting("size_fresh_large_bytes", "0").unwrap();
    let mut files = Vec::new();
    for n in 0..6u8 {
        let f = fs
            .mknod(
                1,
                format!("f{n}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                ROOT,
            )
            .unwrap();
        let data = vec![n + 1; 1 << 20];
        fs.write(f.ino, 0, &data).unwrap();
        files.push((f.ino, data));
    }
    fs.tier(TierId(1)).unwrap().space.set_retiring(true);
    let moved = fs.migration_pass();
    let st = fs.status();
    assert!(moved > 0, "PM drained nothing: {:?}", st.migration);
    assert_eq!(st.tiers[1].used, 0, "data landed on the retiring tier");
    assert!(
        st.tiers[2].used > 0,
        "nothing reached the HDD: {:?}",
        st.tiers
    );
    for (ino, data) in &files {
        assert!(fs.read(*ino, 0, data.len()).unwrap() == *data);
    }
    fs.tier(TierId(1)).unwrap().space.set_retiring(false);
}
