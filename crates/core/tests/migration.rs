//! Migration between tiers: cold data moves down in groups, hot data stays,
//! thresholds hold, read-hot data comes back up, crashes at any step of a
//! migration recover cleanly, and concurrent I/O always sees correct data.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use terrace_core::Fs;
use terrace_format::TierKind;
use terrace_media::{BlockLoss, BlockMedia, LossMode, MemBlock, MemMedia, PmMedia};

const SSD: u64 = 128 << 20;

fn pm_percent(fs: &Fs) -> u64 {
    let t = &fs.status().tiers[0];
    t.used * 100 / t.capacity
}

#[test]
fn cold_files_move_down_in_large_groups_while_a_fsynced_log_stays_on_pm() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    fs.set_setting("migration_policy", "ziggurat").unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("migration_threshold", "30").unwrap();
    let table = file(&fs, 1, "table");
    let wal = file(&fs, 1, "wal");
    let data = pattern(1, 8 << 20);
    // Many small entries: 64 KiB appends.
    for (k, c) in data.chunks(64 << 10).enumerate() {
        fs.write(table, (k as u64) << 16, c).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut log = Vec::new();
    for r in 0..200 {
        let rec = format!("record {r}\n");
        fs.write(wal, log.len() as u64, rec.as_bytes()).unwrap();
        fs.fsync(wal, false).unwrap();
        log.extend_from_slice(rec.as_bytes());
    }
    assert!(pm_percent(&fs) > 30, "the workload must pass the threshold");
    let before = ssd.stats();
    let moved = fs.migration_pass();
    assert!(moved > 0);
    assert!(pm_percent(&fs) <= 30, "PM still at {}%", pm_percent(&fs));
    assert_eq!(
        tier_bytes(&fs, table, "ssd"),
        8 << 20,
        "the cold file did not move"
    );
    assert_eq!(
        tier_bytes(&fs, wal, "pm"),
        log.len().div_ceil(4096) as u64 * 4096
    );
    let after = ssd.stats();
    let reqs = after.write_requests - before.write_requests;
    let avg = (after.write_bytes - before.write_bytes) / reqs;
    assert!(
        avg >= 4 << 20,
        "group migration wrote {reqs} requests of {avg} bytes"
    );
    // 128 entries of 64 KiB became one entry per 16 MiB group (split only at
    // 512 KiB extent boundaries of the non-overwrite space).
    let st = fs.status();
    assert!(st.migration.bytes_down >= 8 << 20);
    assert!(
        st.tiers[1].write_entries < 128,
        "entries were not coalesced"
    );
    assert!(fs.read(table, 0, data.len()).unwrap() == data);
    assert!(fs.read(wal, 0, log.len()).unwrap() == log);
    assert_eq!(fs.getattr(table).unwrap().size, 8 << 20);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Metadata, "after unmount");
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(table, 0, data.len()).unwrap() == data);
}

/// `terrace migrate --to pm` of a file larger than PM's room for data
/// moves none of it, says how much room there is, and still moves the
/// files that fit. (Before, the file moved up until PM was full, the
/// command failed with a bare ENOSPC and said 0 bytes had moved, and
/// migration moved the part that came up down again at once.)
#[test]
fn moving_up_a_file_larger_than_pm_leaves_it_whole_and_says_how_much_room_there_is() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    let big = file_holding(&fs, "big", &pattern(3, 24 << 20));
    let small = file_holding(&fs, "small", &pattern(4, 2 << 20));
    fs.migrate_files(&[big, small], 1).unwrap();
    assert_eq!(tier_bytes(&fs, big, "ssd"), 24 << 20);
    let (moved, errors) = fs.migrate_files(&[big, small], 0).unwrap();
    assert_eq!(moved, 2 << 20, "the file that fits moves");
    assert_eq!(tier_bytes(&fs, small, "pm"), 2 << 20);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, big);
    let why = errors[0]
        .1
        .get_ref()
        .and_then(|e| e.downcast_ref::<terrace_core::migrate::NoRoomOnTier>())
        .expect("a NoRoomOnTier error");
    assert_eq!((why.tier, why.needed), ("pm", 24 << 20));
    assert!(why.room > 0 && why.room < 16 << 20, "{why:?}");
    assert_eq!(tier_bytes(&fs, big, "pm"), 0, "nothing of it moved");
    let one = fs.migrate_file(big, 0).unwrap_err().to_string();
    assert!(one.starts_with("no room on pm: 24.0 MiB to move"), "{one}");
    assert_eq!(tier_bytes(&fs, big, "ssd"), 24 << 20);
    assert!(fs.read(big, 0, 24 << 20).unwrap() == pattern(3, 24 << 20));
}

#[test]
fn migration_does_not_change_size_or_times() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    let f = file_holding(&fs, "f", &pattern(2, 300_000));
    let a = fs.getattr(f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        fs.migrate_file(f, 1).unwrap(),
        300_000u64.div_ceil(4096) * 4096
    );
    let b = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.mtime, a.ctime), (b.size, b.mtime, b.ctime));
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    let c = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.mtime, a.ctime), (c.size, c.mtime, c.ctime));
    assert_eq!(tier_bytes(&fs, f, "pm"), 0);
}

#[test]
fn a_workload_five_times_pm_keeps_pm_near_its_threshold_without_enospc() {
    let (_, _, fs) = tiered_pool(8 << 20, SSD, 64);
    let fs = Arc::new(fs);
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("migration_threshold", "60").unwrap();
    fs.set_setting("group_migration_bytes", "1M").unwrap();
    fs.start_migration();
    fs.start_writeback();
    let mut files = Vec::new();
    let mut peak_after_settle = 0;
    for n in 0..10u64 {
        let f = fs
            .mknod(1, format!("f{n}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        let data = pattern(n, 4 << 20);
        for (k, c) in data.chunks(32 << 10).enumerate() {
            fs.write(f.ino, (k as u64) << 15, c)
                .expect("no ENOSPC while the SSD has room");
        }
        files.push((f.ino, data));
        // Give the migration thread time to catch up, then look at PM.
        for _ in 0..100 {
            if pm_percent(&fs) <= 60 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        peak_after_settle = peak_after_settle.max(pm_percent(&fs));
    }
    let st = fs.status();
    assert!(st.migration.bytes_down > 0);
    assert!(
        peak_after_settle <= 75,
        "PM stayed at {peak_after_settle}% (threshold 60%)"
    );
    assert_files(&fs, &files, "every file");
    fs.unmount().unwrap();
    fs.check_allocator().unwrap();
}

#[test]
fn reverse_migration_brings_a_read_hot_file_back_to_pm() {
    let (_, _, fs) = tiered_pool(32 << 20, SSD, 64);
    block_first(&fs);
    let data = pattern(4, 2 << 20);
    let f = write_file(&fs, "hot", &data);
    assert_eq!(tier_bytes(&fs, f, "ssd"), 2 << 20);
    // Writes dominate so far: nothing moves up.
    assert_eq!(fs.migration_pass(), 0);
    for _ in 0..50 {
        for k in 0..8u64 {
            fs.read(f, k << 18, 256 << 10).unwrap();
        }
    }
    assert!(fs.migration_pass() >= 2 << 20);
    assert_eq!(
        tier_bytes(&fs, f, "pm"),
        2 << 20,
        "the read-hot file stayed down"
    );
    assert!(fs.status().migration.bytes_up >= 2 << 20);
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn crashes_at_any_step_of_migration_keep_every_byte_exactly_once() {
    let base = base_seed("migration crash test");
    for k in 0..6 {
        let seed = base.wrapping_add(k);
        let mut rng = StdRng::seed_from_u64(seed);
        let (pm, ssd, fs) = crash_pool(8 << 20, SSD, 64);
        fs.set_setting("migration_age_ns", "0s").unwrap();
        fs.set_setting("migration_threshold", "5").unwrap();
        fs.set_setting("group_migration_bytes", "256K").unwrap();
        let mut files = Vec::new();
        for n in 0..3u64 {
            let f = fs
                .mknod(1, format!("f{n}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                .unwrap();
            let len = rng.gen_range(100_000..900_000);
            let data = pattern(seed ^ n, len);
            for (c, chunk) in data.chunks(40_000).enumerate() {
                fs.write(f.ino, c as u64 * 40_000, chunk).unwrap();
            }
            files.push((f.ino, data));
        }
        pm.sync_all().unwrap();
        ssd.sync().unwrap();
        let (moved, trace) = pm.trace(|| fs.migration_pass());
        assert!(moved > 0, "seed {seed}: nothing migrated");
        let n = trace.len();
        for kk in [
            0,
            n / 4,
            n / 2,
            rng.gen_range(0..=n),
            rng.gen_range(0..=n),
            n,
        ] {
            // The device as it was at the same moment (one clock).
            let t = trace.time_after(kk);
            for (mode, loss) in [
                (LossMode::AllUnflushed, BlockLoss::AllUnsynced),
                (
                    LossMode::RandomLines(rng.gen()),
                    BlockLoss::RandomBlocks(rng.gen()),
                ),
            ] {
                let what = format!("seed {seed} crash at {kk}/{n}");
                let ssd_img = ssd.image_at_time(t, loss);
                assert_recovers(trace.image_at(kk, mode), ssd_img, &files, &what);
            }
        }
    }
}

#[test]
fn readers_and_writers_see_correct_data_while_migration_runs() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    let fs = Arc::new(fs);
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("migration_threshold", "1").unwrap();
    fs.set_setting("group_migration_bytes", "64K").unwrap();
    fs.set_setting("reverse_read_ratio", "0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let migrator = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut moved = 0;
            while !stop.load(Ordering::Relaxed) {
                moved += fs.migration_pass();
                // Move some of it back too, so both directions race with I/O.
                for ino in 2..8 {
                    moved += fs.migrate_file(ino, 0).unwrap_or(0);
                }
            }
            moved
        })
    };
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = fs
                    .mknod(1, format!("w{w}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                    .unwrap();
                const BLOCKS: usize = 256;
                // The checker: what every block must hold.
                let mut truth: Vec<Vec<u8>> =
                    (0..BLOCKS).map(|b| vec![(b % 251) as u8; 4096]).collect();
                let mut rng = StdRng::seed_from_u64(w);
                for (b, content) in truth.iter().enumerate() {
                    fs.write(f.ino, b as u64 * 4096, content).unwrap();
                }
                for step in 0..30_000 {
                    let b = rng.gen_range(0..BLOCKS);
                    if rng.gen_bool(0.3) {
                        let n = rng.gen_range(1..=4).min(BLOCKS - b);
                        let v = rng.gen::<u8>();
                        for k in 0..n {
                            truth[b + k] = vec![v; 4096];
                        }
                        fs.write(f.ino, b as u64 * 4096, &vec![v; n * 4096])
                            .unwrap();
                    } else {
                        let got = fs.read(f.ino, b as u64 * 4096, 4096).unwrap();
                        assert!(
                            got == truth[b],
                            "worker {w} step {step}: block {b} is wrong"
                        );
                    }
                }
                (f.ino, truth.concat())
            })
        })
        .collect();
    let files: Vec<(u64, Vec<u8>)> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let moved = migrator.join().unwrap();
    assert!(
        moved > 0,
        "migration never ran during the test: {:?}",
        fs.status().migration
    );
    assert_files(&fs, &files, "every file");
    fs.check_allocator().unwrap();
}

/// Writes a 12 MiB file to the 16 MiB SSD tier of `fs` and punches out
/// every other 64 KiB: 24 extents half valid, few free extents. Returns the
/// file and its content.
fn fragment(fs: &Fs) -> (u64, Vec<u8>) {
    block_first(fs);
    fs.set_setting("migration_threshold", "99").unwrap();
    let f = file(fs, 1, "frag");
    let mut data = pattern(8, 12 << 20);
    for (k, c) in data.chunks(512 << 10).enumerate() {
        fs.write(f, (k as u64) << 19, c).unwrap();
    }
    fs.fsync(f, false).unwrap();
    for k in (0..(12u64 << 20) / (64 << 10)).step_by(2) {
        fs.fallocate(
            f,
            k * (64 << 10),
            64 << 10,
            terrace_core::FallocateMode::PunchHole,
        )
        .unwrap();
        data[(k * (64 << 10)) as usize..((k + 1) * (64 << 10)) as usize].fill(0);
    }
    (f, data)
}

const SMALL_SSD: u64 = 16 << 20;

#[test]
fn fragmented_extents_are_recycled_and_cleaning_efficiency_is_reported() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SMALL_SSD, 64);
    let (ino, data) = fragment(&fs);
    let before = fs.status().tiers[1].extents.unwrap();
    assert!(before.fragmentation_pct <= 55, "{before:?}");
    // Plenty of free extents: nothing to do.
    fs.set_setting("cleaner_free_percent", "10").unwrap();
    assert_eq!(fs.clean_pass(), 0);
    fs.set_setting("cleaner_free_percent", "50").unwrap();
    let recycled = fs.clean_pass();
    assert_eq!(recycled, 8, "one batch of eight half-valid extents");
    let after = fs.status().tiers[1].extents.unwrap();
    assert!(
        after.free_extents >= before.free_extents + 4,
        "{before:?} -> {after:?}"
    );
    assert!(after.fragmentation_pct > before.fragmentation_pct);
    let c = fs.status().cleaner;
    assert_eq!(c.extents_recycled, 8);
    let eff = c.efficiency.unwrap();
    assert!(
        (eff - 0.5).abs() < 0.01,
        "half-valid extents: efficiency {eff}"
    );
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
}

#[test]
fn recycling_rounds_racing_on_the_same_extents_waste_no_free_extent() {
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, SMALL_SSD, 64);
    let (ino, data) = fragment(&fs);
    let before = fs.status().tiers[1].extents.unwrap();
    // The file's first eight extents, each half valid: one round moves
    // their blocks into four fresh extents, a gain of four free extents.
    let victims: Vec<u64> = (1..=8).collect();
    let fs = std::sync::Arc::new(fs);
    let go = std::sync::Arc::new(std::sync::Barrier::new(4));
    let rounds: Vec<_> = (0..4)
        .map(|_| {
            let (fs, go, victims) = (fs.clone(), go.clone(), victims.clone());
            std::thread::spawn(move || {
                go.wait();
                fs.recycle(1, &victims)
            })
        })
        .collect();
    // (A later round may recycle blocks an earlier one moved into a
    // victim freed meanwhile: free extents are reused lowest first.)
    for h in rounds {
        h.join().unwrap();
    }
    let after = fs.status().tiers[1].extents.unwrap();
    // Racing rounds used to copy the same blocks each; the copies dropped
    // at their commits stayed behind as dead blocks in the free extents.
    assert!(
        after.free_extents >= before.free_extents + 4,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        after.valid_blocks, before.valid_blocks,
        "{before:?} -> {after:?}"
    );
    assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn crashes_during_extent_recycling_lose_nothing() {
    let (pm, ssd, fs) = crash_pool(16 << 20, SMALL_SSD, 64);
    let (ino, data) = fragment(&fs);
    fs.set_setting("cleaner_free_percent", "50").unwrap();
    pm.sync_all().unwrap();
    ssd.sync().unwrap();
    let (recycled, trace) = pm.trace(|| fs.clean_pass());
    assert!(recycled > 0);
    let files = [(ino, data)];
    assert_random_crash_points_recover(&trace, &ssd, &files, 12, "recycling crash test");
}

#[test]
fn cold_data_cascades_from_pm_to_ssd_to_hdd() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let ssd = Arc::new(MemBlock::new(16 << 20));
    let hdd = Arc::new(MemBlock::new(64 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, 16 << 20), (TierKind::Hdd, 64 << 20)],
        64,
    );
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, hdd.clone())]).unwrap();
    fs.set_setting("migration_policy", "ziggurat").unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("migration_threshold", "20").unwrap();
    fs.set_setting("migration_block_threshold", "20").unwrap();
    fs.set_setting("migration_threads", "3").unwrap();
    // The data must start on PM: large new writes would otherwise go to the
    // SSD directly once PM passes its threshold.
    fs.set_setting("size_fresh_large_bytes", "0").unwrap();
    let mut files = Vec::new();
    for n in 0..6u64 {
        let f = fs
            .mknod(1, format!("c{n}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        let data = pattern(100 + n, 2 << 20);
        fs.write(f.ino, 0, &data).unwrap();
        files.push((f.ino, data));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // Two passes: PM drains into the SSD, which then passes its (block)
    // threshold and drains into the HDD.
    fs.migration_pass();
    fs.migration_pass();
    let st = fs.status();
    assert!(st.migration.bytes_down >= 12 << 20, "{:?}", st.migration);
    assert!(st.tiers[2].used > 0, "nothing cascaded to the HDD");
    assert!(
        st.tiers[1].used * 100 / st.tiers[1].capacity <= 25,
        "{:?}",
        st.tiers[1]
    );
    assert_files(&fs, &files, "every file");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = Fs::mount_with_tiers(pm, vec![(1, ssd), (2, hdd)]).unwrap();
    assert_files(&fs, &files, "every file");
}

/// The cascade's drain of a block tier must find that tier's files however
/// many colder files already sit further down: with more than the 256
/// files a drain looks at all on the HDD (the coldest, written first), the
/// newer files filling the SSD must still move on. When the cold list
/// spanned all tiers, the drain of the SSD saw only the HDD's files, moved
/// nothing, and the SSD stayed full (so PM, which drains into it, filled
/// and writes failed with ENOSPC while the HDD — or an S3 bucket — had room;
/// `tests/e2e/test_s3_cascade.py` with many 256 KiB files).
#[test]
fn a_block_tier_drains_even_when_hundreds_of_colder_files_sit_below_it() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let ssd = Arc::new(MemBlock::new(8 << 20));
    let hdd = Arc::new(MemBlock::new(64 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, 8 << 20), (TierKind::Hdd, 64 << 20)],
        512,
    );
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, hdd.clone())]).unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    fs.set_setting("size_fresh_large_bytes", "0").unwrap();
    let mut files = Vec::new();
    // 300 old small files, all on the HDD: the coldest files of the pool.
    for n in 0..300u64 {
        let ino = file(&fs, 1, &format!("old{n}"));
        let data = pattern(n, 16 << 10);
        fs.write(ino, 0, &data).unwrap();
        fs.migrate_file(ino, 2).unwrap();
        files.push((ino, data));
    }
    std::thread::sleep(std::time::Duration::from_millis(2));
    // Newer files, all on the SSD: 5 MiB of its 8 MiB.
    let mut newer = Vec::new();
    for n in 0..40u64 {
        let ino = file(&fs, 1, &format!("new{n}"));
        let data = pattern(1000 + n, 128 << 10);
        fs.write(ino, 0, &data).unwrap();
        fs.migrate_file(ino, 1).unwrap();
        newer.push(ino);
        files.push((ino, data));
    }
    let ssd_percent = |fs: &Fs| {
        let t = &fs.status().tiers[1];
        t.used * 100 / t.capacity
    };
    assert!(ssd_percent(&fs) >= 55, "{:?}", fs.status().tiers[1]);
    fs.set_setting("migration_threshold", "20").unwrap();
    fs.set_setting("migration_block_threshold", "20").unwrap();
    fs.migration_pass();
    fs.migration_pass();
    let st = fs.status();
    assert!(
        ssd_percent(&fs) <= 25,
        "the SSD did not drain into the HDD: {:?}; migration {:?}",
        st.tiers[1],
        st.migration
    );
    assert!(newer.iter().any(|&ino| tier_bytes(&fs, ino, "hdd") > 0));
    assert_files(&fs, &files, "every file");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn crashes_during_reverse_migration_keep_every_byte() {
    let (pm, ssd, fs) = crash_pool(32 << 20, SSD, 64);
    block_first(&fs);
    let f = file(&fs, 1, "hot");
    let data = pattern(40, 1 << 20);
    for (k, c) in data.chunks(64 << 10).enumerate() {
        fs.write(f, (k as u64) << 16, c).unwrap();
    }
    fs.fsync(f, false).unwrap();
    for _ in 0..200 {
        fs.read(f, 0, 1 << 20).unwrap();
    }
    pm.sync_all().unwrap();
    ssd.sync().unwrap();
    let (moved, trace) = pm.trace(|| fs.migration_pass());
    assert!(moved >= 1 << 20, "reverse migration did not run");
    let files = [(f, data)];
    assert_random_crash_points_recover(&trace, &ssd, &files, 10, "reverse migration crash test");
}

#[test]
fn scattered_overwrites_reach_the_ssd_in_large_requests_and_survive_crashes() {
    let base = base_seed("scattered migration test");
    let mut rng = StdRng::seed_from_u64(base);
    let (pm, ssd, fs) = crash_pool(32 << 20, SSD, 64);
    fs.set_setting("migration_threshold", "95").unwrap();
    let mut data = pattern(base, 8 << 20);
    let f = file_holding(&fs, "table", &data);
    fs.migrate_file(f, 1).unwrap();
    assert_eq!(tier_bytes(&fs, f, "pm"), 0);
    // Random 4 KiB overwrites: small writes, placed on PM, far apart.
    for _ in 0..300 {
        let b = rng.gen_range(0..(8 << 20) / 4096) as usize;
        let new = pattern(rng.gen(), 4096);
        data[b * 4096..(b + 1) * 4096].copy_from_slice(&new);
        fs.write(f, (b * 4096) as u64, &new).unwrap();
    }
    let on_pm = tier_bytes(&fs, f, "pm");
    assert!(
        on_pm >= 200 * 4096,
        "overwrites did not land on PM: {on_pm}"
    );
    pm.sync_all().unwrap();
    ssd.sync().unwrap();
    let io0 = fs.status().tiers[1].io.unwrap();
    let (moved, trace) = pm.trace(|| fs.migrate_file(f, 1).unwrap());
    assert_eq!(moved, on_pm);
    let io1 = fs.status().tiers[1].io.unwrap();
    let (bytes, reqs) = (
        io1.write_bytes - io0.write_bytes,
        io1.write_requests - io0.write_requests,
    );
    // Scattered blocks are packed: one sequential request per batch (at
    // most 512 KiB extents apart), not one per 4 KiB block.
    assert!(bytes >= on_pm, "{bytes} < {on_pm}");
    assert!(
        bytes / reqs.max(1) >= 256 << 10,
        "{reqs} requests for {bytes} bytes"
    );
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
    // A crash anywhere in the batched move loses nothing.
    let n = trace.len();
    let mut points: Vec<usize> = (0..6).map(|_| rng.gen_range(0..=n)).collect();
    points.extend([0, n / 2, n]);
    let files = [(f, data)];
    for kk in points {
        let (pm_img, ssd_img) = random_crash_images(&trace, &ssd, kk, &mut rng);
        assert_recovers(pm_img, ssd_img, &files, &format!("crash at {kk}/{n}"));
    }
}

#[test]
fn crashes_while_several_files_share_a_sync_window_lose_nothing() {
    // One worker: every file in one window, one sync; two workers (files
    // moved in parallel): one window, and one sync, each.
    for threads in [1u64, 2] {
        several_files_share_a_sync_window(threads);
    }
}

fn several_files_share_a_sync_window(threads: u64) {
    let (pm, ssd, fs) = crash_pool(32 << 20, SSD, 64);
    fs.set_setting("migration_threshold", "95").unwrap();
    fs.set_setting("migration_threads", &threads.to_string())
        .unwrap();
    let mut rng = StdRng::seed_from_u64(base_seed("sync window crash test") + threads);
    let mut files = Vec::new();
    for n in 0..6u64 {
        let f = fs
            .mknod(1, format!("w{n}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        let data = pattern(rng.gen(), rng.gen_range(200_000..1_500_000));
        for (c, chunk) in data.chunks(64 << 10).enumerate() {
            fs.write(f.ino, (c as u64) << 16, chunk).unwrap();
        }
        files.push((f.ino, data));
    }
    pm.sync_all().unwrap();
    ssd.sync().unwrap();
    ssd.clear_events();
    let inos: Vec<u64> = files.iter().map(|f| f.0).collect();
    let (r, trace) = pm.trace(|| fs.migrate_files(&inos, 1).unwrap());
    let (moved, failed) = r;
    assert!(failed.is_empty(), "{failed:?}");
    let total: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    assert!(moved >= total, "moved {moved} of {total}");
    // One sync per worker's window, not one per file.
    let syncs = ssd
        .events()
        .iter()
        .filter(|e| **e == terrace_media::BlockEvent::Sync)
        .count();
    assert!(
        (1..=threads as usize).contains(&syncs),
        "{threads} workers: {syncs} device syncs"
    );
    let n = trace.len();
    let mut points: Vec<usize> = (0..12).map(|_| rng.gen_range(0..=n)).collect();
    points.extend([0, n / 3, n / 2, n]);
    for kk in points {
        let (pm_img, ssd_img) = random_crash_images(&trace, &ssd, kk, &mut rng);
        assert_recovers(
            pm_img,
            ssd_img,
            &files,
            &format!("{threads} workers, crash at {kk}/{n}"),
        );
    }
}

#[test]
fn a_hot_region_rewritten_on_pm_over_an_old_file_on_disk_still_migrates() {
    let (_, _, fs) = tiered_pool(32 << 20, SSD, 64);
    fs.set_setting("migration_threshold", "95").unwrap();
    fs.set_setting("migration_policy", "ziggurat").unwrap();
    // A file that is recent (so it does not move whole) ...
    fs.set_setting("migration_age_ns", "1h").unwrap();
    let mut data = pattern(1, 16 << 20);
    let f = file_holding(&fs, "db", &data);
    fs.migrate_file(f, 1).unwrap();
    // ... whose bulk is on disk and whose hot region keeps being rewritten
    // on PM: every PM entry is newer than the file's average mtime.
    let mut rng = StdRng::seed_from_u64(base_seed("hot region test"));
    for _ in 0..1500 {
        let b = rng.gen_range(0..512usize);
        let new = pattern(rng.gen(), 4096);
        data[b * 4096..(b + 1) * 4096].copy_from_slice(&new);
        fs.write(f, (b * 4096) as u64, &new).unwrap();
    }
    let before = tier_bytes(&fs, f, "pm");
    assert!(before > 1 << 20, "{before}");
    fs.set_setting("migration_threshold", "1").unwrap();
    let moved = fs.migration_pass();
    assert!(moved > 0, "migration stalled with PM over its threshold");
    assert!(tier_bytes(&fs, f, "pm") < before);
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

/// Every PM crash point of a move down, each paired with the SSD image of
/// the same moment (one clock; unsynced device writes lost): the file reads
/// back whole. This is the test that fails when a move commits before the
/// device sync its data needs (design.md §5a).
#[test]
fn a_move_never_commits_before_its_data_is_durable_on_the_device() {
    let (pm, ssd, fs) = crash_pool(8 << 20, SSD, 64);
    let data = pattern(77, 600_000);
    let f = file_holding(&fs, "f", &data);
    pm.sync_all().unwrap();
    let (moved, trace) = pm.trace(|| fs.migrate_file(f, 1).unwrap());
    assert!(moved > 0);
    assert_eq!(tier_bytes(&fs, f, "pm"), 0);
    let files = [(f, data)];
    let n = trace.len();
    for kk in 0..=n {
        assert_recovers(
            trace.image_at(kk, LossMode::AllUnflushed),
            ssd.image_at_time(trace.time_after(kk), BlockLoss::AllUnsynced),
            &files,
            &format!("crash at {kk}/{n}"),
        );
    }
}

/// A move to a block tier counts the extents the tier holds back for
/// recycling as taken: a file that fits only with them is not moved at
/// all and the error says how much room there is (before, the room check
/// passed, the move stopped partway and failed with a bare ENOSPC).
#[test]
fn a_move_to_a_block_tier_leaves_the_recycling_reserve_out_of_its_room() {
    let (_, _, fs) = tiered_pool(48 << 20, 16 << 20, 64);
    let a = file_holding(&fs, "a", &pattern(5, 14 << 20));
    fs.migrate_files(&[a], 1).unwrap();
    assert_eq!(tier_bytes(&fs, a, "ssd"), 14 << 20);
    let b = file_holding(&fs, "b", &pattern(6, 1 << 20));
    let (moved, errors) = fs.migrate_files(&[b], 1).unwrap();
    assert_eq!(moved, 0, "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let why = errors[0]
        .1
        .get_ref()
        .and_then(|e| e.downcast_ref::<terrace_core::migrate::NoRoomOnTier>())
        .unwrap_or_else(|| panic!("a NoRoomOnTier error: {:?}", errors[0].1));
    assert!(why.room < 1 << 20, "{why}");
    assert_eq!(tier_bytes(&fs, b, "pm"), 1 << 20, "the file stays whole");
    fs.check_allocator().unwrap();
}
