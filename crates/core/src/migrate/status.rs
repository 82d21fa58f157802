//! What `terrace status` shows about migration, and the snapshot of a
//! file's extents that migration policies decide on.

use super::*;

/// What `terrace status` shows about migration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationStatus {
    /// The migration policy.
    pub policy: String,
    /// Whether some tier is being drained now.
    pub running: bool,
    /// Why the last pass moved data (or why not).
    pub reason: String,
    /// PM's migration threshold now (percent of capacity).
    pub pm_threshold_percent: u8,
    /// A block tier's migration threshold (percent of capacity): one with a
    /// tier below it drains into it past this (`migration_block_threshold`).
    #[serde(default)]
    pub block_threshold_percent: u8,
    /// PM data use the last pass compared with that threshold (percent of
    /// PM's capacity for data: logs left out, and clean copies too when the
    /// policy keeps them).
    pub pm_counted_percent: u64,
    /// Non-empty while a tier is over its threshold and the last pass could
    /// move nothing: why, in words.
    pub waiting: String,
    /// Bytes moved to a lower tier.
    pub bytes_down: u64,
    /// Bytes moved up to PM.
    pub bytes_up: u64,
    /// Write entries written by migration.
    pub entries_moved: u64,
    /// Groups copied.
    pub groups: u64,
    /// Bytes of files that shared moved blocks (`copy_file_range` clones)
    /// pointed at the moved copy instead of getting one of their own.
    #[serde(default)]
    pub reshared_bytes: u64,
    /// Bytes written to a lower tier as clean copies (NVMFS flush; the PM
    /// copy stays).
    pub bytes_copied: u64,
    /// PM bytes freed by dropping the PM side of clean data (no copy needed).
    pub bytes_evicted: u64,
    /// PM blocks that hold data with a clean copy on a block tier.
    pub clean_pm_blocks: u64,
    /// PM reads that hit clean data / all PM reads (NVMFS hit ratio).
    pub clean_hit_ratio: Option<f64>,
    /// Migration throughput while copying (bytes/s), 0 before any migration.
    pub bandwidth_bytes_per_sec: u64,
    /// Per target tier: bytes written there by migration and the throughput
    /// while copying to it.
    pub per_tier: Vec<TierMigration>,
    /// Migration passes since mount (one every 100 ms, more when writes
    /// kick the mover).
    #[serde(default)]
    pub passes: u64,
    /// Looks those passes took at work they might do, each a walk of
    /// files: at PM's data (a drain), at the logs on PM, and at the files
    /// that have rules. A mover with nothing it may move looks again only
    /// when the pool's room changes or after a back-off of up to 2 s
    /// (`worker::IdleBackoff`), so in an idle pool this grows far slower
    /// than `passes`; one look per pass is a mover that spins.
    #[serde(default)]
    pub looks: u64,
}

/// Migration into one tier (`terrace status`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierMigration {
    /// Target tier id.
    pub tier: u8,
    /// Bytes migration copied to it.
    pub bytes: u64,
    /// Bytes per second while copying to it (copy, device sync and commit).
    pub bandwidth_bytes_per_sec: u64,
}

impl Fs {
    /// Migration state for `terrace status`.
    pub fn migration_status(&self) -> MigrationStatus {
        let m = &self.migrator;
        // A copy: the settings lock is a leaf (design.md §4a).
        let st = self.settings.read().clone();
        let params = st.migration_params();
        let busy = m.busy_ns.load(Ordering::Relaxed);
        let moved = m.data_bytes.load(Ordering::Relaxed);
        // Each leaf alone: a guard in the literal below would live until the
        // whole literal is built.
        let reason = m.last_reason.lock().clone();
        let waiting = m.waiting.lock().why.clone();
        let rule_walks = self.ruled.lock().walks;
        MigrationStatus {
            policy: st.migration_policy.clone(),
            running: m.running.load(Ordering::Relaxed) != 0,
            reason,
            pm_threshold_percent: mig::migration_threshold(params.threshold, self.io_counters()),
            block_threshold_percent: params.block_threshold,
            pm_counted_percent: m.pm_counted_percent.load(Ordering::Relaxed),
            waiting,
            bytes_down: m.bytes_down.load(Ordering::Relaxed),
            bytes_up: m.bytes_up.load(Ordering::Relaxed),
            entries_moved: m.entries_moved.load(Ordering::Relaxed),
            groups: m.groups.load(Ordering::Relaxed),
            reshared_bytes: m.reshared_blocks.load(Ordering::Relaxed) * BLOCK_SIZE,
            bytes_copied: m.bytes_copied.load(Ordering::Relaxed),
            bytes_evicted: m.bytes_evicted.load(Ordering::Relaxed),
            clean_pm_blocks: self.pm_clean_dirty().0,
            clean_hit_ratio: {
                let c = m.clean_hits.load(Ordering::Relaxed);
                let d = m.dirty_hits.load(Ordering::Relaxed);
                (c + d > 0).then(|| c as f64 / (c + d) as f64)
            },
            bandwidth_bytes_per_sec: if busy == 0 {
                0
            } else {
                (u128::from(moved) * 1_000_000_000 / u128::from(busy)) as u64
            },
            per_tier: m
                .per_tier
                .lock()
                .iter()
                .map(|(&tier, &(bytes, ns))| TierMigration {
                    tier: tier.get(),
                    bytes,
                    bandwidth_bytes_per_sec: (u128::from(bytes) * 1_000_000_000
                        / u128::from(ns.max(1)))
                        as u64,
                })
                .collect(),
            passes: m.passes.load(Ordering::Relaxed),
            looks: m.pm_looks.load(Ordering::Relaxed)
                + self.log_migration.scans.load(Ordering::Relaxed)
                + rule_walks,
        }
    }
}

/// The file's extents as the migration policies see them.
pub(super) fn snapshot_entries(i: &Inode) -> Vec<EntrySnapshot> {
    i.extents
        .iter()
        .map(|(fb, e)| EntrySnapshot {
            file_block: fb.get(),
            blocks: e.blocks,
            mtime_ns: e.mtime.max(0) as u64,
            tier: e.tier,
        })
        .collect()
}

impl Fs {
    /// Forgets tier `id`'s migration counters: the tier was removed from the
    /// pool (`tier_detach.rs`), and a tier attached later with its id starts
    /// from zero.
    pub(crate) fn forget_tier_migration(&self, id: TierId) {
        self.migrator.per_tier.lock().remove(&id);
    }
}
