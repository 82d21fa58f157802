//! Crash images of a pool PM + SSD + object tier (design §5n): the PM
//! ([`CrashMedia`]), the SSD ([`CrashBlock`]) and the object store
//! ([`CrashStore`]) stamp every durable step on one clock — PM stores,
//! flushes and fences, block writes and syncs, and the issue and the answer
//! of every PUT and DELETE of a part. Each step of a workload that migrates
//! data to the object tier, overwrites, truncates and deletes it, reclaims
//! dead parts and cleans partly dead ones is traced, and a crash image is
//! built at EVERY tick of the clock inside it: what PM, SSD and store held
//! at that moment, with unflushed lines, unsynced blocks and in-flight
//! requests lost, kept at random, or (for requests in flight) landed.
//!
//! Every image must: pass fsck before the mount; have every block run on the
//! object tier that the committed state references inside a part the store
//! holds (no committed extent names a missing part); mount, with the mount
//! deleting exactly the orphan parts fsck counted; hold the tree of before
//! or after the step (after, at the step's end) — every file reading back
//! in full, never a wrong byte or EIO; and, once unmounted, leave a store
//! whose every part holds a referenced block (fsck on a reopened tier finds
//! no orphan).
//!
//! Per crash point: one image with everything not yet durable lost, one
//! with a random choice (per PM word, per SSD block, per request), and
//! where a request is in flight one with it landed. The random choices come
//! from `TERRACE_SEED` (printed); `TERRACE_OBJECT_CRASH_SEEDS=N` makes N
//! random images per crash point (default 1) for a longer run.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::{Fs, SetAttr};
use terrace_media::object::{Bucket, CrashStore, ObjectEvent, ObjectLoss};
use terrace_media::{
    BlockLoss, BlockMedia, CrashBlock, CrashMedia, LossMode, MemBlock, MemMedia, ObjectMedia,
    PartInfo, SweepReport,
};

const PM: u64 = 4 << 20;
const SSD: u64 = 4 << 20;
const S3: u64 = 32 << 20;
const URL: &str = "memory://crash";
const PREFIX: &str = "pool";

/// A pool on crash-simulating media, all on the PM's clock.
struct Pool {
    pm: Arc<CrashMedia>,
    ssd: Arc<CrashBlock>,
    store: Arc<CrashStore>,
    fs: Fs,
}

fn pool() -> Pool {
    let pm = Arc::new(CrashMedia::new(PM));
    let clock = pm.clock();
    let ssd = Arc::new(CrashBlock::timed(SSD, clock.clone()));
    mkfs_object(&*pm, SSD, S3, 64);
    let store = Arc::new(CrashStore::timed(clock));
    let bucket = Bucket::with_store(store.clone(), URL, PREFIX).unwrap();
    let fs = mount_object(pm.clone(), ssd.clone(), create_object_tier(bucket, S3));
    // One mover: batches in a deterministic order.
    fs.set_setting("migration_threads", "1").unwrap();
    Pool { pm, ssd, store, fs }
}

/// The object tier as fsck sees it, remembering the block runs the
/// committed state references (what fsck passes to `unreferenced`).
struct Spy {
    inner: Arc<ObjectMedia>,
    used: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl Hooks for Spy {
    fn inner(&self) -> &dyn BlockMedia {
        &*self.inner
    }
    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        *self.used.lock() = used.to_vec();
        self.inner.unreferenced(used)
    }
}

/// fsck of the pool on `pm`, `ssd`, `s3`: clean. Returns the orphan parts
/// it counted and the runs of the object tier the committed state uses.
fn fsck_clean(
    pm: &MemMedia,
    ssd: &Arc<MemBlock>,
    s3: &Arc<ObjectMedia>,
    ctx: &str,
) -> (u64, Vec<(u64, u64)>) {
    let spy = Arc::new(Hooked(Spy {
        inner: s3.clone(),
        used: Default::default(),
    }));
    let r = fsck_object_clean(pm, ssd.clone(), spy.clone(), ctx);
    let used = spy.used.lock().clone();
    (r.object_orphans, used)
}

/// Every block of `used` (but the tier header, block 0, which no part
/// holds) lies inside a part of `parts`.
fn assert_parts_hold(used: &[(u64, u64)], parts: &[PartInfo], ctx: &str) {
    for &(start, n) in used {
        for b in start.max(1)..start + n {
            assert!(
                parts.iter().any(|p| p.block <= b && b < p.block + p.blocks),
                "{ctx}: the committed state references block {b} of the object tier, \
                 which no part in the store holds (run {start}+{n}; parts {:?})",
                parts
                    .iter()
                    .map(|p| (p.block, p.blocks))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// What a crash image loses: unflushed PM lines, unsynced SSD blocks and
/// requests in flight.
#[derive(Clone, Copy, Debug)]
struct Loss(LossMode, BlockLoss, ObjectLoss);

/// Recovers one crash image (the store's in `bucket`) and checks it (see
/// the module docs): its tree must be `before` or `after` (`after` when
/// `must_be_after`). Returns the orphan parts the mount deleted and
/// whether the tree is `after`.
fn check_image(
    pm_img: Vec<u8>,
    ssd_img: Vec<u8>,
    bucket: Bucket,
    before: &Tree,
    after: &Tree,
    must_be_after: bool,
    ctx: &str,
) -> (u64, bool) {
    let pm = Arc::new(MemMedia::from_image(pm_img));
    let ssd = Arc::new(MemBlock::from_image(ssd_img));
    let again = Bucket::with_store(bucket.store(), URL, PREFIX).unwrap();
    let s3 = open_object_tier(bucket);
    let (orphans, used) = fsck_clean(&pm, &ssd, &s3, ctx);
    assert_parts_hold(&used, &s3.parts(), ctx);
    let fs = Fs::mount_with_tiers(pm.clone(), object_tiers(ssd.clone(), s3.clone()))
        .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
    let rep = fs.mount_report();
    assert!(
        rep.object_sweep_errors.is_empty(),
        "{ctx}: {:?}",
        rep.object_sweep_errors
    );
    assert_eq!(rep.object_orphans, orphans, "{ctx}: orphans deleted");
    let swept = rep.object_orphans;
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
    let st = s3.object_stats();
    assert_eq!(st.dead_parts, 0, "{ctx}: dead parts left after the mount");
    let t = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs_tree(&fs)))
        .unwrap_or_else(|_| panic!("{ctx}: the tree cannot be read (see above)"));
    assert_before_or_after(&t, before, after, must_be_after, ctx);
    fs.unmount().unwrap();
    drop(fs);
    drop(s3);
    // The store holds only parts the pool references.
    let s3 = open_object_tier(again);
    let (orphans, used) = fsck_clean(&pm, &ssd, &s3, &format!("{ctx}: after recovery"));
    assert_eq!(orphans, 0, "{ctx}: orphan parts left after the mount");
    assert_parts_hold(&used, &s3.parts(), &format!("{ctx}: after recovery"));
    (swept, t == *after)
}

/// Counts of a run.
#[derive(Default, Debug)]
struct Counts {
    /// Crash points (clock ticks) in the traced steps.
    points: u64,
    /// Images recovered (several loss modes per point).
    images: u64,
    /// Points with a PUT or DELETE in flight.
    in_flight: u64,
    /// PUTs of parts in the traced steps.
    puts: u64,
    /// DELETEs of parts in the traced steps.
    deletes: u64,
    /// Images whose mount deleted orphan parts.
    swept: u64,
    /// Images of a step that changes the tree found before and after it.
    before: u64,
    after: u64,
}

/// Runs `step` on the pool and checks the crash image at every tick of the
/// clock while it ran, with `TERRACE_OBJECT_CRASH_SEEDS` random images per
/// point drawn from `rng`.
fn crash_step(p: &Pool, name: &str, rng: &mut StdRng, counts: &mut Counts, step: impl FnOnce(&Fs)) {
    let before = fs_tree(&p.fs);
    let events = p.store.events().len();
    let ((), trace) = p.pm.trace(|| step(&p.fs));
    let end = p.pm.clock().now();
    let after = fs_tree(&p.fs);
    for e in &p.store.events()[events..] {
        match e {
            ObjectEvent::Put { .. } => counts.puts += 1,
            ObjectEvent::Delete { .. } => counts.deletes += 1,
        }
    }
    let n = trace.len();
    let seeds = env_u64("TERRACE_OBJECT_CRASH_SEEDS", 1);
    trace.for_each_state(|k, state| {
        // Ticks at which exactly k PM events had happened.
        let lo = trace.time_after(k);
        let hi = if k < n {
            trace.time_after(k + 1) - 1
        } else {
            end
        };
        for t in lo..=hi {
            counts.points += 1;
            let in_flight = p.store.in_flight_at(t) > 0;
            counts.in_flight += u64::from(in_flight);
            let mut losses = vec![Loss(
                LossMode::AllUnflushed,
                BlockLoss::AllUnsynced,
                ObjectLoss::InFlightLost,
            )];
            for _ in 0..seeds {
                losses.push(Loss(
                    LossMode::RandomWords(rng.gen()),
                    BlockLoss::RandomBlocks(rng.gen()),
                    ObjectLoss::Random(rng.gen()),
                ));
            }
            if in_flight {
                losses.push(Loss(
                    LossMode::AllUnflushed,
                    BlockLoss::AllUnsynced,
                    ObjectLoss::InFlightDone,
                ));
            }
            for loss in losses {
                let ctx = format!(
                    "{name}: crash at tick {t} ({k}/{n} PM events, ticks {}..={end}) {loss:?}",
                    trace.time_after(0)
                );
                counts.images += 1;
                let (swept, is_after) = check_image(
                    state.image(loss.0),
                    p.ssd.image_at_time(t, loss.1),
                    Bucket::with_store(p.store.store_at_time(t, loss.2), URL, PREFIX).unwrap(),
                    &before,
                    &after,
                    t == end,
                    &ctx,
                );
                counts.swept += u64::from(swept > 0);
                if before != after {
                    *if is_after {
                        &mut counts.after
                    } else {
                        &mut counts.before
                    } += 1;
                }
            }
        }
    });
}

/// Migration to the object tier (PM → S3 in one batch of several parts,
/// PM → SSD → S3), an overwrite and a truncate of object data, the delete
/// of a file (its parts die), the deletes of dead parts, the data written
/// meanwhile migrated out, a batch of several parts uploaded at once, and a
/// migration back to PM.
#[test]
fn every_crash_point_of_migration_to_the_object_tier_recovers() {
    let p = pool();
    let fs = &p.fs;
    let a = write_file(fs, "a", &pattern(1, 300 << 10));
    let b = write_file(fs, "b", &pattern(2, 200 << 10));
    let c = write_file(fs, "c", &pattern(3, 120 << 10));
    let d = write_file(fs, "d", &pattern(4, 160 << 10));
    let e = write_file(fs, "e", &pattern(5, 20 << 10));
    let g = write_file(fs, "g", &pattern(7, 400 << 10));
    let h = write_file(fs, "h", &pattern(8, 500 << 10));
    let mut rng = StdRng::seed_from_u64(base_seed("object crash images"));
    let mut n = Counts::default();
    crash_step(&p, "migrate a, b, c to s3", &mut rng, &mut n, |fs| {
        let (moved, errors) = fs.migrate_files(&[a, b, c], 2).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(moved, 620 << 10);
    });
    crash_step(&p, "migrate d to the ssd", &mut rng, &mut n, |fs| {
        fs.migrate_file(d, 1).unwrap();
    });
    crash_step(&p, "migrate d from the ssd to s3", &mut rng, &mut n, |fs| {
        fs.migrate_file(d, 2).unwrap();
        assert_eq!(tier_bytes(fs, d, "s3"), 160 << 10);
    });
    crash_step(&p, "overwrite the middle of a", &mut rng, &mut n, |fs| {
        fs.write(a, 100 << 10, &pattern(6, 40 << 10)).unwrap();
        fs.fsync(a, false).unwrap();
    });
    crash_step(&p, "truncate c", &mut rng, &mut n, |fs| {
        fs.setattr(
            c,
            SetAttr {
                size: Some(10_000),
                ..Default::default()
            },
        )
        .unwrap();
    });
    crash_step(&p, "unlink b", &mut rng, &mut n, |fs| {
        fs.unlink(1, b"b").unwrap();
    });
    crash_step(&p, "delete dead parts", &mut rng, &mut n, |fs| {
        fs.reclaim_object_tiers();
    });
    crash_step(&p, "migrate a and e to s3", &mut rng, &mut n, |fs| {
        let (_, errors) = fs.migrate_files(&[a, e], 2).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(tier_bytes(fs, a, "s3"), 300 << 10);
    });
    crash_step(
        &p,
        "migrate g and h to s3 (three parts at once)",
        &mut rng,
        &mut n,
        |fs| {
            let (moved, errors) = fs.migrate_files(&[g, h], 2).unwrap();
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(moved, 900 << 10);
        },
    );
    crash_step(
        &p,
        "unlink g and delete its dead parts",
        &mut rng,
        &mut n,
        |fs| {
            fs.unlink(1, b"g").unwrap();
            fs.reclaim_object_tiers();
        },
    );
    crash_step(&p, "migrate d back to pm", &mut rng, &mut n, |fs| {
        fs.migrate_file(d, 0).unwrap();
        assert_eq!(tier_bytes(fs, d, "pm"), 160 << 10);
        fs.reclaim_object_tiers();
    });
    eprintln!("migration workload: {n:?}");
    assert!(n.puts > 0 && n.deletes > 0 && n.in_flight > 0, "{n:?}");
    assert!(n.swept > 0 && n.before > 0 && n.after > 0, "{n:?}");
    fs.check_allocator().unwrap();
}

/// Object cleaning: 24 files of 64 KiB migrated in one batch (three parts
/// of eight files), every other one deleted and every fourth overwritten,
/// so each part is under half live; a cleaning pass rewrites the live
/// blocks into new parts, commits the moves and deletes the old parts.
#[test]
fn every_crash_point_of_object_cleaning_recovers() {
    let p = pool();
    let fs = &p.fs;
    fs.set_setting("object_clean_live_percent", "50").unwrap();
    let files: Vec<u64> = (0..24)
        .map(|i| write_file(fs, &format!("f{i}"), &pattern(100 + i, 64 << 10)))
        .collect();
    let (_, errors) = fs.migrate_files(&files, 2).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    for (i, &ino) in files.iter().enumerate() {
        if i % 2 == 1 {
            fs.unlink(1, format!("f{i}").as_bytes()).unwrap();
        } else if i % 4 == 0 {
            fs.write(ino, 0, &pattern(1000 + i as u64, 16 << 10))
                .unwrap();
            fs.fsync(ino, false).unwrap();
        }
    }
    fs.reclaim_object_tiers();
    let mut rng = StdRng::seed_from_u64(base_seed("object cleaning crash images"));
    let mut n = Counts::default();
    crash_step(&p, "clean the object tier", &mut rng, &mut n, |fs| {
        assert_eq!(fs.clean_object_tiers(), 3, "every part is 7/16 live");
    });
    eprintln!("cleaning workload: {n:?}");
    assert!(n.puts > 0 && n.deletes > 0 && n.in_flight > 0, "{n:?}");
    assert!(n.swept > 0, "{n:?}");
    fs.check_allocator().unwrap();
}
