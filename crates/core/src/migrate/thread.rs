//! The migration thread: start, wake, stop.

use super::*;

impl Fs {
    /// Starts the migration thread: a pass every 100 ms (or when kicked;
    /// after a pass that moved nothing — target full, or nothing qualifies —
    /// kicks wait for the next tick, so it never spins on them), each
    /// followed by object cleaning (at most once per
    /// `object_clean_interval_ns`), the deletes of dead parts and online
    /// discard (at most once per `discard_interval_ns`); stops at
    /// [`Fs::unmount`].
    pub fn start_migration(self: &Arc<Self>) {
        crate::worker::Worker::start(
            self,
            "terrace-migrate",
            Duration::from_millis(100),
            |fs| &fs.migrator.worker,
            |fs| {
                fs.migrator.passes.fetch_add(1, Ordering::Relaxed);
                let moved = fs.migration_pass() > 0;
                fs.maybe_clean_object_tiers();
                fs.reclaim_object_tiers();
                fs.maybe_discard_free();
                moved
            },
        );
    }

    /// Deletes the dead parts of object tiers — parts all of whose blocks
    /// frees trimmed — now rather than at the tier's next upload
    /// (`delete_dead`: deletes only; a `sync` here would also upload a
    /// mover's half-copied window, cutting its segment in two, design
    /// §5n). Run by the migration thread after each pass; a failed delete
    /// stays queued.
    pub fn reclaim_object_tiers(&self) {
        for t in &self.tiers {
            if t.media
                .object_tier_stats()
                .is_some_and(|s| s.dead_parts > 0)
            {
                let _ = t.media.delete_dead();
            }
        }
    }

    /// Whether the migration thread runs (so waiting for it can help).
    pub(crate) fn migration_thread_running(&self) -> bool {
        self.migrator.worker.running()
    }

    /// Wakes the migration thread (PM passed its threshold).
    pub(crate) fn kick_migration(&self) {
        self.migrator.worker.kick();
    }

    /// Stops the migration thread (if running) and waits for it.
    pub(crate) fn stop_migration(&self) {
        self.migrator.worker.stop();
    }
}

impl Fs {
    /// Whether migration is draining a tier into an object tier right now:
    /// room on the tiers above the object tier is on its way, so a
    /// write-back short of it waits for a window of moves rather than
    /// overflow into a small object of its own (`writeback.rs`).
    pub(crate) fn draining_into_object_tier(&self) -> bool {
        if !self.migration_thread_running() {
            return false;
        }
        let running = self.migrator.running.load(Ordering::Relaxed);
        let mut from = terrace_format::TierId::PM;
        for t in self.tiers.iter() {
            if t.kind == terrace_format::TierKind::S3 && running & (1u64 << from.get()) != 0 {
                return true;
            }
            from = t.id;
        }
        false
    }
}
