//! Which data of the coldest file moves (Ziggurat §5.1): the snapshot of a
//! file's write entries a policy sees, and the cold part chosen from it — the
//! whole file when it is old, otherwise its entries older than its amtime
//! (falling back to the amtime of its blocks on the tier, Terrace's
//! addition; see the module docs of `migration`).

use super::params::MigrationParams;
use terrace_format::TierId;

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
    pub tier: TierId,
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

impl FileSnapshot {
    /// Its entries holding data on `tier`, in snapshot order.
    pub fn entries_on(&self, tier: TierId) -> impl Iterator<Item = &EntrySnapshot> + Clone {
        self.entries
            .iter()
            .filter(move |e| e.tier == tier && e.blocks > 0)
    }
}

/// The data of one file chosen to migrate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColdChoice {
    /// The whole file was judged cold (all of its entries on the tier move).
    pub whole_file: bool,
    /// Entries to move, in file order (or in the order the policy wants them
    /// moved, see [`MigrationPolicy::choose`](super::MigrationPolicy::choose)).
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
pub fn cold_entries(
    file: &FileSnapshot,
    from_tier: TierId,
    now_ns: u64,
    age_ns: u64,
) -> ColdChoice {
    let whole_file = is_old(file.mtime_ns, now_ns, age_ns);
    let on_tier = || file.entries_on(from_tier);
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
    from_tier: TierId,
    now_ns: u64,
    params: &MigrationParams,
) -> ColdChoice {
    let mut c = cold_entries(file, from_tier, now_ns, params.age_ns);
    if c.entries.is_empty() && params.whole_when_uniform {
        c.entries = file.entries_on(from_tier).copied().collect();
        c.entries.sort_by_key(|e| e.file_block);
    }
    c
}

/// Average mtime of the file's blocks on `tier`, weighted by length (`None`
/// when it has none there).
pub fn tier_amtime(file: &FileSnapshot, tier: TierId) -> Option<u64> {
    let (mut sum, mut blocks) = (0u128, 0u128);
    for e in file.entries.iter().filter(|e| e.tier == tier) {
        sum += u128::from(e.mtime_ns) * u128::from(e.blocks);
        blocks += u128::from(e.blocks);
    }
    (blocks > 0).then(|| (sum / blocks) as u64)
}
