//! Issue 22: a synchronous writer keeps PM while a bulk stream runs beside
//! it, and a lone bulk stream still uses PM (up to the forced mark) when no
//! synchronous writer needs it. Counted with `status.placement_by_class`.

mod common;
use common::*;

const MIB: u64 = 1 << 20;

/// A WAL: 4 KiB appends with an fsync after each.
fn wal_writes(fs: &terrace_core::Fs, ino: u64, from: u64, n: u64) {
    for k in from..from + n {
        fs.write(ino, k * 4096, &[7u8; 4096]).unwrap();
        fs.fsync(ino, true).unwrap();
    }
}

/// A lone bulk stream: `mib` 1 MiB asynchronous writes to `ino`.
fn stream(fs: &terrace_core::Fs, ino: u64, mib: u64) {
    for k in 0..mib {
        fs.write(ino, k * MIB, &vec![3u8; MIB as usize]).unwrap();
    }
}

/// PM 32 MiB; a bulk stream writes four times that in 1 MiB writes, a WAL
/// 4 MiB in 4 KiB writes interleaved with it. No migration runs, so PM holds
/// whatever lands on it. Returns the placement counts.
fn wal_beside_a_stream(fs: &terrace_core::Fs) -> terrace_core::placement_stats::PlacementByClass {
    let wal = file(fs, 1, "wal");
    let bulk = file(fs, 1, "bulk");
    wal_writes(fs, wal, 0, 8);
    for k in 0..128u64 {
        fs.write(bulk, k * MIB, &vec![3u8; MIB as usize]).unwrap();
        wal_writes(fs, wal, 8 + k * 8, 8);
    }
    fs.status().placement_by_class
}

#[test]
fn without_the_sync_window_the_stream_takes_pm_and_the_wal_overflows() {
    // The setting is what protects the WAL: with it off, the old behaviour.
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    fs.set_setting("placement_sync_window_ns", "0").unwrap();
    fs.set_setting("placement_bulk_pm_percent", "100").unwrap();
    let p = wal_beside_a_stream(&fs);
    assert!(p.sync.overflow_writes > 0, "{p:?}");
}

#[test]
fn a_synchronous_writer_keeps_pm_while_a_bulk_stream_runs() {
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    let wal = file(&fs, 1, "wal");
    let bulk = file(&fs, 1, "bulk");
    wal_writes(&fs, wal, 0, 8);
    for k in 0..128u64 {
        fs.write(bulk, k * MIB, &vec![3u8; MIB as usize]).unwrap();
        wal_writes(&fs, wal, 8 + k * 8, 8);
    }
    let p = fs.status().placement_by_class;
    assert_eq!(p.sync.pm_writes, 8 + 128 * 8 - 1, "{p:?}");
    assert_eq!(
        p.sync.overflow_writes + p.sync.block_writes,
        0,
        "synchronous writes left PM: {p:?}"
    );
    assert!(
        p.async_large.block_writes >= 96,
        "the bulk stream kept taking PM: {p:?}"
    );
    // Every WAL block is on PM.
    let tiers = fs.getxattr(wal, b"user.terrace.tiers").unwrap();
    let tiers = String::from_utf8(tiers).unwrap();
    assert!(!tiers.contains(":ssd"), "WAL data on the SSD: {tiers}");
}

#[test]
fn a_lone_bulk_stream_still_uses_pm_up_to_the_bulk_limit() {
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    let bulk = file(&fs, 1, "bulk");
    stream(&fs, bulk, 64);
    let p = fs.status().placement_by_class;
    // Past the dynamic threshold (50% for writes alone) and up to the bulk
    // limit (80%): 25 of 32 MiB.
    assert!(
        p.async_large.pm_writes >= 24,
        "a lone stream should fill PM before going down: {p:?}"
    );
    assert!(p.async_large.pm_writes <= 26, "{p:?}");
}

#[test]
fn a_synchronous_writer_arriving_after_a_stream_filled_pm_finds_room() {
    // The stream runs alone first (no synchronous writer yet) and takes PM
    // up to the bulk limit; the WAL that starts then still lands on PM.
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    let bulk = file(&fs, 1, "bulk");
    stream(&fs, bulk, 64);
    let wal = file(&fs, 1, "wal");
    wal_writes(&fs, wal, 0, 1024);
    let p = fs.status().placement_by_class;
    assert_eq!(p.sync.overflow_writes, 0, "{p:?}");
    assert_eq!(p.sync.pm_writes, 1023, "{p:?}");
}

#[test]
fn synchronous_writes_keep_pm_past_the_forced_mark_until_it_has_no_room() {
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    fs.set_setting("placement_bulk_pm_percent", "100").unwrap();
    let bulk = file(&fs, 1, "bulk");
    // Fill PM to the forced mark with a lone stream.
    stream(&fs, bulk, 64);
    let before = fs.status().placement_by_class;
    // Small asynchronous writes now go down (PM saturated) ...
    let small = file(&fs, 1, "small");
    for k in 0..16u64 {
        fs.write(small, k * 4096, &[1u8; 4096]).unwrap();
    }
    // ... while synchronous ones still land on PM.
    let wal = file(&fs, 1, "wal");
    wal_writes(&fs, wal, 0, 16);
    let p = fs.status().placement_by_class;
    assert_eq!(
        p.async_small.pm_writes, before.async_small.pm_writes,
        "small async writes took a saturated PM: {p:?}"
    );
    assert!(p.sync.pm_writes >= 15, "{p:?}");
    assert_eq!(p.sync.overflow_writes, 0, "{p:?}");
}

#[test]
fn a_large_preallocation_takes_no_pm_and_a_small_one_does() {
    // fio and databases preallocate with fallocate; writes never land in
    // preallocated blocks (copy-on-write), so on PM they only take room.
    let (_pm, _ssd, fs) = tiered_pool(32 * MIB, 512 * MIB, 64);
    let big = file(&fs, 1, "big");
    let before = fs.status().tiers[0].used;
    fs.fallocate(big, 0, 256 * MIB, terrace_core::FallocateMode::Allocate)
        .unwrap();
    let pm_after = fs.status().tiers[0].used;
    assert!(
        pm_after - before < MIB,
        "a 256 MiB preallocation took {} KiB of PM",
        (pm_after - before) >> 10
    );
    assert_eq!(fs.getattr(big).unwrap().size, 256 * MIB);
    let small = file(&fs, 1, "small");
    fs.fallocate(small, 0, 64 << 10, terrace_core::FallocateMode::Allocate)
        .unwrap();
    let tiers = String::from_utf8(fs.getxattr(small, b"user.terrace.tiers").unwrap()).unwrap();
    assert!(tiers.contains(":pm@"), "{tiers}");
    // Writes into the preallocated range follow the placement as usual.
    fs.write(big, 0, &[1u8; 4096]).unwrap();
    fs.fsync(big, false).unwrap();
    assert_eq!(fs.read(big, 0, 8192).unwrap()[..4096], [1u8; 4096]);
    assert_eq!(fs.read(big, 4096, 4096).unwrap(), vec![0u8; 4096]);
}
