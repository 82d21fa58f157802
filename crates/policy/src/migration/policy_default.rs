//! The `default` migration policy: Ziggurat's selection (a file's hot part
//! stays where writes land) with NVMFS's clean copies, except when migration
//! is forced and the space is needed now.

use super::policy::{CopyObservation, MigrationPolicy};
use super::threshold::MigrationNeed;

/// Terrace's default: Ziggurat's selection (the trait's
/// [`choose`](MigrationPolicy::choose)), NVMFS's clean copies except when
/// migration is forced.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultMigration;

impl MigrationPolicy for DefaultMigration {
    fn name(&self) -> &'static str {
        "default"
    }

    fn keep_clean_copy(&self, obs: &CopyObservation) -> bool {
        !matches!(obs.need, MigrationNeed::Forced { .. })
    }
}
