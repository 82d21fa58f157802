//! Cleaning of object tiers (design §5n, "Object cleaning"): deleting or
//! overwriting file data leaves an object tier's immutable parts partly dead,
//! and a part costs its full size until its last block dies. A pass rewrites
//! the live blocks of mostly dead parts into new parts so that the old ones
//! die and are deleted — NVMFS's segment cleaning applied to objects.
//!
//! Order, the same as extent recycling's (`clean.rs`, whose reverse map and
//! move this reuses): the choice ([`terrace_policy::object_cleaner`]: parts
//! under `object_clean_live_percent` live, by cost-benefit, at most
//! `object_clean_bytes_per_pass` of live data) → the owners of their blocks
//! ([`Fs::owners_in`]) → copy into fresh blocks of the same tier → one sync
//! (the upload: every PUT answered) per window → one commit per file → the
//! old blocks freed, which trims them: the old part is dead → deleted by the
//! tier's next sync (`reclaim`, at the end of the pass).
//!
//! Crash: before a file's commit its entries still name the old blocks,
//! whose part is not deleted (it still has live blocks), and the uploaded
//! copies are parts no committed entry references — orphans the next mount's
//! `retain_only` deletes. After the commit the old blocks are free in the
//! committed state, so if the crash comes before the old part's delete, the
//! mount deletes it as an orphan too. Nothing committed ever names a deleted
//! part.
//!
//! Invariant relied on: while a part has a live block, no block in its range
//! belongs to a newer part — the tier's allocator (`tier.rs`) reuses no block
//! of an extent (one segment, which holds the part) until the whole extent is
//! free. So the reverse map of a part's range finds only its live blocks.
//!
//! A pass skips an object tier whose store is failing requests (`status`
//! says UNREACHABLE), and read-only or frozen mounts.

use crate::clean::BlockRanges;
use crate::fs::Fs;
use crate::tier::BlockTier;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::{PhysBlock, TierId, BLOCK_SIZE};
use terrace_policy::cleaner::cleaning_efficiency;
use terrace_policy::object_cleaner::{pick_parts, ObjectCleanParams, PartUsage};

/// What `terrace status` shows about one object tier's cleaning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectCleaningStatus {
    /// Passes that chose parts to clean.
    pub passes: u64,
    /// Passes skipped because the store was failing requests.
    pub skipped_unreachable: u64,
    /// Parts emptied by cleaning (and so deleted).
    pub parts_cleaned: u64,
    /// Live bytes rewritten into new parts.
    pub bytes_rewritten: u64,
    /// Bytes of the parts cleaned (what their deletes gave back).
    pub bytes_reclaimed: u64,
    /// `1 − rewritten / reclaimed`; `None` before any part was cleaned.
    pub efficiency: Option<f64>,
}

impl Fs {
    /// Runs [`Fs::clean_object_tiers`] when `object_clean_interval_ns` has
    /// passed since the last pass (the migration thread calls this after
    /// every migration pass). Returns the parts cleaned.
    pub fn maybe_clean_object_tiers(&self) -> u64 {
        if !self
            .tiers
            .iter()
            .any(|t| t.kind == terrace_format::TierKind::S3)
        {
            return 0;
        }
        let interval = Duration::from_nanos(self.settings.read().object_clean_interval_ns);
        {
            let mut last = self.object_cleaning.last_pass.lock();
            if last.is_some_and(|t| t.elapsed() < interval) {
                return 0;
            }
            *last = Some(Instant::now());
        }
        self.clean_object_tiers()
    }

    /// One cleaning pass on every object tier, now. Returns the parts
    /// cleaned (chosen and found dead after the moves).
    pub fn clean_object_tiers(&self) -> u64 {
        if self.read_only || self.is_frozen() {
            return 0;
        }
        let oc = &self.object_cleaning;
        if oc.running.swap(true, Ordering::Acquire) {
            return 0;
        }
        let params = self.settings.read().object_clean_params();
        let mut cleaned = 0;
        for t in &self.tiers {
            cleaned += self.clean_object_tier(t, &params);
        }
        oc.running.store(false, Ordering::Release);
        cleaned
    }

    /// One pass on tier `t` (nothing unless it is an object tier).
    fn clean_object_tier(&self, t: &BlockTier, params: &ObjectCleanParams) -> u64 {
        let Some(stats) = t.media.object_tier_stats() else {
            return 0;
        };
        if stats.failing.is_some() {
            self.object_cleaning
                .tiers
                .lock()
                .entry(t.id)
                .or_default()
                .skipped_unreachable += 1;
            return 0;
        }
        let Some(parts) = t.media.object_parts() else {
            return 0;
        };
        // The last pass's parts that died since (a free deferred for a reader).
        self.settle(t.id, &parts, false);
        let now = unix_now();
        let usage: Vec<PartUsage> = parts
            .iter()
            .map(|p| PartUsage {
                id: p.seq,
                stored_blocks: p.blocks,
                live_blocks: p.live,
                age_secs: now.saturating_sub(p.uploaded_unix),
            })
            .collect();
        let plan = pick_parts(&usage, params, BLOCK_SIZE);
        if plan.parts.is_empty() {
            return 0;
        }
        let picked: std::collections::BTreeSet<u64> = plan.parts.iter().copied().collect();
        let chosen: Vec<_> = parts.iter().filter(|p| picked.contains(&p.seq)).collect();
        let ranges = BlockRanges::new(chosen.iter().map(|p| (PhysBlock(p.block), p.blocks)));
        let (owned, logs) = self.owners_in(t.id, &ranges);
        let budget = params.bytes_per_pass / BLOCK_SIZE;
        let moved = self.evacuate(
            t.id,
            owned,
            logs,
            crate::migrate::MOVE_SYNC_WINDOW_BYTES,
            false,
            budget,
        );
        {
            let mut g = self.object_cleaning.tiers.lock();
            let c = g.entry(t.id).or_default();
            c.passes += 1;
            c.rewritten_blocks += moved;
            c.awaiting = chosen.iter().map(|p| (p.seq, p.blocks)).collect();
        }
        let after = t.media.object_parts().unwrap_or_default();
        let cleaned = self.settle(t.id, &after, true);
        // Delete the parts that died now rather than at the next upload.
        if t.media
            .object_tier_stats()
            .is_some_and(|s| s.dead_parts > 0)
        {
            let _ = t.media.delete_dead();
        }
        cleaned
    }

    /// Counts the awaited parts of tier `tier` that are dead in `parts` (or
    /// gone: deleted) as cleaned; the others stay awaited when `keep`, else
    /// are forgotten (they did not die: not counted). Returns those counted.
    fn settle(&self, tier: TierId, parts: &[terrace_media::PartInfo], keep: bool) -> u64 {
        let mut g = self.object_cleaning.tiers.lock();
        let c = g.entry(tier).or_default();
        let mut cleaned = 0;
        let awaiting = std::mem::take(&mut c.awaiting);
        for (seq, blocks) in awaiting {
            let dead = !parts.iter().any(|p| p.seq == seq && p.live > 0);
            if dead {
                cleaned += 1;
                c.parts_cleaned += 1;
                c.reclaimed_blocks += blocks;
            } else if keep {
                c.awaiting.insert(seq, blocks);
            }
        }
        cleaned
    }

    /// Tier `tier`'s cleaning counters (zeros before its first pass).
    pub(crate) fn object_cleaning_status(&self, tier: TierId) -> ObjectCleaningStatus {
        let g = self.object_cleaning.tiers.lock();
        let c = g.get(&tier).cloned().unwrap_or_default();
        ObjectCleaningStatus {
            passes: c.passes,
            skipped_unreachable: c.skipped_unreachable,
            parts_cleaned: c.parts_cleaned,
            bytes_rewritten: c.rewritten_blocks * BLOCK_SIZE,
            bytes_reclaimed: c.reclaimed_blocks * BLOCK_SIZE,
            efficiency: cleaning_efficiency(c.rewritten_blocks, c.reclaimed_blocks),
        }
    }
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
