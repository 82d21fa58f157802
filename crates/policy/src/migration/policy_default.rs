//! The `default` migration policy: Ziggurat's selection (a file's hot part
//! stays where writes land) with NVMFS's clean copies, except when migration
//! is forced and the space is needed now.

use super::cold::{ColdChoice, FileSnapshot};
use super::params::MigrationParams;
use super::policy::{CopyObservation, MigrationPolicy};
use super::policy_ziggurat::ZigguratMigration;
use super::threshold::MigrationNeed;

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
