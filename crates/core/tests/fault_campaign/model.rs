//! The model of what each file may hold and what was acknowledged durable,
//! and the random operations run against it.

use super::*;

/// One file of the model.
#[derive(Debug, Clone)]
pub(crate) struct FileM {
    pub(crate) ino: u64,
    /// The contents the file may have now (one, except after a failed
    /// operation until a fault-free read decides).
    pub(crate) cands: Vec<Vec<u8>>,
    /// Contents acknowledged durable.
    pub(crate) stable: Vec<u8>,
    /// Bytes of `stable` changed (or possibly changed) since: a crash may
    /// show either version there.
    pub(crate) touched: Vec<bool>,
}

impl FileM {
    pub(crate) fn new(ino: u64) -> FileM {
        FileM {
            ino,
            cands: vec![Vec::new()],
            stable: Vec::new(),
            touched: Vec::new(),
        }
    }

    pub(crate) fn touch(&mut self, from: u64, to: u64) {
        let n = self.touched.len() as u64;
        for t in &mut self.touched[from.min(n) as usize..to.min(n) as usize] {
            *t = true;
        }
    }

    /// Applies a change to every candidate; when `maybe`, keeps the
    /// unchanged candidates too.
    pub(crate) fn apply(&mut self, maybe: bool, f: impl Fn(&mut Vec<u8>)) {
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
pub(crate) struct Model {
    pub(crate) names: BTreeMap<(usize, &'static str), usize>,
    pub(crate) files: BTreeMap<usize, FileM>,
    pub(crate) next: usize,
}

impl Model {
    pub(crate) fn drop_unreferenced(&mut self) {
        let live: std::collections::BTreeSet<usize> = self.names.values().copied().collect();
        self.files.retain(|id, _| live.contains(id));
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
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
    pub(crate) fn kind(&self) -> &'static str {
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

pub(crate) fn random_len(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0..=2 => rng.gen_range(1..600),
        3..=4 => rng.gen_range(600..8192),
        5 => 4096 * rng.gen_range(1..4),
        6..=7 => rng.gen_range(8192..256 << 10),
        8 => 256 << 10,
        _ => rng.gen_range(256 << 10..=1 << 20),
    }
}

pub(crate) fn random_op(m: &Model, rng: &mut StdRng) -> Op {
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

pub(crate) fn data_of(seed: u64, len: usize) -> Vec<u8> {
    pattern(seed, len)
}

pub(crate) fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// Whether `ino` has dirty pages in the DRAM cache (not yet durable);
/// `true` when unknown.
pub(crate) fn has_dirty(fs: &Fs, ino: u64) -> bool {
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
