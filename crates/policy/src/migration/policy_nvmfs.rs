//! The `nvmfs` migration policy (NVMFS §III-C): all of the file's entries on
//! the tier, least recently written first, the PM copy kept clean; it keeps
//! PM's dirty data between the NVMFS dirty list's own marks.

use super::cold::{ColdChoice, EntrySnapshot, FileSnapshot};
use super::params::MigrationParams;
use super::policy::{CopyObservation, MigrationPolicy};

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
        from_tier: terrace_format::TierId,
        _now_ns: u64,
        _params: &MigrationParams,
    ) -> ColdChoice {
        let mut entries: Vec<EntrySnapshot> = file.entries_on(from_tier).copied().collect();
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
