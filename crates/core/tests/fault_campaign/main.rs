//! Fault campaign (issue 20): random file operations on a PM + SSD pool
//! while the media fail under them, checked against a model of what the
//! design promises to keep (design.md §7).
//!
//! Faults injected:
//! - the SSD ([`FaultBlock`] over a [`CrashBlock`]): reads, writes and syncs
//!   fail with EIO after a random countdown, for one operation or for a
//!   stretch of them (a device that stays bad until healed); and a sync
//!   fails the way a buffered file's `fsync` fails on Linux — once, with
//!   every unsynced write lost although reads still see it
//!   ([`CrashBlock::lose_unsynced`]);
//! - the pool filling up: the tiers are small, so writes also meet ENOSPC;
//! - PM ([`FaultMedia`] over a [`CrashMedia`]): PM has no error path (a
//!   store cannot fail; a bad load is a machine check), so PM faults are
//!   poisoned loads. PM data carries no checksum (design.md §5h), so a
//!   poisoned load of file data is served: those reads are counted
//!   separately (`pm poison served`), as the known gap, not as silent
//!   corruption of the tiers the checksums cover.
//!
//! Operations: writes of 1 B to 1 MiB at random places (holes, appends,
//! overwrites; `O_SYNC` sometimes), reads, fsync, truncate, create, rename,
//! link, unlink, `migrate_file` both ways, `migration_pass`, write-back,
//! cleaning, log migration, eviction of clean copies, scrub (with and
//! without repair), and placement/migration policy changes — each under
//! `catch_unwind` (a panic is counted, must be 0).
//!
//! The model keeps, per file, the contents it may have now (more than one
//! after an operation failed: a failed write may or may not have left its
//! data in the cache; the next fault-free read decides) and the contents
//! acknowledged durable — at the last moment the file had no dirty cached
//! data (a write placed on PM is durable when it returns) or after a
//! successful fsync — with the bytes changed since.
//!
//! Checks:
//! - every read that succeeds returns bytes the model allows; anything else
//!   is *wrong bytes served* (silent corruption, must be 0);
//! - after every round, a crash image of both media (unflushed PM lines and
//!   unsynced SSD blocks lost at random) passes `fsck --data` and mounts,
//!   and every acknowledged byte not changed since reads back exactly
//!   (else *bytes lost*, must be 0);
//! - then the live pool, with the faults healed, unmounts cleanly, passes
//!   `fsck --data`, mounts again and holds exactly what the model says.
//!
//! - a crash image is also mounted while the SSD fails reads (and writes)
//!   after a random countdown: refused or mounted, and whatever it serves is
//!   what the fault-free mount served.
//!
//! A second campaign runs the daemon's write-back and migration threads
//! under the same faults (not deterministic: the interleaving varies).
//!
//! `TERRACE_FAULT_SEED` sets the base seed (printed; round k uses base + k),
//! `TERRACE_FAULT_ROUNDS` / `TERRACE_FAULT_THREAD_ROUNDS` the number of
//! rounds of each campaign, `TERRACE_FAULT_OPS` the operations per round;
//! `TERRACE_FAULT_REPORT=FILE` appends the counts as one JSON line (used by
//! `make faults` for docs/reliability.md); `TERRACE_FAULT_DEBUG=1` prints
//! per-round statistics.

#[path = "../common/mod.rs"]
mod common;
mod counts;
mod model;
mod round;
mod ssd;
use common::*;
// Named, not globbed: common has a Model, an Op and a random_op of its own.
use counts::Counts;
use model::{data_of, errno_of, has_dirty, random_op, FileM, Model, Op};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use round::Round;
use ssd::{Pm, Ssd};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use terrace_core::{Fs, RenameFlags, SetAttr};
use terrace_media::{
    BlockLoss, BlockMedia, CrashBlock, CrashMedia, FaultBlock, FaultMedia, LossMode, MemBlock,
    MemMedia,
};

const PM_BYTES: u64 = 4 << 20;
const SSD_BYTES: u64 = 12 << 20;
const BS: u64 = 4096;
/// Names the operations use: (directory index, name).
const NAMES: [(usize, &str); 8] = [
    (0, "a"),
    (0, "b"),
    (0, "c"),
    (0, "e"),
    (0, "f"),
    (1, "x"),
    (1, "y"),
    (1, "z"),
];

/// `op_errors` key of a `set_setting` that failed (it returns a message).
const SETTING_REFUSED: i32 = -2;

fn lookup_dir(fs: &Fs, parent: u64, name: &[u8]) -> u64 {
    let a = fs.lookup(parent, name).expect("directory d");
    fs.forget(a.ino, 1);
    a.ino
}

fn diff_bytes(a: &[u8], b: &[u8]) -> u64 {
    let common = a.iter().zip(b).filter(|(x, y)| x != y).count();
    (common + a.len().abs_diff(b.len())) as u64
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Panics in any thread (the test's, migration workers, background
/// threads), counted by a hook installed once.
static PANICS: AtomicU64 = AtomicU64::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info);
        }));
    });
}

/// One round with seed `seed`: a fresh pool, `ops` operations under faults,
/// then the checks. With `threads`, the write-back and migration threads
/// run as in the daemon.
fn round(seed: u64, ops: usize, threads: bool, c: &mut Counts) {
    let panics_before = PANICS.load(Ordering::SeqCst);
    let mut rng = StdRng::seed_from_u64(seed);
    let pm = Arc::new(FaultMedia::new(CrashMedia::new(PM_BYTES)));
    let ssd = Arc::new(Ssd::new(SSD_BYTES));
    mkfs_pm_ssd(&*pm, SSD_BYTES, 128);
    let fs = Arc::new(
        Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone() as _)])
            .unwrap_or_else(|e| panic!("seed {seed}: mount: {e}")),
    );
    fs.set_setting("dram_cache_bytes", ["1M", "2M", "4M"][rng.gen_range(0..3)])
        .unwrap();
    if rng.gen_bool(0.5) {
        fs.set_setting("migration_policy", "nvmfs").unwrap();
    }
    if threads {
        fs.set_setting("writeback_age_ns", "20ms").unwrap();
        fs.start_writeback();
        fs.start_migration();
    }
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap();
    fs.forget(d.ino, 1);
    let before = ssd.injected();
    let mut r = Round {
        seed,
        rng,
        pm: pm.clone(),
        ssd: ssd.clone(),
        fs,
        threads,
        dirs: [1, d.ino],
        m: Model::default(),
        c,
        step: 0,
        op_kind: "create",
    };
    // Start with files in both directories, and sometimes a policy that
    // sends writes to the SSD at once.
    for n in [0, 1, 5] {
        r.run(&Op::Create(n));
    }
    if r.rng.gen_bool(0.4) {
        r.fs.set_setting("placement_policy", "block-first").unwrap();
    }
    let t_ops = std::time::Instant::now();
    let mut panicked = false;
    for step in 0..ops {
        r.step = step;
        r.maybe_arm();
        let op = random_op(&r.m, &mut r.rng);
        r.c.ops += 1;
        r.op_kind = op.kind();
        let res = catch_unwind(AssertUnwindSafe(|| r.run(&op)));
        r.pm.inner().clear_events();
        r.ssd.inner().clear_events();
        if let Err(p) = res {
            let msg = format!("panic in {op:?}: {}", panic_text(&*p));
            r.fail(msg);
            panicked = true;
            break;
        }
    }
    if std::env::var("TERRACE_FAULT_DEBUG").is_ok() {
        let st = ssd.inner().stats();
        let fst = r.fs.status();
        eprintln!(
            "seed {seed}: ssd {} reads {} writes {} syncs, injected {:?}; used pm {}K ssd {}K; errors {:?}",
            st.read_requests,
            st.write_requests,
            st.syncs,
            ssd.injected(),
            fst.tiers[0].used >> 10,
            fst.tiers[1].used >> 10,
            r.c.op_errors
        );
    }
    if std::env::var("TERRACE_FAULT_DEBUG").is_ok() {
        let lm = r.fs.log_migration_status();
        let cl = r.fs.cleaner_status();
        let mg = r.fs.migration_status();
        eprintln!(
            "seed {seed}: ops took {:?}; logs moved {} (on tiers {}), cleaner rounds {} moved {}, migrated down {}K up {}K",
            t_ops.elapsed(),
            lm.moved,
            lm.logs_on_tiers,
            cl.rounds,
            cl.moved_blocks,
            mg.bytes_down >> 10,
            mg.bytes_up >> 10
        );
    }
    let after = ssd.injected();
    r.c.ssd_read_faults += after.reads - before.reads;
    r.c.ssd_write_faults += after.writes - before.writes;
    r.c.ssd_sync_faults += after.syncs - before.syncs;
    r.c.ssd_lost_syncs += ssd.lost_syncs.load(Ordering::Relaxed);
    r.c.rounds += 1;
    if !panicked {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| r.finish())) {
            let msg = format!(
                "seed {seed}: panic in the end-of-round checks: {}",
                panic_text(&*p)
            );
            eprintln!("FAULT CAMPAIGN FAILURE: {msg}");
            c.failures.push(msg);
        }
    } else {
        r.fs.stop_background_for_crash_test();
    }
    c.panics += PANICS.load(Ordering::SeqCst) - panics_before;
}

fn campaign(what: &str, rounds_var: &str, default_rounds: u64, threads: bool) {
    count_panics();
    let base = env_u64("TERRACE_FAULT_SEED", rand::random());
    let rounds = env_u64(rounds_var, default_rounds);
    let ops = env_u64("TERRACE_FAULT_OPS", 300) as usize;
    eprintln!(
        "{what}: base seed {base} (set TERRACE_FAULT_SEED to repeat), {rounds} rounds of {ops} ops"
    );
    let mut c = Counts::default();
    for k in 0..rounds {
        round(base.wrapping_add(k), ops, threads, &mut c);
    }
    let line = format!("{what}: {}", c.summary(base));
    eprintln!("{line}");
    if let Ok(path) = std::env::var("TERRACE_FAULT_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        writeln!(f, "{{\"campaign\":\"{what}\",\"counts\":{}}}", c.json(base)).unwrap();
    }
    assert!(c.faults() > 0, "base seed {base}: no fault was injected");
    assert_eq!(c.panics, 0, "base seed {base}: panics: {:#?}", c.failures);
    assert_eq!(c.bytes_lost, 0, "base seed {base}: {:#?}", c.failures);
    assert_eq!(c.wrong_bytes, 0, "base seed {base}: {:#?}", c.failures);
    assert!(c.failures.is_empty(), "base seed {base}: {:#?}", c.failures);
}

/// Deterministic: one thread drives everything (seed → same run).
#[test]
fn fault_campaign_loses_no_acknowledged_byte_and_serves_no_wrong_byte() {
    campaign("fault campaign", "TERRACE_FAULT_ROUNDS", 32, false);
}

/// With the daemon's write-back and migration threads running under the
/// same faults (the interleaving, so the run, varies with the seed's luck).
#[test]
fn fault_campaign_with_background_threads() {
    campaign(
        "fault campaign (threads)",
        "TERRACE_FAULT_THREAD_ROUNDS",
        8,
        true,
    );
}

/// Linux reports a failed write-back of a buffered file to one `fsync`
/// only, and the failed pages are marked clean: a writer whose data was
/// unsynced when *another* writer's sync failed gets success from its own
/// sync, although its data never reached the device. Terrace shares one
/// file per tier between threads (migration workers, write-back, writes
/// through the cache), so it must not commit data written before a sync
/// error it did not see itself.
///
/// Here a migration has written a file's data to the SSD and is about to
/// sync; a write-through write's sync fails in between (losing both
/// writers' unsynced blocks); the migration's sync then succeeds.
#[test]
fn a_sync_error_seen_by_another_writer_does_not_let_lost_writes_commit() {
    let (pm, ssd, fs) = tiered_pool_on(MemMedia::new(16 << 20), Ssd::new(32 << 20), 64);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let b = fs.mknod(1, b"b", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(5, 2 << 20);
    fs.write(a.ino, 0, &data).unwrap();
    fs.fsync(a.ino, false).unwrap();
    assert_eq!(tier_bytes(&fs, a.ino, "pm"), 2 << 20);
    // b's write goes to the SSD, through (larger than half the cache).
    fs.set_setting("placement_policy", "block-first").unwrap();
    let (arrived_tx, arrived) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *ssd.gate.lock() = Some((arrived_tx, go_rx));
    let mover = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.migrate_file(a.ino, 1))
    };
    arrived
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the migration never synced");
    // The migration's blocks are written, not yet synced. Another writer's
    // sync fails now and loses them with its own.
    ssd.lose_writes_at_sync_after(0);
    let r = fs.write(b.ino, 0, &pattern(6, 1 << 20));
    assert_eq!(ssd.lost_syncs.load(Ordering::Relaxed), 1, "{r:?}");
    go.send(()).unwrap();
    let moved = mover.join().unwrap();
    // Whatever the migration reports, a crash now must find a's data.
    assert_file_survives_a_crash(&pm, &ssd, a.ino, &data, &moved);
}

/// After a crash now (the SSD loses every unsynced write), file `ino` reads
/// `data`, whatever the migration that ran reported (`moved`).
fn assert_file_survives_a_crash(
    pm: &MemMedia,
    ssd: &Ssd,
    ino: u64,
    data: &[u8],
    moved: &dyn std::fmt::Debug,
) {
    let pm2 = Arc::new(MemMedia::from_image(pm.image()));
    let ssd2 = Arc::new(MemBlock::from_image(
        ssd.inner().crash_image(BlockLoss::AllUnsynced),
    ));
    let fs2 = mount_tiered(pm2, ssd2);
    let got = fs2.read(ino, 0, data.len());
    assert!(
        matches!(&got, Ok(d) if d == data),
        "migration result {moved:?}: after a crash the fsynced file reads {:?}",
        got.map(|d| d.len())
    );
}

/// A migration batch holds one file's moved blocks unsynced while the next
/// file's cached writes are written back by the same thread; that sync
/// fails (losing both) and the write-back copes by keeping its pages on
/// PM. The batch's own sync afterwards must not succeed for the first
/// file's lost blocks: its moves would commit and free the PM copy.
#[test]
fn a_failed_write_back_inside_a_migration_batch_keeps_the_batch_from_committing() {
    let (pm, ssd, fs) = tiered_pool_on(MemMedia::new(16 << 20), Ssd::new(32 << 20), 64);
    fs.set_setting("migration_threads", "1").unwrap();
    let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let b = fs.mknod(1, b"b", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(7, 2 << 20);
    fs.write(a.ino, 0, &data).unwrap();
    fs.fsync(a.ino, false).unwrap();
    assert_eq!(tier_bytes(&fs, a.ino, "pm"), 2 << 20);
    // b: a small write kept dirty in the DRAM cache.
    fs.set_setting("placement_policy", "block-first").unwrap();
    fs.write(b.ino, 0, &pattern(8, 8192)).unwrap();
    ssd.lose_writes_at_sync_after(0);
    let moved = fs.migrate_files(&[a.ino, b.ino], 1);
    assert_eq!(ssd.lost_syncs.load(Ordering::Relaxed), 1, "{moved:?}");
    assert_file_survives_a_crash(&pm, &ssd, a.ino, &data, &moved);
}
