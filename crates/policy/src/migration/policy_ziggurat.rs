//! The `ziggurat` migration policy (Ziggurat §5): the cold part by amtime,
//! the PM copy freed at once.

use super::policy::{CopyObservation, MigrationPolicy};

/// Ziggurat (§5): cold part by amtime (the trait's
/// [`choose`](MigrationPolicy::choose)), PM copy freed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZigguratMigration;

impl MigrationPolicy for ZigguratMigration {
    fn name(&self) -> &'static str {
        "ziggurat"
    }

    fn keep_clean_copy(&self, _obs: &CopyObservation) -> bool {
        false
    }
}
