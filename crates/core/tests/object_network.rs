//! What the core does for network faults of an object tier (design §5n
//! "Network faults"), on the in-memory store: the `s3_*` settings reach the
//! tier's client at once, reads of object-tier ranges, writes and truncates
//! that must read a partial block stored there, copies from or into such
//! data, and any of them while the inode lock is busy are named as ones that
//! may wait on the network (so that FUSE serves them off its request
//! threads), and a clean unmount deletes dead parts, leaving no orphan for
//! fsck.

mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use terrace_core::Fs;
use terrace_media::object::{Bucket, FaultStore};
use terrace_media::{BlockMedia, ObjectMedia};

const PM: u64 = 16 << 20;
const SSD: u64 = 16 << 20;
const S3: u64 = 64 << 20;

/// A pool PM + SSD + an object tier on a fresh in-memory store.
fn pool() -> (Fs, Arc<ObjectMedia>) {
    let pool = ObjectPool::format(PM, SSD, S3, Bucket::in_memory("tier", "pool").unwrap());
    (pool.mount(), pool.s3)
}

#[test]
fn s3_settings_reach_the_object_tier_at_once_and_bad_ones_change_nothing() {
    let (fs, s3) = pool();
    fs.set_setting("s3_retries", "3").unwrap();
    fs.set_setting("s3_timeout_ns", "7s").unwrap();
    fs.set_setting("s3_request_timeout_ns", "1500ms").unwrap();
    fs.set_setting("s3_backoff_ns", "20ms").unwrap();
    let net = s3.bucket().network();
    assert_eq!(net.retries, 3);
    assert_eq!(net.retry_timeout, Duration::from_secs(7));
    assert_eq!(net.request_timeout, Duration::from_millis(1500));
    assert_eq!(net.backoff, Duration::from_millis(20));
    assert!(fs.set_setting("s3_request_timeout_ns", "1ms").is_err());
    assert!(fs.set_setting("s3_retries", "101").is_err());
    assert_eq!(s3.bucket().network(), net);
    fs.unmount().unwrap();
}

#[test]
fn only_reads_of_object_tier_ranges_may_wait_on_the_network() {
    let (fs, _s3) = pool();
    let data = pattern(3, 1 << 20);
    let on_s3 = write_file(&fs, "cold", &data);
    let on_pm = write_file(&fs, "hot", &data);
    let on_ssd = write_file(&fs, "warm", &data);
    fs.migrate_file(on_s3, 2).unwrap();
    fs.migrate_file(on_ssd, 1).unwrap();
    assert_eq!(tier_bytes(&fs, on_s3, "s3"), data.len() as u64);
    assert!(fs.read_may_wait_on_network(on_s3, 0, 4096));
    assert!(fs.read_may_wait_on_network(on_s3, (1 << 20) - 1, 1));
    assert!(
        !fs.read_may_wait_on_network(on_s3, 1 << 20, 4096),
        "past the end"
    );
    assert!(!fs.read_may_wait_on_network(on_s3, 0, 0));
    assert!(!fs.read_may_wait_on_network(on_pm, 0, 1 << 20));
    assert!(!fs.read_may_wait_on_network(on_ssd, 0, 1 << 20));
    assert!(!fs.read_may_wait_on_network(9999, 0, 4096), "no such file");
    assert_eq!(fs.read(on_s3, 0, data.len()).unwrap(), data);
    fs.unmount().unwrap();
    // Without an object tier, no read may wait on the network.
    let (pm, _ssd, fs) = tiered_pool(PM, SSD, 64);
    let ino = write_file(&fs, "f", &data);
    fs.migrate_file(ino, 1).unwrap();
    assert!(!fs.read_may_wait_on_network(ino, 0, 4096));
    drop(pm);
}

#[test]
fn a_clean_unmount_deletes_dead_parts_so_fsck_finds_no_orphans() {
    let (fs, s3) = pool();
    let data = pattern(5, 2 << 20);
    let ino = write_file(&fs, "f", &data);
    fs.migrate_file(ino, 2).unwrap();
    assert!(s3.object_stats().parts >= 1);
    // Deleted: its parts are dead (trimmed), not yet deleted from the store.
    fs.unlink(1, b"f").unwrap();
    assert!(s3.object_stats().dead_parts >= 1, "{:?}", s3.object_stats());
    fs.unmount().unwrap();
    assert_eq!(s3.object_stats().dead_parts, 0);
    // No part is left (this pool's tier has no header part): nothing is an
    // orphan.
    assert_eq!(s3.object_stats().parts, 0);
    assert_eq!(s3.unreferenced(&[]).map(|r| r.parts), Some(0));
}

#[test]
fn partial_writes_truncates_and_copies_of_object_data_may_wait_on_the_network() {
    let (fs, _s3) = pool();
    let data = pattern(4, 1 << 20);
    let on_s3 = write_file(&fs, "cold", &data);
    let on_pm = write_file(&fs, "hot", &data);
    let other = write_file(&fs, "hot2", &data);
    fs.migrate_file(on_s3, 2).unwrap();
    assert_eq!(tier_bytes(&fs, on_s3, "s3"), data.len() as u64);
    let mib = 1u64 << 20;

    // Writes: only a partial first or last block inside the file is read.
    assert!(
        fs.write_may_wait_on_network(on_s3, 100, 10),
        "inside block 0"
    );
    assert!(
        fs.write_may_wait_on_network(on_s3, 4096, 4097),
        "partial tail"
    );
    assert!(
        fs.write_may_wait_on_network(on_s3, 4095, 4097),
        "partial head"
    );
    assert!(
        fs.write_may_wait_on_network(on_s3, mib - 10, 100),
        "over the end"
    );
    assert!(
        !fs.write_may_wait_on_network(on_s3, 4096, 8192),
        "whole blocks"
    );
    assert!(
        !fs.write_may_wait_on_network(on_s3, mib, 100),
        "past the end"
    );
    assert!(!fs.write_may_wait_on_network(on_s3, 100, 0), "empty");
    assert!(!fs.write_may_wait_on_network(on_pm, 100, 10), "PM data");
    assert!(!fs.write_may_wait_on_network(9999, 100, 10), "no such file");

    // fallocate (zero range, punch): as a write of the range.
    assert!(
        fs.fallocate_may_wait_on_network(on_s3, 4100, 10),
        "a punch inside block 1"
    );
    assert!(
        !fs.fallocate_may_wait_on_network(on_s3, 4096, 8192),
        "whole blocks"
    );
    assert!(!fs.fallocate_may_wait_on_network(on_pm, 100, 10), "PM data");

    // Truncates: only a cut inside a block stored on the object tier.
    assert!(fs.truncate_may_wait_on_network(on_s3, 100));
    assert!(fs.truncate_may_wait_on_network(on_s3, mib - 1));
    assert!(
        !fs.truncate_may_wait_on_network(on_s3, 4096),
        "block boundary"
    );
    assert!(!fs.truncate_may_wait_on_network(on_s3, 0), "to zero");
    assert!(!fs.truncate_may_wait_on_network(on_s3, mib), "same size");
    assert!(!fs.truncate_may_wait_on_network(on_s3, 2 * mib), "growing");
    assert!(!fs.truncate_may_wait_on_network(on_pm, 100), "PM data");

    // Copies: a source range on the object tier, or a partial destination
    // block there.
    assert!(fs.copy_may_wait_on_network(on_s3, 0, on_pm, 0, 4096));
    assert!(fs.copy_may_wait_on_network(on_s3, mib - 1, on_pm, 0, 4096));
    assert!(fs.copy_may_wait_on_network(on_pm, 0, on_s3, 100, 4096));
    assert!(fs.copy_may_wait_on_network(on_pm, 0, on_s3, 4096, 100));
    assert!(
        !fs.copy_may_wait_on_network(on_pm, 0, on_s3, 4096, 8192),
        "whole destination blocks"
    );
    assert!(
        !fs.copy_may_wait_on_network(on_s3, mib, on_pm, 0, 4096),
        "past the source's end"
    );
    assert!(!fs.copy_may_wait_on_network(on_pm, 0, other, 100, 4096));
    assert!(!fs.copy_may_wait_on_network(on_s3, 0, on_pm, 0, 0), "empty");

    // And they do what they say, reading the object tier.
    let mut want = data.clone();
    fs.write(on_s3, 100, b"partial").unwrap();
    want[100..107].copy_from_slice(b"partial");
    fs.setattr(
        on_s3,
        terrace_core::SetAttr {
            size: Some(mib - 5000),
            ..Default::default()
        },
    )
    .unwrap();
    want.truncate((mib - 5000) as usize);
    assert_eq!(fs.read(on_s3, 0, 2 << 20).unwrap(), want);
    fs.unmount().unwrap();

    // Without an object tier, none may wait on the network.
    let (pm, _ssd, fs) = tiered_pool(PM, SSD, 64);
    let ino = write_file(&fs, "f", &data);
    let hot = write_file(&fs, "g", &data);
    fs.migrate_file(ino, 1).unwrap();
    assert!(!fs.write_may_wait_on_network(ino, 100, 10));
    assert!(!fs.truncate_may_wait_on_network(ino, 100));
    assert!(!fs.copy_may_wait_on_network(ino, 0, hot, 100, 4096));
    drop(pm);
}

/// Lets held GETs go when dropped (so a failed assertion does not leave a
/// writer waiting forever inside a thread scope).
struct ReleaseGets<'a>(&'a FaultStore);

impl Drop for ReleaseGets<'_> {
    fn drop(&mut self) {
        self.0.release_gets();
    }
}

#[test]
fn a_partial_write_waits_on_the_store_without_the_inode_lock_and_a_busy_lock_may_wait() {
    let (_, fault, faulty) = faulty_memory_store();
    let mut pool = ObjectPool::format(PM, SSD, S3, faulty);
    let fs = pool.mount();
    let data = pattern(6, 1 << 20);
    let ino = write_file(&fs, "mixed", &data);
    let cold = write_file(&fs, "cold", &data);
    let hot = write_file(&fs, "hot", &data);
    fs.migrate_file(ino, 2).unwrap();
    fs.migrate_file(cold, 2).unwrap();
    fs.unmount().unwrap();
    // Remounted: the DRAM cache holds none of the migrated blocks.
    pool.reopen();
    let fs = pool.mount();
    // Block 0 back on PM, the rest on the object tier.
    let mut want = data.clone();
    want[..4096].fill(9);
    fs.write(ino, 0, &want[..4096]).unwrap();
    assert!(!fs.read_may_wait_on_network(ino, 0, 4096));
    assert!(!fs.write_may_wait_on_network(ino, 100, 10));
    let wait_for_a_get = || {
        let t0 = Instant::now();
        while fault.gets_waiting() == 0 {
            assert!(t0.elapsed() < Duration::from_secs(20), "no GET waits");
            std::thread::sleep(Duration::from_millis(1));
        }
    };

    // A partial write of block 2 of a file on the object tier fetches the
    // block before it takes the inode lock: while the store does not
    // answer, the file's lock is free.
    fault.hold_gets();
    let release = ReleaseGets(&fault);
    std::thread::scope(|sc| {
        let writer = sc.spawn(|| fs.write(cold, 8192 + 100, b"held"));
        wait_for_a_get();
        // Whole blocks: "may wait" only if the inode lock were busy.
        assert!(!fs.write_may_wait_on_network(cold, 4096, 4096), "lock free");
        assert_eq!(fs.getattr(cold).unwrap().size, 1 << 20);
        assert!(!writer.is_finished(), "the write waits for the store");
        drop(release);
        assert_eq!(writer.join().unwrap().unwrap(), 4);
    });
    let mut cold_want = data.clone();
    cold_want[8192 + 100..8192 + 104].copy_from_slice(b"held");
    assert_eq!(fs.read(cold, 0, 2 << 20).unwrap(), cold_want);

    // A hole punched inside block 3 fetches it before taking the inode lock
    // (as a write does): while it waits on the store, the file's lock is
    // free, its PM block is no network read, and other files are not held
    // up.
    fault.hold_gets();
    let release = ReleaseGets(&fault);
    std::thread::scope(|sc| {
        let puncher = sc.spawn(|| {
            fs.fallocate(
                ino,
                3 * 4096 + 100,
                10,
                terrace_core::FallocateMode::PunchHole,
            )
        });
        wait_for_a_get();
        assert!(!fs.read_may_wait_on_network(ino, 0, 4096), "lock free");
        assert!(fs.getattr(ino).is_ok());
        assert_eq!(fs.read(hot, 0, 4096).unwrap(), data[..4096]);
        assert!(!puncher.is_finished(), "the punch waits for the store");
        drop(release);
        puncher.join().unwrap().unwrap();
    });
    // While another request holds the file's lock, every question about it
    // answers "may wait" without waiting for the lock, even for its PM
    // block; other files answer as usual.
    fs.with_inode_locked(ino, || {
        assert!(fs.read_may_wait_on_network(ino, 0, 4096));
        assert!(fs.write_may_wait_on_network(ino, 100, 10));
        assert!(fs.truncate_may_wait_on_network(ino, 100));
        assert!(fs.fallocate_may_wait_on_network(ino, 100, 10));
        assert!(fs.copy_may_wait_on_network(ino, 0, hot, 0, 4096));
        assert!(fs.copy_may_wait_on_network(hot, 0, ino, 0, 4096));
        assert!(!fs.read_may_wait_on_network(hot, 0, 4096));
        assert!(!fs.write_may_wait_on_network(hot, 100, 10));
    })
    .unwrap();
    want[3 * 4096 + 100..3 * 4096 + 110].fill(0);
    assert!(
        !fs.read_may_wait_on_network(ino, 0, 4096),
        "lock free again"
    );
    assert_eq!(fs.read(ino, 0, 2 << 20).unwrap(), want);
    fs.unmount().unwrap();
}

/// A file on the object tier: its inode and content.
type ColdFile = (u64, Vec<u8>);

/// A pool with room for files of tens of MiB, its object tier on a fresh
/// in-memory store behind a [`FaultStore`]; files `names` of `len` bytes
/// each written, migrated there, and the pool mounted again (nothing
/// cached).
fn cold_object_files(
    names: &[&str],
    len: usize,
) -> (ObjectPool, Fs, Arc<FaultStore>, Vec<ColdFile>) {
    let (_, fault, faulty) = faulty_memory_store();
    let mut pool = ObjectPool::format(96 << 20, 16 << 20, 256 << 20, faulty);
    let fs = pool.mount();
    let mut files = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let data = pattern(20 + k as u64, len);
        let ino = write_file(&fs, name, &data);
        fs.migrate_file(ino, 2).unwrap();
        assert_eq!(tier_bytes(&fs, ino, "s3"), len as u64);
        files.push((ino, data));
    }
    fs.unmount().unwrap();
    pool.reopen();
    let fs = pool.mount();
    (pool, fs, fault, files)
}

/// Waits until the object tier's read-ahead holds no GET in flight.
fn read_ahead_settles(s3: &ObjectMedia, fault: &FaultStore) {
    let t0 = Instant::now();
    loop {
        let (st, _) = s3.read_ahead_stats();
        let gets_done = s3.object_stats().requests.get_bytes;
        std::thread::sleep(Duration::from_millis(20));
        let (st2, _) = s3.read_ahead_stats();
        if st == st2
            && s3.object_stats().requests.get_bytes == gets_done
            && fault.gets_waiting() == 0
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "read-ahead never settles"
        );
    }
}

/// Reads `ino` sequentially in 256 KiB reads from `*off` while `more`
/// says so, checking each against `data`.
fn read_on(fs: &Fs, ino: u64, data: &[u8], off: &mut usize, mut more: impl FnMut() -> bool) {
    while *off < data.len() && more() {
        let n = (256 << 10).min(data.len() - *off);
        assert_eq!(
            fs.read(ino, *off as u64, n).unwrap(),
            data[*off..*off + n],
            "at {off}"
        );
        *off += n;
    }
}

#[test]
fn a_sequential_reader_of_object_data_has_the_next_windows_fetched_ahead_each_byte_once() {
    const MIB: usize = 1 << 20;
    let (pool, fs, fault, files) = cold_object_files(&["seq"], 40 * MIB);
    let (ino, data) = &files[0];
    let s3 = &pool.s3;
    let gets0 = s3.object_stats().requests;
    // Sequential reads until the tracer calls the file sequential and a
    // read misses: that read starts GETs of the next three 8 MiB windows in
    // the background, and returns without waiting for them.
    let mut off = 0;
    read_on(&fs, *ino, data, &mut off, || {
        s3.read_ahead_stats().0.started == 0
    });
    assert!(off < 16 * MIB, "no read-ahead by {off}");
    read_ahead_settles(s3, &fault);
    let (st, _) = s3.read_ahead_stats();
    assert!(
        st.started_bytes >= (16 << 20) && st.started_bytes <= 32 << 20,
        "{st:?}"
    );
    let fetched = (s3.object_stats().requests.get_bytes - gets0.get_bytes) as usize;
    assert!(
        fetched >= off + 16 * MIB,
        "{fetched} bytes fetched by a reader at {off}"
    );
    // The rest of the file: nothing fetched twice, nothing past the end,
    // everything the read-ahead fetched taken by the reads.
    read_on(&fs, *ino, data, &mut off, || true);
    assert_eq!(fs.read(*ino, off as u64, 4096).unwrap(), b"", "EOF");
    read_ahead_settles(s3, &fault);
    let req = s3.object_stats().requests;
    assert_eq!(req.get_bytes - gets0.get_bytes, 40 << 20, "each byte once");
    let (st, held) = s3.read_ahead_stats();
    assert!(st.started_bytes >= 24 << 20, "{st:?}");
    assert_eq!(st.taken_bytes, st.started_bytes, "{st:?}");
    assert_eq!((st.dropped, held), (0, 0), "{st:?}");
    assert!(st.peak_bytes <= 32 << 20, "{st:?}");
    fs.unmount().unwrap();
}

#[test]
fn a_random_reader_of_object_data_gets_no_read_ahead() {
    const MIB: usize = 1 << 20;
    let (pool, fs, fault, files) = cold_object_files(&["rand"], 30 * MIB);
    let (ino, data) = &files[0];
    let s3 = &pool.s3;
    // 4 KiB reads at scattered offsets (a database's pattern), many more
    // than the tracer needs to call the file random.
    let mut x: u64 = 12345;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = ((x >> 33) as usize % (data.len() / 4096)) * 4096;
        assert_eq!(
            fs.read(*ino, off as u64, 4096).unwrap(),
            data[off..off + 4096]
        );
    }
    read_ahead_settles(s3, &fault);
    let (st, held) = s3.read_ahead_stats();
    assert_eq!((st.started, held), (0, 0), "{st:?}");
    fs.unmount().unwrap();
}

#[test]
fn a_failed_read_ahead_fails_no_read_that_did_not_wait_for_it() {
    const MIB: usize = 1 << 20;
    let (pool, fs, fault, files) = cold_object_files(&["seq"], 40 * MIB);
    let (ino, data) = &files[0];
    let s3 = &pool.s3;
    fs.set_setting("s3_retries", "0").unwrap();
    let mut off = 0;
    read_on(&fs, *ino, data, &mut off, || {
        s3.read_ahead_stats().0.started == 0
    });
    read_ahead_settles(s3, &fault);
    // From now on every GET fails: the reads served by what was fetched
    // ahead go on, and start read-ahead GETs of later windows, which fail.
    fault.fail_gets_after(0);
    read_on(&fs, *ino, data, &mut off, || fault.injected().gets == 0);
    read_ahead_settles(s3, &fault);
    assert!(fault.injected().gets > 0);
    fault.heal();
    // The failed ranges are not held: the reads that want them fetch them.
    read_on(&fs, *ino, data, &mut off, || true);
    let (st, held) = s3.read_ahead_stats();
    assert!(st.dropped > 0, "{st:?}");
    assert_eq!(held, 0, "{st:?}");
    fs.unmount().unwrap();
}
