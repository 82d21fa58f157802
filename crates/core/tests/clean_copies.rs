//! NVMFS clean copies: flushed PM data keeps a valid copy on the SSD tier, so
//! evicting it from PM copies nothing; writes to clean data drop the copy;
//! copies survive remounts and crashes.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_core::Fs;
use terrace_media::{BlockMedia, PmMedia};

const SSD: u64 = 64 << 20;

/// Gives `fs` the nvmfs policy ([`use_nvmfs`]) and an 8 MiB file on PM,
/// more than the dirty list's high mark (the next migration pass copies
/// part of it to the SSD). Returns the file and its content.
fn flushed(fs: &Fs) -> (u64, Vec<u8>) {
    use_nvmfs(fs);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(1, 8 << 20);
    for (k, c) in data.chunks(256 << 10).enumerate() {
        fs.write(f.ino, (k as u64) << 18, c).unwrap();
    }
    (f.ino, data)
}

#[test]
fn flushed_data_stays_on_pm_with_a_clean_copy_on_the_ssd() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    let (ino, data) = flushed(&fs);
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), 0);
    let copied = fs.migration_pass();
    assert!(
        copied > 0,
        "the dirty list passed its high mark but nothing was flushed"
    );
    let copies = tier_bytes(&fs, ino, "ssd-copy");
    assert_eq!(copies, copied);
    assert_eq!(
        tier_bytes(&fs, ino, "pm"),
        8 << 20,
        "flushing must keep the PM copy"
    );
    let st = fs.status();
    assert_eq!(st.migration.clean_pm_blocks * 4096, copies);
    assert_eq!(
        st.tiers[1].used, copies,
        "copies are valid blocks of the SSD tier"
    );
    // Reads of clean data are PM hits.
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    assert!(fs.status().migration.clean_hit_ratio.unwrap() > 0.0);
    fs.check_allocator().unwrap();
    // Copies survive a clean remount and a crash (no unmount).
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), copies);
    fs.check_allocator().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), copies);
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
}

/// Bytes of clean copies of the file's first `limit` bytes.
fn copy_bytes_below(fs: &Fs, ino: u64, limit: u64) -> u64 {
    extents(fs, ino)
        .into_iter()
        .filter(|e| e.2 == "ssd-copy")
        .map(|(off, len, _, _)| (off + len).min(limit).saturating_sub(off))
        .sum()
}

/// Writes 8 MiB in 4 KiB writes, the first 256 KiB nine times before the
/// rest once, runs one migration pass with `order`, and returns the bytes
/// flushed and the bytes of the first 256 KiB among them.
fn flush_after_skewed_writes(order: &str) -> (u64, u64) {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    use_nvmfs(&fs);
    fs.set_setting("nvmfs_flush_order", order).unwrap();
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let mut data = pattern(3, 8 << 20);
    const HOT: usize = 256 << 10;
    for round in 0..9u8 {
        for (k, c) in data[..HOT].chunks_mut(4096).enumerate() {
            c[0] = round;
            fs.write(f.ino, k as u64 * 4096, c).unwrap();
        }
    }
    for (k, c) in data[HOT..].chunks(4096).enumerate() {
        fs.write(f.ino, (HOT + k * 4096) as u64, c).unwrap();
    }
    let copied = fs.migration_pass();
    assert!(fs.read(f.ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
    (copied, copy_bytes_below(&fs, f.ino, HOT as u64))
}

#[test]
fn nvmfs_flush_stops_at_the_low_mark_and_keeps_often_rewritten_blocks_on_pm() {
    let (copied, hot) = flush_after_skewed_writes("frequency");
    assert!(
        copied > 0,
        "the dirty list passed its high mark but nothing was flushed"
    );
    assert!(
        copied < 6 << 20,
        "flushed {copied} bytes: more than down to the low mark"
    );
    assert_eq!(hot, 0, "the blocks written nine times were flushed first");
    // NVMFS's LRU order flushes them first: they were written longest ago.
    let (copied, hot) = flush_after_skewed_writes("lru");
    assert!(copied > 0 && copied < 6 << 20);
    assert_eq!(
        hot,
        256 << 10,
        "lru flushes the least recently written first"
    );
}

#[test]
fn evicting_clean_data_from_pm_writes_nothing_to_the_ssd() {
    let (_, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    let (ino, data) = flushed(&fs);
    let copied = fs.migration_pass();
    let pm_before = tier_bytes(&fs, ino, "pm");
    let ssd_writes = ssd.stats().write_bytes;
    let freed = fs.evict_clean(u64::MAX);
    assert_eq!(freed, copied, "every clean block is evictable");
    assert_eq!(ssd.stats().write_bytes, ssd_writes, "eviction copied data");
    assert_eq!(tier_bytes(&fs, ino, "pm"), pm_before - freed);
    assert_eq!(tier_bytes(&fs, ino, "ssd"), freed);
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), 0);
    assert!(fs.status().migration.bytes_evicted >= freed);
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn writing_to_clean_data_drops_its_copy() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    let (ino, mut data) = flushed(&fs);
    fs.migration_pass();
    let copies = tier_bytes(&fs, ino, "ssd-copy");
    assert!(copies >= 64 << 10);
    // Find a copied range and overwrite 64 KiB of it.
    let off = extents(&fs, ino)
        .into_iter()
        .find(|e| e.2 == "ssd-copy")
        .unwrap()
        .0;
    let new = vec![0xabu8; 64 << 10];
    fs.write(ino, off, &new).unwrap();
    data[off as usize..off as usize + new.len()].copy_from_slice(&new);
    assert_eq!(tier_bytes(&fs, ino, "ssd-copy"), copies - (64 << 10));
    assert_eq!(
        fs.status().tiers[1].used,
        copies - (64 << 10),
        "the stale copy was not freed"
    );
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn crashes_during_flush_and_eviction_lose_nothing() {
    let base = base_seed("clean copy crash test");
    let mut rng = StdRng::seed_from_u64(base);
    // One clock: each PM crash point is paired with the device image of the
    // same moment (copies whose sync came later are missing or torn).
    let (pm, ssd, fs) = crash_pool(16 << 20, SSD, 64);
    let (ino, data) = flushed(&fs);
    pm.sync_all().unwrap();
    ssd.sync().unwrap();
    let ((), trace) = pm.trace(|| {
        fs.migration_pass();
        fs.evict_clean(u64::MAX);
    });
    let n = trace.len();
    let mut points: Vec<usize> = (0..10).map(|_| rng.gen_range(0..=n)).collect();
    points.extend([0, n]);
    for kk in points {
        let (img, img_ssd) = random_crash_images(&trace, &ssd, kk, &mut rng);
        let what = format!("seed {base} crash at {kk}/{n}");
        let (_, fs2) = recover(img, Some(img_ssd), Fsck::Metadata, &what);
        assert!(
            fs2.read(ino, 0, data.len()).unwrap() == data,
            "{what}: data changed"
        );
    }
}

#[test]
fn clean_pm_copies_can_be_evicted_even_when_pm_is_full() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    let (ino, data) = flushed(&fs);
    let copied = fs.migration_pass();
    assert!(copied >= 1 << 20, "no clean copies ({copied} bytes)");
    // Fill PM (past the forced mark, after which writes go to the SSD) with
    // another file's data; its 256 KiB writes are bulk, which by default
    // stops taking PM at 80 %.
    fs.set_setting("placement_bulk_pm_percent", "100").unwrap();
    let f = fs.mknod(1, b"fill", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let mut off = 0u64;
    let pm_use = |fs: &Fs| fs.status().tiers[0].used * 100 / fs.status().tiers[0].capacity;
    while pm_use(&fs) < 85 {
        fs.write(f.ino, off, &pattern(off, 256 << 10)).unwrap();
        off += 256 << 10;
        assert!(off < 64 << 20, "PM never filled");
    }
    let freed = fs.evict_clean(u64::MAX);
    assert!(
        freed >= copied,
        "evicted {freed} of {copied} bytes of clean copies"
    );
    assert!(fs.read(ino, 0, data.len() + 1).unwrap() == data);
    fs.check_allocator().unwrap();
}

/// A working set between the dirty list's low and high marks, rewritten over
/// and over: the flush brings the list down once, and when the rewrites
/// re-dirty data as fast as it is flushed (the list stops shrinking) it stops
/// instead of copying the same data to the SSD on every pass.
#[test]
fn rewrites_of_a_working_set_above_the_low_mark_do_not_keep_the_flush_running() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    use_nvmfs(&fs);
    // The split stays at its initial 80%: the data area of a 16 MiB pool is
    // 14-16 MiB, so the dirty target is 11.2-12.8 MiB, the high mark (60%)
    // 6.7-7.7 MiB and the low mark (30%) 3.4-3.9 MiB.
    fs.set_setting("nvmfs_window_ns", "1h").unwrap();
    const BLOCK: usize = 4096;
    let cold = fs.mknod(1, b"cold", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let hot = fs.mknod(1, b"hot", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let cold_data = pattern(5, 3 << 20);
    let mut hot_data = pattern(6, 5 << 20);
    // 4 KiB writes: small, so they stay on PM however often they repeat.
    for (k, c) in cold_data.chunks(BLOCK).enumerate() {
        fs.write(cold.ino, (k * BLOCK) as u64, c).unwrap();
    }
    for (k, c) in hot_data.chunks(BLOCK).enumerate() {
        fs.write(hot.ino, (k * BLOCK) as u64, c).unwrap();
    }
    // 8 MiB dirty: past the high mark.
    fs.migration_pass();
    let first = fs.status().migration.bytes_copied;
    assert!(first > 0, "8 MiB of dirty data passed the high mark");
    let mut per_round = Vec::new();
    for round in 0..8u64 {
        // Rewrite all of the 5 MiB working set (clean copies become dirty).
        for (k, c) in hot_data.chunks_mut(BLOCK).enumerate() {
            c[..8].copy_from_slice(&(round * 1_000_000 + k as u64).to_le_bytes());
            fs.write(hot.ino, (k * BLOCK) as u64, c).unwrap();
        }
        let before = fs.status().migration.bytes_copied;
        fs.migration_pass();
        per_round.push(fs.status().migration.bytes_copied - before);
    }
    // The first rewrite found the list smaller than at the first flush (the
    // cold data went): the flush went on. From then on each pass saw as much
    // dirty data as the one before: no more copies, and 5 MiB is below the
    // high mark, so none start again.
    assert!(
        per_round[2..].iter().all(|&b| b == 0),
        "the flush kept copying rewritten data: {per_round:?} bytes per round"
    );
    assert!(fs.read(hot.ino, 0, hot_data.len()).unwrap() == hot_data);
    assert!(fs.read(cold.ino, 0, cold_data.len()).unwrap() == cold_data);
    fs.check_allocator().unwrap();
}

#[test]
fn a_pool_full_but_for_clean_copies_takes_writes_for_all_of_its_room() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    use_nvmfs(&fs);
    let room0 = fs.statfs().bavail * 4096;
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    let (ino, data) = flushed(&fs);
    let copied = fs.migration_pass();
    assert!(copied >= 1 << 20, "the flush made {copied} bytes of copies");
    // Fill the rest of the pool; clean copies take room on both tiers until
    // a write that finds no other room drops their PM side.
    let g = fs.mknod(1, b"g", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let chunk = pattern(2, 1 << 20);
    let mut written = 0u64;
    loop {
        match fs.write(g.ino, written, &chunk) {
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        fs.fsync(g.ino, false).unwrap();
    }
    let total = written + data.len() as u64;
    assert!(
        total + (2 << 20) >= room0,
        "ENOSPC with {} MiB of {} MiB of room used ({} MiB were clean copies)",
        total >> 20,
        room0 >> 20,
        copied >> 20
    );
    assert!(fs.status().space.copies_dropped_for_room_bytes > 0);
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn clean_copies_never_take_the_room_promised_to_dirty_cached_pages() {
    // A small SSD: PM data of an nvmfs pool, and a file pinned to the SSD
    // whose dirty cached pages were promised the rest of the pool's room.
    let (_, _, fs) = tiered_pool(16 << 20, 16 << 20, 64);
    let (ino, data) = flushed(&fs);
    let hot = fs.mknod(1, b"hot", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    fs.setxattr(hot.ino, b"user.terrace.rule", b"ssd", 0)
        .unwrap();
    let mut hot_data = Vec::new();
    loop {
        let chunk = pattern(2 + hot_data.len() as u64, 256 << 10);
        match fs.write(hot.ino, hot_data.len() as u64, &chunk) {
            Ok(_) => hot_data.extend_from_slice(&chunk),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
                break;
            }
        }
        assert!(hot_data.len() < 64 << 20, "the pool never filled");
    }
    assert!(fs.cache().stats().dirty_bytes > 4 << 20);
    // The dirty list is past its high mark, but a copy now would take SSD
    // blocks the cached pages need: the pass makes none.
    fs.migration_pass();
    assert_eq!(
        tier_bytes(&fs, ino, "ssd-copy"),
        0,
        "a clean copy took room promised to dirty pages"
    );
    fs.fsync(hot.ino, false).unwrap();
    assert_eq!(fs.status().space.copies_dropped_for_room_bytes, 0);
    assert!(fs.read(hot.ino, 0, hot_data.len() + 1).unwrap() == hot_data);
    assert!(fs.read(ino, 0, data.len() + 1).unwrap() == data);
    fs.check_allocator().unwrap();
}
