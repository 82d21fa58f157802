//! `fstrim` (`Fs::trim`): every free extent of a block tier is discarded,
//! nothing a file or a crash image needs ever is, and bad ranges get the
//! errors ext4 gives.
//!
//! The SSD tiers here are `CrashBlock`s: a discard overwrites the blocks
//! with garbage in the live *and* the durable image at once, so a discard
//! of anything the pool still references shows as wrong file contents, a
//! checksum error or an fsck problem, now or after a crash.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use terrace_media::{BlockLoss, BlockMedia, CrashBlock, CrashMedia, LossMode, MemBlock, MemMedia};

const PM: u64 = 8 << 20;
const SSD: u64 = 64 << 20;
const EXTENT: u64 = 512 << 10;

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("an errno")
}

/// Files written to the SSD tier (block-first placement), some deleted and
/// some overwritten in part, everything fsynced: the survivors with their
/// contents.
fn churn(fs: &terrace_core::Fs, seed: u64) -> Vec<(u64, Vec<u8>)> {
    block_first(fs);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut files = Vec::new();
    for i in 0..12u64 {
        let len = rng.gen_range(1..5usize) << 20;
        let data = pattern(seed * 100 + i, len);
        let ino = file_holding(fs, &format!("f{i}"), &data);
        files.push((ino, data, format!("f{i}")));
    }
    // Every other file goes; the rest get a region rewritten.
    let mut kept = Vec::new();
    for (k, (ino, mut data, name)) in files.into_iter().enumerate() {
        if k % 2 == 0 {
            fs.unlink(1, name.as_bytes()).unwrap();
            continue;
        }
        let at = rng.gen_range(0..data.len() / 2);
        let new = pattern(seed * 1000 + k as u64, 700 << 10);
        fs.write(ino, at as u64, &new).unwrap();
        data.resize(data.len().max(at + new.len()), 0);
        data[at..at + new.len()].copy_from_slice(&new);
        fs.fsync(ino, false).unwrap();
        kept.push((ino, data));
    }
    kept
}

/// A crash now (every unsynced PM line and device block lost): the pool
/// recovers with exactly `files`, checksums included (fsck with data).
fn assert_crash_keeps(pm: &CrashMedia, ssd: &CrashBlock, files: &[(u64, Vec<u8>)], when: &str) {
    let (_, crashed) = recover(
        pm.crash_image(LossMode::AllUnflushed),
        Some(ssd.crash_image(BlockLoss::AllUnsynced)),
        Fsck::Data,
        &format!("crash {when}"),
    );
    assert_files(&crashed, files, &format!("crash image {when}"));
}

/// `rounds` files of 64 KiB to 1.5 MiB written one by one and fsync'd,
/// a random one deleted whenever more than `keep` are live; `each_round`
/// runs after every round, and every tenth round a crash image must hold
/// the live files. Returns them.
fn write_and_delete(
    fs: &terrace_core::Fs,
    (pm, ssd): (&CrashMedia, &CrashBlock),
    seed: &str,
    (rounds, keep): (u64, usize),
    mut each_round: impl FnMut(u64),
) -> Vec<(u64, Vec<u8>)> {
    let mut rng = StdRng::seed_from_u64(base_seed(seed));
    let mut live: Vec<(u64, Vec<u8>, String)> = Vec::new();
    let files = |live: &[(u64, Vec<u8>, String)]| -> Vec<(u64, Vec<u8>)> {
        live.iter().map(|(i, d, _)| (*i, d.clone())).collect()
    };
    for round in 0..rounds {
        let name = format!("r{round}");
        let data = pattern(round, rng.gen_range(64usize..1536) << 10);
        let ino = file_holding(fs, &name, &data);
        fs.fsync(ino, false).unwrap();
        live.push((ino, data, name));
        if live.len() > keep {
            let (_, _, gone) = live.remove(rng.gen_range(0..live.len()));
            fs.unlink(1, gone.as_bytes()).unwrap();
        }
        each_round(round);
        // What the devices hold (reads of the pool may come from its DRAM
        // cache): a crash now must find every file intact.
        if round % 10 == 9 {
            assert_crash_keeps(pm, ssd, &files(&live), &format!("at round {round}"));
        }
    }
    files(&live)
}

#[test]
fn fstrim_discards_every_free_extent_and_nothing_a_file_or_a_crash_image_needs() {
    let (pm, ssd, fs) = crash_pool(PM, SSD, 64);
    let files = churn(&fs, 1);
    let free_before = fs.status().tiers[1].extents.unwrap().free_extents;
    assert!(
        free_before > 20,
        "the churn left free extents: {free_before}"
    );

    let r = fs.trim(0, u64::MAX, 0).unwrap();
    assert_eq!(
        r.bytes,
        free_before * EXTENT,
        "every free extent, nothing else"
    );
    assert_eq!(ssd.stats().discard_bytes, r.bytes);
    assert_eq!(fs.status().tiers[1].io.unwrap().discard_bytes, r.bytes);
    assert_files(&fs, &files, "after fstrim");
    // Nothing was allocated since: a second fstrim has nothing to do.
    assert_eq!(fs.trim(0, u64::MAX, 0).unwrap().bytes, 0);

    // A crash now (every unsynced PM line and device block lost): the pool
    // recovers with every fsynced byte, checksums included.
    assert_crash_keeps(&pm, &ssd, &files, "after fstrim");

    // Discarded extents are allocated again like any other, and a clean
    // unmount and mount read everything back from the device.
    let more = pattern(77, 6 << 20);
    let ino = file_holding(&fs, "after", &more);
    fs.fsync(ino, false).unwrap();
    let mut all = files.clone();
    all.push((ino, more));
    assert_files(&fs, &all, "written after fstrim");
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_files(&fs, &all, "after a remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(
        &MemMedia::from_image(pm.image()),
        Some(Arc::new(MemBlock::from_image(ssd.image())) as Arc<dyn BlockMedia>),
        Fsck::Data,
        "fsck after fstrim",
    );
}

#[test]
fn fstrim_racing_writes_deletes_and_migration_never_discards_live_data() {
    let (pm, ssd, fs) = crash_pool(PM, SSD, 256);
    let fs = Arc::new(fs);
    block_first(&fs);
    let stop = Arc::new(AtomicBool::new(false));
    let trimmer = {
        let (fs, stop) = (fs.clone(), stop.clone());
        thread::spawn(move || {
            let mut total = 0;
            while !stop.load(Ordering::Relaxed) {
                total += fs.trim(0, u64::MAX, 0).unwrap().bytes;
                thread::yield_now();
            }
            total
        })
    };
    let files = write_and_delete(&fs, (&pm, &ssd), "fstrim race", (120, 24), |round| {
        if round % 5 == 0 {
            let _ = fs.clean_pass();
        }
    });
    stop.store(true, Ordering::Relaxed);
    let trimmed = trimmer.join().unwrap();
    assert!(trimmed > 0, "the trimmer discarded something");
    assert_files(&fs, &files, "after the race");
    assert_crash_keeps(&pm, &ssd, &files, "after the race");
}

#[test]
fn fstrim_ranges_minimum_lengths_and_pools_that_cannot_trim_get_ext4s_answers() {
    let (_pm, ssd, fs) = tiered_pool(PM, SSD, 64);
    let end = fs.trim_space_bytes();
    // PM's data blocks (the pool less its superblock area), then the SSD.
    let pm_part = end - SSD;
    assert!(pm_part <= PM && pm_part > PM - (1 << 20), "{pm_part}");
    assert_eq!(errno_of(fs.trim(0, 0, 0)), libc::EINVAL, "empty range");
    assert_eq!(errno_of(fs.trim(0, 100, 0)), libc::EINVAL, "under a block");
    assert_eq!(
        errno_of(fs.trim(end, 1 << 20, 0)),
        libc::EINVAL,
        "at the end"
    );
    assert_eq!(errno_of(fs.trim(u64::MAX, 1 << 20, 0)), libc::EINVAL);
    assert_eq!(
        errno_of(fs.trim(0, u64::MAX, SSD + 1)),
        libc::EINVAL,
        "a minimum no tier can meet"
    );
    // PM's part of the space is never discarded.
    assert_eq!(fs.trim(0, pm_part, 0).unwrap().bytes, 0);
    // Only extents wholly inside the range: [1 MiB + 1, 4 MiB + 1) of the
    // SSD covers extents 2..8, of which 3..8 wholly.
    let r = fs.trim(pm_part + (1 << 20) + 1, 3 << 20, 0).unwrap();
    assert_eq!(r.bytes, 5 * EXTENT);
    // A range reaching past the end is cut there.
    let rest = fs.trim(pm_part, u64::MAX - pm_part, 0).unwrap().bytes;
    assert_eq!(rest + 5 * EXTENT, SSD - EXTENT, "all but the header extent");
    assert_eq!(ssd.stats().discard_bytes, SSD - EXTENT);

    // A minimum length skips runs of free extents shorter than it.
    let fs2 = {
        let (_pm, _ssd, fs2) = tiered_pool(PM, SSD, 64);
        block_first(&fs2);
        // Eight 1-extent files; deleting every other leaves 1-extent holes.
        for i in 0..8u64 {
            let ino = file_holding(&fs2, &format!("x{i}"), &pattern(i, EXTENT as usize));
            fs2.fsync(ino, false).unwrap();
        }
        for i in (0..8u64).step_by(2) {
            fs2.unlink(1, format!("x{i}").as_bytes()).unwrap();
        }
        fs2
    };
    let base = fs2.trim_space_bytes() - SSD;
    let holes_skipped = fs2.trim(base, 9 * EXTENT, 2 * EXTENT).unwrap().bytes;
    let holes = fs2.trim(base, 9 * EXTENT, EXTENT).unwrap().bytes;
    assert_eq!(
        holes_skipped, 0,
        "single free extents are under the minimum"
    );
    assert!(holes > 0, "the holes are discarded without a minimum");

    // A PM-only pool has nothing to discard; a read-only pool discards
    // nothing.
    let (_, pm_only) = pm_pool(PM, 64);
    assert_eq!(errno_of(pm_only.trim(0, u64::MAX, 0)), libc::EOPNOTSUPP);
}

/// Memory media whose every discard fails with `error()`.
struct RefusingDiscard {
    inner: MemBlock,
    error: fn() -> std::io::Error,
}

impl Hooks for RefusingDiscard {
    fn inner(&self) -> &dyn BlockMedia {
        &self.inner
    }
    fn discard(&self, _: u64, _: u64) -> std::io::Result<()> {
        Err((self.error)())
    }
    fn describe(&self) -> String {
        "memory media refusing discards".into()
    }
}

#[test]
fn a_device_that_cannot_discard_gets_eopnotsupp_and_one_that_fails_gets_its_errno() {
    let unsupported = Hooked(RefusingDiscard {
        inner: MemBlock::new(SSD),
        error: || std::io::Error::new(std::io::ErrorKind::Unsupported, "no discard"),
    });
    let (_pm, _ssd, fs) = tiered_pool_on(MemMedia::new(PM), unsupported, 64);
    assert_eq!(errno_of(fs.trim(0, u64::MAX, 0)), libc::EOPNOTSUPP);

    let failing = Hooked(RefusingDiscard {
        inner: MemBlock::new(SSD),
        error: || std::io::Error::from_raw_os_error(libc::EIO),
    });
    let (_pm, _ssd, fs) = tiered_pool_on(MemMedia::new(PM), failing, 64);
    let data = pattern(5, 3 << 20);
    let ino = file_holding(&fs, "kept", &data);
    assert_eq!(errno_of(fs.trim(0, u64::MAX, 0)), libc::EIO);
    assert_files(&fs, &[(ino, data)], "after a failed discard");
}

#[test]
fn fstrim_on_a_read_only_pool_is_refused_with_erofs() {
    let (pm, ssd, fs) = tiered_pool(PM, SSD, 64);
    fs.unmount().unwrap();
    drop(fs);
    let ro = terrace_core::Fs::mount_read_only(pm, vec![(1, ssd as Arc<dyn BlockMedia>)]).unwrap();
    assert_eq!(errno_of(ro.trim(0, u64::MAX, 0)), libc::EROFS);
}

/// Online discard passes, one after the other, while each discards
/// something (a pass cut at its time slice leaves the next one due at
/// once): the bytes and the passes.
fn discard_while_due(fs: &terrace_core::Fs) -> (u64, u64) {
    let (mut bytes, mut passes) = (0, 0);
    loop {
        let n = fs.maybe_discard_free();
        if n == 0 {
            return (bytes, passes);
        }
        bytes += n;
        passes += 1;
    }
}

#[test]
fn online_discard_is_off_by_default_and_then_discards_what_was_freed_once_per_interval() {
    let (pm, ssd, fs) = crash_pool(PM, SSD, 64);
    let files = churn(&fs, 3);
    let free = fs.status().tiers[1].extents.unwrap().free_extents;
    assert_eq!(fs.maybe_discard_free(), 0, "off by default");
    assert_eq!(ssd.stats().discard_bytes, 0);
    assert_eq!(fs.discard_status().passes, 0);

    // The first pass discards every free extent, as fstrim would (in
    // slices of the thread's time, one after the other).
    fs.set_setting("discard_interval_ns", "1h").unwrap();
    let (first, slices) = discard_while_due(&fs);
    assert_eq!(first, free * EXTENT);
    assert_eq!(ssd.stats().discard_bytes, free * EXTENT);
    assert_files(&fs, &files, "after the first online discard");

    // More extents are freed: nothing is discarded before the interval ends.
    let gone = pattern(31, 3 << 20);
    let ino = file_holding(&fs, "gone", &gone);
    fs.fsync(ino, false).unwrap();
    fs.unlink(1, b"gone").unwrap();
    fs.flush_all().unwrap();
    assert_eq!(fs.maybe_discard_free(), 0, "within the interval");

    // Once it has passed, what was freed since goes, and only that.
    fs.set_setting("discard_interval_ns", "1ms").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (second, slices2) = discard_while_due(&fs);
    assert!(second >= 4 * EXTENT, "the deleted file's extents: {second}");
    assert_eq!(ssd.stats().discard_bytes, free * EXTENT + second);
    let st = fs.discard_status();
    assert_eq!(
        (st.passes, st.bytes, st.errors),
        (slices + slices2, free * EXTENT + second, 0)
    );
    assert_eq!(st.interval_ns, 1_000_000);
    assert_eq!(fs.status().discard, st);

    // Nothing allocated or freed since: no pass at all, however often asked.
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(fs.maybe_discard_free(), 0);
    assert_eq!(
        fs.discard_status().passes,
        slices + slices2,
        "an unchanged space is not looked at"
    );

    assert_files(&fs, &files, "after online discard");
    assert_crash_keeps(&pm, &ssd, &files, "after online discard");
}

#[test]
fn the_migration_thread_discards_online_while_files_are_written_and_deleted() {
    let (pm, ssd, fs) = crash_pool(PM, SSD, 256);
    let fs = Arc::new(fs);
    block_first(&fs);
    fs.set_setting("discard_interval_ns", "1ms").unwrap();
    fs.start_migration();
    let files = write_and_delete(&fs, (&pm, &ssd), "online discard", (60, 12), |_| {});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.discard_status().bytes == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The thread stopped, so no pass is between its requests and its count.
    fs.stop_background_for_crash_test();
    let st = fs.discard_status();
    assert!(
        st.bytes > 0 && st.passes > 0,
        "the thread discarded: {st:?}"
    );
    assert_eq!(ssd.stats().discard_bytes, st.bytes);
    assert_files(&fs, &files, "after online discard");
    fs.unmount().unwrap();
}

#[test]
fn online_discard_skips_a_device_that_cannot_discard_and_retries_one_that_failed() {
    let unsupported = Hooked(RefusingDiscard {
        inner: MemBlock::new(SSD),
        error: || std::io::Error::new(std::io::ErrorKind::Unsupported, "no discard"),
    });
    let (_pm, _ssd, fs) = tiered_pool_on(MemMedia::new(PM), unsupported, 64);
    fs.set_setting("discard_interval_ns", "1ns").unwrap();
    assert_eq!(fs.maybe_discard_free(), 0);
    let st = fs.discard_status();
    assert_eq!((st.passes, st.unsupported_tiers, st.errors), (1, 1, 0));
    let notices = fs.take_notices();
    assert!(
        notices.iter().any(|n| n.contains("cannot discard")),
        "{notices:?}"
    );

    let failing = Hooked(RefusingDiscard {
        inner: MemBlock::new(SSD),
        error: || std::io::Error::from_raw_os_error(libc::EIO),
    });
    let (_pm, _ssd, fs) = tiered_pool_on(MemMedia::new(PM), failing, 64);
    block_first(&fs);
    let data = pattern(5, 3 << 20);
    let ino = file_holding(&fs, "kept", &data);
    fs.fsync(ino, false).unwrap();
    fs.set_setting("discard_interval_ns", "1ns").unwrap();
    assert_eq!(fs.maybe_discard_free(), 0);
    let gone = file_holding(&fs, "gone", &pattern(6, 2 << 20));
    fs.fsync(gone, false).unwrap();
    fs.unlink(1, b"gone").unwrap();
    assert_eq!(fs.maybe_discard_free(), 0);
    // A failed pass is due again even when nothing was freed since.
    assert_eq!(fs.maybe_discard_free(), 0);
    let st = fs.discard_status();
    assert_eq!(
        (st.passes, st.errors, st.unsupported_tiers),
        (3, 3, 0),
        "{st:?}"
    );
    let notices = fs.take_notices();
    assert_eq!(
        notices
            .iter()
            .filter(|n| n.contains("online discard failed"))
            .count(),
        1,
        "said once: {notices:?}"
    );
    assert_files(&fs, &[(ino, data)], "after failed online discards");
}

#[test]
fn online_discard_leaves_object_tiers_to_their_own_cleaning() {
    let bucket = terrace_media::object::Bucket::in_memory("tier", "pool").unwrap();
    let pool = ObjectPool::format(PM, SSD, 64 << 20, bucket);
    let fs = pool.mount();
    fs.set_setting("discard_interval_ns", "1ns").unwrap();
    let free = fs.status().tiers[1].extents.unwrap().free_extents;
    assert_eq!(
        fs.maybe_discard_free(),
        free * EXTENT,
        "the SSD's free extents"
    );
    let st = fs.discard_status();
    assert_eq!(
        (st.passes, st.unsupported_tiers, st.errors),
        (1, 0, 0),
        "{st:?}"
    );
    let notices = fs.take_notices();
    assert!(
        !notices.iter().any(|n| n.contains("cannot discard")),
        "nothing said about the object tier: {notices:?}"
    );
    fs.unmount().unwrap();
}

#[test]
fn online_discard_on_a_pool_without_block_tiers_says_once_that_it_has_nothing_to_do() {
    let (_, fs) = pm_pool(PM, 64);
    fs.set_setting("discard_interval_ns", "1ms").unwrap();
    assert_eq!(fs.maybe_discard_free(), 0);
    let notices = fs.take_notices();
    assert!(
        notices.iter().any(|n| n.contains("nothing to discard")),
        "{notices:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(fs.maybe_discard_free(), 0);
    assert!(fs.take_notices().is_empty(), "said once");
    assert_eq!(fs.discard_status().passes, 0);
    fs.unmount().unwrap();
}

/// Memory media whose discards take `delay` each.
struct SlowDiscard {
    inner: MemBlock,
    delay: std::time::Duration,
}

impl Hooks for SlowDiscard {
    fn inner(&self) -> &dyn BlockMedia {
        &self.inner
    }
    fn discard(&self, block: u64, blocks: u64) -> std::io::Result<()> {
        thread::sleep(self.delay);
        self.inner.discard(block, blocks)
    }
}

#[test]
fn a_long_online_discard_yields_the_migration_thread_after_a_slice_and_goes_on_at_its_next_pass() {
    let slow = Hooked(SlowDiscard {
        inner: MemBlock::new(SSD),
        delay: std::time::Duration::from_millis(40),
    });
    let (_pm, _ssd, fs) = tiered_pool_on(MemMedia::new(PM), slow, 64);
    // A fresh tier: every extent free, in 4 MiB requests (12 or so of them).
    let free = fs.status().tiers[1].extents.unwrap().free_extents;
    assert!(free * EXTENT >= 40 << 20, "{free} free extents");
    fs.set_setting("discard_interval_ns", "1h").unwrap();
    let slice = terrace_core::trim::ONLINE_DISCARD_SLICE;
    let mut total = 0;
    let mut passes = 0;
    while total < free * EXTENT {
        let started = std::time::Instant::now();
        let n = fs.maybe_discard_free();
        let took = started.elapsed();
        assert!(
            n > 0,
            "pass {passes} discarded nothing with {total} of {} done",
            free * EXTENT
        );
        assert!(
            took < slice + std::time::Duration::from_millis(40 + 200),
            "pass {passes} held the thread {took:?}"
        );
        total += n;
        passes += 1;
    }
    assert_eq!(total, free * EXTENT);
    assert!(
        passes >= 3,
        "the first discard of the whole tier was sliced ({passes} passes)"
    );
    // Done: the interval applies again.
    assert_eq!(fs.maybe_discard_free(), 0);
    fs.unmount().unwrap();
}
