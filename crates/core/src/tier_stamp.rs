//! Stamping the block tiers with a new epoch at mount, thaw and clean
//! unmount (`tier_epoch.rs` says why and checks; design.md §3.2 "Stale PM
//! tiers").
//!
//! Lock order: the superblock lock (a leaf) is taken and released around
//! each superblock write; no lock is held across the header writes.

use crate::fs::Fs;
use crate::tier_epoch::{new_epoch, stamped_header};
use terrace_format::TierHeader;

impl Fs {
    /// [`Fs::advance_tier_epochs`], a failure said in the daemon's log
    /// rather than returned: mount, thaw and unmount go on (the epoch
    /// stays pending, which every header accepts, and a failing tier is
    /// handled as any device error).
    pub(crate) fn stamp_tiers_or_say_why(&self) {
        if let Err(e) = self.advance_tier_epochs() {
            self.notice(format!(
                "cannot stamp the block tiers' headers with a new epoch ({e}): a copy of the \
                 PM tier taken before now is not told apart from this one until a later \
                 mount, read-write remount or unmount stamps them"
            ));
        }
    }

    /// Writes a new epoch into the headers of the stamped block tiers and
    /// their records (module docs, steps 1–3). Nothing on a read-only pool
    /// or one without stamped tiers. An error leaves the epoch pending in
    /// the superblock, where it is accepted.
    ///
    /// An epoch left pending by a stamping cut short is finished first
    /// (headers that have it must stay accepted), then a fresh one is
    /// stamped: a copy of PM taken while it was pending holds it too, and
    /// reusing it as the new epoch let that copy mount against tiers the
    /// original had changed since.
    pub(crate) fn advance_tier_epochs(&self) -> std::io::Result<()> {
        if self.sb.lock().next_tier_epoch != 0 {
            self.stamp_tiers_once()?;
        }
        self.stamp_tiers_once()
    }

    /// One stamping: the pending epoch, or a new one if none is pending.
    fn stamp_tiers_once(&self) -> std::io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        let sb = self.sb.lock().clone();
        let stamped: Vec<(&crate::tier::BlockTier, TierHeader)> = self
            .tiers
            .iter()
            .filter_map(|t| stamped_header(&sb, t.id.get(), t.kind, &*t.media).map(|h| (t, h)))
            .collect();
        if stamped.is_empty() {
            return Ok(());
        }
        // Only attach and detach change the tier list, and they do not run
        // at mount, thaw or unmount: `stamped` stays the tiers of `sb`.
        let next = {
            let mut sb = self.sb.lock();
            if sb.next_tier_epoch == 0 {
                sb.next_tier_epoch = new_epoch();
                sb.generation += 1;
                crate::mkfs::write_superblock(&*self.media, &sb);
            }
            sb.next_tier_epoch
        };
        for (t, mut h) in stamped.iter().cloned() {
            h.epoch = next;
            t.media.write_blocks(0, &h.encode())?;
            t.media.sync()?;
        }
        let mut sb = self.sb.lock();
        for rec in sb.tiers.iter_mut() {
            if stamped.iter().any(|(t, _)| t.id.get() == rec.id) {
                rec.epoch = next;
            }
        }
        sb.next_tier_epoch = 0;
        sb.generation += 1;
        crate::mkfs::write_superblock(&*self.media, &sb);
        Ok(())
    }
}
