//! A tier with data is removed from a mounted pool (`Fs::detach_tier`,
//! `tier_evacuate.rs`, design.md §3 "Removing a tier from a mounted
//! pool"): its data moves to the next tier below (the last tier's to the
//! nearest one above) while background migration and writers run, every
//! file reads back the same and nothing maps the tier; a removal that
//! cannot fit the data elsewhere (clones' shared blocks counted once; PM
//! keeping room for metadata when it is the target), or that a rule naming
//! the tier holds up, is refused before anything moves, with the pool as
//! it was. A freeze or an unmount during the move stops it before any
//! further commit (nothing written after the clean mark, nothing leaked),
//! and a `tier add` meanwhile is refused at once.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_core::Fs;
use terrace_format::{TierId, TierKind};
use terrace_media::{BlockMedia, MemBlock, MemMedia};

/// A pool of `pm` bytes of PM, an ssd (tier 1) of `ssd` bytes and an hdd
/// (tier 2) of `hdd` bytes, mounted.
fn pool(pm: u64, ssd: u64, hdd: u64) -> (Arc<MemMedia>, Arc<MemBlock>, Arc<MemBlock>, Fs) {
    let pm_media = Arc::new(MemMedia::new(pm));
    mkfs_tiers(
        &*pm_media,
        &[(TierKind::Ssd, ssd), (TierKind::Hdd, hdd)],
        256,
    );
    let s = Arc::new(MemBlock::new(ssd));
    let h = Arc::new(MemBlock::new(hdd));
    let fs = Fs::mount_with_tiers(
        pm_media.clone(),
        vec![(1, s.clone() as Arc<dyn BlockMedia>), (2, h.clone())],
    )
    .unwrap_or_else(|e| panic!("mount: {e}"));
    (pm_media, s, h, fs)
}

fn kinds(fs: &Fs) -> Vec<&'static str> {
    fs.status().tiers.iter().map(|t| t.kind).collect()
}

/// Bytes of `ino` whose primary copy is on a tier of kind `tier`.
fn on(fs: &Fs, ino: u64, tier: &str) -> u64 {
    tier_bytes(fs, ino, tier)
}

/// The SSD of a pm+ssd+hdd pool holds files' data while the migration
/// thread keeps draining a PM past its threshold (into the SSD, until it
/// retires) and a writer keeps writing: `detach_tier(ssd)` moves the data
/// down to the hdd and removes the tier; every file reads back the same,
/// before and after a remount, and nothing maps the ssd.
#[test]
fn a_tier_with_data_is_emptied_and_removed_while_migration_and_writers_run() {
    let (pm, _ssd, hdd, fs) = pool(16 << 20, 64 << 20, 64 << 20);
    let fs = Arc::new(fs);
    let cold: Vec<(u64, Vec<u8>)> = (0..6)
        .map(|k| {
            let d = pattern(100 + k, (1 << 20) + (k as usize) * 12288);
            (file_holding(&fs, &format!("cold{k}"), &d), d)
        })
        .collect();
    let inos: Vec<u64> = cold.iter().map(|c| c.0).collect();
    fs.migrate_files(&inos, 1).unwrap();
    for &(ino, ref d) in &cold {
        assert_eq!(on(&fs, ino, "ssd"), d.len() as u64 / 4096 * 4096);
    }
    // PM past its threshold: the drain keeps moving data into the SSD.
    fs.set_setting("migration_threshold", "1").unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.start_migration();
    let stop = AtomicBool::new(false);
    let (removed, written) = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut written = Vec::new();
            let mut k = 0u64;
            while !stop.load(Ordering::SeqCst) && k < 40 {
                let d = pattern(1000 + k, 256 << 10);
                let ino = file_holding(&fs, &format!("hot{k}"), &d);
                fs.fsync(ino, false).unwrap();
                written.push((ino, d));
                k += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            written
        });
        std::thread::sleep(Duration::from_millis(50));
        let removed = fs.detach_tier(Some(TierId(1)));
        stop.store(true, Ordering::SeqCst);
        (removed, writer.join().unwrap())
    });
    let gone = removed.unwrap_or_else(|e| panic!("the ssd with data was not removed: {e}"));
    assert_eq!((gone.record.id, gone.record.kind), (1, TierKind::Ssd));
    assert_eq!(kinds(&fs), ["pm", "hdd"]);
    let all: Vec<(u64, Vec<u8>)> = cold.iter().cloned().chain(written).collect();
    for (ino, d) in &all {
        assert!(content(&fs, *ino) == *d, "inode {ino} differs");
        assert_eq!(on(&fs, *ino, "ssd") + on(&fs, *ino, "ssd-copy"), 0);
    }
    for &(ino, ref d) in &cold {
        assert_eq!(
            on(&fs, ino, "hdd") + on(&fs, ino, "pm"),
            d.len() as u64 / 4096 * 4096,
            "inode {ino}: its ssd data moved down"
        );
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(2, hdd.clone())];
    fsck_clean_with(&*pm, &tiers, Fsck::Data, "after the removal");
    let fs = Fs::mount_with_tiers(pm.clone(), tiers).unwrap_or_else(|e| panic!("mount: {e}"));
    for (ino, d) in &all {
        assert!(
            content(&fs, *ino) == *d,
            "inode {ino} differs after the remount"
        );
    }
    fs.unmount().unwrap();
}

/// The last tier's data moves up: the hdd's to the ssd, then (the ssd now
/// the only block tier) the ssd's to PM.
#[test]
fn the_last_tier_s_data_moves_up_to_the_nearest_tier() {
    let (pm, _ssd, _hdd, fs) = pool(32 << 20, 32 << 20, 32 << 20);
    let (da, db) = (pattern(1, 3 << 20), pattern(2, 1 << 20));
    let a = file_holding(&fs, "a", &da);
    let b = file_holding(&fs, "b", &db);
    fs.migrate_file(a, 2).unwrap();
    fs.migrate_file(b, 1).unwrap();
    assert_eq!(fs.evacuation_target(TierId(2)), TierId(1));
    let gone = fs.detach_last_tier().unwrap_or_else(|e| panic!("hdd: {e}"));
    assert_eq!(gone.record.kind, TierKind::Hdd);
    assert_eq!(kinds(&fs), ["pm", "ssd"]);
    assert_eq!(
        on(&fs, a, "ssd"),
        3 << 20,
        "the hdd's data went up to the ssd"
    );
    assert_eq!(fs.read(a, 0, da.len()).unwrap(), da);
    assert_eq!(fs.evacuation_target(TierId(1)), TierId::PM);
    let gone = fs.detach_last_tier().unwrap_or_else(|e| panic!("ssd: {e}"));
    assert_eq!(gone.record.kind, TierKind::Ssd);
    assert_eq!(kinds(&fs), ["pm"]);
    assert_eq!(on(&fs, a, "pm"), 3 << 20);
    assert_eq!(on(&fs, b, "pm"), 1 << 20);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    assert_eq!(content(&fs, a), da);
    assert_eq!(content(&fs, b), db);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Data, "after both removals");
}

/// The ssd holds more than the hdd below it can take: refused before
/// anything moves, saying how much is needed and how much room there is;
/// the pool is as it was (the ssd attached, its data there, not retiring:
/// it takes data again).
#[test]
fn a_removal_without_room_elsewhere_is_refused_with_the_pool_as_it_was() {
    let (pm, ssd, hdd, fs) = pool(16 << 20, 64 << 20, 8 << 20);
    let data = pattern(7, 20 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.migrate_file(a, 1).unwrap();
    assert_eq!(on(&fs, a, "ssd"), 20 << 20);
    let before = fs.superblock();
    let room = fs.statfs().bavail;
    let hdd_writes = hdd.stats();
    let e = fs.detach_tier(Some(TierId(1))).unwrap_err();
    assert!(
        e.contains("tier 1") && e.contains("needs 20.0 MiB") && e.contains("room for"),
        "{e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    assert_eq!(fs.superblock(), before, "a refused removal wrote");
    assert_eq!(kinds(&fs), ["pm", "ssd", "hdd"]);
    assert_eq!(on(&fs, a, "ssd"), 20 << 20, "data moved before the refusal");
    assert_eq!(hdd.stats(), hdd_writes, "the hdd was written");
    assert_eq!(fs.read(a, 0, data.len()).unwrap(), data);
    assert_eq!(fs.statfs().bavail, room, "the tier's room counts again");
    let b = file_holding(&fs, "b", &pattern(8, 1 << 20));
    fs.migrate_file(b, 1).unwrap();
    assert_eq!(on(&fs, b, "ssd"), 1 << 20, "the ssd takes data again");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd.clone()), (2, hdd.clone())];
    fsck_clean_with(&*pm, &tiers, Fsck::Data, "after the refusal");
}

/// A rule naming the tier refuses the removal before any data moves, and
/// the refusal names the file's path. A file unlinked while open keeps its
/// data: it moves like any other and still reads back through the handle.
#[test]
fn a_rule_refuses_before_anything_moves_and_an_open_deleted_file_moves() {
    let (_pm, _ssd, _hdd, fs) = pool(16 << 20, 32 << 20, 32 << 20);
    let keep = pattern(3, 2 << 20);
    let a = file_holding(&fs, "a", &keep);
    let zd = pattern(4, 1 << 20);
    let z = file_holding(&fs, "z", &zd);
    fs.migrate_files(&[a, z], 1).unwrap();
    let p = fs.mkdir(1, b"pinned", 0o755, CTX).unwrap().ino;
    fs.setxattr(p, b"user.terrace.rule", b"ssd", 0).unwrap();
    let e = fs.detach_tier(Some(TierId(1))).unwrap_err();
    assert!(e.contains("placement rule") && e.contains("/pinned"), "{e}");
    assert_eq!(on(&fs, a, "ssd"), 2 << 20, "data moved before the refusal");
    fs.removexattr(p, b"user.terrace.rule").unwrap();
    // Unlinked while open: its data stays until the release.
    fs.open(z, libc::O_RDONLY).unwrap();
    fs.unlink(1, b"z").unwrap();
    fs.detach_tier(Some(TierId(1))).unwrap();
    assert_eq!(on(&fs, a, "hdd"), 2 << 20);
    assert_eq!(content(&fs, a), keep);
    assert_eq!(fs.read(z, 0, zd.len()).unwrap(), zd);
    fs.release(z).unwrap();
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// Block media whose next sync, once armed, waits until let go (then
/// syncs): an evacuation held between the copy of its window and the
/// commits.
struct HeldSync {
    dev: MemBlock,
    armed: AtomicBool,
    inside: AtomicBool,
    release: AtomicBool,
}

impl Hooks for HeldSync {
    fn inner(&self) -> &dyn BlockMedia {
        &self.dev
    }
    fn sync(&self) -> std::io::Result<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.inside.store(true, Ordering::SeqCst);
            while !self.release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.dev.sync()
    }
}

impl HeldSync {
    /// Waits (up to 20 s) for the armed sync to begin; lets it go at
    /// once when it does not, so no thread stays held.
    fn held(&self) -> bool {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.inside.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        let held = self.inside.load(Ordering::SeqCst);
        if !held {
            self.let_go();
        }
        held
    }

    fn let_go(&self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

type Held = Arc<Hooked<HeldSync>>;

/// A pool whose hdd's next sync waits once armed ([`held_pool`]).
struct HeldPool {
    pm: Arc<MemMedia>,
    ssd: Arc<MemBlock>,
    hdd: Held,
    fs: Fs,
    /// The 4 MiB file on the ssd, and its data.
    a: (u64, Vec<u8>),
}

/// [`pool`] of 16 MiB of PM, a 64 MiB ssd and a 64 MiB hdd whose next sync
/// waits once armed, with a 4 MiB file `a` on the ssd.
fn held_pool() -> HeldPool {
    let pm = Arc::new(MemMedia::new(16 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, 64 << 20), (TierKind::Hdd, 64 << 20)],
        256,
    );
    let ssd = Arc::new(MemBlock::new(64 << 20));
    let hdd = Arc::new(Hooked(HeldSync {
        dev: MemBlock::new(64 << 20),
        armed: false.into(),
        inside: false.into(),
        release: false.into(),
    }));
    let fs = Fs::mount_with_tiers(
        pm.clone(),
        vec![(1, ssd.clone() as Arc<dyn BlockMedia>), (2, hdd.clone())],
    )
    .unwrap_or_else(|e| panic!("mount: {e}"));
    let data = pattern(11, 4 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.migrate_file(a, 1).unwrap();
    assert_eq!(on(&fs, a, "ssd"), 4 << 20);
    HeldPool {
        pm,
        ssd,
        hdd,
        fs,
        a: (a, data),
    }
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    Freeze,
    Unmount,
}

/// The ssd's removal is held between the copy of its data to the hdd and
/// the commits; `how` makes the pool clean meanwhile. Returns the removal's
/// answer and PM as the clean mark left it.
fn stop_during_the_evacuation(
    fs: &Arc<Fs>,
    pm: &MemMedia,
    hdd: &Held,
    how: Stop,
) -> (
    Result<terrace_core::tier_detach::DetachedTier, String>,
    Vec<u8>,
) {
    hdd.armed.store(true, Ordering::SeqCst);
    let (removed, image) = std::thread::scope(|sc| {
        let remover = sc.spawn(|| fs.detach_tier(Some(TierId(1))));
        let held = hdd.held();
        if held {
            match how {
                Stop::Freeze => fs.freeze().unwrap(),
                Stop::Unmount => fs.unmount().unwrap(),
            }
        }
        let image = pm.image();
        hdd.let_go();
        assert!(held, "the evacuation never synced the hdd");
        (remover.join().unwrap(), image)
    });
    assert!(fs.superblock().clean, "{how:?} marked the pool clean");
    (removed, image)
}

/// A freeze (read-only remount) while the removal's data is on its way to
/// the hdd, not yet committed: the evacuation commits nothing after the
/// clean mark (PM is byte for byte as the freeze left it), releases the
/// hdd blocks it copied to, and the removal is refused saying why, the
/// ssd taking data again; after the thaw the pool is whole and fsck-clean.
#[test]
fn a_freeze_during_the_evacuation_writes_nothing_after_the_clean_mark_and_keeps_the_tier() {
    let HeldPool {
        pm,
        ssd,
        hdd,
        fs,
        a: (a, data),
    } = held_pool();
    let fs = Arc::new(fs);
    let (removed, frozen) = stop_during_the_evacuation(&fs, &pm, &hdd, Stop::Freeze);
    assert!(
        pm.image() == frozen,
        "the removal wrote to PM after the freeze marked it clean"
    );
    let e = removed.unwrap_err();
    assert!(
        e.contains("cannot move the data off tier 1") && e.contains("remounted read-only"),
        "{e}"
    );
    assert_eq!(
        fs.tier_being_removed(),
        None,
        "the retirement was not taken back"
    );
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("the halted moves' blocks leaked: {e}"));
    assert_eq!(on(&fs, a, "ssd"), 4 << 20);
    assert_eq!(on(&fs, a, "hdd"), 0);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd.clone()), (2, hdd.clone())];
    fsck_clean_with(&*pm, &tiers, Fsck::Data, "frozen during the evacuation");
    fs.thaw().unwrap();
    assert_eq!(kinds(&fs), ["pm", "ssd", "hdd"]);
    assert_eq!(content(&fs, a), data);
    let b = file_holding(&fs, "b", &pattern(12, 1 << 20));
    fs.migrate_file(b, 1).unwrap();
    assert_eq!(on(&fs, b, "ssd"), 1 << 20, "the ssd takes data again");
    fs.detach_tier(Some(TierId(1)))
        .unwrap_or_else(|e| panic!("the removal again, thawed: {e}"));
    assert_eq!(on(&fs, a, "hdd"), 4 << 20);
    assert_eq!(content(&fs, a), data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// The same with an unmount: nothing is written after its clean mark,
/// nothing leaks, and the pool mounts again with the ssd and its data.
#[test]
fn an_unmount_during_the_evacuation_writes_nothing_after_the_clean_mark_and_keeps_the_tier() {
    let HeldPool {
        pm,
        ssd,
        hdd,
        fs,
        a: (a, data),
    } = held_pool();
    let fs = Arc::new(fs);
    let (removed, unmounted) = stop_during_the_evacuation(&fs, &pm, &hdd, Stop::Unmount);
    assert!(
        pm.image() == unmounted,
        "the removal wrote to PM after the unmount marked it clean"
    );
    let e = removed.unwrap_err();
    assert!(
        e.contains("cannot move the data off tier 1") && e.contains("being unmounted"),
        "{e}"
    );
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("the halted moves' blocks leaked: {e}"));
    drop(fs);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd.clone()), (2, hdd.clone())];
    fsck_clean_with(&*pm, &tiers, Fsck::Data, "unmounted during the evacuation");
    let fs = Fs::mount_with_tiers(pm.clone(), tiers).unwrap_or_else(|e| panic!("mount: {e}"));
    assert_eq!(kinds(&fs), ["pm", "ssd", "hdd"]);
    assert_eq!(on(&fs, a, "ssd"), 4 << 20);
    assert_eq!(content(&fs, a), data);
    fs.unmount().unwrap();
}

/// `tier add` while a removal moves its data: refused at once (not after
/// the move, behind the tier-change lock), naming the tier and when to try
/// again; it works once the removal ended.
#[test]
fn a_tier_add_during_a_removal_is_refused_at_once_saying_when_to_try_again() {
    let HeldPool {
        hdd,
        fs,
        a: (a, data),
        ..
    } = held_pool();
    hdd.armed.store(true, Ordering::SeqCst);
    let fs = &fs;
    let (removed, added, waited) = std::thread::scope(|sc| {
        let remover = sc.spawn(|| fs.detach_tier(Some(TierId(1))));
        let held = hdd.held();
        let (tx, rx) = std::sync::mpsc::channel();
        let asked = Instant::now();
        sc.spawn(move || {
            let r = fs.attach_tier(
                tier_record(3, TierKind::Hdd, 16 << 20),
                Arc::new(MemBlock::new(16 << 20)),
            );
            let _ = tx.send(r);
        });
        let added = rx.recv_timeout(Duration::from_secs(5));
        let waited = asked.elapsed();
        hdd.let_go();
        assert!(held, "the evacuation never synced the hdd");
        (remover.join().unwrap(), added, waited)
    });
    let added = added.unwrap_or_else(|_| {
        panic!("the attach waited for the removal's evacuation (no answer in 5 s)")
    });
    assert_eq!(
        added.unwrap_err(),
        "tier 1 is being removed; try again when `terrace tier remove` ends"
    );
    assert!(waited < Duration::from_secs(2), "refused after {waited:?}");
    removed.unwrap_or_else(|e| panic!("the removal: {e}"));
    assert_eq!(content(fs, a), data);
    fs.attach_tier(
        tier_record(3, TierKind::Hdd, 16 << 20),
        Arc::new(MemBlock::new(16 << 20)),
    )
    .unwrap_or_else(|e| panic!("the attach after the removal: {e}"));
    assert_eq!(kinds(fs), ["pm", "hdd", "hdd"]);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// A 6 MiB file on the ssd and its clone (`copy_file_range`), the clone
/// then written into (its extent cut in three, the shared blocks mapped by
/// extents that no longer match the source's): the refusal for lack of
/// room says the move needs 6.0 MiB — the shared blocks once — not 12.
#[test]
fn blocks_clones_share_count_once_in_the_refusal_for_room() {
    let (_pm, _ssd, _hdd, fs) = pool(16 << 20, 64 << 20, 4 << 20);
    let data = pattern(9, 6 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.migrate_file(a, 1).unwrap();
    let b = file(&fs, 1, "b");
    fs.copy_range(a, 0, b, 0, data.len() as u64).unwrap();
    assert_eq!(
        on(&fs, b, "ssd"),
        6 << 20,
        "the clone shares the ssd blocks"
    );
    let e = fs.detach_tier(Some(TierId(1))).unwrap_err();
    assert!(
        e.contains("needs 6.0 MiB on tier 2 (hdd)"),
        "a whole clone: {e}"
    );
    fs.write(b, 100 * 4096, &[1u8; 4096]).unwrap();
    let e = fs.detach_tier(Some(TierId(1))).unwrap_err();
    assert!(
        e.contains("needs 6.0 MiB on tier 2 (hdd)"),
        "a clone written into: {e}"
    );
    fs.check_allocator().unwrap();
}

/// The same clones with room on the hdd for their blocks once (but not
/// twice): the removal goes through, the blocks move once and stay shared.
#[test]
fn clones_whose_shared_blocks_fit_once_are_moved_and_the_tier_removed() {
    let (_pm, _ssd, _hdd, fs) = pool(16 << 20, 64 << 20, 10 << 20);
    let data = pattern(10, 6 << 20);
    let a = file_holding(&fs, "a", &data);
    fs.migrate_file(a, 1).unwrap();
    let b = file(&fs, 1, "b");
    fs.copy_range(a, 0, b, 0, data.len() as u64).unwrap();
    let mut bdata = data.clone();
    fs.write(b, 100 * 4096, &[1u8; 4096]).unwrap();
    bdata[100 * 4096..101 * 4096].fill(1);
    fs.detach_tier(Some(TierId(1)))
        .unwrap_or_else(|e| panic!("6 MiB of shared blocks on a 10 MiB hdd: {e}"));
    assert_eq!(kinds(&fs), ["pm", "hdd"]);
    assert_eq!(on(&fs, a, "hdd"), 6 << 20);
    assert_eq!(content(&fs, a), data);
    assert_eq!(content(&fs, b), bdata);
    assert!(
        fs.shared_block_stats().get(&2).is_some_and(|s| s.0 > 0),
        "no longer shared"
    );
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// The pool's only block tier goes to PM. Holding as much data as PM has
/// room for beyond its metadata reserve (less 8 KiB), it is refused — the
/// move would leave PM at its bare reserve, where the next file's first
/// write fails with ENOSPC — saying how much is needed, how much there is
/// and how much to free; with 1 MiB fewer it goes, and new files can be
/// written afterwards.
#[test]
fn the_only_block_tier_goes_to_pm_only_leaving_room_beyond_its_metadata_reserve() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    mkfs_tiers(&*pm, &[(TierKind::Ssd, 64 << 20)], 256);
    let ssd = Arc::new(MemBlock::new(64 << 20));
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone() as Arc<dyn BlockMedia>)])
        .unwrap_or_else(|e| panic!("mount: {e}"));
    let room = |fs: &Fs| {
        let s = fs.space_status();
        s.pm_free_bytes - s.promised_bytes - s.pm_reserve_bytes
    };
    let mut files = Vec::new();
    let mut on_ssd = 0u64;
    while on_ssd + (2 << 20) < room(&fs) {
        let d = pattern(files.len() as u64, 1 << 20);
        let ino = file_holding(&fs, &format!("f{}", files.len()), &d);
        fs.migrate_file(ino, 1).unwrap();
        on_ssd += 1 << 20;
        files.push((ino, d));
    }
    let last = (room(&fs) - on_ssd - 8192) / 4096 * 4096;
    let d = pattern(99, last as usize);
    let ino = file_holding(&fs, "last", &d);
    fs.migrate_file(ino, 1).unwrap();
    files.push((ino, d));
    assert!(
        room(&fs) >= on_ssd + last,
        "the data fits beyond the reserve"
    );
    let e = fs.detach_tier(Some(TierId(1))).unwrap_err();
    assert!(
        e.contains("to pm")
            && e.contains("needs")
            && e.contains("keeps free")
            && e.contains("free ")
            && e.contains("there or add a tier"),
        "{e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    assert_eq!(kinds(&fs), ["pm", "ssd"]);
    assert_eq!(fs.tier_being_removed(), None);
    fs.unlink(1, b"f0").unwrap();
    files.remove(0);
    fs.detach_tier(Some(TierId(1)))
        .unwrap_or_else(|e| panic!("with 1 MiB fewer: {e}"));
    assert_eq!(kinds(&fs), ["pm"]);
    for (ino, d) in &files {
        assert!(content(&fs, *ino) == *d, "inode {ino} differs");
    }
    for k in 0..16 {
        let n = fs
            .mknod(
                1,
                format!("new{k}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                CTX,
            )
            .unwrap_or_else(|e| panic!("create new{k} after the removal: {e}"));
        fs.write(n.ino, 0, &pattern(200 + k, 4096))
            .unwrap_or_else(|e| panic!("write new{k} after the removal: {e}"));
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}
