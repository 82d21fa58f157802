//! A block tier whose device says "full" (ENOSPC on writes to blocks the
//! pool allocated: a thin device, or a sparse image on a file system that
//! filled up) while the pool's own accounting still has room
//! (`device_full.rs`, design.md §5s).

mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use terrace_core::Fs;
use terrace_format::TierKind;
use terrace_media::{BlockMedia, FaultBlock, MemBlock, MemMedia};

const SSD: u64 = 96 << 20;
const MIB: u64 = 1 << 20;

/// Fills PM (so write-back has nowhere to go but the SSD) with the SSD
/// healthy, then goes back to block-first placement.
fn fill_pm(fs: &Fs) {
    fs.set_setting("placement_policy", "pm-only").unwrap();
    let filler = file(fs, 1, "filler");
    let mut off = 0;
    while fs.status().placement_overflows == 0 {
        fs.write(filler, off, &[7u8; 65536]).unwrap();
        off += 65536;
    }
    fs.fsync(filler, false).unwrap();
    block_first(fs);
}

fn free_bytes(fs: &Fs) -> u64 {
    fs.statfs().bavail * 4096
}

/// A pool of PM (`pm_bytes`), an SSD whose faults the test injects (64 MiB)
/// and an HDD (`hdd_bytes`), formatted and mounted: (PM, SSD, HDD, Fs).
type ThreeTiers = (Arc<MemMedia>, Arc<FaultBlock<MemBlock>>, Arc<MemBlock>, Fs);

fn three_tiers(pm_bytes: u64, hdd_bytes: u64, inodes: u64) -> ThreeTiers {
    let pm = Arc::new(MemMedia::new(pm_bytes));
    let ssd = Arc::new(FaultBlock::new(MemBlock::new(64 << 20)));
    let hdd = Arc::new(MemBlock::new(hdd_bytes));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, 64 << 20), (TierKind::Hdd, hdd_bytes)],
        inodes,
    );
    let fs = remount_three(&pm, &ssd, &hdd);
    (pm, ssd, hdd, fs)
}

fn remount_three(pm: &Arc<MemMedia>, ssd: &Arc<FaultBlock<MemBlock>>, hdd: &Arc<MemBlock>) -> Fs {
    Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, hdd.clone())]).unwrap()
}

#[test]
fn a_full_device_is_tried_once_per_wait_refuses_new_writes_and_comes_back_when_it_has_room() {
    let (pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(4 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    fill_pm(&fs);
    assert!(free_bytes(&fs) > 64 * MIB, "{}", free_bytes(&fs));
    // Every write-back pass below writes back what is dirty.
    fs.set_setting("writeback_age_ns", "1ms").unwrap();

    let b = file(&fs, 1, "b");
    // The file system under the image fills up.
    ssd.set_host_free(Some(0));
    ssd.fail_writes_with(libc::ENOSPC, 0);
    let a = file(&fs, 1, "a");
    let data = pattern(1, MIB as usize);
    fs.write(a, 0, &data)
        .expect("accepted: the pool does not know yet");
    let e = fs.fsync(a, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    let tried = ssd.injected().writes;
    assert!(tried > 0);

    // Known full: its room is gone from statfs, new data is refused at
    // write() (creates too: the accepted page has no block), and `status`
    // says so.
    let st = fs.status();
    let full = st.tiers[1]
        .device_full
        .expect("status shows the full device");
    assert!(full.next_try_in_secs <= 1, "{full:?}");
    assert!(
        free_bytes(&fs) < 2 * MIB,
        "df still counts the full device: {} bytes free",
        free_bytes(&fs)
    );
    let e = fs.write(b, 0, &pattern(2, MIB as usize)).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::ENOSPC),
        "a write the pool cannot keep was accepted"
    );
    let e = fs
        .mknod(1, b"c", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));

    // No loop of tries: a hundred write-back passes and fsyncs within the
    // wait send the device nothing.
    for _ in 0..100 {
        fs.writeback_pass();
    }
    for _ in 0..5 {
        assert!(fs.fsync(a, false).is_err());
    }
    assert_eq!(
        ssd.injected().writes,
        tried,
        "the full device was tried within its wait"
    );

    // After the wait, one try; it fails, and the next wait is longer.
    std::thread::sleep(Duration::from_millis(1100));
    fs.writeback_pass();
    let tried_again = ssd.injected().writes;
    assert!(tried_again > tried, "no try after the wait");
    for _ in 0..100 {
        fs.writeback_pass();
    }
    assert_eq!(ssd.injected().writes, tried_again);
    assert!(fs.status().tiers[1].device_full.unwrap().next_try_in_secs >= 1);

    // Unmount cannot persist the accepted page: it says so soon (not after
    // a minute of waiting for migration) and the pool stays usable.
    let t0 = std::time::Instant::now();
    let e = fs.unmount().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(fs.read(a, 0, MIB as usize).unwrap() == data);

    // Space is freed on the image's file system: the next write-back pass
    // sees it, the episode ends without waiting, the page is written back,
    // and the pool has its room again.
    ssd.heal();
    ssd.set_host_free(Some(64 * MIB));
    fs.writeback_pass();
    assert!(fs.status().tiers[1].device_full.is_none());
    assert_eq!(fs.status().cache.dirty_bytes, 0);
    fs.fsync(a, false).expect("fsync once the device has room");
    assert!(free_bytes(&fs) > 64 * MIB);
    fs.write(b, 0, &pattern(2, MIB as usize)).unwrap();
    fs.fsync(b, false).unwrap();
    assert!(fs.read(a, 0, MIB as usize).unwrap() == data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(
        &*pm,
        Some(ssd.clone()),
        Fsck::Data,
        "after the device had room again",
    );
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(a, 0, MIB as usize).unwrap() == data);
    assert!(fs.read(b, 0, MIB as usize).unwrap() == pattern(2, MIB as usize));
}

#[test]
fn writes_that_fit_on_pm_go_on_while_the_device_is_full() {
    let (_pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(16 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    block_first(&fs);
    ssd.fail_writes_with(libc::ENOSPC, 0);
    let a = file(&fs, 1, "a");
    fs.write(a, 0, &pattern(1, MIB as usize)).unwrap();
    // Write-back fails on the SSD and lands on PM instead.
    fs.fsync(a, false).unwrap();
    assert!(fs.status().tiers[1].device_full.is_some());
    // Small files still fit on PM; the pool says how much room that is.
    let room = free_bytes(&fs);
    assert!(room > 4 * MIB && room < 16 * MIB, "{room}");
    for i in 0..4 {
        let f = file(&fs, 1, &format!("s{i}"));
        fs.write(f, 0, &pattern(10 + i, 256 << 10)).unwrap();
        fs.fsync(f, false).unwrap();
    }
    assert!(fs.read(a, 0, MIB as usize).unwrap() == pattern(1, MIB as usize));
}

#[test]
fn a_full_device_without_a_host_file_system_is_probed_after_its_wait() {
    let (_pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(4 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    fill_pm(&fs);
    let b = file(&fs, 1, "b");
    // A thin-provisioned device: no host file system to ask.
    ssd.fail_writes_with(libc::ENOSPC, 0);
    let a = file(&fs, 1, "a");
    fs.write(a, 0, &pattern(1, MIB as usize)).unwrap();
    assert!(fs.fsync(a, false).is_err());
    // The application gives up on that file: nothing is dirty, and the
    // pool refuses every new write, so no write could find the room.
    fs.unlink(1, b"a").unwrap();
    assert_eq!(fs.status().cache.dirty_bytes, 0);
    assert!(fs.write(b, 0, &pattern(2, MIB as usize)).is_err());
    ssd.heal();
    let before = ssd.inner().stats().write_requests;
    fs.writeback_pass();
    assert!(
        fs.status().tiers[1].device_full.is_some(),
        "probed within the wait"
    );
    assert_eq!(ssd.inner().stats().write_requests, before);
    std::thread::sleep(Duration::from_millis(1100));
    // The write-back thread probes it with one block once the wait is over.
    fs.writeback_pass();
    assert_eq!(ssd.inner().stats().write_requests, before + 1);
    assert!(fs.status().tiers[1].device_full.is_none());
    fs.write(b, 0, &pattern(2, MIB as usize)).unwrap();
    fs.fsync(b, false).unwrap();
    fs.check_allocator().unwrap();
}

#[test]
fn a_write_back_that_finds_the_ssd_full_lands_on_the_hdd_and_fsync_succeeds() {
    let (pm, ssd, hdd, fs) = three_tiers(4 << 20, 64 << 20, 64);
    fill_pm(&fs);
    ssd.set_host_free(Some(0));
    ssd.fail_writes_with(libc::ENOSPC, 0);
    let a = file(&fs, 1, "a");
    fs.write(a, 0, &pattern(1, MIB as usize)).unwrap();
    fs.fsync(a, false)
        .expect("the HDD had room: the fsync must not fail for the SSD's device");
    assert_eq!(tier_bytes(&fs, a, "hdd"), MIB);
    assert!(fs.status().tiers[1].device_full.is_some());
    // The pool's room is now the HDD's: writes go on there.
    assert!(free_bytes(&fs) > 32 * MIB, "{}", free_bytes(&fs));
    let b = file(&fs, 1, "b");
    fs.write(b, 0, &pattern(2, 8 * MIB as usize)).unwrap();
    fs.fsync(b, false).unwrap();
    assert_eq!(tier_bytes(&fs, b, "hdd"), 8 * MIB);
    fs.unmount().unwrap();
    drop(fs);
    let fs = remount_three(&pm, &ssd, &hdd);
    assert!(fs.read(a, 0, MIB as usize).unwrap() == pattern(1, MIB as usize));
    assert!(fs.read(b, 0, 8 * MIB as usize).unwrap() == pattern(2, 8 * MIB as usize));
}

#[test]
fn migration_passes_over_a_full_ssd_to_the_hdd_so_pm_keeps_draining() {
    let (_pm, ssd, _hdd, fs) = three_tiers(8 << 20, 64 << 20, 64);
    fs.set_setting("placement_policy", "pm-only").unwrap();
    fs.set_setting("migration_age_ns", "0").unwrap();
    let files: Vec<(u64, Vec<u8>)> = (0..5)
        .map(|i| {
            let f = file(&fs, 1, &format!("f{i}"));
            let data = pattern(i, MIB as usize);
            fs.write(f, 0, &data).unwrap();
            fs.fsync(f, false).unwrap();
            (f, data)
        })
        .collect();
    let pm_before = fs.status().tiers[0].used;
    ssd.set_host_free(Some(0));
    ssd.fail_writes_with(libc::ENOSPC, 0);
    // The first drain meets the full SSD; the next ones go to the HDD.
    // (A drain that moved nothing makes the next one wait 200 ms.)
    for _ in 0..4 {
        fs.migration_pass();
        std::thread::sleep(Duration::from_millis(250));
    }
    let st = fs.status();
    assert!(st.tiers[1].device_full.is_some());
    assert!(
        st.tiers[2].used > 0,
        "nothing drained to the HDD: {:?}",
        st.migration
    );
    assert!(st.tiers[0].used < pm_before, "PM did not drain");
    for (f, data) in &files {
        assert!(fs.read(*f, 0, MIB as usize).unwrap() == *data);
    }
    fs.check_allocator().unwrap();
}

/// The burst of `log_migration.rs` (small files whose logs do not fit PM)
/// on a pool whose SSD's device is full from the start: the logs move to
/// the HDD instead, nothing fails, and everything reads back.
#[test]
fn logs_move_to_the_hdd_while_the_ssd_device_is_full() {
    let (pm, ssd, hdd, fs) = three_tiers(8 << 20, 256 << 20, 30_000);
    // Full from the start: the first write-back marks it.
    ssd.set_host_free(Some(0));
    ssd.fail_writes_with(libc::ENOSPC, 0);
    let fs = Arc::new(fs);
    let files = small_files_burst(&fs, 24_000);
    let st = fs.log_migration_status();
    assert!(st.moved > 0 && st.logs_on_tiers > 0, "{st:?}");
    let on_hdd = files
        .iter()
        .filter(|(ino, _)| fs.log_place(*ino).unwrap().is_some_and(|p| p.0 == 2))
        .count();
    assert!(on_hdd > 0, "no log on the HDD");
    assert!(fs.status().tiers[1].device_full.is_some());
    fs.unmount().unwrap();
    drop(fs);
    let fs = remount_three(&pm, &ssd, &hdd);
    fs.check_allocator().unwrap();
    assert_files(&fs, &files, "after the burst");
}

#[test]
fn a_sparse_image_on_a_full_host_begins_full_at_mount_and_a_whole_image_does_not() {
    let (pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(4 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    fill_pm(&fs);
    fs.unmount().unwrap();
    drop(fs);
    // The host file system filled up while the pool was unmounted; the
    // image still has unallocated blocks.
    ssd.set_host_free(Some(64 << 10));
    ssd.set_unbacked(Some(32 * MIB));
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert!(
        fs.status().tiers[1].device_full.is_some(),
        "a sparse image on a full file system mounts as a full device"
    );
    assert!(free_bytes(&fs) < 2 * MIB, "{} bytes free", free_bytes(&fs));
    let a = file(&fs, 1, "a");
    let e = fs.write(a, 0, &pattern(3, MIB as usize)).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::ENOSPC),
        "a write its image cannot back was accepted"
    );
    assert!(fs
        .take_notices()
        .iter()
        .any(|n| n.contains("the file system holding its image is full")));
    // Room on the host: the next write-back pass ends the episode.
    ssd.set_host_free(Some(64 * MIB));
    fs.writeback_pass();
    assert!(fs.status().tiers[1].device_full.is_none());
    fs.write(a, 0, &pattern(3, MIB as usize)).unwrap();
    fs.fsync(a, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);

    // A fully allocated image needs nothing from its full host.
    ssd.set_host_free(Some(0));
    ssd.set_unbacked(Some(0));
    let fs = mount_tiered(pm, ssd);
    assert!(fs.status().tiers[1].device_full.is_none());
    assert!(free_bytes(&fs) > 32 * MIB);
    let b = file(&fs, 1, "b");
    fs.write(b, 0, &pattern(4, MIB as usize)).unwrap();
    fs.fsync(b, false).unwrap();
}
