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
        let new_tiers = if new.is_some() {
            i.extents.block_tier_mask()
        } else {
            0
        };
        let m = &self.migrator;
        let k = shard_index(i.ino, m.pm_shards[0].len());
        if (new, new_tiers) != (i.cold_key, i.cold_tiers) {
            for (t, list) in m.tier_shards.iter().enumerate().skip(1) {
                let bit = 1u8 << t;
                let old = i.cold_key.filter(|_| i.cold_tiers & bit != 0);
                let key = new.filter(|_| new_tiers & bit != 0);
                if old != key {
                    list[k].lock().update(i.ino, old, key);
                }
            }
            i.cold_key = new;
            i.cold_tiers = new_tiers;
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
        let k = shard_index(i.ino, m.pm_shards[0].len());
        if let Some(old) = i.cold_key.take() {
            for (t, list) in m.tier_shards.iter().enumerate().skip(1) {
                if i.cold_tiers & 1 << t != 0 {
                    list[k].lock().update(i.ino, Some(old), None);
                }
            }
        }
        i.cold_tiers = 0;
        for list in 0..2 {
            if let Some(old) = i.pm_cold_keys[list].take() {
                m.pm_shards[list][k].lock().update(i.ino, Some(old), None);
            }
        }
    }

    /// Up to `n` coldest files `(amtime, ino)` that a drain of tier `from`
    /// in `mode` can work on, coldest first: on PM, files with data that has
    /// no copy (copying), with a clean copy (evicting), or either (moving);
    /// on other tiers, files with data (not only clean copies) there.
    pub(crate) fn coldest_files(&self, from: TierId, mode: Mode, n: usize) -> Vec<(u64, Ino)> {
        let m = &self.migrator;
        let lists: Vec<&Vec<Mutex<Shard>>> = match (from, mode) {
            (TierId::PM, Mode::Copy) => vec![&m.pm_shards[0]],
            (TierId::PM, Mode::Evict) => vec![&m.pm_shards[1]],
            (TierId::PM, _) => vec![&m.pm_shards[0], &m.pm_shards[1]],
            _ => m.tier_shards.get(from.index()).into_iter().collect(),
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
    pub(crate) fn tier_use(&self, id: TierId) -> (u64, u64) {
        if id.is_pm() {
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

    /// A key of the pool's room that changes whenever a block is taken or
    /// freed on any tier: background jobs that found nothing to do look again
    /// at once when it moved ([`IdleBackoff`](crate::worker::IdleBackoff)).
    pub(crate) fn room_key(&self) -> u64 {
        self.tiers
            .iter()
            .fold(self.alloc.free(), |k, t| k.wrapping_add(t.room_blocks()))
    }

    /// Bytes of data tier `id` takes before its use (as [`Fs::tier_use`]
    /// counts it) reaches `percent` of its capacity.
    pub(crate) fn room_below(&self, id: TierId, percent: u8) -> u64 {
        let (used, cap) = self.tier_use(id);
        let mark = u128::from(cap) * u128::from(percent) / 100;
        (mark as u64).saturating_sub(used)
    }

    /// Where PM use stands against its marks, from one look at its use
    /// (a write's placement needs all three): the migration threshold
    /// (dynamic or static), the forced mark — past it migration is not
    /// keeping up and asynchronous writes go straight down (load-aware
    /// routing) — and the bulk limit `bulk_percent`; and the room left
    /// below the forced mark, which data pinned to PM may take (beyond
    /// twice the metadata reserve, `Fs::pm_pin_room_bytes`).
    pub(crate) fn pm_marks(&self, params: &mig::MigrationParams, bulk_percent: u8) -> PmMarks {
        if self.tiers.is_empty() {
            return PmMarks::default();
        }
        let threshold = mig::migration_threshold(params.threshold, self.io_counters());
        let (used, cap) = self.tier_use(TierId::PM);
        let at_least = |p: u8| cap > 0 && u128::from(used) * 100 >= u128::from(cap) * u128::from(p);
        PmMarks {
            over_threshold: at_least(threshold),
            forced: at_least(params.forced_percent),
            over_bulk_limit: at_least(bulk_percent),
            below_forced_bytes: self.pm_pin_room_bytes(params.forced_percent),
        }
    }
}

/// PM use against its marks ([`Fs::pm_marks`]); all false without block tiers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PmMarks {
    /// At or past the migration threshold.
    pub over_threshold: bool,
    /// At or past the forced mark.
    pub forced: bool,
    /// At or past the bulk limit (`placement_bulk_pm_percent`).
    pub over_bulk_limit: bool,
    /// Bytes of data pinned to PM that PM takes: before the forced mark,
    /// beyond twice the metadata reserve.
    pub below_forced_bytes: u64,
}
