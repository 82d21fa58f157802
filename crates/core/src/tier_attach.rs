//! Attaching a new slowest tier to the mounted pool (`terrace tier add
//! MOUNTPOINT`, design.md §3 "Adding and removing tiers").
//!
//! The caller has formatted the tier (its header written and synced, or the
//! object tier's marker created) and opened its media; [`Fs::attach_tier`]
//! makes it part of the pool:
//!
//! 1. Under the tier-change lock (rank `TierChange`, nothing else held),
//!    check that the tier may follow the pool's last one and that the
//!    mounted list has a free slot ([`crate::tier_list::SLOTS`]; a tier
//!    removed since mount keeps its slot).
//! 2. Write both superblock copies with the tier appended and a higher
//!    generation, then sync PM: **the commit point**. A crash before it
//!    leaves the pool as it was (plus a formatted tier file nothing names);
//!    after it, the next mount opens the tier, which holds nothing yet.
//! 3. Publish the tier in [`crate::tier_list::BlockTiers`]: from then on
//!    placement, write-back and migration may put data there. No data can
//!    reach it before step 2 is durable, so no committed entry ever points
//!    at a tier the superblock does not name.
//!
//! The superblock's `clean` flag is kept as it is (false while mounted).
//!
//! While a tier is being removed ([`Fs::tier_being_removed`]: retiring,
//! `tier_detach.rs`) an attach is refused at once, before it waits for the
//! tier-change lock: the removal holds that lock for as long as its data
//! takes to move (hours for a large tier), and an attach queued behind it
//! would outlive its caller (`terrace tier add` gives up after two
//! minutes) and then attach a tier the user no longer waits for — with an
//! id taken from the superblock of before the removal, refused anyway
//! when the last tier went. Nothing makes the attach need to wait: the
//! user runs it again when the removal ends. (A removal that takes the
//! lock between the look and the wait still makes the attach wait; it is
//! refused once the lock is taken, when a tier removed since changed the
//! next id.)

use crate::fs::Fs;
use std::sync::Arc;
use terrace_format::{TierId, TierKind, TierRecord, BLOCK_SIZE};
use terrace_media::BlockMedia;

impl Fs {
    /// Appends `rec` (whose media is `dev`) to the mounted pool as its new
    /// slowest tier; see the module docs for the order of steps. Refused on
    /// a read-only or frozen pool, and when the tier would break the order
    /// of tiers (the id one above the last tier's, no PM, nothing after an object tier, an
    /// object tier only after a block tier, speeds never rising).
    pub fn attach_tier(&self, rec: TierRecord, dev: Arc<dyn BlockMedia>) -> Result<(), String> {
        self.refuse_tier_change_read_only()?;
        self.refuse_while_removing()?;
        let appending = self.tiers.begin_append();
        let mut sb = self.sb.lock().clone();
        if let Some(why) = attach_problem(&sb.tiers, &rec) {
            return Err(why);
        }
        if !self.tiers.has_free_slot() {
            // Checked before the commit: the push below cannot fail then.
            return Err(crate::tier_list::slots_used_up());
        }
        let blocks = rec.size.min(dev.len()) / BLOCK_SIZE;
        let extent_blocks = (u64::from(rec.extent_size) / BLOCK_SIZE).max(1);
        if blocks < 2 * extent_blocks {
            return Err(format!(
                "the tier holds {blocks} blocks, fewer than two extents of {extent_blocks}"
            ));
        }
        let space = crate::tier::ExtentSpace::new(blocks, extent_blocks, Vec::new())?;
        let tier = crate::tier::BlockTier::new(
            terrace_format::TierId(rec.id),
            rec.kind,
            dev,
            space,
            crate::sums::BlockSums::new(blocks),
        );
        sb.tiers.push(rec);
        {
            // The commit point: both copies, then PM synced.
            let mut live = self.sb.lock();
            sb.generation = live.generation + 1;
            sb.clean = live.clean;
            // The inode table may have grown since the copy was taken.
            sb.inode_map_blocks = live.inode_map_blocks.clone();
            sb.version = sb.version.max(live.version);
            crate::mkfs::write_superblock(&*self.media, &sb);
            *live = sb;
        }
        self.media
            .sync_all()
            .map_err(|e| format!("cannot persist the superblock: {e}"))?;
        appending.push(tier)?;
        // An image on a full file system begins full (`note_full_hosts`).
        self.note_full_hosts();
        if self.fsync_left_to_kernel() {
            self.notice(
                "the kernel completes this mount's fsyncs itself (it was a pm-only pool when the first fsync came): writes are not cached in DRAM until the pool is remounted, so each is durable when it returns"
                    .to_string(),
            );
        }
        // Writers waiting for room may find it on the new tier.
        self.kick_migration();
        Ok(())
    }
}

impl Fs {
    /// The tier a removal is under way for (`terrace tier remove`: retired,
    /// its data moving off), if any.
    pub fn tier_being_removed(&self) -> Option<TierId> {
        self.tiers
            .iter()
            .find(|t| t.space.is_retiring())
            .map(|t| t.id)
    }

    /// Refuses a tier change while a removal is under way (see the module
    /// docs), in words that say when to try again.
    pub fn refuse_while_removing(&self) -> Result<(), String> {
        match self.tier_being_removed() {
            Some(id) => Err(format!(
                "tier {id} is being removed; try again when `terrace tier remove` ends"
            )),
            None => Ok(()),
        }
    }
}

/// The id a tier appended to `tiers` (the superblock's list) takes: one
/// above the last tier's. Ids are not positions: a tier removed before the
/// last leaves its id unused, and the tiers after it keep theirs (extents
/// name them).
pub fn next_tier_id(tiers: &[TierRecord]) -> u8 {
    tiers.last().map_or(0, |t| t.id.saturating_add(1))
}

/// Why `rec` cannot follow `tiers` (the superblock's list), if it cannot.
pub fn attach_problem(tiers: &[TierRecord], rec: &TierRecord) -> Option<String> {
    let last = tiers.last()?;
    if rec.kind == TierKind::Pm {
        return Some("a pool has exactly one pm tier, given at mkfs".into());
    }
    if tiers.len() >= terrace_format::MAX_TIERS {
        return Some(format!(
            "the pool has the most tiers a pool may have ({})",
            terrace_format::MAX_TIERS
        ));
    }
    let next = next_tier_id(tiers);
    if usize::from(next) >= terrace_format::MAX_TIERS {
        return Some(format!(
            "the pool's tier ids are used up: the last tier has id {}, the highest a tier may \
             have (ids of removed tiers before it are not reused; remove the last tier first)",
            last.id
        ));
    }
    if rec.id != next {
        return Some(format!("the new tier must have id {next}, not {}", rec.id));
    }
    if last.kind == TierKind::S3 {
        return Some("the pool's last tier is s3, and nothing may follow an object tier".into());
    }
    if rec.kind == TierKind::S3 && last.kind == TierKind::Pm {
        return Some(
            "an s3 tier needs an ssd or hdd tier before it (the object tier only takes data \
             that migration moves down)"
                .into(),
        );
    }
    if (rec.kind as u8) < (last.kind as u8) {
        return Some(format!(
            "tiers go from fastest to slowest (pm, ssd, hdd, s3), and the pool's last tier is {}: \
             an {} tier cannot follow it",
            last.kind.name(),
            rec.kind.name()
        ));
    }
    None
}
