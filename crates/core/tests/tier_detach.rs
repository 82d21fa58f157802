//! The last tier removed from a mounted pool (`Fs::detach_last_tier`,
//! design.md §3 "Removing a tier from a mounted pool"): an empty tier goes
//! and the pool mounts without it, one holding data once the removal moved
//! it; a tier that a placement rule names is refused with nothing changed; nothing lands on
//! the tier while its removal runs, and nothing written meanwhile is lost;
//! its id can be attached again; a crash at any point of the removal
//! leaves a pool that mounts, naming the empty tier or not.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_core::Fs;
use terrace_format::{Superblock, TierKind};
use terrace_media::{BlockMedia, CrashMedia, CrashTrace, LossMode, MemBlock, MemMedia, PmMedia};

/// A pool of `pm_bytes` of PM, then an ssd (tier 1) and an hdd (tier 2)
/// of `block_bytes` each, mounted.
fn three_tier_pool(
    pm_bytes: u64,
    block_bytes: u64,
) -> (Arc<MemMedia>, Arc<MemBlock>, Arc<MemBlock>, Fs) {
    let pm = Arc::new(MemMedia::new(pm_bytes));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, block_bytes), (TierKind::Hdd, block_bytes)],
        256,
    );
    let ssd = Arc::new(MemBlock::new(block_bytes));
    let hdd = Arc::new(MemBlock::new(block_bytes));
    let fs = Fs::mount_with_tiers(
        pm.clone(),
        vec![(1, ssd.clone() as Arc<dyn BlockMedia>), (2, hdd.clone())],
    )
    .unwrap_or_else(|e| panic!("mount: {e}"));
    (pm, ssd, hdd, fs)
}

/// After the ssd went: checks `fs`'s allocator, unmounts it, checks the
/// pool (PM and the hdd as tier 2) with fsck and mounts it again.
fn remount_with_only_the_hdd(fs: Fs, pm: &Arc<MemMedia>, hdd: &Arc<MemBlock>) -> Fs {
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(2, hdd.clone())];
    fsck_clean_with(&**pm, &tiers, Fsck::Data, "after the removal");
    Fs::mount_with_tiers(pm.clone(), tiers).unwrap_or_else(|e| panic!("mount: {e}"))
}

fn kinds(fs: &Fs) -> Vec<&'static str> {
    fs.status().tiers.iter().map(|t| t.kind).collect()
}

#[test]
fn an_empty_attached_tier_is_removed_and_the_pool_mounts_without_it() {
    let (pm, fs) = pm_pool(4 << 20, 64);
    let data = pattern(1, 1 << 20);
    let a = file_holding(&fs, "a", &data);
    let ssd = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 32 << 20), ssd.clone())
        .unwrap();
    // Data passes through the tier and leaves it again.
    fs.migrate_file(a, 1).unwrap();
    assert_eq!(tier_bytes(&fs, a, "ssd"), 1 << 20);
    fs.migrate_file(a, 0).unwrap();
    let before = fs.superblock();
    let gone = fs.detach_last_tier().expect("an empty tier goes");
    assert_eq!((gone.record.id, gone.record.kind), (1, TierKind::Ssd));
    assert!(gone.was_mounted);
    let sb = fs.superblock();
    assert_eq!(sb.tiers.len(), 1, "the superblock no longer names it");
    assert_eq!(sb.generation, before.generation + 1);
    assert_eq!(kinds(&fs), ["pm"]);
    assert_eq!(
        Arc::strong_count(&ssd),
        1,
        "the tier's media is closed (only the test holds the device)"
    );
    // The pool works on, PM-only.
    assert_eq!(fs.read(a, 0, data.len()).unwrap(), data);
    let b = file_holding(&fs, "b", &pattern(2, 256 << 10));
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    assert_eq!(fs.superblock().tiers.len(), 1);
    assert_eq!(content(&fs, a), data);
    assert_eq!(content(&fs, b), pattern(2, 256 << 10));
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Data, "after the removal");
}

/// A tier holding data goes: the removal moves the data to the nearest
/// tier (the last tier's up), as `tier_evacuate.rs` tests at length.
#[test]
fn a_tier_holding_data_goes_once_the_removal_moved_the_data() {
    let (pm, ssd, hdd, fs) = three_tier_pool(8 << 20, 32 << 20);
    let data = pattern(3, 2 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.migrate_file(a, 2).unwrap();
    assert_eq!(tier_bytes(&fs, a, "hdd"), 2 << 20);
    let more = pattern(4, 1 << 20);
    let b = file_holding(&fs, "b", &more);
    fs.migrate_file(b, 2).unwrap();
    let gone = fs.detach_last_tier().unwrap();
    assert_eq!(gone.record.kind, TierKind::Hdd);
    assert_eq!(kinds(&fs), ["pm", "ssd"]);
    assert_eq!(tier_bytes(&fs, a, "ssd"), 2 << 20, "moved up");
    assert_eq!(fs.read(a, 0, data.len()).unwrap(), data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    drop(hdd);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(content(&fs, a), data);
    assert_eq!(content(&fs, b), more);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, Some(ssd), Fsck::Data, "after the removal");
}

#[test]
fn a_tier_named_by_a_placement_rule_is_refused_until_the_rule_goes() {
    let (_pm, _ssd, _hdd, fs) = three_tier_pool(8 << 20, 32 << 20);
    let dir = fs
        .mkdir(1, b"d", 0o755, CTX)
        .unwrap_or_else(|e| panic!("mkdir: {e}"))
        .ino;
    fs.setxattr(dir, b"user.terrace.rule", b"hdd", 0).unwrap();
    let before = fs.superblock();
    let e = fs.detach_last_tier().unwrap_err();
    assert!(
        e.contains("placement rule") && e.contains(&dir.to_string()),
        "{e}"
    );
    assert_eq!(fs.superblock(), before);
    // A rule by id names it too; one naming another tier does not.
    fs.setxattr(dir, b"user.terrace.rule", b"2", 0).unwrap();
    assert!(fs
        .detach_last_tier()
        .unwrap_err()
        .contains("placement rule"));
    fs.setxattr(dir, b"user.terrace.rule", b"ssd", 0).unwrap();
    fs.detach_last_tier()
        .expect("no rule names the hdd tier now");
    // A rule can no longer name the removed tier.
    assert_eq!(
        fs.setxattr(dir, b"user.terrace.rule", b"hdd", 0)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EINVAL)
    );
}

#[test]
fn removal_is_refused_on_a_pm_only_pool_and_a_frozen_one() {
    let (_pm, fs) = pm_pool(4 << 20, 64);
    let e = fs.detach_last_tier().unwrap_err();
    assert!(e.contains("only its pm tier"), "{e}");
    let (_pm, _ssd, _hdd, fs) = three_tier_pool(8 << 20, 32 << 20);
    let fs = Arc::new(fs);
    fs.freeze().unwrap();
    let before = fs.superblock();
    let e = fs.detach_last_tier().unwrap_err();
    assert!(e.contains("read-only"), "{e}");
    assert_eq!(fs.superblock(), before);
    fs.thaw().unwrap();
    fs.detach_last_tier().unwrap();
    fs.unmount().unwrap();
}

/// Writes, fsyncs and overwrites 8 files from one thread while another
/// keeps moving them onto the hdd tier and the main thread removes that
/// tier (moving everything to the ssd first, again while the removal is
/// refused). After the removal, nothing reaches the removed device, and
/// every byte written is there — before and after a remount without it.
#[test]
fn a_write_storm_during_the_removal_never_lands_on_the_tier_and_loses_nothing() {
    let (pm, ssd, hdd, fs) = three_tier_pool(16 << 20, 64 << 20);
    let inos: Vec<u64> = (0..8).map(|k| file(&fs, 1, &format!("f{k}"))).collect();
    for &ino in &inos {
        fs.write(ino, 0, &pattern(ino, 512 << 10)).unwrap();
    }
    let stop = AtomicBool::new(false);
    let removed = AtomicBool::new(false);
    let (model, attempts, after) = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut model: Vec<Vec<u8>> = inos.iter().map(|&i| pattern(i, 512 << 10)).collect();
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) {
                for (k, &ino) in inos.iter().enumerate() {
                    let off = ((round * 37 + k as u64 * 11) % 96) * 4096;
                    let len = 4096 * (1 + (round + k as u64) % 24) as usize;
                    let buf = pattern(round * 100 + k as u64, len);
                    fs.write(ino, off, &buf)
                        .unwrap_or_else(|e| panic!("write during the removal: {e}"));
                    let m = &mut model[k];
                    if m.len() < off as usize + len {
                        m.resize(off as usize + len, 0);
                    }
                    m[off as usize..off as usize + len].copy_from_slice(&buf);
                    if round % 3 == 0 {
                        fs.fsync(ino, false).unwrap();
                    }
                }
                round += 1;
            }
            model
        });
        let mover = sc.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                // Refused (per file) while the tier retires, and as a bad
                // target once it is gone.
                let _ = fs.migrate_files(&inos, 2);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let mut attempts = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut after = None;
        while Instant::now() < deadline {
            attempts += 1;
            let _ = fs.migrate_files(&inos, 1);
            match fs.detach_last_tier() {
                Ok(d) => {
                    assert_eq!(d.record.id, 2);
                    removed.store(true, Ordering::SeqCst);
                    after = Some(hdd.stats());
                    break;
                }
                Err(e) if e.contains("still") => continue,
                Err(e) => panic!("unexpected refusal: {e}"),
            }
        }
        // The storm goes on a while with the tier gone.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
        mover.join().unwrap();
        (writer.join().unwrap(), attempts, after)
    });
    assert!(
        removed.load(Ordering::SeqCst),
        "no removal in {attempts} attempts"
    );
    assert_eq!(
        hdd.stats(),
        after.unwrap(),
        "the removed tier's device was used after its removal"
    );
    assert_eq!(kinds(&fs), ["pm", "ssd"]);
    for (k, &ino) in inos.iter().enumerate() {
        assert!(
            content(&fs, ino) == model[k],
            "file {k} differs before the remount"
        );
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for (k, &ino) in inos.iter().enumerate() {
        assert!(
            content(&fs, ino) == model[k],
            "file {k} differs after the remount"
        );
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, Some(ssd), Fsck::Data, "after the storm");
}

/// Block media whose next sync, once armed, waits until let go and then
/// fails (a move to the tier is in flight for as long as the test wants,
/// and then releases its blocks).
struct Gated {
    dev: Arc<MemBlock>,
    armed: AtomicBool,
    inside: AtomicBool,
    release: AtomicBool,
}

impl Hooks for Gated {
    fn inner(&self) -> &dyn BlockMedia {
        &*self.dev
    }
    fn sync(&self) -> std::io::Result<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.inside.store(true, Ordering::SeqCst);
            while !self.release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.dev.sync()
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

/// Polls `what` for up to ten seconds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A move onto the hdd tier is in flight (its blocks taken, its sync held)
/// when the removal starts: the removal waits for it, and meanwhile another
/// move to the tier is refused at once (it would otherwise land there and
/// make the removal fail, or be lost with the tier). When the held move
/// fails and gives its blocks back, the removal goes through.
#[test]
fn while_the_removal_waits_for_a_move_in_flight_nothing_new_lands_on_the_tier() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, 32 << 20), (TierKind::Hdd, 32 << 20)],
        64,
    );
    let ssd = Arc::new(MemBlock::new(32 << 20));
    let hdd = Arc::new(Hooked(Gated {
        dev: Arc::new(MemBlock::new(32 << 20)),
        armed: AtomicBool::new(false),
        inside: AtomicBool::new(false),
        release: AtomicBool::new(false),
    }));
    let fs = Fs::mount_with_tiers(
        pm.clone(),
        vec![(1, ssd.clone() as Arc<dyn BlockMedia>), (2, hdd.clone())],
    )
    .unwrap();
    let (da, db) = (pattern(8, 1 << 20), pattern(9, 1 << 20));
    let a = file_holding(&fs, "a", &da);
    let b = file_holding(&fs, "b", &db);
    fs.fsync(a, false).unwrap();
    fs.fsync(b, false).unwrap();
    let room = fs.statfs().bavail;
    hdd.armed.store(true, Ordering::SeqCst);
    /// Lets the held sync go however the scope ends (a failed assertion
    /// must not leave the mover waiting for ever).
    struct Release<'a>(&'a Gated);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.release.store(true, Ordering::SeqCst);
        }
    }
    std::thread::scope(|sc| {
        let _release = Release(&hdd);
        let held = sc.spawn(|| fs.migrate_file(a, 2));
        wait_for("the move's sync", || hdd.inside.load(Ordering::SeqCst));
        let removal = sc.spawn(|| fs.detach_last_tier());
        // Retiring: the tier's free blocks no longer count as room.
        wait_for("the tier to retire", || {
            fs.statfs().bavail < room - (16 << 20) / 4096
        });
        let e = fs
            .migrate_file(b, 2)
            .expect_err("a move onto a retiring tier");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert_eq!(tier_bytes(&fs, b, "hdd"), 0);
        assert!(
            !removal.is_finished(),
            "the removal waits for the move in flight"
        );
        hdd.release.store(true, Ordering::SeqCst);
        assert!(held.join().unwrap().is_err(), "the held move failed");
        let gone = removal.join().unwrap().expect("the removal went through");
        assert_eq!(gone.record.id, 2);
    });
    assert_eq!(kinds(&fs), ["pm", "ssd"]);
    assert_eq!(content(&fs, a), da);
    assert_eq!(content(&fs, b), db);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(content(&fs, a), da);
    assert_eq!(content(&fs, b), db);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, Some(ssd), Fsck::Data, "after the removal");
}

/// Removing the only block tier leaves a PM-only pool: what the DRAM cache
/// held is written back to PM first, and writes that come meanwhile go
/// through to PM instead of into the cache, so nothing is cached once the
/// tier is gone.
#[test]
fn removing_the_only_block_tier_leaves_nothing_in_the_dram_cache() {
    let (pm, fs) = pm_pool(32 << 20, 64);
    let ssd = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 32 << 20), ssd.clone())
        .unwrap();
    block_first(&fs);
    let inos: Vec<u64> = (0..4).map(|k| file(&fs, 1, &format!("f{k}"))).collect();
    let stop = AtomicBool::new(false);
    let model = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut model = vec![Vec::new(); inos.len()];
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) && round < 2000 {
                for (k, &ino) in inos.iter().enumerate() {
                    let buf = pattern(round * 10 + k as u64, 64 << 10);
                    let off = (round % 16) * (64 << 10);
                    fs.write(ino, off, &buf).unwrap();
                    let m: &mut Vec<u8> = &mut model[k];
                    let end = off as usize + buf.len();
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[off as usize..end].copy_from_slice(&buf);
                }
                round += 1;
            }
            model
        });
        wait_for("cached writes", || fs.cache().stats().dirty_bytes > 0);
        fs.detach_last_tier().unwrap();
        assert_eq!(
            fs.cache().stats().dirty_bytes,
            0,
            "dirty pages left in a pool with no block tier"
        );
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap()
    });
    assert_eq!(fs.cache().stats().dirty_bytes, 0);
    assert_eq!(kinds(&fs), ["pm"]);
    for (k, &ino) in inos.iter().enumerate() {
        assert!(content(&fs, ino) == model[k], "file {k}");
    }
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    for (k, &ino) in inos.iter().enumerate() {
        assert!(content(&fs, ino) == model[k], "file {k} after the remount");
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Data, "after the removal");
}

#[test]
fn a_removed_tier_id_can_be_attached_again_and_takes_data() {
    let (pm, fs) = pm_pool(4 << 20, 64);
    let old = Arc::new(MemBlock::new(16 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 16 << 20), old.clone())
        .unwrap();
    let a = file_holding(&fs, "a", &pattern(5, 1 << 20));
    fs.migrate_file(a, 1).unwrap();
    // Read once so that the DRAM cache holds its blocks of the old tier.
    assert_eq!(content(&fs, a), pattern(5, 1 << 20));
    fs.migrate_file(a, 0).unwrap();
    fs.detach_last_tier().unwrap();
    let new = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(1, TierKind::Hdd, 32 << 20), new.clone())
        .unwrap();
    assert_eq!(kinds(&fs), ["pm", "hdd"]);
    // More than PM holds: the new tier takes it.
    let big = pattern(6, 12 << 20);
    let b = file_holding(&fs, "b", &big);
    fs.migrate_file(a, 1).unwrap();
    assert_eq!(tier_bytes(&fs, a, "hdd"), 1 << 20);
    assert_eq!(
        content(&fs, a),
        pattern(5, 1 << 20),
        "no stale cached block"
    );
    assert_eq!(content(&fs, b), big);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), new.clone());
    assert_eq!(content(&fs, a), pattern(5, 1 << 20));
    assert_eq!(content(&fs, b), big);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, Some(new), Fsck::Data, "after attaching again");
}

#[test]
fn attaching_after_the_slots_run_out_is_refused_before_the_superblock_changes() {
    let (_pm, fs) = pm_pool(4 << 20, 64);
    let dev = || Arc::new(MemBlock::new(2 << 20)) as Arc<dyn BlockMedia>;
    for _ in 0..terrace_core::tier_list::SLOTS {
        fs.attach_tier(tier_record(1, TierKind::Ssd, 2 << 20), dev())
            .unwrap();
        fs.detach_last_tier().unwrap();
    }
    let before = fs.superblock();
    let e = fs
        .attach_tier(tier_record(1, TierKind::Ssd, 2 << 20), dev())
        .unwrap_err();
    assert!(e.contains("remount the pool to add more tiers"), "{e}");
    assert_eq!(fs.superblock(), before);
}

/// Crash images at every event of a removal: each mounts (with the tier's
/// device when its superblock still names the tier), holds the file, and
/// passes fsck; the tier is named up to the commit point and gone after
/// it, never named again once gone, and gone when the removal returned.
#[test]
fn a_crash_at_any_point_of_the_removal_leaves_the_empty_tier_named_or_gone() {
    let (pm, fs) = pm_pool_on(CrashMedia::new(4 << 20), 64);
    let data = pattern(7, 1 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.fsync(a, false).unwrap();
    let ssd = Arc::new(MemBlock::new(16 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 16 << 20), ssd.clone())
        .unwrap();
    fs.migrate_file(a, 1).unwrap();
    fs.migrate_file(a, 0).unwrap();
    let (r, trace) = pm.trace(|| fs.detach_last_tier());
    r.unwrap();
    let named = |_: &str, sb: &Superblock| sb.tiers.len() == 2;
    check_removal_crash_images(&trace, named, |ctx, img, named| {
        let dev = named.then(|| Arc::new(MemBlock::from_image(ssd.image())) as Arc<dyn BlockMedia>);
        assert_fsck_clean(&*img, dev.clone(), Fsck::Data, ctx);
        let tiers = dev.map(|d| (1, d)).into_iter().collect();
        let fs = Fs::mount_with_tiers(img as Arc<dyn PmMedia>, tiers)
            .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
        assert!(content(&fs, a) == data, "{ctx}: the file changed");
        fs.check_allocator()
            .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
    });
}

/// Walks the crash images of a tier removal's PM `trace`: after every
/// event, with every unflushed word lost and with random words lost. Each
/// image's superblock must read; `named` says whether it still names the
/// tier. In the images that lost every unflushed word the tier must be
/// named up to one event and gone from it on, never named again, and gone
/// only after the removal wrote something. `check` gets the context to
/// name in failures, the image and whether the tier is named.
fn check_removal_crash_images(
    trace: &CrashTrace,
    named: impl Fn(&str, &Superblock) -> bool,
    mut check: impl FnMut(&str, Arc<MemMedia>, bool),
) {
    let n = trace.len();
    assert!(n > 0, "the removal wrote nothing to PM");
    let mut gone_at = None;
    for k in 0..=n {
        for mode in [LossMode::AllUnflushed, LossMode::RandomWords(k as u64)] {
            let ctx = format!("crash after event {k}/{n} {mode:?}");
            let img = Arc::new(MemMedia::from_image(trace.image_at(k, mode)));
            let sb = terrace_core::recovery::read_superblock(&*img)
                .unwrap_or_else(|e| panic!("{ctx}: superblock: {e}"));
            let is_named = named(&ctx, &sb);
            if mode == LossMode::AllUnflushed {
                match (is_named, gone_at) {
                    (false, None) => gone_at = Some(k),
                    (true, Some(g)) => panic!("{ctx}: named again after it was gone at {g}"),
                    _ => {}
                }
            }
            check(&ctx, img, is_named);
        }
    }
    assert!(
        gone_at.is_some_and(|g| g > 0),
        "the tier must be named before the commit and gone after it ({gone_at:?} of {n})"
    );
}

fn ids(fs: &Fs) -> Vec<u8> {
    fs.superblock().tiers.iter().map(|t| t.id).collect()
}

/// PM+SSD+HDD, the SSD retired: refused while it holds data (nothing
/// changed), removed once the data is on the HDD and PM. The HDD keeps its
/// id; nothing reaches the removed device afterwards (placement and
/// migration go PM → HDD); a tier attached later takes the id after the
/// HDD's, and the pool mounts and passes fsck with the ids skipping 1.
#[test]
fn a_middle_tier_goes_and_the_tiers_after_it_keep_their_ids() {
    use terrace_format::TierId;
    let (pm, ssd, hdd, fs) = three_tier_pool(16 << 20, 32 << 20);
    let (da, db) = (pattern(11, 2 << 20), pattern(12, 1 << 20));
    let a = file_holding(&fs, "a", &da);
    let b = file_holding(&fs, "b", &db);
    fs.migrate_file(a, 1).unwrap();
    let before = fs.superblock();
    for (which, want) in [(0u8, "pm tier"), (5, "no tier 5")] {
        let e = fs.detach_tier(Some(TierId(which))).unwrap_err();
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
        assert_eq!(fs.superblock(), before);
    }
    // Its data moves down to the hdd with the removal.
    let gone = fs.detach_tier(Some(TierId(1))).expect("the ssd goes");
    assert_eq!(tier_bytes(&fs, a, "hdd"), 2 << 20);
    assert_eq!((gone.record.id, gone.record.kind), (1, TierKind::Ssd));
    assert_eq!(ids(&fs), [0, 2]);
    assert_eq!(fs.superblock().version, terrace_format::FORMAT_VERSION);
    assert_eq!(kinds(&fs), ["pm", "hdd"]);
    assert_eq!(Arc::strong_count(&ssd), 1, "the ssd's media is closed");
    let ssd_after = ssd.stats();
    // Placement and migration skip the removed id.
    assert!(fs.migrate_file(b, 1).is_err(), "a move to the removed id");
    fs.migrate_file(b, 2).unwrap();
    assert_eq!(tier_bytes(&fs, b, "hdd"), 1 << 20);
    fs.migrate_files(&[a, b], 0).unwrap();
    fs.set_setting("migration_threshold", "1").unwrap();
    let c = file_holding(&fs, "c", &pattern(13, 4 << 20));
    fs.migration_pass();
    assert_eq!(tier_bytes(&fs, c, "ssd"), 0);
    assert!(
        fs.status().tiers.iter().all(|t| t.id != 1),
        "status lists the removed id"
    );
    // A rule may not name the removed id or kind.
    for rule in [&b"1"[..], b"ssd"] {
        assert_eq!(
            fs.setxattr(c, b"user.terrace.rule", rule, 0)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
    }
    // A tier attached later follows the last one: id 3, not the gap.
    let e = fs
        .attach_tier(
            tier_record(1, TierKind::Hdd, 32 << 20),
            Arc::new(MemBlock::new(32 << 20)),
        )
        .unwrap_err();
    assert!(e.contains("id 3"), "{e}");
    let more = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(3, TierKind::Hdd, 32 << 20), more.clone())
        .unwrap();
    assert_eq!(ids(&fs), [0, 2, 3]);
    fs.migrate_file(b, 3).unwrap();
    assert_eq!(tier_bytes(&fs, b, "hdd"), 1 << 20);
    assert_eq!(ssd.stats(), ssd_after, "the removed device was used");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(2, hdd.clone()), (3, more.clone())];
    fsck_clean_with(&*pm, &tiers, Fsck::Data, "after the removal");
    let fs = Fs::mount_with_tiers(pm.clone(), tiers).unwrap_or_else(|e| panic!("mount: {e}"));
    assert_eq!(ids(&fs), [0, 2, 3]);
    assert_eq!(content(&fs, a), da);
    assert_eq!(content(&fs, b), db);
    assert_eq!(content(&fs, c), pattern(13, 4 << 20));
    fs.unmount().unwrap();
}

/// A tier whose only contents are clean copies (NVMFS: the data's primary
/// is on PM) is removed: the copies are dropped — committed as drops, their
/// blocks freed — and the data reads back, before and after a remount.
#[test]
fn a_tier_holding_only_clean_copies_is_removed_and_the_data_stays() {
    use terrace_format::TierId;
    let (pm, _ssd, hdd, fs) = three_tier_pool(16 << 20, 64 << 20);
    use_nvmfs(&fs);
    let data = pattern(21, 8 << 20);
    let f = file_holding(&fs, "f", &data);
    assert!(fs.migration_pass() > 0, "nothing was flushed");
    let copies = tier_bytes(&fs, f, "ssd-copy");
    assert!(copies > 0, "no clean copy on the ssd");
    assert_eq!(tier_bytes(&fs, f, "ssd"), 0, "data on the ssd");
    let gone = fs
        .detach_tier(Some(TierId(1)))
        .expect("clean copies do not hold the removal up");
    assert_eq!(gone.record.kind, TierKind::Ssd);
    assert_eq!(kinds(&fs), ["pm", "hdd"]);
    assert_eq!(tier_bytes(&fs, f, "ssd-copy"), 0);
    assert_eq!(content(&fs, f), data);
    let fs = remount_with_only_the_hdd(fs, &pm, &hdd);
    assert_eq!(content(&fs, f), data);
    fs.unmount().unwrap();
}

/// The same for the last tier of a PM+SSD pool (`detach_last_tier`): its
/// clean copies go with it.
#[test]
fn the_last_tier_holding_clean_copies_is_removed_too() {
    let (pm, _ssd, fs) = tiered_pool(16 << 20, 64 << 20, 64);
    use_nvmfs(&fs);
    let data = pattern(22, 8 << 20);
    let f = file_holding(&fs, "f", &data);
    assert!(fs.migration_pass() > 0, "nothing was flushed");
    assert!(tier_bytes(&fs, f, "ssd-copy") > 0);
    fs.detach_last_tier().expect("the copies are dropped");
    assert_eq!(kinds(&fs), ["pm"]);
    assert_eq!(content(&fs, f), data);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    assert_eq!(content(&fs, f), data);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Data, "after the removal");
}

#[test]
fn a_tier_is_named_by_its_id_or_its_kind() {
    use terrace_core::tier_detach::resolve_tier;
    use terrace_format::TierId;
    let (_pm, _ssd, _hdd, fs) = three_tier_pool(8 << 20, 32 << 20);
    let sb = fs.superblock();
    assert_eq!(resolve_tier(&sb.tiers, "ssd"), Ok(TierId(1)));
    assert_eq!(resolve_tier(&sb.tiers, "2"), Ok(TierId(2)));
    assert_eq!(resolve_tier(&sb.tiers, "pm"), Ok(TierId(0)));
    for (name, want) in [
        ("s3", "no s3 tier"),
        ("4", "no tier 4"),
        ("nvme", "unknown tier"),
    ] {
        let e = resolve_tier(&sb.tiers, name).unwrap_err();
        assert!(e.contains(want) && e.contains("1 ssd"), "{e}");
    }
    fs.attach_tier(
        tier_record(3, TierKind::Hdd, 32 << 20),
        Arc::new(MemBlock::new(32 << 20)),
    )
    .unwrap();
    let e = resolve_tier(&fs.superblock().tiers, "hdd").unwrap_err();
    assert!(e.contains("2 hdd tiers"), "{e}");
}

/// Crash images at every PM event of a middle tier's removal (PM+SSD+HDD,
/// the SSD goes; a file on the HDD, one on PM, and one on PM with clean
/// copies on the SSD, which the removal drops): each passes fsck and
/// mounts (with the SSD's device while its superblock names it), every
/// file whole; the SSD is named up to the commit point and gone after.
#[test]
fn a_crash_at_any_point_of_a_middle_tier_removal_leaves_it_named_or_gone() {
    use terrace_format::TierId;
    let (pm, fs) = pm_pool_on(CrashMedia::new(16 << 20), 64);
    let (da, db) = (pattern(31, 1 << 20), pattern(32, 256 << 10));
    let a = file_holding(&fs, "a", &da);
    let b = file_holding(&fs, "b", &db);
    let ssd = Arc::new(MemBlock::new(16 << 20));
    let hdd = Arc::new(MemBlock::new(16 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 16 << 20), ssd.clone())
        .unwrap();
    fs.attach_tier(tier_record(2, TierKind::Hdd, 16 << 20), hdd.clone())
        .unwrap();
    fs.migrate_file(a, 1).unwrap();
    fs.migrate_file(a, 2).unwrap();
    fs.fsync(b, false).unwrap();
    use_nvmfs(&fs);
    let dc = pattern(33, 8 << 20);
    let c = file_holding(&fs, "c", &dc);
    assert!(fs.migration_pass() > 0, "nothing was flushed");
    assert!(
        tier_bytes(&fs, c, "ssd-copy") > 0,
        "no clean copy on the ssd"
    );
    assert_eq!(tier_bytes(&fs, c, "ssd"), 0);
    let (r, trace) = pm.trace(|| fs.detach_tier(Some(TierId(1))));
    r.unwrap();
    let named = |ctx: &str, sb: &Superblock| {
        let ids: Vec<u8> = sb.tiers.iter().map(|t| t.id).collect();
        match ids.as_slice() {
            [0, 1, 2] => true,
            [0, 2] => false,
            other => panic!("{ctx}: tiers {other:?}"),
        }
    };
    check_removal_crash_images(&trace, named, |ctx, img, named| {
        let mut tiers: Vec<(u8, Arc<dyn BlockMedia>)> = Vec::new();
        if named {
            tiers.push((1, Arc::new(MemBlock::from_image(ssd.image()))));
        }
        tiers.push((2, Arc::new(MemBlock::from_image(hdd.image()))));
        fsck_clean_with(&*img, &tiers, Fsck::Data, ctx);
        let fs = Fs::mount_with_tiers(img as Arc<dyn PmMedia>, tiers)
            .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
        assert!(content(&fs, a) == da, "{ctx}: the hdd file changed");
        assert!(content(&fs, b) == db, "{ctx}: the pm file changed");
        assert!(content(&fs, c) == dc, "{ctx}: the copied file changed");
        if !named {
            assert_eq!(tier_bytes(&fs, c, "ssd-copy"), 0, "{ctx}: a copy stayed");
        }
        fs.check_allocator()
            .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
    });
}

/// `n` small files under two directories, their data moved to tier `data_to`
/// and then their logs (and the directories') to tier `logs_to`; returns the
/// files with their contents and every inode whose log moved.
fn files_with_logs_on(
    fs: &Fs,
    n: u32,
    data_to: u8,
    logs_to: u8,
) -> (Vec<(u64, Vec<u8>)>, Vec<u64>) {
    let dirs = mkdirs(fs, 2);
    let mut files = Vec::new();
    for i in 0..n {
        let ino = file(fs, dirs[i as usize % 2], &format!("f{i}"));
        let data = pattern(u64::from(i) + 40, 500 + (i as usize * 613) % 7000);
        fs.write(ino, 0, &data).unwrap();
        fs.migrate_file(ino, data_to).unwrap();
        files.push((ino, data));
    }
    let mut inos: Vec<u64> = files.iter().map(|f| f.0).collect();
    inos.extend(dirs);
    assert_eq!(fs.move_logs(&inos, logs_to).unwrap(), inos.len() as u64);
    (files, inos)
}

fn logs_on(fs: &Fs, inos: &[u64], tier: u8) -> usize {
    inos.iter()
        .filter(|&&ino| {
            fs.log_place(ino)
                .unwrap()
                .is_some_and(|(t, _, _)| t == tier)
        })
        .count()
}

/// Log migration puts logs of cold files on a block tier, where no user
/// command moves them: removing that tier moves them to the next block
/// tier itself (it used to refuse, naming `terrace migrate`, which moves
/// data only), and the files read back across a remount without it.
#[test]
fn inode_logs_on_a_removed_tier_move_to_another_block_tier() {
    use terrace_format::TierId;
    let (pm, _ssd, hdd, fs) = three_tier_pool(16 << 20, 32 << 20);
    // Data on the hdd, logs on the ssd: what `terrace migrate --to hdd`
    // leaves of files log migration had moved before.
    let (mut files, inos) = files_with_logs_on(&fs, 60, 2, 1);
    let on_ssd = pattern(60, 1 << 20);
    let a = file_holding(&fs, "a", &on_ssd);
    fs.migrate_file(a, 1).unwrap();
    files.push((a, on_ssd));
    let tree = fs_tree(&fs);
    // The data there moves down with the removal, the logs after it.
    fs.detach_tier(Some(TierId(1)))
        .expect("a tier holding data and logs goes");
    assert_eq!(tier_bytes(&fs, a, "hdd"), 1 << 20, "its data moved down");
    assert_eq!(ids(&fs), [0, 2]);
    assert_eq!(
        logs_on(&fs, &inos, 2),
        inos.len(),
        "the logs are on the hdd"
    );
    assert_files(&fs, &files, "after the removal");
    assert_same_tree(&fs_tree(&fs), &tree, "after the removal");
    let fs = remount_with_only_the_hdd(fs, &pm, &hdd);
    assert_eq!(logs_on(&fs, &inos, 2), inos.len());
    assert_files(&fs, &files, "remounted");
    assert_same_tree(&fs_tree(&fs), &tree, "remounted");
    fs.unmount().unwrap();
}

/// With no other block tier, the logs come back to PM, and the pool is
/// PM-only afterwards.
#[test]
fn inode_logs_on_the_only_block_tier_come_back_to_pm_when_it_goes() {
    let (pm, _ssd, fs) = tiered_pool(16 << 20, 32 << 20, 256);
    // Empty files and their directories: logs without data anywhere.
    let dirs = mkdirs(&fs, 2);
    let mut inos: Vec<u64> = (0..40)
        .map(|i| {
            let ino = file(&fs, dirs[i % 2], &format!("e{i}"));
            fs.setxattr(ino, b"user.n", format!("{i}").as_bytes(), 0)
                .unwrap();
            ino
        })
        .collect();
    inos.extend(&dirs);
    let on_pm = file_holding(&fs, "on-pm", &pattern(50, 9000));
    assert_eq!(fs.move_logs(&inos, 1).unwrap(), inos.len() as u64);
    let tree = fs_tree(&fs);
    fs.detach_last_tier()
        .expect("a tier holding only logs goes");
    assert_eq!(kinds(&fs), ["pm"]);
    assert_eq!(fs.log_migration_status().logs_on_tiers, 0);
    assert_eq!(logs_on(&fs, &inos, 1), 0);
    assert_eq!(content(&fs, on_pm), pattern(50, 9000));
    assert_same_tree(&fs_tree(&fs), &tree, "after the removal");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, None, Fsck::Data, "after the removal");
    let fs = mount(pm.clone());
    assert_same_tree(&fs_tree(&fs), &tree, "remounted");
    fs.unmount().unwrap();
}
