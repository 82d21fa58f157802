//! Cold lists (Ziggurat's profiler) and how full each tier is.

use super::*;

impl Fs {
    /// Puts a file in (or takes it out of) the cold lists after its amtime
    /// changed. Called with the inode locked.
    pub(crate) fn relist(&self, i: &mut Inode) {
        let listed = i.kind == FileType::Regular && !i.zombie && i.attr.nlink > 0;
        let new = if listed { i.amtime.value() } else { None };
        let (clean, dirty) = i.extents.pm_clean_dirty();
        let new_pm = [new.filter(|_| dirty > 0), new.filter(|_| clean > 0)];
        let m = &self.migrator;
        let k = shard_index(i.ino, m.shards.len());
        if new != i.cold_key {
            m.shards[k].lock().update(i.ino, i.cold_key, new);
            i.cold_key = new;
        }
        for (list, key) in new_pm.into_iter().enumerate() {
            if key != i.pm_cold_keys[list] {
                m.pm_shards[list][k]
                    .lock()
                    .update(i.ino, i.pm_cold_keys[list], key);
                i.pm_cold_keys[list] = key;
            }
        }
    }

    /// Takes a file out of the cold lists (it is being freed).
    pub(crate) fn unlist(&self, i: &mut Inode) {
        let m = &self.migrator;
        let k = shard_index(i.ino, m.shards.len());
        if let Some(old) = i.cold_key.take() {
            m.shards[k].lock().update(i.ino, Some(old), None);
        }
        for list in 0..2 {
            if let Some(old) = i.pm_cold_keys[list].take() {
                m.pm_shards[list][k].lock().update(i.ino, Some(old), None);
            }
        }
    }

    /// Up to `n` coldest files `(amtime, ino)` that a drain of tier `from`
    /// in `mode` can work on, coldest first: on PM, files with data that has
    /// no copy (copying), with a clean copy (evicting), or either (moving);
    /// on other tiers, files with data anywhere.
    pub(crate) fn coldest_files(&self, from: u8, mode: Mode, n: usize) -> Vec<(u64, Ino)> {
        let m = &self.migrator;
        let lists: Vec<&Vec<Mutex<Shard>>> = match (from, mode) {
            (0, Mode::Copy) => vec![&m.pm_shards[0]],
            (0, Mode::Evict) => vec![&m.pm_shards[1]],
            (0, _) => vec![&m.pm_shards[0], &m.pm_shards[1]],
            _ => vec![&m.shards],
        };
        let mut all: Vec<(u64, Ino)> = Vec::new();
        for list in lists {
            for s in list {
                all.extend(s.lock().iter().take(n));
            }
        }
        all.sort_unstable();
        all.dedup();
        all.truncate(n);
        all
    }

    /// Used and total data bytes of tier `id`. On PM both leave out the
    /// blocks that hold logs: migration moves data, and logs stay on PM, so
    /// a PM that metadata fills beyond the threshold must not keep migration
    /// running with nothing to move (status shows metadata on its own line).
    pub(crate) fn tier_use(&self, id: u8) -> (u64, u64) {
        if id == 0 {
            let total = self.alloc.total();
            let meta = self.log_space.blocks().min(total);
            let used = (total - self.alloc.free()).saturating_sub(meta);
            (used * BS, (total - meta) * BS)
        } else if let Some(t) = self.tiers.iter().find(|t| t.id == id) {
            let st = t.space.stats();
            (
                st.valid_blocks * BS,
                (st.extents * t.space.extent_blocks()) * BS,
            )
        } else {
            (0, 0)
        }
    }

    /// PM use has reached its migration threshold now (dynamic or static).
    pub(crate) fn pm_over_threshold(&self) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let params = self.settings.read().migration_params();
        let threshold = mig::migration_threshold(params.threshold, self.io_counters());
        let (used, cap) = self.tier_use(0);
        cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(threshold)
    }

    /// PM use (as [`Fs::tier_use`] counts it) is at least `percent` of PM.
    pub(crate) fn pm_use_at_least(&self, percent: u8) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let (used, cap) = self.tier_use(0);
        cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(percent)
    }

    /// PM use passes the forced mark: migration is not keeping up, and the
    /// placement policies send asynchronous writes straight down
    /// (load-aware routing; synchronous writes keep PM while it has room).
    pub(crate) fn pm_forced(&self) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let forced = self.settings.read().migration_params().forced_percent;
        let (used, cap) = self.tier_use(0);
        cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(forced)
    }
}
