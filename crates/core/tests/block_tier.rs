//! Block tiers: data spills from a full PM tier to an SSD tier, reads back
//! across tiers and remounts, survives crashes, and device errors reach the
//! application as EIO without damaging the pool.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::{Fs, OpenError};
use terrace_media::{FaultBlock, LossMode, MemBlock, MemMedia, PmMedia};

const SSD: u64 = 32 << 20;

#[test]
fn writes_spill_to_the_ssd_tier_when_pm_is_full_and_read_back_after_remount() {
    let (pm, ssd, fs) = tiered_pool(2 << 20, SSD, 64);
    let a = file(&fs, 1, "big");
    let mut expect = Vec::new();
    for i in 0..40u32 {
        let chunk: Vec<u8> = (0..256 * 1024).map(|k| (k as u32 ^ i) as u8).collect();
        fs.write(a, expect.len() as u64, &chunk)
            .expect("no ENOSPC while the SSD tier has room");
        expect.extend_from_slice(&chunk);
    }
    assert_eq!(fs.read(a, 0, expect.len()).unwrap(), expect);
    fs.fsync(a, false).unwrap();
    let st = fs.status();
    assert!(st.tiers[1].used > 0, "nothing reached the SSD tier");
    assert!(st.tiers[1].io.unwrap().write_requests > 0);
    assert_eq!(fs.read(a, 0, expect.len()).unwrap(), expect);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(fs.read(a, 0, expect.len()).unwrap(), expect);
    // Overwrites free SSD blocks; deleting the file frees them all.
    fs.unlink(1, b"big").unwrap();
    assert_eq!(fs.status().tiers[1].used, 0);
    fs.check_allocator().unwrap();
}

#[test]
fn a_write_back_larger_than_its_copy_window_lands_whole_and_in_order() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    fs.set_setting("placement_policy", "block-first").unwrap();
    fs.set_setting("dram_cache_bytes", "64M").unwrap();
    let a = file(&fs, 1, "big");
    // 20 MiB, every 4 KiB block different, written out of order so the
    // pages' order is not the writes' order: more than two copy windows.
    let block = |k: u64| -> Vec<u8> { (0..4096u64).map(|x| (x * 7 + k * 13) as u8).collect() };
    let blocks = (20u64 << 20) / 4096;
    for k in (0..blocks).rev().step_by(2).chain((0..blocks).step_by(2)) {
        fs.write(a, k * 4096, &block(k)).unwrap();
    }
    assert!(
        tier_bytes(&fs, a, "dram") >= 16 << 20,
        "cached, not yet written back"
    );
    fs.fsync(a, false).unwrap();
    assert_eq!(tier_bytes(&fs, a, "ssd"), 20 << 20);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    let got = fs.read(a, 0, (20 << 20) as usize).unwrap();
    for k in 0..blocks {
        let at = (k * 4096) as usize;
        assert!(got[at..at + 4096] == block(k)[..], "block {k}");
    }
    fs.check_allocator().unwrap();
}

#[test]
fn mounting_without_a_tier_that_holds_data_is_refused_without_writes() {
    let (pm, _, fs) = tiered_pool(2 << 20, SSD, 64);
    let a = file(&fs, 1, "f");
    fs.write(a, 0, &vec![1u8; 3 << 20]).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let before = pm.image();
    assert_eq!(
        Fs::mount(pm.clone() as Arc<dyn PmMedia>).err(),
        Some(OpenError::MissingTier(1))
    );
    assert!(pm.image() == before);
}

#[test]
fn device_write_errors_fail_the_write_with_eio_and_keep_the_pool_consistent() {
    let (pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(2 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    // Writes of more than half the cache bypass it: this one is written through.
    fs.set_setting("dram_cache_bytes", "2M").unwrap();
    // A settings change is a line of the daemon's log.
    assert_eq!(
        fs.take_notices(),
        ["setting dram_cache_bytes changed from 256M to 2M"]
    );
    let a = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = vec![9u8; 3 << 20];
    fs.write(a.ino, 0, &data).unwrap();
    ssd.fail_writes_after(0);
    let err = fs.write(a.ino, 8 << 20, &vec![5u8; 2 << 20]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        fs.getattr(a.ino).unwrap().size,
        3 << 20,
        "a failed write changed the size"
    );
    // One line for the daemon's log (more at the 2nd, 4th, 8th … error).
    let notes = fs.take_notices();
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.starts_with("tier 1: device error: "))
            .count(),
        1,
        "{notes:?}"
    );
    // ...and a count in `status`, which the operator sees without the log.
    let st = fs.status();
    assert!(st.device_errors >= 1, "device errors not counted");
    assert_eq!(st.device_full_errors, 0);
    assert_eq!(fs.read(a.ino, 0, data.len()).unwrap(), data);
    fs.check_allocator().unwrap();
    ssd.heal();
    fs.write(a.ino, 8 << 20, &vec![5u8; 2 << 20]).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Metadata, "after unmount");
}

#[test]
fn random_sequences_with_a_small_pm_tier_match_the_model() {
    let base = base_seed("tiered model test");
    for k in 0..150 {
        let seed = base.wrapping_add(k);
        let (pm, ssd, mut fs) = tiered_pool(1 << 20, SSD, 64);
        let mut model = Model::default();
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..60 {
            if rng.gen_range(0..30) == 0 {
                fs.unmount().unwrap();
                drop(fs);
                fs = mount_tiered(pm.clone(), ssd.clone());
            }
            let ctx = format!("seed {seed} step {step}");
            random_step(&fs, &mut model, &mut rng, &ctx);
        }
        fs.check_allocator()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn crashes_during_spilled_writes_recover_to_before_or_after() {
    let base = base_seed("tiered crash test");
    for k in 0..4 {
        let seed = base.wrapping_add(k);
        let mut rng = StdRng::seed_from_u64(seed);
        // One clock for both media: each PM crash point gets the device
        // image of the same moment (unsynced writes kept or lost at random).
        let (pm, ssd, fs) = crash_pool(1 << 20, SSD, 64);
        let mut model = Model::default();
        for step in 0..30 {
            let op = random_op(&model, &mut rng);
            let before = model.tree();
            let want = apply_model(&mut model, &op);
            let after = model.tree();
            let (got, trace) = pm.trace(|| apply_fs(&fs, &op));
            assert_eq!(got, want);
            let n = trace.len();
            for kk in [rng.gen_range(0..=n), rng.gen_range(0..=n), n] {
                let (img, ssd_img) = random_crash_images(&trace, &ssd, kk, &mut rng);
                let pm2 = Arc::new(MemMedia::from_image(img));
                let ssd2 = Arc::new(MemBlock::from_image(ssd_img));
                let fs2 = mount_tiered(pm2, ssd2);
                fs2.check_allocator().unwrap();
                let t = fs_tree(&fs2);
                let ctx = format!("seed {seed} step {step} {op:?} crash at {kk}/{n}");
                if kk == n || before == after {
                    assert_same_tree(&t, &after, &ctx);
                } else {
                    assert!(
                        t == before || t == after,
                        "{ctx}: neither before nor after:\n{}",
                        diff_trees(&t, &after)
                    );
                }
            }
        }
    }
}

#[test]
fn large_asynchronous_overwrites_go_to_the_ssd_and_fsynced_appends_stay_on_pm() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    assert_eq!(fs.settings().placement_policy, "ziggurat");
    let big = file(&fs, 1, "table");
    let wal = file(&fs, 1, "wal");
    for round in 0..8u8 {
        // The same 1 MiB rewritten in 256 KiB writes, never fsynced: large and stable.
        for k in 0..4u64 {
            fs.write(big, k << 18, &vec![round; 256 << 10]).unwrap();
        }
        for r in 0..4u64 {
            let off = fs.getattr(wal).unwrap().size;
            fs.write(wal, off, format!("record {round} {r}\n").as_bytes())
                .unwrap();
            fs.fsync(wal, false).unwrap();
        }
    }
    assert!(
        tier_bytes(&fs, big, "dram") > 0,
        "large asynchronous writes did not go through the DRAM cache"
    );
    fs.fsync(big, false).unwrap();
    assert_eq!(tier_bytes(&fs, big, "dram"), 0, "fsync left dirty pages");
    assert_eq!(
        tier_bytes(&fs, big, "ssd"),
        1 << 20,
        "large stable asynchronous rewrites stayed on PM"
    );
    assert_eq!(tier_bytes(&fs, wal, "ssd"), 0, "fsynced appends left PM");
    assert_eq!(fs.read(big, 0, 1 << 20).unwrap(), vec![7u8; 1 << 20]);
    let st = fs.status();
    assert!(st.placed_block > 0 && st.placed_pm > 0);
    assert!(st.sync_predictions.total() > 0);
    fs.check_allocator().unwrap();
}

#[test]
fn large_new_asynchronous_data_goes_to_the_ssd_once_pm_passes_its_threshold() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    // A static threshold, and the rule on (it is off by default).
    fs.set_setting("migration_threshold", "40").unwrap();
    fs.set_setting("size_fresh_large_bytes", "512K").unwrap();
    let early = file(&fs, 1, "early");
    fs.write(early, 0, &vec![1u8; 1 << 20]).unwrap();
    assert_eq!(
        tier_bytes(&fs, early, "ssd") + tier_bytes(&fs, early, "dram"),
        0,
        "new data went down while PM was nearly empty"
    );
    // Fill PM past 40% with small writes (small new data stays on PM).
    let filler = file(&fs, 1, "filler");
    for k in 0..(8 << 20) / 65536u64 {
        fs.write(filler, k * 65536, &vec![2u8; 65536]).unwrap();
    }
    assert!(fs.status().tiers[0].used * 100 >= fs.status().tiers[0].capacity * 40);
    let late = file(&fs, 1, "late");
    for k in 0..4u64 {
        fs.write(late, k << 20, &vec![3u8; 1 << 20]).unwrap();
    }
    // Small new data still goes to PM past the threshold.
    fs.write(late, 4 << 20, &vec![4u8; 4096]).unwrap();
    fs.fsync(late, false).unwrap();
    assert_eq!(
        tier_bytes(&fs, late, "ssd"),
        4 << 20,
        "large new data stayed on PM"
    );
    assert_eq!(tier_bytes(&fs, late, "pm"), 4096);
    let mut want = vec![3u8; 4 << 20];
    want.extend_from_slice(&[4u8; 4096]);
    assert_eq!(fs.read(late, 0, (4 << 20) + 4096).unwrap(), want);
    // Turned off, large new data stays on PM again.
    fs.set_setting("size_fresh_large_bytes", "0").unwrap();
    let off = file(&fs, 1, "off");
    fs.write(off, 0, &vec![5u8; 1 << 20]).unwrap();
    assert_eq!(
        tier_bytes(&fs, off, "ssd") + tier_bytes(&fs, off, "dram"),
        0
    );
    fs.check_allocator().unwrap();
}

#[test]
fn a_large_asynchronous_write_joins_the_files_cached_writes_instead_of_flushing_them_for_pm() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    fs.set_setting("placement_policy", "block-first").unwrap();
    let stream = file(&fs, 1, "stream");
    for k in 0..2u64 {
        fs.write(stream, k << 20, &vec![1u8; 1 << 20]).unwrap();
    }
    assert_eq!(tier_bytes(&fs, stream, "dram"), 2 << 20, "cached first");
    // The policy now takes PM for new large data (PM-first, as by default).
    fs.set_setting("placement_policy", "ziggurat").unwrap();
    let elsewhere = file(&fs, 1, "elsewhere");
    fs.write(elsewhere, 0, &vec![2u8; 1 << 20]).unwrap();
    assert_eq!(
        tier_bytes(&fs, elsewhere, "pm"),
        1 << 20,
        "the policy takes PM"
    );
    // The stream's next large write joins its cached pages: none of them
    // was written back for it to go to PM.
    fs.write(stream, 2 << 20, &vec![3u8; 1 << 20]).unwrap();
    assert_eq!(tier_bytes(&fs, stream, "dram"), 3 << 20);
    assert_eq!(tier_bytes(&fs, stream, "pm"), 0);
    assert_eq!(
        fs.status().cache.writebacks,
        0,
        "no write-back in the write"
    );
    // A small write still goes to PM (after the cached pages, in order).
    fs.write(stream, 3 << 20, &[4u8; 4096]).unwrap();
    assert_eq!(tier_bytes(&fs, stream, "pm"), 4096);
    assert_eq!(tier_bytes(&fs, stream, "dram"), 0);
    // Written back, the policy decides again: PM.
    fs.write(stream, 4 << 20, &vec![5u8; 1 << 20]).unwrap();
    assert_eq!(tier_bytes(&fs, stream, "pm"), (1 << 20) + 4096);
    let mut want = vec![1u8; 2 << 20];
    want.extend(vec![3u8; 1 << 20]);
    want.extend([4u8; 4096]);
    want.resize((4 << 20) as usize, 0);
    want.extend(vec![5u8; 1 << 20]);
    assert_eq!(content(&fs, stream), want);
    fs.check_allocator().unwrap();
}

#[test]
fn settings_change_at_run_time_and_bad_values_change_nothing() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    assert!(fs
        .set_setting("placement_policy", "no-such-policy")
        .is_err());
    assert!(fs.set_setting("no_such_key", "1").is_err());
    assert_eq!(fs.settings(), terrace_policy::Settings::default());
    fs.set_setting("placement_policy", "pm-only").unwrap();
    let f = file(&fs, 1, "f");
    for round in 0..8u8 {
        fs.write(f, 0, &vec![round; 256 << 10]).unwrap();
    }
    assert_eq!(
        tier_bytes(&fs, f, "ssd"),
        0,
        "pm-only placed data on the SSD"
    );
    block_first(&fs);
    fs.write(f, 0, &vec![9u8; 256 << 10]).unwrap();
    fs.fsync(f, false).unwrap();
    assert_eq!(tier_bytes(&fs, f, "ssd"), 256 << 10);
    assert_eq!(fs.status().placement_policy, "block-first");
}

#[test]
fn fsync_needs_no_work_only_on_pools_without_block_tiers() {
    // PM only: every write is durable when it returns (the FUSE adapter then
    // lets the kernel complete fsync without a request).
    let (_, fs) = pm_pool(2 << 20, 64);
    assert!(fs.fsync_is_noop());
    fs.unmount().unwrap();
    // With a block tier the DRAM cache may hold dirty data: fsync has work.
    let (_, _, fs) = tiered_pool(2 << 20, SSD, 64);
    assert!(!fs.fsync_is_noop());
    fs.unmount().unwrap();
}

/// Every PM crash point of the write-back (fsync) of cached data bound for
/// the SSD, each paired with the SSD image of the same moment (one clock;
/// unsynced device writes lost): the file is either as before the fsync
/// (empty) or whole. Fails when the write-back commits before its device
/// sync (design.md §5a).
#[test]
fn a_write_back_never_commits_before_its_data_is_durable_on_the_device() {
    let (pm, ssd, fs) = crash_pool(4 << 20, SSD, 64);
    block_first(&fs);
    let f = file(&fs, 1, "f");
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs.write(f, 0, &data).unwrap();
    pm.sync_all().unwrap();
    let ((), trace) = pm.trace(|| fs.fsync(f, false).unwrap());
    let n = trace.len();
    assert!(n > 0, "the fsync wrote nothing back");
    for kk in 0..=n {
        let what = format!("crash at {kk}/{n}");
        let pm2 = Arc::new(MemMedia::from_image(
            trace.image_at(kk, LossMode::AllUnflushed),
        ));
        let ssd2 = Arc::new(MemBlock::from_image(
            ssd.image_at_time(trace.time_after(kk), terrace_media::BlockLoss::AllUnsynced),
        ));
        let fs2 = mount_tiered(pm2, ssd2);
        let got = fs2
            .read(f, 0, data.len())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            got.is_empty() || got == data,
            "{what}: {} bytes, not whole",
            got.len()
        );
        if kk == n {
            assert!(got == data, "{what}: the fsync'd data is missing");
        }
    }
}
