//! The `ziggurat` migration policy (Ziggurat §5): the cold part by amtime,
//! the PM copy freed at once.

use super::cold::{cold_entries_with, ColdChoice, FileSnapshot};
use super::params::MigrationParams;
use super::policy::{CopyObservation, MigrationPolicy};

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
