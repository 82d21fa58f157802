//! Tier epochs (`tier_epoch.rs`, design.md §3 "Stale PM tiers"): a copy of
//! the PM tier that is older than the block tiers' contents — a backup
//! restored, or the other copy mounted since — is refused at mount, before
//! anything is written; the copy that last used the tiers mounts, whatever
//! crash or failure interrupted a stamping.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::recovery::OpenError;
use terrace_core::Fs;
use terrace_format::{TierHeader, TierKind, BLOCK_SIZE};
use terrace_media::{BlockMedia, FaultBlock, MemBlock, MemMedia};

const SSD: u64 = 32 << 20;
const HDD: u64 = 32 << 20;

/// A formatted PM tier and two block tiers with their headers (as the CLI's
/// mkfs writes them, epoch 0: stamped at the first mount).
fn pool() -> (Arc<MemMedia>, Arc<MemBlock>, Arc<MemBlock>) {
    let pm = Arc::new(MemMedia::new(16 << 20));
    mkfs_tiers(&*pm, &[(TierKind::Ssd, SSD), (TierKind::Hdd, HDD)], 256);
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    let (ssd, hdd) = (Arc::new(MemBlock::new(SSD)), Arc::new(MemBlock::new(HDD)));
    for (dev, id) in [(&ssd, 1u8), (&hdd, 2)] {
        let rec = sb.tiers.iter().find(|t| t.id == id).unwrap();
        let h = TierHeader {
            pool_uuid: sb.uuid,
            id,
            kind: rec.kind,
            size: rec.size,
            extent_size: rec.extent_size,
            epoch: 0,
        };
        dev.write_blocks(0, &h.encode()).unwrap();
    }
    (pm, ssd, hdd)
}

fn devices(ssd: &Arc<MemBlock>, hdd: &Arc<MemBlock>) -> Vec<(u8, Arc<dyn BlockMedia>)> {
    vec![(1, ssd.clone()), (2, hdd.clone())]
}

fn open(pm: &Arc<MemMedia>, devs: Vec<(u8, Arc<dyn BlockMedia>)>) -> Result<Fs, OpenError> {
    Fs::mount_with_tiers(pm.clone(), devs)
}

fn header_epoch(dev: &dyn BlockMedia) -> u64 {
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    dev.read_blocks(0, &mut b).unwrap();
    TierHeader::decode(&b).unwrap().epoch
}

fn record_epoch(pm: &MemMedia, id: u8) -> u64 {
    let sb = terrace_core::recovery::read_superblock(pm).unwrap();
    sb.tiers.iter().find(|t| t.id == id).unwrap().epoch
}

/// Data on both block tiers, then a clean unmount.
fn fill(fs: &Fs, seed: u64) -> Vec<(u64, Vec<u8>)> {
    let a = file_holding(fs, &format!("a{seed}"), &pattern(seed, 1 << 20));
    let b = file_holding(fs, &format!("b{seed}"), &pattern(seed + 1, 1 << 20));
    fs.migrate_file(a, 1).unwrap();
    fs.migrate_file(b, 2).unwrap();
    vec![(a, pattern(seed, 1 << 20)), (b, pattern(seed + 1, 1 << 20))]
}

fn assert_stale(r: Result<Fs, OpenError>, what: &str) {
    match r {
        Err(OpenError::StaleTier(m)) => {
            assert!(
                m.contains("another copy of this pool's PM tier"),
                "{what}: {m}"
            )
        }
        Err(e) => panic!("{what}: refused for another reason: {e}"),
        Ok(_) => panic!("{what}: a stale copy of the PM tier mounted"),
    }
}

#[test]
fn every_mount_and_unmount_stamps_the_headers_and_records_alike() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let at_mount = header_epoch(&*ssd);
    assert_ne!(at_mount, 0, "stamped at mount");
    assert_eq!(header_epoch(&*hdd), at_mount);
    assert_eq!(record_epoch(&pm, 1), at_mount);
    assert_eq!(record_epoch(&pm, 2), at_mount);
    assert_eq!(record_epoch(&pm, 0), 0, "PM is not stamped");
    fs.unmount().unwrap();
    drop(fs);
    let at_unmount = header_epoch(&*ssd);
    assert_ne!(at_unmount, at_mount, "a new epoch at unmount");
    assert_eq!(record_epoch(&pm, 1), at_unmount);
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    assert_eq!(sb.next_tier_epoch, 0, "nothing left pending");
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Data, "after stamping");
}

#[test]
fn a_restored_backup_of_pm_is_refused_and_the_pool_that_moved_on_still_mounts() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let mut files = fill(&fs, 1);
    fs.unmount().unwrap();
    drop(fs);
    let backup = pm.image();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    files.extend(fill(&fs, 10));
    fs.unmount().unwrap();
    drop(fs);
    let newer = pm.image();
    let restored = Arc::new(MemMedia::from_image(backup));
    let (ssd_before, hdd_before) = (ssd.image(), hdd.image());
    assert_stale(open(&restored, devices(&ssd, &hdd)), "the backup");
    assert_stale(
        Fs::mount_read_only(restored.clone(), devices(&ssd, &hdd)),
        "the backup, read-only",
    );
    assert!(
        ssd.image() == ssd_before && hdd.image() == hdd_before,
        "a refused mount wrote a tier"
    );
    assert_eq!(pm.image(), newer);
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_files(&fs, &files, "the copy that moved on");
    fs.unmount().unwrap();
}

#[test]
fn a_copy_of_pm_taken_while_mounted_is_refused_once_the_original_unmounts() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let files = fill(&fs, 3);
    let live_copy = Arc::new(MemMedia::from_image(pm.image()));
    fs.unmount().unwrap();
    drop(fs);
    assert_stale(open(&live_copy, devices(&ssd, &hdd)), "the live copy");
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_files(&fs, &files, "the original");
    fs.unmount().unwrap();
}

#[test]
fn a_stamping_that_fails_leaves_the_pool_mountable_and_the_next_one_finishes_it() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let files = fill(&fs, 5);
    fs.unmount().unwrap();
    drop(fs);
    let before = header_epoch(&*ssd);
    // The mount writes the ssd's header, then the hdd's fails: the epoch
    // stays pending, one header has it and one does not, and the pool
    // mounts all the same (saying so), as it would with a failing tier.
    let faulty_hdd = Arc::new(FaultBlock::new(MemBlock::from_image(hdd.image())));
    faulty_hdd.fail_writes_after(0);
    let fs = open(&pm, vec![(1, ssd.clone()), (2, faulty_hdd.clone())]).unwrap();
    let notices = fs.take_notices().join("\n");
    assert!(notices.contains("cannot stamp"), "{notices}");
    assert_files(&fs, &files, "with the stamping failed");
    drop(fs); // a crash: no unmount
    let pending = terrace_core::recovery::read_superblock(&*pm)
        .unwrap()
        .next_tier_epoch;
    assert_ne!(pending, 0);
    assert_eq!(header_epoch(&*ssd), pending, "the ssd has the new epoch");
    assert_eq!(header_epoch(faulty_hdd.inner()), before, "the hdd the old");
    // A copy of PM taken now holds the pending epoch.
    let copy = pm.image();
    faulty_hdd.heal();
    let fs = open(&pm, vec![(1, ssd.clone()), (2, faulty_hdd.clone())]).unwrap();
    let now = header_epoch(&*ssd);
    assert_ne!(now, pending, "a fresh epoch, not the pending one again");
    assert_eq!(header_epoch(faulty_hdd.inner()), now);
    assert_files(&fs, &files, "after the failed stamping");
    fill(&fs, 20);
    drop(fs); // a crash: the original moved on without an unmount
              // The copy must not mount against tiers the original changed: it did
              // when the pending epoch was reused as the new one.
    let hdd: Arc<MemBlock> = Arc::new(MemBlock::from_image(faulty_hdd.inner().image()));
    assert_stale(
        open(&Arc::new(MemMedia::from_image(copy)), devices(&ssd, &hdd)),
        "a copy of PM taken while an epoch was pending",
    );
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_files(&fs, &files, "the original after all");
    fs.unmount().unwrap();
}

#[test]
fn a_tier_mounted_without_its_device_is_accepted_when_it_comes_back() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let a = file_holding(&fs, "a", &pattern(7, 1 << 20));
    fs.migrate_file(a, 1).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let hdd_epoch = header_epoch(&*hdd);
    // The hdd holds nothing: the pool mounts without it, twice.
    for _ in 0..2 {
        let fs = open(&pm, vec![(1, ssd.clone())]).unwrap();
        fs.unmount().unwrap();
    }
    assert_ne!(header_epoch(&*ssd), hdd_epoch);
    assert_eq!(record_epoch(&pm, 2), hdd_epoch, "its record kept its epoch");
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_eq!(content(&fs, a), pattern(7, 1 << 20));
    fs.unmount().unwrap();
}

#[test]
fn a_pool_and_headers_from_before_epochs_mount_and_get_stamped() {
    let (pm, ssd, hdd) = pool();
    // `pool()` is what an older mkfs wrote: every epoch 0.
    assert_eq!(record_epoch(&pm, 1), 0);
    assert_eq!(header_epoch(&*ssd), 0);
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_ne!(header_epoch(&*ssd), 0);
    fs.unmount().unwrap();
}

#[test]
fn a_block_tier_restored_from_an_older_backup_is_refused_too() {
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let files = fill(&fs, 20);
    fs.unmount().unwrap();
    drop(fs);
    let old_hdd = hdd.image();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let restored = Arc::new(MemBlock::from_image(old_hdd));
    assert_stale(open(&pm, devices(&ssd, &restored)), "an older hdd image");
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_files(&fs, &files, "with the hdd of the same moment");
    fs.unmount().unwrap();
}

#[test]
fn an_unmount_whose_stamping_fails_still_marks_the_pool_clean() {
    let (pm, ssd, hdd) = pool();
    let faulty_hdd = Arc::new(FaultBlock::new(MemBlock::from_image(hdd.image())));
    let fs = open(&pm, vec![(1, ssd.clone()), (2, faulty_hdd.clone())]).unwrap();
    let files = fill(&fs, 30);
    fs.flush_all().unwrap();
    // Every write to the hdd fails from here on: its header's included.
    faulty_hdd.fail_writes_after(0);
    fs.unmount().unwrap();
    assert!(
        fs.take_notices().iter().any(|n| n.contains("cannot stamp")),
        "the failure is said"
    );
    drop(fs);
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    assert!(sb.clean, "the pool is marked clean");
    assert_ne!(sb.next_tier_epoch, 0, "the epoch is left pending");
    faulty_hdd.heal();
    let fs = open(&pm, vec![(1, ssd.clone()), (2, faulty_hdd.clone())]).unwrap();
    assert_files(&fs, &files, "after the unmount whose stamping failed");
    fs.unmount().unwrap();
}

#[test]
fn a_header_torn_by_a_power_loss_inside_its_write_is_accepted_and_rewritten_whole() {
    // The header is rewritten in place at every mount and unmount; a power
    // loss inside that 4 KiB write (a device without atomic 4 KiB writes)
    // can leave its first sector from the new stamping, its last from the
    // old: its check fails. It was skipped (never stamped again) here and
    // refused by the CLI as "damaged", so the pool could not mount.
    let (pm, ssd, hdd) = pool();
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    let files = fill(&fs, 3);
    fs.unmount().unwrap();
    drop(fs);
    let old_epoch = header_epoch(&*ssd);
    assert_eq!(record_epoch(&pm, 1), old_epoch);
    let mut head = vec![0u8; BLOCK_SIZE as usize];
    ssd.read_blocks(0, &mut head).unwrap();
    let mut newer = TierHeader::decode(&head).unwrap();
    newer.epoch = old_epoch ^ 0x5555;
    head[..512].copy_from_slice(&newer.encode()[..512]);
    ssd.write_blocks(0, &head).unwrap();
    assert!(TierHeader::decode(&head).is_err(), "torn");
    let sb = terrace_core::recovery::read_superblock(&*pm).unwrap();
    let rec = sb.tiers.iter().find(|t| t.id == 1).unwrap();
    let h = TierHeader::decode_torn(&head, &terrace_core::tier_epoch::known_epochs(&sb, 1))
        .expect("taken with the epoch of its check");
    assert!(sb.accepts_tier_epoch(rec, h.epoch));
    let fs = open(&pm, devices(&ssd, &hdd)).unwrap();
    assert_files(&fs, &files, "with a torn header");
    fs.unmount().unwrap();
    assert_eq!(header_epoch(&*ssd), record_epoch(&pm, 1), "rewritten whole");
    assert_ne!(header_epoch(&*ssd), old_epoch);
}
