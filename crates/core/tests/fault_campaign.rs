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

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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

type Pm = FaultMedia<CrashMedia>;
/// The campaign's SSD: [`FaultBlock`]'s countdowns (EIO on reads, writes
/// or syncs until healed) over a [`CrashBlock`], plus the way a buffered
/// file's fsync fails on Linux: once, with the unsynced writes lost for
/// good although reads still see them ([`CrashBlock::lose_unsynced`]).
struct Ssd {
    fault: FaultBlock<Arc<CrashBlock>>,
    /// Syncs to let through before the one that fails and loses writes.
    lose_at: parking_lot::Mutex<Option<u64>>,
    lost_syncs: AtomicU64,
    /// Holds the next sync until released (for the regression test of a
    /// sync error seen by another writer): signals arrival, waits for go.
    gate: parking_lot::Mutex<Option<Gate>>,
}

type Gate = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);

impl Ssd {
    fn new(bytes: u64) -> Ssd {
        Ssd {
            fault: FaultBlock::new(Arc::new(CrashBlock::new(bytes))),
            lose_at: parking_lot::Mutex::new(None),
            lost_syncs: AtomicU64::new(0),
            gate: parking_lot::Mutex::new(None),
        }
    }

    fn inner(&self) -> &Arc<CrashBlock> {
        self.fault.inner()
    }

    fn heal(&self) {
        self.fault.heal();
        *self.lose_at.lock() = None;
    }

    /// The sync after the next `n` fails once, losing the unsynced writes.
    fn lose_writes_at_sync_after(&self, n: u64) {
        *self.lose_at.lock() = Some(n);
    }
}

impl std::ops::Deref for Ssd {
    type Target = FaultBlock<Arc<CrashBlock>>;
    fn deref(&self) -> &Self::Target {
        &self.fault
    }
}

impl BlockMedia for Ssd {
    fn len(&self) -> u64 {
        self.fault.len()
    }
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.fault.read_blocks(block, buf)
    }
    fn write_blocks(&self, block: u64, data: &[u8]) -> std::io::Result<()> {
        self.fault.write_blocks(block, data)
    }
    fn sync(&self) -> std::io::Result<()> {
        let gate = self.gate.lock().take();
        if let Some((arrived, go)) = gate {
            let _ = arrived.send(());
            let _ = go.recv_timeout(std::time::Duration::from_secs(10));
        }
        {
            let mut l = self.lose_at.lock();
            match *l {
                Some(0) => {
                    *l = None;
                    self.inner().lose_unsynced();
                    self.lost_syncs.fetch_add(1, Ordering::Relaxed);
                    return Err(std::io::Error::from_raw_os_error(libc::EIO));
                }
                Some(n) => *l = Some(n - 1),
                None => {}
            }
        }
        self.fault.sync()
    }
    fn describe(&self) -> String {
        self.fault.describe()
    }
    fn stats(&self) -> terrace_media::BlockStats {
        self.fault.stats()
    }
}

/// What the campaign counted (summed over rounds).
#[derive(Debug, Default, Clone)]
struct Counts {
    rounds: u64,
    ops: u64,
    ssd_read_faults: u64,
    ssd_write_faults: u64,
    ssd_sync_faults: u64,
    /// Syncs that failed once with the unsynced writes lost (Linux's
    /// buffered-file fsync error).
    ssd_lost_syncs: u64,
    pm_poisoned_reads: u64,
    /// Operations that returned an error, by errno.
    op_errors: BTreeMap<i32, u64>,
    /// The same, by operation.
    op_errors_by_op: BTreeMap<&'static str, u64>,
    /// Reads served wrong bytes from poisoned PM (the known gap).
    pm_poison_served: u64,
    /// Acknowledged bytes that did not read back after a remount.
    bytes_lost: u64,
    /// Bytes a successful read returned that the model does not allow.
    wrong_bytes: u64,
    panics: u64,
    /// Crash images and clean remounts checked.
    crash_remounts: u64,
    clean_remounts: u64,
    /// Acknowledged bytes compared after crash remounts, and all bytes
    /// after clean remounts.
    bytes_checked: u64,
    /// Crash images mounted while the SSD failed: mounted, refused.
    faulty_mounts: u64,
    faulty_mounts_refused: u64,
    /// Scrub reports: blocks flagged bad (reads that failed) and repaired.
    scrub_bad: u64,
    scrub_repaired: u64,
    /// Anything else that broke a promise: fsck problems, refused mounts,
    /// an unmount that failed with healthy media, a file unreadable with
    /// healthy media, a namespace that differs.
    failures: Vec<String>,
}

impl Counts {
    fn faults(&self) -> u64 {
        self.ssd_read_faults
            + self.ssd_write_faults
            + self.ssd_sync_faults
            + self.ssd_lost_syncs
            + self.pm_poisoned_reads
    }

    fn errors(&self) -> u64 {
        self.op_errors.values().sum()
    }

    fn summary(&self, base: u64) -> String {
        let errs: Vec<String> = self
            .op_errors
            .iter()
            .map(|(e, n)| format!("{} {n}", errno_name(*e)))
            .collect();
        format!(
            "base seed {base}, {} rounds, {} ops: faults injected {} \
             (ssd read {}, write {}, sync {}, sync losing writes {}; pm poisoned reads {}), operations that \
             returned an error {} ({}; by operation: {}), bytes lost {}, wrong bytes served {}, panics {}; \
             remounts checked {} crash + {} clean ({} MiB compared) + {} under read faults \
             ({} refused), scrub flagged {} repaired {}, \
             pm poison served {} (PM data has no checksum), other failures {}",
            self.rounds,
            self.ops,
            self.faults(),
            self.ssd_read_faults,
            self.ssd_write_faults,
            self.ssd_sync_faults,
            self.ssd_lost_syncs,
            self.pm_poisoned_reads,
            self.errors(),
            errs.join(", "),
            self.op_errors_by_op
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.bytes_lost,
            self.wrong_bytes,
            self.panics,
            self.crash_remounts,
            self.clean_remounts,
            self.bytes_checked >> 20,
            self.faulty_mounts + self.faulty_mounts_refused,
            self.faulty_mounts_refused,
            self.scrub_bad,
            self.scrub_repaired,
            self.pm_poison_served,
            self.failures.len()
        )
    }

    fn json(&self, base: u64) -> String {
        let errs: Vec<String> = self
            .op_errors
            .iter()
            .map(|(e, n)| format!("\"{}\":{n}", errno_name(*e)))
            .collect();
        format!(
            "{{\"base_seed\":{base},\"rounds\":{},\"ops\":{},\"faults_injected\":{},\
             \"ssd_read_faults\":{},\"ssd_write_faults\":{},\"ssd_sync_faults\":{},\"ssd_lost_syncs\":{},\
             \"pm_poisoned_reads\":{},\"op_errors\":{},\"op_errors_by_errno\":{{{}}},\"op_errors_by_op\":{{{}}},\
             \"bytes_lost\":{},\"wrong_bytes\":{},\"panics\":{},\"crash_remounts\":{},\
             \"clean_remounts\":{},\"bytes_checked\":{},\"faulty_mounts\":{},\"faulty_mounts_refused\":{},\"scrub_bad\":{},\"scrub_repaired\":{},\
             \"pm_poison_served\":{},\"failures\":{}}}",
            self.rounds,
            self.ops,
            self.faults(),
            self.ssd_read_faults,
            self.ssd_write_faults,
            self.ssd_sync_faults,
            self.ssd_lost_syncs,
            self.pm_poisoned_reads,
            self.errors(),
            errs.join(","),
            self.op_errors_by_op
                .iter()
                .map(|(k, n)| format!("\"{k}\":{n}"))
                .collect::<Vec<_>>()
                .join(","),
            self.bytes_lost,
            self.wrong_bytes,
            self.panics,
            self.crash_remounts,
            self.clean_remounts,
            self.bytes_checked,
            self.faulty_mounts,
            self.faulty_mounts_refused,
            self.scrub_bad,
            self.scrub_repaired,
            self.pm_poison_served,
            self.failures.len()
        )
    }
}

fn errno_name(e: i32) -> String {
    match e {
        libc::EIO => "EIO".into(),
        libc::ENOSPC => "ENOSPC".into(),
        libc::EAGAIN => "EAGAIN".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EEXIST => "EEXIST".into(),
        libc::EINVAL => "EINVAL".into(),
        SETTING_REFUSED => "setting refused".into(),
        e => format!("errno{e}"),
    }
}

/// One file of the model.
#[derive(Debug, Clone)]
struct FileM {
    ino: u64,
    /// The contents the file may have now (one, except after a failed
    /// operation until a fault-free read decides).
    cands: Vec<Vec<u8>>,
    /// Contents acknowledged durable.
    stable: Vec<u8>,
    /// Bytes of `stable` changed (or possibly changed) since: a crash may
    /// show either version there.
    touched: Vec<bool>,
}

impl FileM {
    fn new(ino: u64) -> FileM {
        FileM {
            ino,
            cands: vec![Vec::new()],
            stable: Vec::new(),
            touched: Vec::new(),
        }
    }

    fn touch(&mut self, from: u64, to: u64) {
        let n = self.touched.len() as u64;
        for t in &mut self.touched[from.min(n) as usize..to.min(n) as usize] {
            *t = true;
        }
    }

    /// Applies a change to every candidate; when `maybe`, keeps the
    /// unchanged candidates too.
    fn apply(&mut self, maybe: bool, f: impl Fn(&mut Vec<u8>)) {
        let mut next = Vec::new();
        for c in &self.cands {
            if maybe {
                next.push(c.clone());
            }
            let mut d = c.clone();
            f(&mut d);
            next.push(d);
        }
        next.sort();
        next.dedup();
        self.cands = next;
    }
}

/// The model: names (directory index, name) → file id, and the files.
#[derive(Debug, Default)]
struct Model {
    names: BTreeMap<(usize, &'static str), usize>,
    files: BTreeMap<usize, FileM>,
    next: usize,
}

impl Model {
    fn drop_unreferenced(&mut self) {
        let live: std::collections::BTreeSet<usize> = self.names.values().copied().collect();
        self.files.retain(|id, _| live.contains(id));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write(usize, u64, usize, u64, bool),
    Read(usize, u64, usize),
    Fsync(usize),
    Truncate(usize, u64),
    Create(usize),
    Unlink(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Migrate(usize, u8),
    MigrationPass,
    Writeback,
    FlushAll,
    Clean(Vec<u64>),
    MoveLogs,
    EvictClean(u64),
    Scrub(bool),
    Setting(&'static str, String),
    PoisonedRead(usize, u64),
}

impl Op {
    fn kind(&self) -> &'static str {
        match self {
            Op::Write(..) => "write",
            Op::Read(..) => "read",
            Op::Fsync(..) => "fsync",
            Op::Truncate(..) => "truncate",
            Op::Create(..) => "create",
            Op::Unlink(..) => "unlink",
            Op::Rename(..) => "rename",
            Op::Link(..) => "link",
            Op::Migrate(..) => "migrate_file",
            Op::MigrationPass => "migration_pass",
            Op::Writeback => "writeback_pass",
            Op::FlushAll => "flush_all",
            Op::Clean(..) => "clean",
            Op::MoveLogs => "move_logs",
            Op::EvictClean(..) => "evict_clean",
            Op::Scrub(..) => "scrub",
            Op::Setting(..) => "set_setting",
            Op::PoisonedRead(..) => "poisoned_read",
        }
    }
}

fn random_len(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0..=2 => rng.gen_range(1..600),
        3..=4 => rng.gen_range(600..8192),
        5 => 4096 * rng.gen_range(1..4),
        6..=7 => rng.gen_range(8192..256 << 10),
        8 => 256 << 10,
        _ => rng.gen_range(256 << 10..=1 << 20),
    }
}

fn random_op(m: &Model, rng: &mut StdRng) -> Op {
    let name = |rng: &mut StdRng| rng.gen_range(0..NAMES.len());
    let size_of = |n: usize| {
        m.names
            .get(&NAMES[n])
            .map(|id| m.files[id].cands[0].len() as u64)
            .unwrap_or(0)
    };
    match rng.gen_range(0..100) {
        0..=33 => {
            let n = name(rng);
            let size = size_of(n);
            let len = random_len(rng);
            let off = match rng.gen_range(0..5) {
                0 | 1 => size,                                             // append
                2 => rng.gen_range(0..=size),                              // overwrite
                3 => size + rng.gen_range(0..512 << 10),                   // beyond: a hole
                _ => rng.gen_range(0..64) * BS + rng.gen_range(0..2) * 17, // near the start
            };
            Op::Write(n, off, len, rng.gen(), rng.gen_bool(0.15))
        }
        34..=46 => {
            let n = name(rng);
            let size = size_of(n);
            Op::Read(n, rng.gen_range(0..=size), random_len(rng))
        }
        47..=52 => Op::Fsync(name(rng)),
        53..=54 => {
            let n = name(rng);
            let size = size_of(n);
            Op::Truncate(n, rng.gen_range(size / 2..=size + (64 << 10)))
        }
        55..=59 => Op::Create(name(rng)),
        60..=61 => Op::Unlink(name(rng)),
        62..=66 => Op::Rename(name(rng), name(rng)),
        67..=68 => Op::Link(name(rng), name(rng)),
        69..=74 => Op::Migrate(name(rng), if rng.gen_bool(0.7) { 1 } else { 0 }),
        75..=78 => Op::MigrationPass,
        79..=81 => Op::Writeback,
        82..=83 => Op::FlushAll,
        84..=85 => Op::Clean(if rng.gen_bool(0.3) {
            Vec::new()
        } else {
            // Extents of the SSD tier (extent 0 holds the header).
            let n = SSD_BYTES / terrace_format::DEFAULT_EXTENT_SIZE as u64;
            (0..rng.gen_range(1..4))
                .map(|_| rng.gen_range(1..n))
                .collect()
        }),
        86..=87 => Op::MoveLogs,
        88 => Op::EvictClean(rng.gen_range(1..512)),
        89..=92 => Op::Scrub(rng.gen_bool(0.7)),
        93..=96 => {
            let (k, choices): (&'static str, &[&str]) = match rng.gen_range(0..5) {
                0 => (
                    "placement_policy",
                    &["ziggurat", "block-first", "pm-only", "hetfs"],
                ),
                1 => ("migration_policy", &["default", "ziggurat", "nvmfs"]),
                2 => ("dram_cache_bytes", &["1M", "2M", "4M", "8M"]),
                3 => ("migration_threshold", &["dynamic", "1", "20", "50", "90"]),
                _ => ("size_counter_threshold", &["0", "1", "4"]),
            };
            Op::Setting(k, choices[rng.gen_range(0..choices.len())].to_string())
        }
        _ => Op::PoisonedRead(name(rng), rng.gen()),
    }
}

fn data_of(seed: u64, len: usize) -> Vec<u8> {
    pattern(seed, len)
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// Whether `ino` has dirty pages in the DRAM cache (not yet durable);
/// `true` when unknown.
fn has_dirty(fs: &Fs, ino: u64) -> bool {
    match fs.getxattr(ino, b"user.terrace.extents") {
        Ok(v) => {
            let s = String::from_utf8_lossy(&v);
            s.ends_with("...")
                || s.lines()
                    .any(|l| l.split_whitespace().nth(2) == Some("dram"))
        }
        Err(_) => true,
    }
}

/// One round's world: media, pool, model, counts.
struct Round<'a> {
    seed: u64,
    rng: StdRng,
    pm: Arc<Pm>,
    ssd: Arc<Ssd>,
    fs: Arc<Fs>,
    /// Background write-back and migration threads run (not deterministic).
    threads: bool,
    dirs: [u64; 2],
    m: Model,
    c: &'a mut Counts,
    /// The step being run (for messages).
    step: usize,
    /// The kind of operation being run (for counts).
    op_kind: &'static str,
}

impl Round<'_> {
    fn fail(&mut self, what: String) {
        let msg = format!("seed {} step {}: {what}", self.seed, self.step);
        eprintln!("FAULT CAMPAIGN FAILURE: {msg}");
        self.c.failures.push(msg);
    }

    fn err(&mut self, e: &std::io::Error) {
        *self.c.op_errors.entry(errno_of(e)).or_default() += 1;
        *self.c.op_errors_by_op.entry(self.op_kind).or_default() += 1;
    }

    /// Arms or heals SSD faults at random.
    fn maybe_arm(&mut self) {
        let r = self.rng.gen_range(0..100);
        let n = self.rng.gen_range(0..6);
        match r {
            0..=5 => self.ssd.fail_writes_after(n),
            6..=10 => self.ssd.fail_reads_after(n),
            11..=12 => self.ssd.fail_sync_after(n),
            13..=14 => self.ssd.lose_writes_at_sync_after(n),
            15..=28 => self.ssd.heal(),
            _ => {}
        }
    }

    /// After an operation on file `id` returned: makes its contents
    /// acknowledged when nothing of it waits in the cache.
    fn settle(&mut self, id: usize) {
        let Some(f) = self.m.files.get(&id) else {
            return;
        };
        if f.cands.len() == 1 && !has_dirty(&self.fs, f.ino) {
            let f = self.m.files.get_mut(&id).unwrap();
            f.stable = f.cands[0].clone();
            f.touched = vec![false; f.stable.len()];
        }
    }

    fn settle_all(&mut self) {
        let ids: Vec<usize> = self.m.files.keys().copied().collect();
        for id in ids {
            self.settle(id);
        }
    }

    /// Reads the whole file with the faults healed and keeps the candidate
    /// it matches.
    fn resolve(&mut self, id: usize) {
        self.ssd.heal();
        let ino = self.m.files[&id].ino;
        let size = match self.fs.getattr(ino) {
            Ok(a) => a.size,
            Err(e) => {
                self.fail(format!("getattr of inode {ino} with healthy media: {e}"));
                return;
            }
        };
        match self.fs.read(ino, 0, size as usize + 10) {
            Ok(d) => {
                let f = self.m.files.get_mut(&id).unwrap();
                if f.cands.contains(&d) {
                    f.cands = vec![d];
                } else {
                    let diff = f.cands.iter().map(|c| diff_bytes(&d, c)).min().unwrap_or(0);
                    let want: Vec<usize> = f.cands.iter().map(|c| c.len()).collect();
                    f.cands = vec![d.clone()];
                    self.c.wrong_bytes += diff;
                    self.fail(format!(
                        "inode {ino} holds {} bytes matching none of the possible contents \
                         (sizes {want:?}): {diff} bytes differ",
                        d.len()
                    ));
                }
            }
            Err(e) => self.fail(format!("inode {ino} unreadable with healthy media: {e}")),
        }
    }

    /// The model's file id behind name `n`, if any.
    fn id(&self, n: usize) -> Option<usize> {
        self.m.names.get(&NAMES[n]).copied()
    }

    fn lookup(&self, n: usize) -> Option<u64> {
        let (d, name) = NAMES[n];
        let a = self.fs.lookup(self.dirs[d], name.as_bytes()).ok()?;
        self.fs.forget(a.ino, 1);
        Some(a.ino)
    }

    /// Checks the model's names against the file system's (after a failed
    /// namespace operation).
    fn resolve_names(&mut self, ns: &[usize]) {
        for &n in ns {
            let got = self.lookup(n);
            let want = self.id(n).map(|id| self.m.files[&id].ino);
            if got == want {
                continue;
            }
            // The operation happened after all, or partly: follow the file
            // system when the inode is one the model knows.
            match got {
                None => {
                    self.m.names.remove(&NAMES[n]);
                }
                Some(ino) => match self.m.files.iter().find(|(_, f)| f.ino == ino) {
                    Some((&id, _)) => {
                        self.m.names.insert(NAMES[n], id);
                    }
                    None => {
                        let id = self.m.next;
                        self.m.next += 1;
                        self.m.files.insert(id, FileM::new(ino));
                        self.m.names.insert(NAMES[n], id);
                    }
                },
            }
        }
        self.m.drop_unreferenced();
    }

    fn run(&mut self, op: &Op) {
        match op.clone() {
            Op::Write(n, off, len, seed, o_sync) => {
                if self.id(n).is_none() {
                    self.run(&Op::Create(n));
                }
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                let data = data_of(seed, len);
                let r = self.fs.write_hinted(ino, off, &data, o_sync);
                let end = off + len as u64;
                self.m.files.get_mut(&id).unwrap().touch(off, end);
                let write = |d: &mut Vec<u8>| {
                    if d.len() < end as usize {
                        d.resize(end as usize, 0);
                    }
                    d[off as usize..end as usize].copy_from_slice(&data);
                };
                match r {
                    Ok(k) if k == len => self.m.files.get_mut(&id).unwrap().apply(false, write),
                    Ok(k) => self.fail(format!("short write: {k} of {len} bytes")),
                    Err(e) => {
                        self.err(&e);
                        self.m.files.get_mut(&id).unwrap().apply(true, write);
                        self.resolve(id);
                    }
                }
                self.settle(id);
            }
            Op::Read(n, off, len) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                match self.fs.read(ino, off, len) {
                    Ok(d) => self.check_read(id, off, &d),
                    Err(e) => {
                        self.err(&e);
                        if errno_of(&e) != libc::EIO {
                            self.fail(format!("read failed with {e}, not EIO"));
                        }
                    }
                }
            }
            Op::Fsync(n) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                if let Err(e) = self.fs.fsync(ino, false) {
                    self.err(&e);
                }
                self.settle(id);
            }
            Op::Truncate(n, size) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                let r = self.fs.setattr(
                    ino,
                    SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                );
                let f = self.m.files.get_mut(&id).unwrap();
                f.touch(size, u64::MAX);
                let t = |d: &mut Vec<u8>| d.resize(size as usize, 0);
                f.apply(r.is_err(), t);
                if let Err(e) = r {
                    self.err(&e);
                    self.resolve(id);
                }
                self.settle(id);
            }
            Op::Create(n) => {
                if self.id(n).is_some() {
                    return;
                }
                let (d, name) = NAMES[n];
                match self
                    .fs
                    .mknod(self.dirs[d], name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                {
                    Ok(a) => {
                        self.fs.forget(a.ino, 1);
                        let id = self.m.next;
                        self.m.next += 1;
                        self.m.files.insert(id, FileM::new(a.ino));
                        self.m.names.insert(NAMES[n], id);
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[n]);
                    }
                }
            }
            Op::Unlink(n) => {
                if self.id(n).is_none() {
                    return;
                }
                let (d, name) = NAMES[n];
                match self.fs.unlink(self.dirs[d], name.as_bytes()) {
                    Ok(()) => {
                        self.m.names.remove(&NAMES[n]);
                        self.m.drop_unreferenced();
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[n]);
                    }
                }
            }
            Op::Rename(s, t) => {
                // Not to itself, nor onto another name of the same file (a
                // no-op in POSIX).
                if s == t || self.id(s).is_none() || self.id(s) == self.id(t) {
                    return;
                }
                let (sd, sn) = NAMES[s];
                let (td, tn) = NAMES[t];
                let r = self.fs.rename(
                    self.dirs[sd],
                    sn.as_bytes(),
                    self.dirs[td],
                    tn.as_bytes(),
                    RenameFlags::default(),
                );
                match r {
                    Ok(()) => {
                        let id = self.m.names.remove(&NAMES[s]).unwrap();
                        self.m.names.insert(NAMES[t], id);
                        self.m.drop_unreferenced();
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[s, t]);
                    }
                }
            }
            Op::Link(s, t) => {
                let Some(id) = self.id(s) else { return };
                if self.id(t).is_some() {
                    return;
                }
                let (td, tn) = NAMES[t];
                let ino = self.m.files[&id].ino;
                match self.fs.link(ino, self.dirs[td], tn.as_bytes()) {
                    Ok(a) => {
                        self.fs.forget(a.ino, 1);
                        self.m.names.insert(NAMES[t], id);
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[t]);
                    }
                }
            }
            Op::Migrate(n, to) => {
                let Some(id) = self.id(n) else { return };
                if let Err(e) = self.fs.migrate_file(self.m.files[&id].ino, to) {
                    self.err(&e);
                }
                self.settle(id);
            }
            Op::MigrationPass => {
                self.fs.migration_pass();
                self.settle_all();
            }
            Op::Writeback => {
                self.fs.writeback_pass();
                self.settle_all();
            }
            Op::FlushAll => {
                if let Err(e) = self.fs.flush_all() {
                    self.err(&e);
                }
                self.settle_all();
            }
            Op::Clean(victims) => {
                if victims.is_empty() {
                    self.fs.clean_pass();
                } else {
                    self.fs.recycle(1, &victims);
                }
                self.settle_all();
            }
            Op::MoveLogs => {
                let inos: Vec<u64> = self.m.files.values().map(|f| f.ino).collect();
                if let Err(e) = self.fs.move_logs(&inos, 1) {
                    self.err(&e);
                }
            }
            Op::EvictClean(goal) => {
                self.fs.evict_clean(goal);
            }
            Op::Scrub(repair) => {
                let r = self.fs.scrub(0, repair);
                self.c.scrub_bad += r.bad_blocks;
                self.c.scrub_repaired += r.repaired_blocks;
                self.settle_all();
            }
            Op::Setting(k, v) => {
                // Lowering the cache bound writes back: it can fail.
                if self.fs.set_setting(k, &v).is_err() {
                    *self.c.op_errors.entry(SETTING_REFUSED).or_default() += 1;
                    *self.c.op_errors_by_op.entry(self.op_kind).or_default() += 1;
                }
                self.settle_all();
            }
            Op::PoisonedRead(n, seed) => {
                let Some(id) = self.id(n) else { return };
                self.poisoned_read(id, seed);
            }
        }
    }

    /// Checks the bytes a successful read at `off` returned.
    fn check_read(&mut self, id: usize, off: u64, d: &[u8]) {
        let f = self.m.files.get_mut(&id).unwrap();
        let expect = |c: &Vec<u8>| -> Vec<u8> {
            let s = (off as usize).min(c.len());
            let e = (off as usize + d.len()).min(c.len());
            c[s..e].to_vec()
        };
        let keep: Vec<Vec<u8>> = f.cands.iter().filter(|c| expect(c) == d).cloned().collect();
        if !keep.is_empty() {
            // A short read is fine only at the end of the file.
            f.cands = keep;
            return;
        }
        let diff = f
            .cands
            .iter()
            .map(|c| diff_bytes(d, &expect(c)))
            .min()
            .unwrap_or(0);
        let ino = f.ino;
        self.c.wrong_bytes += diff;
        self.fail(format!(
            "read of inode {ino} at {off} returned {} bytes the model does not allow ({diff} differ)",
            d.len()
        ));
        self.resolve(id);
    }

    /// Poisons one PM block of the file's data, reads the file, clears the
    /// poison. Reads only: nothing may carry poisoned bytes elsewhere.
    fn poisoned_read(&mut self, id: usize, seed: u64) {
        let ino = self.m.files[&id].ino;
        let Ok(v) = self.fs.getxattr(ino, b"user.terrace.extents") else {
            return;
        };
        let pm_runs: Vec<(u64, u64, u64)> = String::from_utf8_lossy(&v)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && f[2] == "pm").then(|| {
                    (
                        f[0].parse().unwrap_or(0),
                        f[1].parse().unwrap_or(0),
                        f[3].parse().unwrap_or(0),
                    )
                })
            })
            .collect();
        if pm_runs.is_empty() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let (foff, len, block) = pm_runs[rng.gen_range(0..pm_runs.len())];
        let k = rng.gen_range(0..(len / BS).max(1));
        let before = self.pm.poisoned_reads();
        self.pm.poison((block + k) * BS, BS);
        let r = self.fs.read(ino, foff + k * BS, BS as usize);
        self.pm.clear_poison();
        self.c.pm_poisoned_reads += self.pm.poisoned_reads() - before;
        match r {
            Ok(d) => {
                let f = &self.m.files[&id];
                let at = (foff + k * BS) as usize;
                let ok = f.cands.iter().any(|c| {
                    let s = at.min(c.len());
                    let e = (at + d.len()).min(c.len());
                    c[s..e] == d[..]
                });
                if !ok {
                    self.c.pm_poison_served += 1;
                }
            }
            Err(e) => self.err(&e),
        }
    }

    /// Crash now (no unmount): both media lose what they may lose, the
    /// images are checked, mounted without faults, and every acknowledged
    /// byte must be there.
    fn crash_check(&mut self) {
        if self.threads {
            // Both images must be of one moment: no thread may commit
            // between the two copies.
            self.fs.stop_background_for_crash_test();
        }
        let pm_img = self
            .pm
            .inner()
            .crash_image(LossMode::RandomLines(self.rng.gen()));
        let ssd_img = self
            .ssd
            .inner()
            .crash_image(BlockLoss::RandomBlocks(self.rng.gen()));
        let pm2 = Arc::new(MemMedia::from_image(pm_img.clone()));
        let ssd2 = Arc::new(MemBlock::from_image(ssd_img.clone()));
        let tiers: [(u8, Arc<dyn BlockMedia>); 1] = [(1, ssd2.clone())];
        match terrace_core::fsck::check_data(&*pm2, &tiers, &mut |_, _| {}) {
            Ok(r) if r.is_clean() && r.bad_blocks == 0 => {}
            Ok(r) => self.fail(format!(
                "fsck --data of a crash image: {} bad blocks, {:?}",
                r.bad_blocks, r.problems
            )),
            Err(e) => self.fail(format!("fsck of a crash image refused it: {e}")),
        }
        let fs2 = match Fs::mount_with_tiers(pm2.clone(), vec![(1, ssd2.clone() as _)]) {
            Ok(f) => f,
            Err(e) => {
                self.fail(format!("a crash image does not mount: {e}"));
                return;
            }
        };
        self.c.crash_remounts += 1;
        let dirs = [1, lookup_dir(&fs2, 1, b"d")];
        let served = self.compare(&fs2, dirs, true);
        if let Err(e) = fs2.check_allocator() {
            self.fail(format!("allocator after a crash: {e}"));
        }
        if let Err(e) = fs2.unmount() {
            self.fail(format!("unmount after a crash remount: {e}"));
        }
        drop(fs2);
        self.faulty_mount(pm_img, ssd_img, &served);
    }

    /// The same crash image mounted while the SSD fails reads (and writes)
    /// after a random countdown — recovery reads log blobs and the
    /// superblock check reads the tier header there: the mount is refused
    /// or succeeds, and a file read that succeeds returns what the
    /// fault-free mount of the image served.
    fn faulty_mount(&mut self, pm_img: Vec<u8>, ssd_img: Vec<u8>, served: &[Option<Vec<u8>>]) {
        let pm3 = Arc::new(MemMedia::from_image(pm_img));
        let ssd3 = Arc::new(FaultBlock::new(MemBlock::from_image(ssd_img)));
        ssd3.fail_reads_after(self.rng.gen_range(0..24));
        if self.rng.gen_bool(0.3) {
            ssd3.fail_writes_after(self.rng.gen_range(0..8));
        }
        let fs3 = match Fs::mount_with_tiers(pm3, vec![(1, ssd3.clone() as _)]) {
            Ok(f) => f,
            Err(_) => {
                self.c.faulty_mounts_refused += 1;
                self.count_faults(&ssd3);
                return;
            }
        };
        self.c.faulty_mounts += 1;
        if let Ok(a) = fs3.lookup(1, b"d") {
            fs3.forget(a.ino, 1);
            let dirs = [1, a.ino];
            for (n, want) in served.iter().enumerate() {
                let (d, name) = NAMES[n];
                let Ok(a) = fs3.lookup(dirs[d], name.as_bytes()) else {
                    if want.is_some() {
                        self.fail(format!("{name}: missing in a mount under read faults"));
                    }
                    continue;
                };
                fs3.forget(a.ino, 1);
                match fs3.read(a.ino, 0, a.size as usize + 10) {
                    Ok(got) => {
                        if Some(&got) != want.as_ref() {
                            let diff = want
                                .as_ref()
                                .map_or(got.len() as u64, |w| diff_bytes(&got, w));
                            self.c.wrong_bytes += diff;
                            self.fail(format!(
                                "{name}: a mount under read faults served {diff} bytes that differ"
                            ));
                        }
                    }
                    Err(e) => {
                        self.op_kind = "read after a mount under faults";
                        self.err(&e);
                    }
                }
            }
        }
        let _ = fs3.unmount();
        self.count_faults(&ssd3);
    }

    fn count_faults(&mut self, ssd: &FaultBlock<MemBlock>) {
        let f = ssd.injected();
        self.c.ssd_read_faults += f.reads;
        self.c.ssd_write_faults += f.writes;
        self.c.ssd_sync_faults += f.syncs;
    }

    /// Compares a mounted pool with the model: after a crash, acknowledged
    /// bytes not changed since; after a clean unmount, everything.
    fn compare(&mut self, fs: &Fs, dirs: [u64; 2], crash: bool) -> Vec<Option<Vec<u8>>> {
        let mut served = vec![None; NAMES.len()];
        for n in 0..NAMES.len() {
            let (d, name) = NAMES[n];
            let got = fs.lookup(dirs[d], name.as_bytes()).ok();
            if let Some(a) = &got {
                fs.forget(a.ino, 1);
            }
            let want = self.id(n);
            let (a, id) = match (got, want) {
                (None, None) => continue,
                (Some(a), None) => {
                    served[n] = fs.read(a.ino, 0, a.size as usize + 10).ok();
                    self.fail(format!("{name}: exists after remount, the model has none"));
                    continue;
                }
                (None, Some(id)) => {
                    let f = &self.m.files[&id];
                    let lost = if crash {
                        f.touched.iter().filter(|t| !**t).count() as u64
                    } else {
                        f.cands.iter().map(|c| c.len()).min().unwrap_or(0) as u64
                    };
                    self.c.bytes_lost += lost;
                    self.fail(format!("{name}: missing after remount ({lost} bytes lost)"));
                    continue;
                }
                (Some(a), Some(id)) => (a, id),
            };
            let data = match fs.read(a.ino, 0, a.size as usize + 10) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(format!("{name}: unreadable after remount: {e}"));
                    Vec::new()
                }
            };
            served[n] = Some(data.clone());
            let f = &self.m.files[&id];
            if crash {
                self.c.bytes_checked += f.touched.iter().filter(|t| !**t).count() as u64;
                let lost = f
                    .stable
                    .iter()
                    .zip(&f.touched)
                    .enumerate()
                    .filter(|(x, (b, t))| !**t && data.get(*x) != Some(b))
                    .count() as u64;
                if lost > 0 {
                    self.c.bytes_lost += lost;
                    self.fail(format!(
                        "{name} (inode {}): {lost} acknowledged bytes lost in a crash \
                         (size {} now, {} acknowledged)",
                        a.ino,
                        data.len(),
                        f.stable.len()
                    ));
                }
            } else if f.cands.contains(&data) {
                self.c.bytes_checked += data.len() as u64;
            } else {
                let lost = f
                    .cands
                    .iter()
                    .map(|c| diff_bytes(&data, c))
                    .min()
                    .unwrap_or(0);
                self.c.bytes_lost += lost;
                self.fail(format!(
                    "{name} (inode {}): after a clean unmount {lost} bytes differ \
                     (size {}, model sizes {:?})",
                    a.ino,
                    data.len(),
                    f.cands.iter().map(|c| c.len()).collect::<Vec<_>>()
                ));
            }
        }
        served
    }

    /// End of a round: crash check, then heal, unmount cleanly, fsck,
    /// remount and compare everything.
    fn finish(mut self) {
        self.crash_check();
        self.ssd.heal();
        // Decide the files a failed operation left uncertain.
        let ids: Vec<usize> = self
            .m
            .files
            .iter()
            .filter(|(_, f)| f.cands.len() > 1)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.resolve(id);
        }
        if let Err(e) = self.fs.unmount() {
            self.fail(format!("unmount with healthy media failed: {e}"));
            return;
        }
        let pm_img = self.pm.inner().crash_image(LossMode::AllUnflushed);
        let ssd_img = self.ssd.inner().crash_image(BlockLoss::AllUnsynced);
        let pm2 = Arc::new(MemMedia::from_image(pm_img));
        let ssd2 = Arc::new(MemBlock::from_image(ssd_img));
        let tiers: [(u8, Arc<dyn BlockMedia>); 1] = [(1, ssd2.clone())];
        match terrace_core::fsck::check_data(&*pm2, &tiers, &mut |_, _| {}) {
            Ok(r) if r.is_clean() && r.bad_blocks == 0 && r.orphans.is_empty() => {}
            Ok(r) => self.fail(format!(
                "fsck --data after a clean unmount: {} bad blocks, orphans {:?}, {:?}",
                r.bad_blocks, r.orphans, r.problems
            )),
            Err(e) => self.fail(format!("fsck refused the pool after unmount: {e}")),
        }
        let fs2 = match Fs::mount_with_tiers(pm2.clone(), vec![(1, ssd2.clone() as _)]) {
            Ok(f) => f,
            Err(e) => {
                self.fail(format!(
                    "the pool does not mount after a clean unmount: {e}"
                ));
                return;
            }
        };
        if !fs2.mount_report().was_clean {
            self.fail("the pool is not clean after a successful unmount".into());
        }
        self.c.clean_remounts += 1;
        let dirs = [1, lookup_dir(&fs2, 1, b"d")];
        self.compare(&fs2, dirs, false);
        if let Err(e) = fs2.check_allocator() {
            self.fail(format!("allocator after remount: {e}"));
        }
        fs2.unmount().unwrap();
    }
}

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
    let pm2 = Arc::new(MemMedia::from_image(pm.image()));
    let ssd2 = Arc::new(MemBlock::from_image(
        ssd.inner().crash_image(BlockLoss::AllUnsynced),
    ));
    let fs2 = mount_tiered(pm2, ssd2);
    let got = fs2.read(a.ino, 0, data.len());
    assert!(
        matches!(&got, Ok(d) if *d == data),
        "migration result {moved:?}: after a crash the fsynced file reads {:?}",
        got.map(|d| d.len())
    );
}
