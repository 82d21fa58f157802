//! A tier with data is removed from a mounted pool (`Fs::detach_tier`,
//! `tier_evacuate.rs`, design.md §3 "Removing a tier from a mounted
//! pool"): its data moves to the next tier below (the last tier's to the
//! nearest one above) while background migration and writers run, every
//! file reads back the same and nothing maps the tier; a removal that
//! cannot fit the data elsewhere, or that a rule naming the tier holds
//! up, is refused before anything moves, with the pool as it was.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
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
