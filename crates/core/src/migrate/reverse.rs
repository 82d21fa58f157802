//! Reverse migration (Ziggurat §5.3): hot block-tier data back to PM when
//! reads dominate and PM has room.

use super::*;

impl Fs {
    /// Reverse migration: read-hot block-tier files move up to PM.
    pub(super) fn reverse_pass(&self, io: IoCounters, params: &mig::MigrationParams) -> u64 {
        if self.tiers.is_empty() || !io.reads_dominate(params.reverse_read_ratio) {
            return 0;
        }
        let (used, cap) = self.tier_use(TierId::PM);
        let mut files = Vec::new();
        for slot in &self.table {
            if let Some(i) = slot.lock().as_ref() {
                // A file pinned to a block tier stays there (rules).
                let pinned_down = self.rule_of(i).is_some_and(|t| !t.is_pm());
                if i.block_reads > 0 && i.kind == FileType::Regular && !pinned_down {
                    let (clean, dirty) = i.extents.pm_clean_dirty();
                    let on_block = i.extents.mapped_blocks() - clean - dirty;
                    files.push(mig::FileReads {
                        ino: i.ino,
                        block_tier_blocks: on_block,
                        reads: i.block_reads,
                    });
                }
            }
        }
        let mut moved = 0;
        for f in mig::reverse_candidates(io, used, cap, &files, params) {
            let entries: Vec<EntrySnapshot> = {
                let Ok(mut g) = self.lock(f.ino) else {
                    continue;
                };
                let i = g.as_mut().expect("live");
                i.block_reads = 0;
                snapshot_entries(i)
            };
            for from in self.tiers.iter().map(|t| t.id) {
                // Basic migration: one write entry at a time, no grouping.
                let groups: Vec<Group> = entries
                    .iter()
                    .filter(|e| e.tier == from)
                    .map(|e| Group {
                        file_block: e.file_block,
                        blocks: e.blocks,
                        sources: vec![*e],
                    })
                    .collect();
                match self.migrate_groups(f.ino, from, TierId::PM, &groups) {
                    Ok(b) => moved += b,
                    Err(_) => return moved,
                }
            }
        }
        if moved > 0 {
            *self.migrator.last_reason.lock() = format!(
                "reads dominate: {} bytes of read-hot data moved up to PM",
                moved
            );
        }
        moved
    }
}
