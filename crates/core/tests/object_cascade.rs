//! The cascade into the object tier makes objects of object-store size
//! (design §5n "Object size"): a pool PM 32 MiB + SSD 256 MiB + s3 (16 MiB
//! segments, in-memory store) takes far more than PM + SSD through plain
//! writes while migration passes run as the migration thread would, with no
//! `migrate` command. Each pass drains only the excess over the threshold,
//! a few MiB; the objects it uploads must still be large — the drain moves at
//! least an object batch, in windows of one batch — and every byte reads
//! back after a remount. (Before the object batch: ~1.5 MiB per PUT here;
//! with it ~11 MiB, three parts per 32 MiB window.)

mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use terrace_core::Fs;
use terrace_format::TierKind;
use terrace_media::object::{Bucket, PutFault, DEFAULT_SEGMENT_BLOCKS};
use terrace_media::{MemBlock, MemMedia, ObjectMedia};

const PM: u64 = 32 << 20;
const SSD: u64 = 256 << 20;
const S3: u64 = 2 << 30;
const SEGMENT: u64 = DEFAULT_SEGMENT_BLOCKS * 4096;
/// The pool uuid `mkfs_tiers_sized` writes.
const UUID: [u8; 16] = [15; 16];
const FILE: usize = 1 << 20;
const FILES: u64 = 360;

/// `len` bytes of file `k`: every 8-byte word names the file and its own
/// place, so a block read from the wrong place shows (cheap to make, unlike
/// `pattern` in a debug build).
fn stamped(k: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8)
        .flat_map(|w| ((k << 40) ^ w ^ 0x5eed_0000_0000_0000).to_le_bytes())
        .collect()
}

/// Every file `inos[k]` reads back as `stamped(k, len)`.
fn assert_stamped(fs: &Fs, inos: &[u64], len: usize, when: &str) {
    for (k, &ino) in inos.iter().enumerate() {
        assert!(
            fs.read(ino, 0, len).unwrap() == stamped(k as u64, len),
            "file {k} reads back {when}"
        );
    }
}

#[test]
fn a_cascade_uploads_objects_of_at_least_half_a_segment_on_average() {
    let pm = Arc::new(MemMedia::new(PM));
    mkfs_tiers_sized(
        &*pm,
        &[
            (TierKind::Ssd, SSD, terrace_format::DEFAULT_EXTENT_SIZE),
            (TierKind::S3, S3, SEGMENT as u32),
        ],
        1024,
    );
    let bucket = Bucket::in_memory("tier", "pool").unwrap();
    let store = bucket.store().clone();
    let s3 = Arc::new(ObjectMedia::create_in(bucket, UUID, S3, DEFAULT_SEGMENT_BLOCKS).unwrap());
    let ssd = Arc::new(MemBlock::new(SSD));
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, s3.clone())]).unwrap();

    let mut inos = Vec::new();
    for k in 0..FILES {
        let name = format!("f{k:04}");
        let f = fs
            .mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        for (i, chunk) in stamped(k, FILE).chunks(64 << 10).enumerate() {
            fs.write(f.ino, (i * chunk.len()) as u64, chunk).unwrap();
        }
        fs.fsync(f.ino, false).unwrap();
        inos.push(f.ino);
        // The migration thread's pass every 100 ms: here every 4 MiB written.
        if k % 4 == 3 {
            fs.migration_pass();
        }
    }
    for _ in 0..8 {
        fs.migration_pass();
    }
    let stats = s3.object_stats();
    let r = stats.requests;
    assert!(
        r.put_bytes >= 128 << 20,
        "the cascade reached the object tier ({} MiB uploaded)",
        r.put_bytes >> 20
    );
    let average = r.put_bytes / r.puts.max(1);
    assert!(
        average >= SEGMENT / 2,
        "objects average {} KiB over {} PUTs ({} MiB): a drain into the object tier \
         must move at least an object batch",
        average >> 10,
        r.puts,
        r.put_bytes >> 20
    );
    fs.unmount().unwrap();

    let bucket = Bucket::with_store(store, "memory://tier", "pool").unwrap();
    let s3 = Arc::new(ObjectMedia::open_in(bucket, UUID).unwrap());
    let fs = Fs::mount_with_tiers(pm, vec![(1, ssd), (2, s3)]).unwrap();
    assert_stamped(&fs, &inos, FILE, "after the remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// `terrace migrate --to s3` of many windows whose data does not start on
/// a segment boundary (a small file went first): every window ends on a
/// segment end, so each segment is uploaded as one part — as few PUTs as
/// the data allows, and all of them full segments but the first and last.
/// (Before windows were cut at segment ends, each 64 MiB window started
/// where the last one stopped and cut a segment in two: five parts per four
/// segments, ~82 PUTs per GiB in the s3 benchmark.)
#[test]
fn windows_into_the_object_tier_end_on_segment_ends_so_each_segment_is_one_part() {
    const FILE5: usize = 5 << 20;
    const FILES5: u64 = 60; // 300 MiB: five windows of 64 MiB and a rest
    let pm = Arc::new(MemMedia::new(512 << 20));
    mkfs_tiers_sized(
        &*pm,
        &[
            (TierKind::Ssd, 64 << 20, terrace_format::DEFAULT_EXTENT_SIZE),
            (TierKind::S3, S3, SEGMENT as u32),
        ],
        1024,
    );
    let bucket = Bucket::in_memory("tier", "pool").unwrap();
    let s3 = Arc::new(ObjectMedia::create_in(bucket, UUID, S3, DEFAULT_SEGMENT_BLOCKS).unwrap());
    let ssd = Arc::new(MemBlock::new(64 << 20));
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, s3.clone())]).unwrap();
    fs.set_setting("migration_threshold_pct", "100").ok();
    let make = |name: &str, k: u64, len: usize| {
        let f = fs
            .mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        fs.write(f.ino, 0, &stamped(k, len)).unwrap();
        fs.fsync(f.ino, false).unwrap();
        f.ino
    };
    // 1 MiB first: the tier's next allocation is then 1 MiB into a segment.
    let first = make("first", 999, 1 << 20);
    let (_, errors) = fs.migrate_files(&[first], 2).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let before = s3.object_stats().requests;
    let inos: Vec<u64> = (0..FILES5)
        .map(|k| make(&format!("g{k:02}"), k, FILE5))
        .collect();
    let (moved, errors) = fs.migrate_files(&inos, 2).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(moved, FILES5 * FILE5 as u64);
    let r = s3.object_stats().requests;
    let (puts, bytes) = (r.puts - before.puts, r.put_bytes - before.put_bytes);
    assert_eq!(bytes, moved, "every moved byte uploaded once");
    // 300 MiB from 1 MiB into a segment: 15 MiB, 17 full segments, 13 MiB.
    let fewest = 1 + (moved - (15 << 20)).div_ceil(SEGMENT);
    for p in s3.parts() {
        eprintln!("part seq {} block {} blocks {}", p.seq, p.block, p.blocks);
    }
    assert!(
        puts <= fewest,
        "{puts} PUTs for {} MiB, {fewest} needed: a window cut a segment in two",
        moved >> 20
    );
    assert_stamped(&fs, &inos, FILE5, "after the migration");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// `files` files named PREFIX00, PREFIX01, … in the root, each `size`
/// stamped bytes (`stamped(k, size)`), fsync'd; their inode numbers.
fn stamped_files(fs: &Fs, prefix: &str, files: u64, size: usize) -> Vec<u64> {
    (0..files)
        .map(|k| {
            let name = format!("{prefix}{k:02}");
            let f = fs
                .mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                .unwrap();
            fs.write(f.ino, 0, &stamped(k, size)).unwrap();
            fs.fsync(f.ino, false).unwrap();
            f.ino
        })
        .collect()
}

/// The next window's upload starts before the batch waits for the one
/// before: with the store holding every PUT, the PUTs of two windows wait
/// at once (one window has at most the bucket's concurrency, 4, in flight),
/// and everything lands and reads back once they go. With one upload at a
/// time the store sat idle at every window boundary while the last parts
/// finished and the next bodies were hashed.
#[test]
fn the_next_windows_upload_starts_while_the_one_before_is_still_uploading() {
    const FILES: u64 = 8;
    const SIZE: usize = 16 << 20;
    let (_plain, faults, bucket) = faulty_memory_store();
    let mut pool = ObjectPool::format(256 << 20, 16 << 20, 1 << 30, bucket);
    let fs = pool.mount();
    let inos = stamped_files(&fs, "o", FILES, SIZE);
    faults.hold_puts();
    let most_held = std::thread::scope(|s| {
        let mover = s.spawn(|| fs.migrate_files(&inos, 2));
        let start = std::time::Instant::now();
        let mut most = 0;
        while most <= 4 && start.elapsed() < Duration::from_secs(20) {
            most = most.max(faults.puts_waiting());
            std::thread::sleep(Duration::from_millis(5));
        }
        // Released before any assertion: the mover would wait forever.
        faults.release_puts();
        let (moved, errors) = mover.join().unwrap().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(moved, FILES * SIZE as u64);
        most
    });
    assert!(
        most_held > 4,
        "at most {most_held} PUTs held at once: the second window's upload never started \
         while the first was held"
    );
    assert_stamped(&fs, &inos, SIZE, "after the overlapped uploads");
    fs.unmount().unwrap();
    pool.reopen();
    let fs = pool.mount();
    assert_stamped(&fs, &inos, SIZE, "after a remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// `terrace migrate --to s3` of more than one window: each window uploads
/// while the next copies. When the second window's upload fails, the first
/// stays moved, nothing points at the failed window's objects, every file
/// reads back (now and after a remount) and fsck is clean; with the store
/// healthy again the migration finishes.
#[test]
fn a_failed_upload_between_pipelined_windows_loses_nothing_and_the_migration_finishes() {
    const FILES: u64 = 12;
    const SIZE: usize = 16 << 20;
    let (_plain, faults, bucket) = faulty_memory_store();
    let mut pool = ObjectPool::format(256 << 20, 16 << 20, 1 << 30, bucket);
    let fs = pool.mount();
    // One worker: its windows follow each other (two workers' windows would
    // share uploads and the PUT countdown).
    fs.set_setting("migration_threads", "1").unwrap();
    let inos = stamped_files(&fs, "w", FILES, SIZE);
    let check = |fs: &Fs, when: &str| assert_stamped(fs, &inos, SIZE, when);
    // 192 MiB in windows of 64 MiB: 128 parts of 512 KiB each. The first
    // window's PUTs all land; the second window's fail partway.
    faults.fail_puts_after(128 + 40, PutFault::Refuse);
    let (moved, errors) = fs.migrate_files(&inos, 2).unwrap();
    assert!(!errors.is_empty(), "the failed upload is reported");
    assert!(
        (64 << 20..192 << 20).contains(&moved),
        "the first window moved, not all ({} MiB)",
        moved >> 20
    );
    let on_s3: u64 = inos.iter().map(|&i| tier_bytes(&fs, i, "s3")).sum();
    assert_eq!(on_s3, moved, "what moved is what the files map on s3");
    check(&fs, "after the failed window");
    fs.unmount().unwrap();
    fsck_object_clean(
        &*pool.pm,
        pool.ssd.clone(),
        pool.s3.clone(),
        "after the failed window",
    );

    faults.heal();
    pool.reopen();
    let fs = pool.mount();
    check(&fs, "after a remount");
    let (moved_now, errors) = fs.migrate_files(&inos, 2).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(moved + moved_now, FILES * SIZE as u64);
    check(&fs, "after the migration finished");
    fs.unmount().unwrap();
    pool.reopen();
    let fs = pool.mount();
    check(&fs, "after the last remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}
