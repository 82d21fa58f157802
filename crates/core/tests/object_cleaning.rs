//! Object cleaning (design §5n): deleting and overwriting data on an object
//! tier leaves its parts partly dead; cleaning passes rewrite their live
//! blocks into new parts so the old ones die and are deleted, the stored
//! bytes drop to the live bytes, every file reads back, fsck and the
//! allocator check stay clean; a pass is bounded, waits for its interval and
//! skips an unreachable store; a crash between the upload of rewritten data
//! and its commit (or between the commit and the old part's delete) loses
//! nothing and leaves orphans the next mount deletes. On the in-memory store
//! behind PM and an SSD.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::object::{Bucket, FaultStore, PutFault};
use terrace_media::{MemBlock, MemMedia, ObjectMedia};

const PM: u64 = 16 << 20;
const SSD: u64 = 16 << 20;
const S3: u64 = 64 << 20;
/// One segment per extent: one part.
const SEGMENT: u64 = SEGMENT_BLOCKS * 4096;
/// 48 files of 64 KiB: six full parts of eight files each.
const FILES: u64 = 48;
const FILE: usize = 64 << 10;
/// Bytes overwritten at the start of every fourth file.
const OVERWRITE: usize = 16 << 10;

/// A pool with an object tier whose parts are partly dead.
struct Setup {
    pm: Arc<MemMedia>,
    ssd: Arc<MemBlock>,
    /// A bucket over the store itself (no faults): what a remount opens.
    plain: Bucket,
    fault: Arc<FaultStore>,
    s3: Arc<ObjectMedia>,
    fs: Fs,
    /// The files left and what they hold.
    files: Vec<(u64, Vec<u8>)>,
}

/// Opens the object tier again over the store itself (no faults).
fn reopen(plain: &Bucket) -> Arc<ObjectMedia> {
    open_object_tier(same_store(plain))
}

/// The live file data on the object tier once `fragmented` is done.
fn live_bytes() -> u64 {
    ((FILES / 2) * FILE as u64) - (FILES / 4) * OVERWRITE as u64
}

/// fsck finds the pool clean; returns the orphan parts it counted.
fn fsck_clean(pm: &MemMedia, ssd: &Arc<MemBlock>, s3: &Arc<ObjectMedia>) -> u64 {
    fsck_object_clean(pm, ssd.clone(), s3.clone(), "fsck").object_orphans
}

/// Writes 48 files, migrates them to the object tier in one batch (six
/// parts of eight files each), deletes every other file and overwrites the
/// first 16 KiB of every fourth: each part is then 7/16 live.
fn fragmented() -> Setup {
    let pm = Arc::new(MemMedia::new(PM));
    mkfs_object(&*pm, SSD, S3, 256);
    let ssd = Arc::new(MemBlock::new(SSD));
    let (plain, fault, faulty) = faulty_memory_store();
    let s3 = create_object_tier(faulty, S3);
    let fs = mount_object(pm.clone(), ssd.clone(), s3.clone());
    // One mover: one batch, parts of whole segments.
    fs.set_setting("migration_threads", "1").unwrap();
    let mut all = Vec::new();
    for i in 0..FILES {
        let data = pattern(100 + i, FILE);
        let ino = write_file(&fs, &format!("f{i}"), &data);
        all.push((i, ino, data));
    }
    let inos: Vec<u64> = all.iter().map(|f| f.1).collect();
    let (moved, errors) = fs.migrate_files(&inos, 2).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(moved, FILES * FILE as u64);
    let st = s3.object_stats();
    assert_eq!(st.stored_bytes, 6 * SEGMENT, "six parts");
    assert_eq!(st.live_bytes, st.stored_bytes);
    let mut files = Vec::new();
    for (i, ino, mut data) in all {
        if i % 2 == 1 {
            fs.unlink(1, format!("f{i}").as_bytes()).unwrap();
            continue;
        }
        if i % 4 == 0 {
            let new = pattern(1000 + i, OVERWRITE);
            fs.write(ino, 0, &new).unwrap();
            fs.fsync(ino, false).unwrap();
            data[..OVERWRITE].copy_from_slice(&new);
        }
        files.push((ino, data));
    }
    fs.reclaim_object_tiers();
    let st = s3.object_stats();
    assert_eq!(st.live_bytes, live_bytes());
    assert_eq!(st.stored_bytes, 6 * SEGMENT, "no part is whole dead");
    Setup {
        pm,
        ssd,
        plain,
        fault,
        s3,
        fs,
        files,
    }
}

#[test]
fn cleaning_rewrites_partly_dead_parts_until_stored_bytes_are_the_live_bytes() {
    let s = fragmented();
    let (fs, s3) = (&s.fs, &s.s3);
    let before = s3.object_stats();
    assert_eq!(fs.clean_object_tiers(), 6, "every part is 7/16 live");
    let after = s3.object_stats();
    assert_eq!(after.live_bytes, live_bytes(), "nothing live lost");
    assert_eq!(
        after.stored_bytes, after.live_bytes,
        "the old parts are deleted, the new ones are whole"
    );
    assert_eq!(after.dead_parts, 0);
    assert!(after.parts < before.parts, "{after:?}");
    // What status says.
    let c = fs.status().tiers[2].object.clone().unwrap().cleaning;
    assert_eq!(c.passes, 1);
    assert_eq!(c.parts_cleaned, 6);
    assert_eq!(c.bytes_rewritten, live_bytes());
    assert_eq!(c.bytes_reclaimed, 6 * SEGMENT);
    let eff = c.efficiency.unwrap();
    assert!((eff - (1.0 - live_bytes() as f64 / (6 * SEGMENT) as f64)).abs() < 1e-9);
    assert!(
        eff >= 0.5,
        "under 50% live: at least one byte back per byte rewritten"
    );
    assert_files(fs, &s.files, "after cleaning");
    fs.check_allocator().unwrap();
    // A second pass finds nothing to do.
    assert_eq!(fs.clean_object_tiers(), 0);
    assert_eq!(
        fs.status().tiers[2].object.clone().unwrap().cleaning.passes,
        1
    );
    fs.unmount().unwrap();
    drop((s.fs, s.s3));

    let s3 = reopen(&s.plain);
    assert_eq!(fsck_clean(&s.pm, &s.ssd, &s3), 0);
    let fs = mount_object(s.pm.clone(), s.ssd.clone(), s3.clone());
    assert_eq!(fs.mount_report().object_orphans, 0);
    assert_files(&fs, &s.files, "after a remount");
    let st = s3.object_stats();
    assert_eq!(st.stored_bytes, st.live_bytes);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn parts_above_the_threshold_stay_and_a_pass_rewrites_at_most_its_budget() {
    let s = fragmented();
    let (fs, s3) = (&s.fs, &s.s3);
    // 7/16 live is not under 40%.
    fs.set_setting("object_clean_live_percent", "40").unwrap();
    assert_eq!(fs.clean_object_tiers(), 0);
    assert_eq!(s3.object_stats().stored_bytes, 6 * SEGMENT);
    fs.set_setting("object_clean_live_percent", "50").unwrap();
    // Each part has 224 KiB live: 500 KiB per pass cleans two.
    fs.set_setting("object_clean_bytes_per_pass", "500K")
        .unwrap();
    let mut passes = 0;
    let mut rewritten = 0;
    while s3.object_stats().stored_bytes > s3.object_stats().live_bytes {
        let cleaned = fs.clean_object_tiers();
        assert_eq!(cleaned, 2, "pass {passes}");
        let c = fs.status().tiers[2].object.clone().unwrap().cleaning;
        assert!(c.bytes_rewritten - rewritten <= 500 << 10, "{c:?}");
        rewritten = c.bytes_rewritten;
        passes += 1;
        assert!(passes <= 3);
    }
    assert_eq!(passes, 3);
    assert_files(fs, &s.files, "after budgeted passes");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn the_thread_entry_waits_for_the_interval() {
    let s = fragmented();
    let fs = &s.fs;
    fs.set_setting("object_clean_bytes_per_pass", "500K")
        .unwrap();
    fs.set_setting("object_clean_interval_ns", "1h").unwrap();
    assert_eq!(fs.maybe_clean_object_tiers(), 2, "the first pass runs");
    assert_eq!(fs.maybe_clean_object_tiers(), 0, "the next waits an hour");
    fs.set_setting("object_clean_interval_ns", "0").unwrap();
    assert_eq!(fs.maybe_clean_object_tiers(), 2);
    assert_eq!(fs.maybe_clean_object_tiers(), 2);
    assert_eq!(fs.maybe_clean_object_tiers(), 0, "nothing left");
    fs.unmount().unwrap();
}

#[test]
fn no_pass_runs_while_the_store_is_unreachable() {
    let s = fragmented();
    let (fs, s3) = (&s.fs, &s.s3);
    // A migration whose upload fails marks the store failing.
    let ino = write_file(fs, "late", &pattern(7, 8192));
    s.fault.fail_puts_after(0, PutFault::Refuse);
    s.fault.fail_deletes_after(0);
    assert!(fs.migrate_file(ino, 2).is_err());
    assert!(s3.object_stats().failing.is_some());
    let requests = s3.object_stats().requests;
    assert_eq!(fs.clean_object_tiers(), 0);
    assert_eq!(s3.object_stats().requests, requests, "no request at all");
    let c = fs.status().tiers[2].object.clone().unwrap().cleaning;
    assert_eq!((c.passes, c.skipped_unreachable), (0, 1));
    // Back: the first request that succeeds clears the failure.
    s.fault.heal();
    fs.migrate_file(ino, 2).unwrap();
    assert!(s3.object_stats().failing.is_none());
    assert_eq!(fs.clean_object_tiers(), 6);
    assert_files(fs, &s.files, "after the store came back");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_crash_between_the_upload_of_rewritten_data_and_its_commit_loses_nothing() {
    let s = fragmented();
    let (fs, s3, fault) = (&s.fs, &s.s3, &s.fault);
    let stored = s3.object_stats().stored_bytes;
    // The pass uploads; the pool "crashes" (PM image taken) while its PUTs
    // are held, before any commit points at them. The process goes on
    // after the image, but deletes fail from then on, so the store keeps
    // what it held at the crash plus the late uploads.
    fault.hold_puts();
    let image = std::thread::scope(|sc| {
        let cleaner = sc.spawn(|| fs.clean_object_tiers());
        let t0 = std::time::Instant::now();
        while fault.puts_waiting() == 0 {
            if t0.elapsed().as_secs() >= 30 || cleaner.is_finished() {
                fault.release_puts();
                panic!("the pass uploaded nothing");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let image = s.pm.image();
        fault.fail_deletes_after(0);
        fault.release_puts();
        cleaner.join().unwrap();
        image
    });
    drop((s.fs, s.s3)); // no unmount: the crash
    let pm = Arc::new(MemMedia::from_image(image));
    let s3 = reopen(&s.plain);
    assert!(
        s3.object_stats().stored_bytes > stored,
        "the late uploads landed"
    );
    let orphans = fsck_clean(&pm, &s.ssd, &s3);
    assert!(orphans > 0, "the uncommitted rewrite is an orphan");
    let fs = mount_object(pm.clone(), s.ssd.clone(), s3.clone());
    let rep = fs.mount_report();
    assert!(!rep.was_clean);
    assert_eq!(rep.object_orphans, orphans);
    assert_eq!(
        s3.object_stats().stored_bytes,
        stored,
        "only the orphans went"
    );
    assert_files(&fs, &s.files, "after the crash");
    fs.check_allocator().unwrap();
    // Cleaning runs again from the start, and its result survives a remount.
    assert_eq!(fs.clean_object_tiers(), 6);
    assert_eq!(s3.object_stats().stored_bytes, s3.object_stats().live_bytes);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_object(pm, s.ssd.clone(), s3.clone());
    assert_eq!(fs.mount_report().object_orphans, 0);
    assert_files(&fs, &s.files, "after the crash, cleaning and a remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_crash_after_the_commits_but_before_the_old_parts_deletes_loses_nothing() {
    let s = fragmented();
    let (fs, s3, fault) = (&s.fs, &s.s3, &s.fault);
    // Deletes fail: the pass commits every move and frees the old blocks,
    // but their dead parts stay in the store; then the pool "crashes".
    fault.fail_deletes_after(0);
    assert_eq!(fs.clean_object_tiers(), 6, "the old parts are dead");
    assert_eq!(s3.object_stats().dead_parts, 6, "their deletes failed");
    let image = s.pm.image();
    drop((s.fs, s.s3));
    let pm = Arc::new(MemMedia::from_image(image));
    let s3 = reopen(&s.plain);
    assert_eq!(
        fsck_clean(&pm, &s.ssd, &s3),
        6,
        "the old parts, whose blocks are free"
    );
    let fs = mount_object(pm, s.ssd.clone(), s3.clone());
    assert_eq!(fs.mount_report().object_orphans, 6);
    let st = s3.object_stats();
    assert_eq!(st.stored_bytes, st.live_bytes);
    assert_eq!(st.live_bytes, live_bytes());
    assert_files(&fs, &s.files, "after the crash");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}
