//! Placement with an object tier (S3, design §5n) behind PM and an SSD, on
//! the in-memory store: a file pinned to the object tier by a rule has its
//! data written there (through the DRAM cache and write-back) and stays
//! there however hot its reads are; an unpinned file whose data migration
//! moved to the object tier comes back up to PM when reads dominate (reverse
//! migration); both read back byte-exact after a remount.

mod common;
use common::*;
use terrace_core::Fs;
use terrace_media::object::Bucket;

const PM: u64 = 32 << 20;
const SSD: u64 = 16 << 20;
const S3: u64 = 64 << 20;

/// Reads all of `ino` many times, as a read-hot file would be.
fn read_hot(fs: &Fs, ino: u64, len: usize) {
    for _ in 0..50 {
        for off in (0..len).step_by(256 << 10) {
            fs.read(ino, off as u64, (256 << 10).min(len - off))
                .unwrap();
        }
    }
}

#[test]
fn a_file_pinned_to_the_object_tier_is_written_there_and_stays_there_when_read_hot() {
    let mut pool = ObjectPool::format(PM, SSD, S3, Bucket::in_memory("tier", "pool").unwrap());
    let fs = pool.mount();
    let f = fs
        .mknod(1, b"archive", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    fs.setxattr(f.ino, b"user.terrace.rule", b"s3", 0).unwrap();
    let data = pattern(7, 3 << 20);
    fs.write(f.ino, 0, &data).unwrap();
    fs.fsync(f.ino, false).unwrap();
    assert_eq!(
        tier_bytes(&fs, f.ino, "s3"),
        3 << 20,
        "a pinned file's data is on the object tier once fsync returns"
    );
    assert_eq!(tier_bytes(&fs, f.ino, "pm"), 0);
    assert!(pool.s3.object_stats().live_bytes >= 3 << 20);

    // Reads dominate, PM has room: reverse migration would move an unpinned
    // file up; the rule keeps this one down.
    read_hot(&fs, f.ino, data.len());
    fs.migration_pass();
    assert_eq!(
        tier_bytes(&fs, f.ino, "s3"),
        3 << 20,
        "the rule kept it on s3"
    );
    assert!(fs.read(f.ino, 0, data.len()).unwrap() == data);
    fs.unmount().unwrap();

    pool.reopen();
    let fs = pool.mount();
    assert_eq!(tier_bytes(&fs, f.ino, "s3"), 3 << 20);
    assert!(fs.read(f.ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn read_hot_data_on_the_object_tier_comes_back_up_to_pm() {
    let mut pool = ObjectPool::format(PM, SSD, S3, Bucket::in_memory("tier", "pool").unwrap());
    let fs = pool.mount();
    let data = pattern(8, 2 << 20);
    let f = write_file(&fs, "hot", &data);
    fs.migrate_file(f, 2).unwrap();
    assert_eq!(tier_bytes(&fs, f, "s3"), 2 << 20);
    // Writes dominate so far: nothing moves up.
    assert_eq!(fs.migration_pass(), 0);

    read_hot(&fs, f, data.len());
    assert!(fs.migration_pass() >= 2 << 20);
    assert_eq!(
        tier_bytes(&fs, f, "pm"),
        2 << 20,
        "the read-hot file stayed on the object tier"
    );
    assert_eq!(tier_bytes(&fs, f, "s3"), 0);
    assert!(fs.status().migration.bytes_up >= 2 << 20);
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    // Its objects are dead once nothing references them.
    fs.reclaim_object_tiers();
    assert_eq!(pool.s3.object_stats().live_bytes, 0);
    fs.unmount().unwrap();

    pool.reopen();
    let fs = pool.mount();
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}
