//! Migration between tiers (Ziggurat §5): when to migrate, which data of the
//! coldest file moves, how small entries are grouped into large sequential
//! writes, when data comes back up to PM, and the policies that combine these
//! choices, looked up by name with [`migration_policy`].
//!
//! Every function here is a decision over a snapshot the caller gathered (tier
//! use, read/write counters, one file's write entries); the caller does the
//! copying, the log appends and the freeing.
//!
//! # When to migrate: the threshold
//!
//! Migration down starts when the use of the upper tier passes a threshold and
//! continues until it is below the threshold again (§5.2: "the migration
//! process repeats until the usage of the upper tier is below the threshold
//! again"). The caller keeps whether migration is running and passes it to
//! [`should_migrate`]: a tier not being migrated starts only when its use is
//! *above* the threshold; one being migrated keeps going until its use is
//! *below* it. The hysteresis between stopping and starting again is the
//! granularity of migration: the migrator moves whole entries or groups, so it
//! overshoots the threshold by up to one group.
//!
//! The threshold is either static ([`ThresholdMode::Static`]) or dynamic
//! ([`ThresholdMode::Dynamic`], the default). The paper: "the migration
//! threshold rises from 50% to 90% as the read-write ratio of the system
//! changes" — a write-dominated workload needs free PM for incoming writes, a
//! read-dominated one wants as much data on PM as possible. It gives no
//! formula; this follows the formula the project notes attribute to the
//! authors' code, `50 + 10 · (log2 reads − log2 writes)` clamped to `[50, 90]`
//! ([`dynamic_threshold`]; log2 rounded down, a zero count taken as 1). So an
//! equal mix gives 50%, twice as many reads 60%, and 16 times as many or more
//! 90%.
//!
//! Above a second, *forced* mark (default 95%, [`MigrationParams::forced_percent`])
//! the tier is nearly full: [`should_migrate`] answers [`MigrationNeed::Forced`]
//! and foreground writes should go straight to the next tier rather than wait
//! for migration to free room (Ziggurat: writes "have to either stall before
//! the migration threads clean up enough space in NVMM, or write to disk").
//!
//! Bytes counted as *used* are the caller's to choose; with the NVMFS
//! behaviour (clean copies, [`MigrationPolicy::keep_clean_copy`]), PM blocks
//! that only hold a clean copy of data already on a block tier should not be
//! counted, since evicting them is free (see [`crate::nvmfs`]).
//!
//! # Which data moves
//!
//! The coldest file is the head of the cold lists ([`crate::cold_list`]).
//! If its mtime is older than [`MigrationParams::age_ns`] (30 s, §5.1), the
//! whole file is cold and all of its entries on the tier move; otherwise only
//! the entries whose mtime is earlier than the file's amtime, the cold part
//! ([`cold_entries`]). A recently written file whose entries all share one
//! mtime has no cold part: the answer is empty and the caller moves on to the
//! next coldest file.
//!
//! Terrace's addition: the paper's amtime spans all of a file's blocks, on
//! every tier. A large file whose bulk went to disk long ago and whose hot
//! region keeps being rewritten on PM has an amtime older than every one of
//! its PM entries, so the rule picks nothing on PM — and with a few such
//! files (databases, the Zipf benchmark) migration would stall with PM full.
//! When the file-wide amtime picks nothing on the tier, the average mtime of
//! the file's blocks *on that tier* is used instead: the older part of what
//! is there moves, the recently rewritten part stays.
//!
//! # Group migration
//!
//! Small entries adjacent in the file are coalesced into one group of at most
//! [`MigrationParams::group_bytes`] (16 MiB by default, the best average in
//! §6.7), written with one sequential write and committed as one new write
//! entry ([`group_entries`]). An entry larger than the group size is cut into
//! group-size pieces, so no group ever exceeds the group size (the migrated
//! data becomes new entries anyway, so cutting loses nothing). Entries that are
//! not adjacent in the file, or that come from different tiers, are never in
//! one group.
//!
//! # Reverse migration
//!
//! When reads dominate and PM is little used, PM space would otherwise idle
//! while block-tier data contends for DRAM (§5.2). [`reverse_candidates`]
//! picks the files with the most reads on block tiers, hottest first, as long
//! as moving them keeps PM use under the low mark. Reverse migration is not
//! grouped (PM handles random writes well). It also serves `mmap`, which the
//! caller decides without this policy.
//!
//! # Policies
//!
//! - `ziggurat`: the paper. Cold-part selection by amtime; migrated PM blocks
//!   are freed at once (a DRAM page-cache copy is kept while the cache is less
//!   than half full, [`keep_cache_copy`]).
//! - `nvmfs`: NVMFS §III-C. No hot/cold split inside a file: all of the file's
//!   entries on the tier move, least recently written first; the PM copy stays
//!   as a *clean copy* (two valid versions) and is evicted for free when space
//!   is needed.
//! - `default`: Ziggurat's selection (it keeps a file's hot part where writes
//!   land) with NVMFS's clean copies (reads of migrated data still hit PM until
//!   the space is wanted), except under [`MigrationNeed::Forced`], when the
//!   space is needed now and the PM copy is freed at once. This combination is
//!   the starting point; measurements will decide.

use std::fmt;

/// Bytes per file-system block.
pub const BLOCK_BYTES: u64 = 4096;

/// Default percentage above which foreground writes go straight down.
pub const DEFAULT_FORCED_PERCENT: u8 = 95;

/// Lower bound of the dynamic threshold (percent).
pub const DYNAMIC_MIN_PERCENT: u8 = 50;

/// Upper bound of the dynamic threshold (percent).
pub const DYNAMIC_MAX_PERCENT: u8 = 90;

/// How the migration threshold is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThresholdMode {
    /// A fixed percentage of the tier (1-99).
    Static(u8),
    /// From the read/write ratio, 50% to 90% ([`dynamic_threshold`]).
    Dynamic,
}

impl fmt::Display for ThresholdMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThresholdMode::Static(p) => write!(f, "{p}"),
            ThresholdMode::Dynamic => write!(f, "dynamic"),
        }
    }
}

/// Reads and writes the file system served recently (operations or bytes,
/// as long as both count the same thing), the input of the dynamic threshold
/// and of reverse migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoCounters {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
}

impl IoCounters {
    /// Whether reads are at least `ratio` times the writes (and there are
    /// reads at all). `ratio == 0` never holds: it turns the test off.
    pub fn reads_dominate(&self, ratio: u64) -> bool {
        ratio != 0
            && self.reads > 0
            && u128::from(self.reads) >= u128::from(ratio) * u128::from(self.writes)
    }
}

/// The migration tunables ([`crate::Settings::migration_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationParams {
    /// Threshold of the upper tier's use.
    pub threshold: ThresholdMode,
    /// Use (percent) above which migration is forced and foreground writes go
    /// to the next tier; 100 means never.
    pub forced_percent: u8,
    /// A file not modified for longer than this (ns) migrates whole.
    pub age_ns: u64,
    /// Largest group of coalesced entries (bytes).
    pub group_bytes: u64,
    /// Reverse migration only when reads are at least this many times the
    /// writes; 0 turns reverse migration off.
    pub reverse_read_ratio: u64,
    /// Reverse migration only while PM use is below this percentage, and never
    /// fills PM beyond it.
    pub reverse_pm_low_percent: u8,
    /// Migration threads; 0 = one per core ([`MigrationParams::threads_for`]).
    pub threads: u32,
    /// Not a setting: set by a drain's second round, after a first round
    /// over the coldest files chose nothing. A young file whose blocks on the
    /// tier all have one age (written at one time: none is older than any
    /// average, so the rules never pick any) then moves whole. Without it a
    /// burst of small files written once fills PM with nothing movable
    /// (issue 15); in the first round it is off, so a file rewritten in
    /// place (a WAL of one block) is not taken before older data of others.
    pub whole_when_uniform: bool,
}

impl Default for MigrationParams {
    fn default() -> Self {
        MigrationParams {
            threshold: ThresholdMode::Dynamic,
            forced_percent: DEFAULT_FORCED_PERCENT,
            age_ns: 30_000_000_000,
            group_bytes: 16 << 20,
            reverse_read_ratio: 4,
            reverse_pm_low_percent: 50,
            threads: 0,
            whole_when_uniform: false,
        }
    }
}

impl MigrationParams {
    /// The group size in blocks (at least 1).
    pub fn group_blocks(&self) -> u64 {
        (self.group_bytes / BLOCK_BYTES).max(1)
    }

    /// Number of migration threads on a machine with `cpus` cores (at least 1).
    pub fn threads_for(&self, cpus: usize) -> usize {
        if self.threads == 0 {
            cpus.max(1)
        } else {
            self.threads as usize
        }
    }
}

/// `floor(log2(max(n, 1)))`.
fn log2_floor(n: u64) -> i64 {
    i64::from(n.max(1).ilog2())
}

/// Ziggurat's dynamic threshold: `50 + 10 · (log2 reads − log2 writes)`,
/// clamped to `[50, 90]`. Monotone: more reads never lower it, more writes
/// never raise it.
pub fn dynamic_threshold(io: IoCounters) -> u8 {
    let t = 50 + 10 * (log2_floor(io.reads) - log2_floor(io.writes));
    t.clamp(
        i64::from(DYNAMIC_MIN_PERCENT),
        i64::from(DYNAMIC_MAX_PERCENT),
    ) as u8
}

/// The migration threshold (percent of the tier) for this mode and these
/// counters.
pub fn migration_threshold(mode: ThresholdMode, io: IoCounters) -> u8 {
    match mode {
        ThresholdMode::Static(p) => p,
        ThresholdMode::Dynamic => dynamic_threshold(io),
    }
}

/// What [`should_migrate`] asks of the migrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MigrationNeed {
    /// Nothing to do (or stop).
    None,
    /// Migrate in the background until this many more bytes are free.
    Background {
        /// Bytes to free to get strictly below the threshold.
        bytes_to_free: u64,
    },
    /// The tier is nearly full: migrate, and send foreground writes to the
    /// next tier meanwhile.
    Forced {
        /// Bytes to free to get strictly below the threshold.
        bytes_to_free: u64,
    },
}

impl MigrationNeed {
    /// Whether any migration is asked for.
    pub fn is_needed(&self) -> bool {
        !matches!(self, MigrationNeed::None)
    }

    /// Whether foreground writes should go to the next tier.
    pub fn is_forced(&self) -> bool {
        matches!(self, MigrationNeed::Forced { .. })
    }

    /// Bytes to free (0 for [`MigrationNeed::None`]).
    pub fn bytes_to_free(&self) -> u64 {
        match *self {
            MigrationNeed::None => 0,
            MigrationNeed::Background { bytes_to_free }
            | MigrationNeed::Forced { bytes_to_free } => bytes_to_free,
        }
    }
}

/// `capacity · percent / 100`, rounded down.
fn share(capacity: u64, percent: u8) -> u64 {
    (u128::from(capacity) * u128::from(percent) / 100) as u64
}

/// Whether the tier (`used` of `capacity` bytes) must migrate, with the
/// threshold `threshold_percent` ([`migration_threshold`]) and the forced mark
/// `forced_percent`. `running` says whether migration of this tier is under
/// way (the caller's state): a running migration continues until use is below
/// the threshold, a stopped one starts when use is above it.
///
/// Invariants: `Forced` exactly when use is above the forced mark; the bytes
/// to free bring use strictly below `min(threshold, forced)` (to 0 if that
/// share is 0 bytes) and never exceed `used`; never asks anything of an empty
/// or zero-capacity tier.
pub fn should_migrate(
    used: u64,
    capacity: u64,
    threshold_percent: u8,
    forced_percent: u8,
    running: bool,
) -> MigrationNeed {
    if capacity == 0 || used == 0 {
        return MigrationNeed::None;
    }
    let limit = share(capacity, threshold_percent.min(forced_percent));
    let forced = used > share(capacity, forced_percent);
    let go = forced || used > limit || (running && used >= limit);
    if !go {
        return MigrationNeed::None;
    }
    // Strictly below the limit; all of it when the limit is 0.
    let bytes_to_free = (used - limit).saturating_add(1).min(used);
    if forced {
        MigrationNeed::Forced { bytes_to_free }
    } else {
        MigrationNeed::Background { bytes_to_free }
    }
}

/// One write entry (or a piece of one) of a file: the unit of migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntrySnapshot {
    /// First file block.
    pub file_block: u64,
    /// Length in blocks.
    pub blocks: u64,
    /// When it was written (ns).
    pub mtime_ns: u64,
    /// Tier holding its data.
    pub tier: u8,
}

impl EntrySnapshot {
    /// One past its last file block.
    pub fn end(&self) -> u64 {
        self.file_block + self.blocks
    }
}

/// What the migrator knows of the coldest file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileSnapshot {
    /// Inode number.
    pub ino: u64,
    /// The file's mtime (ns).
    pub mtime_ns: u64,
    /// The file's amtime ([`crate::Amtime::value`]).
    pub amtime_ns: Option<u64>,
    /// Its live write entries, on every tier, in any order.
    pub entries: Vec<EntrySnapshot>,
}

/// The data of one file chosen to migrate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColdChoice {
    /// The whole file was judged cold (all of its entries on the tier move).
    pub whole_file: bool,
    /// Entries to move, in file order (or in the order the policy wants them
    /// moved, see [`MigrationPolicy::choose`]).
    pub entries: Vec<EntrySnapshot>,
}

/// Whether a file last modified at `mtime_ns` counts as old at `now_ns`: more
/// than `age_ns` ago. A time in the future is recent.
pub fn is_old(mtime_ns: u64, now_ns: u64, age_ns: u64) -> bool {
    now_ns.checked_sub(mtime_ns).is_some_and(|d| d > age_ns)
}

/// Ziggurat's choice (§5.1): every entry of `file` on tier `from_tier` if
/// the file is old ([`is_old`]), otherwise the entries on that tier written
/// before the file's amtime. Entries are returned in file order.
pub fn cold_entries(file: &FileSnapshot, from_tier: u8, now_ns: u64, age_ns: u64) -> ColdChoice {
    let whole_file = is_old(file.mtime_ns, now_ns, age_ns);
    let on_tier = || {
        file.entries
            .iter()
            .filter(move |e| e.tier == from_tier && e.blocks > 0)
    };
    let older = |a: Option<u64>| -> Vec<EntrySnapshot> {
        on_tier()
            .filter(|e| whole_file || a.is_some_and(|a| e.mtime_ns < a))
            .copied()
            .collect()
    };
    let mut entries = older(file.amtime_ns);
    if entries.is_empty() && !whole_file {
        // Nothing on this tier is older than the file's average: use the
        // average of the file's blocks on this tier (module doc).
        entries = older(tier_amtime(file, from_tier));
    }
    if entries.is_empty() && !whole_file {
        // Averages are whole nanoseconds: entries 1 ns apart can all be "not
        // older" than a truncated average. The oldest ones are older.
        if let (Some(lo), Some(hi)) = (
            on_tier().map(|e| e.mtime_ns).min(),
            on_tier().map(|e| e.mtime_ns).max(),
        ) {
            if lo < hi {
                entries = on_tier().filter(|e| e.mtime_ns == lo).copied().collect();
            }
        }
    }
    entries.sort_by_key(|e| e.file_block);
    ColdChoice {
        whole_file,
        entries,
    }
}

/// [`cold_entries`], and when that picks nothing and `whole_when_uniform` is
/// set ([`MigrationParams::whole_when_uniform`]), every entry of the file on
/// the tier: its blocks there all have one age (otherwise the older ones
/// would have been picked).
pub fn cold_entries_with(
    file: &FileSnapshot,
    from_tier: u8,
    now_ns: u64,
    params: &MigrationParams,
) -> ColdChoice {
    let mut c = cold_entries(file, from_tier, now_ns, params.age_ns);
    if c.entries.is_empty() && params.whole_when_uniform {
        c.entries = file
            .entries
            .iter()
            .filter(|e| e.tier == from_tier && e.blocks > 0)
            .copied()
            .collect();
        c.entries.sort_by_key(|e| e.file_block);
    }
    c
}

/// Average mtime of the file's blocks on `tier`, weighted by length (`None`
/// when it has none there).
pub fn tier_amtime(file: &FileSnapshot, tier: u8) -> Option<u64> {
    let (mut sum, mut blocks) = (0u128, 0u128);
    for e in file.entries.iter().filter(|e| e.tier == tier) {
        sum += u128::from(e.mtime_ns) * u128::from(e.blocks);
        blocks += u128::from(e.blocks);
    }
    (blocks > 0).then(|| (sum / blocks) as u64)
}

/// A run of file blocks migrated with one sequential write and committed as
/// one write entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    /// First file block.
    pub file_block: u64,
    /// Length in blocks (at most the group size).
    pub blocks: u64,
    /// The entries (or pieces of entries) it is made of, in file order; they
    /// tile `[file_block, file_block + blocks)` exactly and share one tier.
    pub sources: Vec<EntrySnapshot>,
}

/// Group migration (§5.3): coalesces entries adjacent in the file (and on
/// the same tier) into groups of at most `group_blocks` blocks; an entry
/// longer than that is cut into pieces. Entries may come in any order; groups
/// are returned in file order. Overlapping entries (not expected of a live
/// extent map) are never merged. Zero-length entries are dropped.
pub fn group_entries(entries: &[EntrySnapshot], group_blocks: u64) -> Vec<Group> {
    let max = group_blocks.max(1);
    let mut sorted: Vec<EntrySnapshot> = entries.iter().copied().filter(|e| e.blocks > 0).collect();
    sorted.sort_by_key(|e| (e.file_block, e.blocks));
    let mut groups: Vec<Group> = Vec::new();
    for e in sorted {
        let mut rest = e;
        while rest.blocks > 0 {
            let joins = groups.last().filter(|g| {
                g.file_block + g.blocks == rest.file_block
                    && g.blocks < max
                    && g.sources.last().is_some_and(|s| s.tier == rest.tier)
            });
            let room = match joins {
                Some(g) => max - g.blocks,
                None => max,
            };
            let take = rest.blocks.min(room);
            let piece = EntrySnapshot {
                blocks: take,
                ..rest
            };
            match (joins.is_some(), groups.last_mut()) {
                (true, Some(g)) => {
                    g.blocks += take;
                    g.sources.push(piece);
                }
                _ => groups.push(Group {
                    file_block: piece.file_block,
                    blocks: take,
                    sources: vec![piece],
                }),
            }
            rest.file_block += take;
            rest.blocks -= take;
        }
    }
    groups
}

/// Packs groups (in file order, as [`group_entries`] returns them) into
/// batches of at most `group_blocks` blocks in all, keeping their order. The
/// groups of a batch need not be adjacent in the file: the mechanism copies a
/// batch to one contiguous run of the target tier with one sequential request
/// (one write entry per group), so scattered small entries — random
/// overwrites — still reach a block tier as large writes (NVMFS's
/// random-to-sequential conversion). A group of `group_blocks` or more is a
/// batch of its own.
pub fn batch_groups(groups: &[Group], group_blocks: u64) -> Vec<Vec<Group>> {
    let max = group_blocks.max(1);
    let mut batches: Vec<Vec<Group>> = Vec::new();
    let mut size = 0u64;
    for g in groups {
        match batches.last_mut() {
            Some(b) if size + g.blocks <= max => {
                b.push(g.clone());
                size += g.blocks;
            }
            _ => {
                batches.push(vec![g.clone()]);
                size = g.blocks;
            }
        }
    }
    batches
}

/// Whether a migrated entry keeps a copy in the DRAM page cache (Ziggurat
/// §5.2: when the cache is less than half full, to speed up later reads and
/// unaligned writes).
pub fn keep_cache_copy(cache_used: u64, cache_capacity: u64) -> bool {
    u128::from(cache_used) * 2 < u128::from(cache_capacity)
}

/// A file with data on a block tier, as reverse migration sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileReads {
    /// Inode number.
    pub ino: u64,
    /// Blocks of the file on block tiers.
    pub block_tier_blocks: u64,
    /// Reads that hit those blocks recently.
    pub reads: u64,
}

/// Reverse migration (§5.2): when reads are at least
/// [`MigrationParams::reverse_read_ratio`] times the writes and PM use is
/// below [`MigrationParams::reverse_pm_low_percent`], the files to move up to
/// PM, hottest (most reads) first, ties by inode. A file is taken only if its
/// blocks fit in the room left below the low mark; files that were not read
/// are never taken. Empty when the conditions do not hold.
pub fn reverse_candidates(
    io: IoCounters,
    pm_used: u64,
    pm_capacity: u64,
    files: &[FileReads],
    params: &MigrationParams,
) -> Vec<FileReads> {
    if !io.reads_dominate(params.reverse_read_ratio) {
        return Vec::new();
    }
    let low = share(pm_capacity, params.reverse_pm_low_percent);
    let Some(mut room) = low.checked_sub(pm_used).filter(|&r| r > 0) else {
        return Vec::new();
    };
    let mut hot: Vec<FileReads> = files
        .iter()
        .filter(|f| f.reads > 0 && f.block_tier_blocks > 0)
        .copied()
        .collect();
    hot.sort_by(|a, b| b.reads.cmp(&a.reads).then(a.ino.cmp(&b.ino)));
    let mut out = Vec::new();
    for f in hot {
        let bytes = f.block_tier_blocks.saturating_mul(BLOCK_BYTES);
        if bytes <= room {
            room -= bytes;
            out.push(f);
        }
    }
    out
}

/// What a policy knows when deciding whether migrated data keeps its PM copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyObservation {
    /// Why migration runs ([`should_migrate`]'s answer).
    pub need: MigrationNeed,
    /// PM use in bytes, clean copies excluded.
    pub pm_used: u64,
    /// PM capacity in bytes.
    pub pm_capacity: u64,
}

/// A migration policy: which data of the coldest file moves, and what happens
/// to its PM copy afterwards. Grouping, thresholds and reverse migration are
/// the same for every policy (the free functions of this module).
pub trait MigrationPolicy: fmt::Debug {
    /// The name it is registered under.
    fn name(&self) -> &'static str;
    /// The data of `file` on `from_tier` to move down, at `now_ns`.
    fn choose(
        &self,
        file: &FileSnapshot,
        from_tier: u8,
        now_ns: u64,
        params: &MigrationParams,
    ) -> ColdChoice;
    /// Whether the PM blocks of data just migrated down stay as a clean copy
    /// (evictable at no cost, [`crate::nvmfs`]) instead of being freed.
    fn keep_clean_copy(&self, obs: &CopyObservation) -> bool;
    /// Whether PM's dirty data is kept between the NVMFS dirty list's own
    /// marks by its flush ([`crate::nvmfs::FlushRun`]) instead of the
    /// migration threshold, which then applies only when migration is
    /// forced. False unless a policy opts in.
    fn flushes_dirty_list(&self) -> bool {
        false
    }
}

/// Ziggurat (§5): cold part by amtime, PM copy freed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZigguratMigration;

impl MigrationPolicy for ZigguratMigration {
    fn name(&self) -> &'static str {
        "ziggurat"
    }

    fn choose(
        &self,
        file: &FileSnapshot,
        from_tier: u8,
        now_ns: u64,
        params: &MigrationParams,
    ) -> ColdChoice {
        cold_entries_with(file, from_tier, now_ns, params)
    }

    fn keep_clean_copy(&self, _obs: &CopyObservation) -> bool {
        false
    }
}

/// NVMFS (§III-C): the whole file in least-recently-written order, PM copy
/// kept clean.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmfsMigration;

impl MigrationPolicy for NvmfsMigration {
    fn name(&self) -> &'static str {
        "nvmfs"
    }

    fn choose(
        &self,
        file: &FileSnapshot,
        from_tier: u8,
        _now_ns: u64,
        _params: &MigrationParams,
    ) -> ColdChoice {
        let mut entries: Vec<EntrySnapshot> = file
            .entries
            .iter()
            .filter(|e| e.tier == from_tier && e.blocks > 0)
            .copied()
            .collect();
        entries.sort_by_key(|e| (e.mtime_ns, e.file_block));
        ColdChoice {
            whole_file: true,
            entries,
        }
    }

    fn keep_clean_copy(&self, _obs: &CopyObservation) -> bool {
        true
    }

    fn flushes_dirty_list(&self) -> bool {
        true
    }
}

/// Terrace's default: Ziggurat's selection, NVMFS's clean copies except when
/// migration is forced.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultMigration;

impl MigrationPolicy for DefaultMigration {
    fn name(&self) -> &'static str {
        "default"
    }

    fn choose(
        &self,
        file: &FileSnapshot,
        from_tier: u8,
        now_ns: u64,
        params: &MigrationParams,
    ) -> ColdChoice {
        ZigguratMigration.choose(file, from_tier, now_ns, params)
    }

    fn keep_clean_copy(&self, obs: &CopyObservation) -> bool {
        !matches!(obs.need, MigrationNeed::Forced { .. })
    }
}

const NAMES: &[&str] = &["default", "ziggurat", "nvmfs"];

/// Names of the registered migration policies, the default first.
pub fn migration_policy_names() -> &'static [&'static str] {
    NAMES
}

/// The migration policy registered as `name`, or `None` if there is none.
pub fn migration_policy(name: &str) -> Option<Box<dyn MigrationPolicy + Send + Sync>> {
    match name {
        "default" => Some(Box::new(DefaultMigration)),
        "ziggurat" => Some(Box::new(ZigguratMigration)),
        "nvmfs" => Some(Box::new(NvmfsMigration)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MIB: u64 = 1 << 20;

    fn io(reads: u64, writes: u64) -> IoCounters {
        IoCounters { reads, writes }
    }

    fn e(file_block: u64, blocks: u64, mtime_ns: u64) -> EntrySnapshot {
        EntrySnapshot {
            file_block,
            blocks,
            mtime_ns,
            tier: 0,
        }
    }

    #[test]
    fn dynamic_threshold_is_50_for_equal_mix_and_rises_10_per_doubling_of_reads() {
        assert_eq!(dynamic_threshold(io(0, 0)), 50);
        assert_eq!(dynamic_threshold(io(1000, 1000)), 50);
        assert_eq!(dynamic_threshold(io(2000, 1000)), 60);
        assert_eq!(dynamic_threshold(io(4096, 1024)), 70);
        assert_eq!(dynamic_threshold(io(16 << 10, 1 << 10)), 90);
        assert_eq!(dynamic_threshold(io(u64::MAX, 0)), 90);
        assert_eq!(dynamic_threshold(io(1, 1 << 20)), 50);
        assert_eq!(dynamic_threshold(io(100, 0)), 90);
    }

    #[test]
    fn static_threshold_ignores_counters() {
        assert_eq!(
            migration_threshold(ThresholdMode::Static(70), io(1 << 30, 1)),
            70
        );
        assert_eq!(migration_threshold(ThresholdMode::Dynamic, io(8, 1)), 80);
        assert_eq!(ThresholdMode::Static(70).to_string(), "70");
        assert_eq!(ThresholdMode::Dynamic.to_string(), "dynamic");
    }

    #[test]
    fn migration_starts_above_threshold_and_runs_until_below_it() {
        // Threshold 50% of 100 bytes = 50.
        assert_eq!(should_migrate(50, 100, 50, 95, false), MigrationNeed::None);
        assert_eq!(
            should_migrate(51, 100, 50, 95, false),
            MigrationNeed::Background { bytes_to_free: 2 }
        );
        // Running: at exactly the threshold it continues, below it stops.
        assert_eq!(
            should_migrate(50, 100, 50, 95, true),
            MigrationNeed::Background { bytes_to_free: 1 }
        );
        assert_eq!(should_migrate(49, 100, 50, 95, true), MigrationNeed::None);
    }

    #[test]
    fn above_forced_mark_migration_is_forced() {
        assert_eq!(
            should_migrate(96, 100, 50, 95, false),
            MigrationNeed::Forced { bytes_to_free: 47 }
        );
        assert!(!should_migrate(100, 100, 50, 100, false).is_forced());
        // A static threshold above the forced mark: the forced mark rules.
        assert_eq!(
            should_migrate(97, 100, 99, 95, false),
            MigrationNeed::Forced { bytes_to_free: 3 }
        );
    }

    #[test]
    fn empty_or_zero_capacity_tier_needs_nothing() {
        assert_eq!(should_migrate(0, 100, 1, 2, true), MigrationNeed::None);
        assert_eq!(should_migrate(10, 0, 50, 95, true), MigrationNeed::None);
    }

    fn file(mtime_ns: u64, entries: Vec<EntrySnapshot>) -> FileSnapshot {
        let amtime = crate::Amtime::from_extents(entries.iter().map(|e| (e.blocks, e.mtime_ns)));
        FileSnapshot {
            ino: 7,
            mtime_ns,
            amtime_ns: amtime.value(),
            entries,
        }
    }

    #[test]
    fn old_file_migrates_whole_on_its_tier() {
        let mut entries = vec![e(4, 2, 6 * SEC), e(0, 2, 2 * SEC), e(2, 2, 4 * SEC)];
        entries.push(EntrySnapshot {
            tier: 1,
            ..e(6, 2, SEC)
        });
        let f = file(6 * SEC, entries);
        let c = cold_entries(&f, 0, 37 * SEC, 30 * SEC);
        assert!(c.whole_file);
        assert_eq!(
            c.entries,
            vec![e(0, 2, 2 * SEC), e(2, 2, 4 * SEC), e(4, 2, 6 * SEC)]
        );
    }

    #[test]
    fn a_young_file_written_at_one_time_moves_whole_only_in_a_second_round() {
        let f = file(7 * SEC, vec![e(0, 2, 7 * SEC), e(2, 3, 7 * SEC)]);
        let first = MigrationParams::default();
        assert!(cold_entries_with(&f, 0, 8 * SEC, &first).entries.is_empty());
        let second = MigrationParams {
            whole_when_uniform: true,
            ..first
        };
        let c = cold_entries_with(&f, 0, 8 * SEC, &second);
        assert!(!c.whole_file);
        assert_eq!(c.entries, vec![e(0, 2, 7 * SEC), e(2, 3, 7 * SEC)]);
        // A file with blocks of different ages is chosen as before.
        let g = file(7 * SEC, vec![e(0, 2, 2 * SEC), e(2, 3, 7 * SEC)]);
        assert_eq!(
            cold_entries_with(&g, 0, 8 * SEC, &second).entries,
            vec![e(0, 2, 2 * SEC)]
        );
    }

    #[test]
    fn recent_file_migrates_only_entries_older_than_amtime() {
        // The slides' file: (0,2,2) (2,2,4) (4,2,6) (6,2,8), amtime 5.
        let f = file(
            8 * SEC,
            vec![
                e(0, 2, 2 * SEC),
                e(2, 2, 4 * SEC),
                e(4, 2, 6 * SEC),
                e(6, 2, 8 * SEC),
            ],
        );
        assert_eq!(f.amtime_ns, Some(5 * SEC));
        let c = cold_entries(&f, 0, 10 * SEC, 30 * SEC);
        assert!(!c.whole_file);
        assert_eq!(c.entries, vec![e(0, 2, 2 * SEC), e(2, 2, 4 * SEC)]);
        // Exactly `age` ago is still recent.
        assert!(!cold_entries(&f, 0, 38 * SEC, 30 * SEC).whole_file);
        assert!(cold_entries(&f, 0, 38 * SEC + 1, 30 * SEC).whole_file);
    }

    #[test]
    fn recent_file_written_at_one_time_has_no_cold_part() {
        let f = file(SEC, vec![e(0, 4, SEC), e(4, 4, SEC)]);
        assert!(cold_entries(&f, 0, SEC, 30 * SEC).entries.is_empty());
        // Clock before the file's mtime: recent.
        assert!(!cold_entries(&f, 0, 0, 30 * SEC).whole_file);
    }

    #[test]
    fn a_hot_pm_region_of_an_old_file_still_has_a_cold_part() {
        // 100 blocks on disk written at 1 s, PM entries rewritten at 50..53 s:
        // the file's amtime (~10 s) is older than every PM entry.
        let mut es = vec![EntrySnapshot {
            tier: 1,
            ..e(0, 100, SEC)
        }];
        es.extend((0..4).map(|k| e(100 + k, 1, (50 + k) * SEC)));
        let f = file(53 * SEC, es);
        assert!(f.amtime_ns.unwrap() < 50 * SEC);
        let c = cold_entries(&f, 0, 54 * SEC, 30 * SEC);
        // PM's own average is 51.5 s: the two older PM entries move.
        assert_eq!(c.entries, vec![e(100, 1, 50 * SEC), e(101, 1, 51 * SEC)]);
    }

    #[test]
    fn adjacent_small_entries_coalesce_up_to_group_size() {
        let entries = [e(0, 1, 0), e(1, 1, 0), e(2, 2, 0), e(10, 1, 0), e(11, 3, 0)];
        let g = group_entries(&entries, 3);
        let spans: Vec<(u64, u64)> = g.iter().map(|g| (g.file_block, g.blocks)).collect();
        assert_eq!(spans, vec![(0, 3), (3, 1), (10, 3), (13, 1)]);
        assert_eq!(g[0].sources, vec![e(0, 1, 0), e(1, 1, 0), e(2, 1, 0)]);
        assert_eq!(g[1].sources, vec![e(3, 1, 0)]);
    }

    #[test]
    fn large_entry_is_cut_into_group_size_pieces() {
        let g = group_entries(&[e(5, 10, 9)], 4);
        let spans: Vec<(u64, u64)> = g.iter().map(|g| (g.file_block, g.blocks)).collect();
        assert_eq!(spans, vec![(5, 4), (9, 4), (13, 2)]);
        assert!(g.iter().all(|g| g.sources[0].mtime_ns == 9));
    }

    #[test]
    fn scattered_small_groups_share_a_batch_up_to_group_size() {
        // Random 4 KiB overwrites: single blocks far apart in the file.
        let entries = [
            e(0, 1, 0),
            e(7, 1, 0),
            e(20, 2, 0),
            e(40, 1, 0),
            e(90, 4, 0),
        ];
        let groups = group_entries(&entries, 4);
        let b = batch_groups(&groups, 4);
        let spans: Vec<Vec<(u64, u64)>> = b
            .iter()
            .map(|b| b.iter().map(|g| (g.file_block, g.blocks)).collect())
            .collect();
        assert_eq!(
            spans,
            vec![vec![(0, 1), (7, 1), (20, 2)], vec![(40, 1)], vec![(90, 4)]]
        );
    }

    #[test]
    fn entries_on_different_tiers_are_not_grouped() {
        let other = EntrySnapshot {
            tier: 1,
            ..e(2, 2, 0)
        };
        let g = group_entries(&[e(0, 2, 0), other], 16);
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn group_size_default_is_16m_in_blocks() {
        let p = MigrationParams::default();
        assert_eq!(p.group_blocks(), 16 * MIB / BLOCK_BYTES);
        assert_eq!(p.threads_for(8), 8);
        assert_eq!(p.threads_for(0), 1);
        let p = MigrationParams {
            threads: 3,
            group_bytes: 100,
            ..p
        };
        assert_eq!(p.threads_for(8), 3);
        assert_eq!(p.group_blocks(), 1);
    }

    #[test]
    fn cache_copy_kept_only_below_half_full_cache() {
        assert!(keep_cache_copy(49, 100));
        assert!(!keep_cache_copy(50, 100));
        assert!(!keep_cache_copy(0, 0));
    }

    fn fr(ino: u64, blocks: u64, reads: u64) -> FileReads {
        FileReads {
            ino,
            block_tier_blocks: blocks,
            reads,
        }
    }

    #[test]
    fn reverse_migration_picks_hottest_files_that_fit_below_low_mark() {
        let p = MigrationParams::default();
        let files = [fr(1, 100, 5), fr(2, 10, 50), fr(3, 10, 0), fr(4, 1000, 40)];
        // Low mark 50% of 8 MiB = 4 MiB = 1024 blocks; 1 MiB used: 768 blocks of room.
        let got = reverse_candidates(io(100, 10), MIB, 8 * MIB, &files, &p);
        assert_eq!(got, vec![fr(2, 10, 50), fr(1, 100, 5)]);
    }

    #[test]
    fn reverse_migration_needs_read_dominance_and_pm_below_low_mark() {
        let p = MigrationParams::default();
        let files = [fr(1, 1, 5)];
        assert!(reverse_candidates(io(39, 10), 0, 8 * MIB, &files, &p).is_empty());
        assert_eq!(
            reverse_candidates(io(40, 10), 0, 8 * MIB, &files, &p).len(),
            1
        );
        assert!(reverse_candidates(io(40, 10), 4 * MIB, 8 * MIB, &files, &p).is_empty());
        assert!(reverse_candidates(io(0, 0), 0, 8 * MIB, &files, &p).is_empty());
        let off = MigrationParams {
            reverse_read_ratio: 0,
            ..p
        };
        assert!(reverse_candidates(io(1000, 0), 0, 8 * MIB, &files, &off).is_empty());
    }

    #[test]
    fn registry_finds_every_listed_name_under_its_own_name() {
        for name in migration_policy_names() {
            assert_eq!(migration_policy(name).unwrap().name(), *name);
        }
        assert!(migration_policy("nope").is_none());
    }

    #[test]
    fn policies_differ_in_selection_and_clean_copies() {
        let f = file(
            8 * SEC,
            vec![e(0, 2, 4 * SEC), e(2, 2, 2 * SEC), e(4, 2, 8 * SEC)],
        );
        let p = MigrationParams::default();
        let now = 9 * SEC;
        let zig = migration_policy("ziggurat").unwrap().choose(&f, 0, now, &p);
        let def = migration_policy("default").unwrap().choose(&f, 0, now, &p);
        let nv = migration_policy("nvmfs").unwrap().choose(&f, 0, now, &p);
        assert_eq!(zig, def);
        assert_eq!(zig.entries, vec![e(0, 2, 4 * SEC), e(2, 2, 2 * SEC)]);
        // NVMFS: everything, least recently written first.
        assert_eq!(
            nv.entries,
            vec![e(2, 2, 2 * SEC), e(0, 2, 4 * SEC), e(4, 2, 8 * SEC)]
        );

        let bg = CopyObservation {
            need: MigrationNeed::Background { bytes_to_free: 1 },
            pm_used: 60,
            pm_capacity: 100,
        };
        let forced = CopyObservation {
            need: MigrationNeed::Forced { bytes_to_free: 1 },
            ..bg
        };
        let keep =
            |name: &str, o: &CopyObservation| migration_policy(name).unwrap().keep_clean_copy(o);
        assert!(!keep("ziggurat", &bg) && !keep("ziggurat", &forced));
        assert!(keep("nvmfs", &bg) && keep("nvmfs", &forced));
        assert!(keep("default", &bg) && !keep("default", &forced));
    }

    #[test]
    fn only_nvmfs_keeps_pm_dirty_data_between_the_dirty_lists_own_marks() {
        for name in migration_policy_names() {
            let p = migration_policy(name).unwrap();
            assert_eq!(p.flushes_dirty_list(), *name == "nvmfs", "{name}");
        }
    }
}
