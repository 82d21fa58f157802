//! The migration tunables ([`MigrationParams`]), built from the settings by
//! [`crate::Settings::migration_params`]; their defaults are the papers'.

use super::threshold::{ThresholdMode, DEFAULT_BLOCK_THRESHOLD_PERCENT, DEFAULT_FORCED_PERCENT};
use super::BLOCK_BYTES;

/// The migration tunables ([`crate::Settings::migration_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationParams {
    /// Threshold of PM's use.
    pub threshold: ThresholdMode,
    /// Threshold of a block tier's use (percent, 1-99): a block tier with a
    /// tier below it drains into it past this.
    pub block_threshold: u8,
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
            block_threshold: DEFAULT_BLOCK_THRESHOLD_PERCENT,
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
