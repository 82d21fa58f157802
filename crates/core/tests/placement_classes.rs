//! `status.placement_by_class` (issue 22): every write is counted once, in
//! its class (synchronous, small or large asynchronous) and where it landed
//! (PM, a block tier by choice, a block tier because PM was full).

mod common;
use common::*;
use terrace_core::placement_stats::ClassPlacement;

fn total(c: &ClassPlacement) -> u64 {
    c.pm_writes + c.block_writes + c.overflow_writes
}

#[test]
fn writes_are_counted_by_class_and_where_they_landed() {
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, 256 << 20, 64);
    // Synchronous: 4 KiB writes each followed by fsync, on PM.
    let wal = fs.mknod(1, b"wal", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    for k in 0..32u64 {
        fs.write(wal.ino, k * 4096, &[1u8; 4096]).unwrap();
        fs.fsync(wal.ino, false).unwrap();
    }
    // A file pinned to the SSD: its writes go there by choice.
    let pinned = fs
        .mknod(1, b"pinned", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    fs.setxattr(pinned.ino, b"user.terrace.rule", b"ssd", 0)
        .unwrap();
    for k in 0..8u64 {
        fs.write(pinned.ino, k * 4096, &[2u8; 4096]).unwrap();
    }
    // Large asynchronous writes fill PM, then overflow to the SSD.
    let bulk = fs.mknod(1, b"bulk", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    for k in 0..48u64 {
        fs.write(bulk.ino, k << 20, &vec![3u8; 1 << 20]).unwrap();
    }
    let p = fs.status().placement_by_class;
    let writes = fs.status().writes;
    assert_eq!(
        total(&p.sync) + total(&p.async_small) + total(&p.async_large),
        writes,
        "every write counted once: {p:?}"
    );
    assert!(p.sync.pm_writes > 0, "synchronous writes not on PM: {p:?}");
    assert!(
        p.sync.block_writes + p.async_small.block_writes + p.async_large.block_writes >= 8,
        "the pinned file's writes are not counted as chosen block placements: {p:?}"
    );
    // 1 MiB writes are large; on a 16 MiB PM most of 48 MiB goes to the
    // SSD (by the policy's choice once PM is short, or as overflow).
    let large = &p.async_large;
    assert_eq!(total(large), 48, "{p:?}");
    assert!(
        large.pm_writes > 0 && large.block_writes + large.overflow_writes >= 32,
        "{p:?}"
    );
    assert_eq!(p.sync.overflow_writes, 0, "{p:?}");
}
