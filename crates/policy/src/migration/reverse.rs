//! Reverse migration (Ziggurat §5.2): when reads dominate and PM is little
//! used, the block-tier files to move back up to PM, hottest first, without
//! filling PM beyond the low mark.

use super::params::MigrationParams;
use super::threshold::{share, IoCounters};
use super::BLOCK_BYTES;

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
