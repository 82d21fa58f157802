//! Checksums of block-tier data (issue 20, finding 1): bytes damaged on the
//! SSD are never served — a read of them fails with EIO, the rest of the
//! file still reads, migration does not carry the damage to PM — and the
//! checksums outlive remounts, log migration and the reuse of blocks by
//! another file.

mod common;
use common::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::{BlockMedia, MemBlock, MemMedia};

const SSD: u64 = 32 << 20;
const BS: u64 = 4096;

/// Mounts copies of `pm` and `ssd` (they stay as they are); returns the
/// copies and the pool.
fn mount_copy(pm: &MemMedia, ssd: &MemBlock) -> (Arc<MemMedia>, Arc<MemBlock>, Fs) {
    let pm = Arc::new(MemMedia::from_image(pm.image()));
    let ssd = Arc::new(MemBlock::from_image(ssd.image()));
    let fs = mount_tiered(pm.clone(), ssd.clone());
    (pm, ssd, fs)
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed as u32) as u8
                ^ seed
        })
        .collect()
}

/// A pool with one 1 MiB file moved to the SSD; returns its images, the
/// file's inode, its data and the SSD block of its first byte.
fn pool_with_a_file_on_the_ssd() -> (MemMedia, MemBlock, u64, Vec<u8>, u64) {
    let (pm, ssd, fs) = tiered_pool(8 << 20, SSD, 256);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(7, 1 << 20);
    fs.write(f.ino, 0, &data).unwrap();
    fs.migrate_file(f.ino, 1).unwrap();
    let ext = extents(&fs, f.ino);
    assert!(
        ext.iter().all(|e| e.2 == "ssd"),
        "the file is on the SSD: {ext:?}"
    );
    let first = ext.iter().find(|e| e.0 == 0).unwrap().3;
    fs.unmount().unwrap();
    (
        MemMedia::from_image(pm.image()),
        MemBlock::from_image(ssd.image()),
        f.ino,
        data,
        first,
    )
}

fn damage(ssd: &MemBlock, block: u64, at: usize, len: usize) {
    let mut b = vec![0u8; BS as usize];
    ssd.read_blocks(block, &mut b).unwrap();
    for x in &mut b[at..at + len] {
        *x ^= 0x5a;
    }
    ssd.write_blocks(block, &b).unwrap();
}

#[test]
fn nineteen_damaged_bytes_on_the_ssd_read_as_eio_never_as_wrong_bytes() {
    let (pm, ssd, ino, data, first) = pool_with_a_file_on_the_ssd();
    // The reproduction of the issue: 19 bytes written into the file's extent.
    damage(&ssd, first + 3, 100, 19);
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let e = fs.read(ino, 0, data.len()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let e = fs.read(ino, 3 * BS + 50, 100).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert!(fs.counters.checksum_errors.load(Ordering::Relaxed) >= 1);
    // What is not damaged still reads, exactly.
    assert_eq!(
        fs.read(ino, 0, 3 * BS as usize).unwrap(),
        &data[..3 * BS as usize]
    );
    let tail = 4 * BS as usize;
    assert_eq!(
        fs.read(ino, tail as u64, data.len() - tail).unwrap(),
        &data[tail..]
    );
    assert!(fs.counters.checksummed_reads.load(Ordering::Relaxed) > 0);
}

#[test]
fn undamaged_data_reads_back_verified_after_remount() {
    let (pm, ssd, ino, data, _) = pool_with_a_file_on_the_ssd();
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    assert_eq!(
        fs.counters.checksummed_reads.load(Ordering::Relaxed),
        data.len() as u64 / BS,
        "every block was checked against a checksum from the log"
    );
    assert_eq!(fs.counters.checksum_errors.load(Ordering::Relaxed), 0);
}

#[test]
fn migration_does_not_carry_damaged_ssd_data_to_pm() {
    let (pm, ssd, ino, data, first) = pool_with_a_file_on_the_ssd();
    damage(&ssd, first + 100, 0, 1);
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let e = fs.migrate_file(ino, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // The damaged block is still where it was, and still refused.
    let bad = extents(&fs, ino)
        .into_iter()
        .find(|e| e.0 <= 100 * BS && 100 * BS < e.0 + e.1)
        .unwrap();
    assert_eq!(bad.2, "ssd");
    assert_eq!(
        fs.read(ino, 100 * BS, 10).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(fs.read(ino, 0, 4096).unwrap(), &data[..4096]);
}

#[test]
fn checksums_move_with_a_log_that_log_migration_put_on_the_ssd() {
    let (pm, ssd, ino, data, first) = pool_with_a_file_on_the_ssd();
    let (pm2, ssd2, fs) = mount_copy(&pm, &ssd);
    assert_eq!(fs.move_logs(&[ino], 1).unwrap(), 1, "the log moved");
    fs.unmount().unwrap();
    drop(fs);
    damage(&ssd2, first + 5, 4000, 96);
    let (_pm, _ssd, fs) = mount_copy(&pm2, &ssd2);
    assert_eq!(
        fs.read(ino, 5 * BS, 4096).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        fs.read(ino, 0, 5 * BS as usize).unwrap(),
        &data[..5 * BS as usize]
    );
}

#[test]
fn blocks_reused_by_another_file_are_checked_against_their_new_data_after_remount() {
    // SSD: the header extent and three 512 KiB extents.
    let ssd_bytes = 4 * (512 << 10);
    let (pm, ssd, fs) = tiered_pool(8 << 20, ssd_bytes, 256);
    // `b` gets the lower inode number: its log replays before `a`'s.
    let b = fs.mknod(1, b"b", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    assert!(b.ino < a.ino);
    // Live xattrs keep a's log from being compacted (which would drop the
    // stale checksums this test is about).
    for k in 0..40 {
        let name = format!("user.k{k}");
        fs.setxattr(a.ino, name.as_bytes(), &[k as u8; 64], 0)
            .unwrap();
    }
    let half = 512 << 10;
    fs.write(a.ino, 0, &pattern(1, half)).unwrap();
    fs.migrate_file(a.ino, 1).unwrap();
    let old = extents(&fs, a.ino)[0].3;
    // Rewritten on PM: a's SSD blocks are freed, its log keeps their
    // checksums.
    fs.write(a.ino, 0, &pattern(2, half)).unwrap();
    assert!(extents(&fs, a.ino).iter().all(|e| e.2 == "pm"));
    let bdata = pattern(3, half);
    fs.write(b.ino, 0, &bdata).unwrap();
    fs.migrate_file(b.ino, 1).unwrap();
    assert_eq!(
        extents(&fs, b.ino)[0].3,
        old,
        "b took the blocks a gave up (the case this test is about)"
    );
    fs.unmount().unwrap();
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    assert_eq!(fs.read(b.ino, 0, half).unwrap(), bdata);
    assert_eq!(fs.read(a.ino, 0, half).unwrap(), pattern(2, half));
    assert_eq!(fs.counters.checksum_errors.load(Ordering::Relaxed), 0);
}

#[test]
fn scrub_finds_every_damaged_block_and_reports_those_no_copy_can_repair() {
    let (pm, ssd, ino, data, first) = pool_with_a_file_on_the_ssd();
    damage(&ssd, first + 10, 0, 1);
    damage(&ssd, first + 200, 4095, 1);
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let r = fs.scrub(0, true);
    assert!(!r.running && r.finished_unix > 0);
    assert_eq!(r.total_blocks, data.len() as u64 / BS);
    assert_eq!(r.read_blocks, r.total_blocks);
    assert_eq!(r.bad_blocks, 2);
    assert_eq!(r.checked_blocks, r.total_blocks - 2);
    assert_eq!(r.repaired_blocks, 0);
    assert_eq!(r.unrepairable.len(), 2, "{:?}", r.unrepairable);
    assert!(r.unrepairable[0].contains(&format!("inode {ino}, bytes {}", 10 * BS)));
    assert_eq!(fs.scrub_status(), Some(r.clone()));
    assert!(fs.status().scrub.is_some_and(|s| s.bad_blocks == 2));
    // Nothing was changed: the damaged blocks still fail, the rest reads.
    assert!(fs.read(ino, 10 * BS, 1).is_err());
    assert_eq!(
        fs.read(ino, 0, 10 * BS as usize).unwrap(),
        &data[..10 * BS as usize]
    );
}

#[test]
fn scrub_drops_a_damaged_clean_copy_and_the_data_stays_readable() {
    let (pm, ssd, fs, ino, data) = pool_with_a_damaged_clean_copy();
    let copies = tier_bytes(&fs, ino, "ssd-copy");
    assert!(copies > 0);
    let r = fs.scrub(0, true);
    assert_eq!((r.bad_blocks, r.repaired_blocks), (1, 1), "{r:?}");
    assert!(r.unrepairable.is_empty());
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), copies - BS);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    fs.check_allocator().unwrap();
    // A second scrub finds nothing left to repair; so does a remount's.
    let again = fs.scrub(0, true);
    assert_eq!(again.bad_blocks, 0, "{again:?}");
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert_eq!(fs.scrub(0, true).bad_blocks, 0);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
}

/// An NVMFS pool with an 8 MiB file on PM whose first clean copy on the
/// SSD has one damaged block; returns the pool, the file and its data.
fn pool_with_a_damaged_clean_copy() -> (Arc<MemMedia>, Arc<MemBlock>, Fs, u64, Vec<u8>) {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    use_nvmfs(&fs);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(9, 8 << 20);
    for (k, c) in data.chunks(256 << 10).enumerate() {
        fs.write(f.ino, (k as u64) << 18, c).unwrap();
    }
    assert!(fs.migration_pass() > 0, "NVMFS made clean copies");
    let copy_at = extents(&fs, f.ino)
        .into_iter()
        .find(|e| e.2 == "ssd-copy")
        .unwrap();
    damage(&ssd, copy_at.3 + 1, 7, 3);
    (pm, ssd, fs, f.ino, data)
}

#[test]
fn eviction_keeps_the_pm_side_of_data_whose_clean_copy_is_damaged() {
    let (_pm, _ssd, fs, ino, data) = pool_with_a_damaged_clean_copy();
    let copies = tier_bytes(&fs, ino, "ssd-copy");
    let freed = fs.evict_clean(u64::MAX);
    assert!(freed > 0, "the intact copies are evicted");
    assert!(
        freed < copies,
        "the PM side of the damaged copy was dropped too"
    );
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    assert!(fs.counters.checksum_errors.load(Ordering::Relaxed) >= 1);
    fs.check_allocator().unwrap();
}

#[test]
fn moving_data_down_rewrites_it_instead_of_promoting_a_damaged_clean_copy() {
    let (pm, ssd, fs, ino, data) = pool_with_a_damaged_clean_copy();
    fs.migrate_file(ino, 1).unwrap();
    assert_eq!(tier_bytes(&fs, ino, "pm"), 0);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    assert_eq!(
        fs.scrub(0, true).bad_blocks,
        0,
        "the damaged copy is no longer referenced"
    );
}

#[test]
fn a_rate_bounded_scrub_takes_at_least_the_time_its_rate_allows() {
    let (pm, ssd, _ino, data, _) = pool_with_a_file_on_the_ssd();
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let t = std::time::Instant::now();
    // 1 MiB at 4 MiB/s: at least ~250 ms (the first chunk is free).
    let r = fs.scrub(4 << 20, true);
    assert_eq!(r.checked_blocks, data.len() as u64 / BS);
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn zeros_fallocated_on_the_ssd_are_checked_without_sums_entries_even_after_a_remount() {
    // PM too small for the checksums of the whole preallocation in one
    // commit (xfstests generic/103: fallocate of nearly all the room).
    let (pm, ssd, fs) = tiered_pool(2 << 20, SSD, 64);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let len = 24 << 20;
    fs.fallocate(f.ino, 0, len, terrace_core::FallocateMode::Allocate)
        .unwrap();
    let on_ssd = extents(&fs, f.ino)
        .into_iter()
        .find(|e| e.2 == "ssd")
        .expect("part of the preallocation is on the SSD");
    // 4 bytes of log per block would be 24 KiB here; zeros take none.
    let log = fs.status().log_bytes;
    assert!(log < 8 << 10, "the preallocation logged {log} bytes");
    fs.unmount().unwrap();
    drop(fs);
    damage(&ssd, on_ssd.3 + 2, 0, 1);
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let good = fs.read(f.ino, on_ssd.0, 2 * BS as usize).unwrap();
    assert!(good.iter().all(|&b| b == 0));
    assert_eq!(
        fs.read(f.ino, on_ssd.0 + 2 * BS, 10)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EIO),
        "a damaged preallocated block is refused (its checksum is the zero block's)"
    );
}

/// An SSD whose next read of one block returns it with a bit flipped (a
/// byte damaged on its way, as over an object tier's network), once per
/// [`DamagedOnTheWay::arm`].
struct DamagedOnTheWay {
    inner: Arc<MemBlock>,
    block: u64,
    armed: std::sync::atomic::AtomicU32,
}

impl DamagedOnTheWay {
    fn arm(&self, reads: u32) {
        self.armed.store(reads, Ordering::SeqCst);
    }
}

impl Hooks for DamagedOnTheWay {
    fn inner(&self) -> &dyn BlockMedia {
        &*self.inner
    }
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(block, buf)?;
        let n = buf.len() as u64 / BS;
        let hit = (block..block + n).contains(&self.block);
        if hit
            && self
                .armed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| a.checked_sub(1))
                .is_ok()
        {
            buf[((self.block - block) * BS + 17) as usize] ^= 1;
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "ssd damaging reads on the way".into()
    }
}

#[test]
fn a_block_damaged_on_its_way_once_is_read_again_and_served_right_never_wrong() {
    let (pm, ssd, ino, data, first) = pool_with_a_file_on_the_ssd();
    let pm = Arc::new(MemMedia::from_image(pm.image()));
    let flaky = Arc::new(Hooked(DamagedOnTheWay {
        inner: Arc::new(MemBlock::from_image(ssd.image())),
        block: first + 5,
        armed: 0.into(),
    }));
    let fs = mount_tiered(pm, flaky.clone());
    // Damaged on every read: EIO, never the wrong bytes (and nothing cached).
    flaky.arm(u32::MAX);
    let e = fs.read(ino, 5 * BS, 10).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let errors = fs.counters.checksum_errors.load(Ordering::Relaxed);
    assert!(errors >= 1);
    // Damaged on the next read only: read again, served right.
    flaky.arm(1);
    assert_eq!(fs.read(ino, 0, data.len()).unwrap(), data);
    assert_eq!(
        fs.counters.checksum_errors.load(Ordering::Relaxed),
        errors + 1,
        "the damage was seen, and the block read once more"
    );
}

/// A damaged file read in a loop (a web server retrying, a backup tool)
/// logs its mismatches at each power of two, so the daemon's log grows by
/// a line per doubling, while every one is counted; and the notices
/// waiting for the logger never exceed their cap, whatever the flood.
#[test]
fn a_damaged_block_read_in_a_loop_logs_a_line_per_doubling_and_counts_every_read() {
    let (pm, ssd, ino, _data, first) = pool_with_a_file_on_the_ssd();
    damage(&ssd, first, 10, 5);
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let _ = fs.take_notices();
    for _ in 0..1000 {
        let e = fs.read(ino, 0, BS as usize).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
    let errors = fs.counters.checksum_errors.load(Ordering::Relaxed);
    assert!(errors >= 1000, "every damaged read counts: {errors}");
    let lines: Vec<String> = fs
        .take_notices()
        .into_iter()
        .filter(|n| n.contains("checksum mismatch"))
        .collect();
    let doublings = 64 - errors.leading_zeros() as usize;
    assert_eq!(
        lines.len(),
        doublings,
        "one line per power of two: {lines:?}"
    );
    assert!(lines[0].contains("mismatch 1 since mount"), "{}", lines[0]);
    // The cap: more notices than it holds between two takes.
    for i in 0..(terrace_core::fs::MAX_PENDING_NOTICES + 50) {
        fs.set_setting("migration_threshold", if i % 2 == 0 { "40" } else { "50" })
            .unwrap();
    }
    let notes = fs.take_notices();
    let cap = terrace_core::fs::MAX_PENDING_NOTICES;
    assert_eq!(notes.len(), cap + 1, "the cap, then what was dropped");
    assert!(
        notes[cap].starts_with("50 more notices came too fast"),
        "{}",
        notes[cap]
    );
    assert!(fs.take_notices().is_empty(), "said once");
}

#[test]
fn scrub_reads_no_faster_than_its_rate_even_a_low_one() {
    // 1 MiB at 256 KiB/s: about 4 s. Each pause was once capped at a second
    // per 1 MiB chunk, so any rate below 1 MiB/s read about 1 MiB/s.
    let (pm, ssd, _ino, data, _first) = pool_with_a_file_on_the_ssd();
    let (_pm, _ssd, fs) = mount_copy(&pm, &ssd);
    let started = std::time::Instant::now();
    let r = fs.scrub(256 << 10, true);
    let took = started.elapsed().as_secs_f64();
    assert_eq!(r.read_blocks, data.len() as u64 / BS);
    assert!(
        took >= 3.5,
        "1 MiB scrubbed in {took:.2} s at a rate of 256 KiB/s"
    );
}

/// A move that found damaged data is not tried again, reading the whole
/// file and counting its mismatches again, until the file's data changes:
/// a rule pinning a damaged file to another tier made every rules pass do
/// so, for ever (found by a new user, 2026-12-07). After a write the move
/// is tried again (and fails again: the damaged block is still there).
#[test]
fn a_move_that_found_damaged_data_is_not_retried_until_the_data_changes() {
    let (pm, ssd, ino, _data, first) = pool_with_a_file_on_the_ssd();
    damage(&ssd, first + 100, 0, 1);
    let (_pm, ssd, fs) = mount_copy(&pm, &ssd);
    let errors = || fs.counters.checksum_errors.load(Ordering::Relaxed);
    let reads = || ssd.stats().read_bytes;
    assert_eq!(
        fs.migrate_file(ino, 0).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    let (e1, r1) = (errors(), reads());
    assert!(e1 >= 1);
    for _ in 0..20 {
        assert_eq!(
            fs.migrate_file(ino, 0).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
    }
    assert_eq!(errors(), e1, "the damage was counted again");
    assert_eq!(reads(), r1, "the damaged file was read again");
    // A change of the file's data: the next move tries (and reads) again.
    fs.write(ino, 0, b"new").unwrap();
    fs.fsync(ino, false).unwrap();
    assert_eq!(
        fs.migrate_file(ino, 0).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert!(errors() > e1, "the move after a write was not tried");
}
