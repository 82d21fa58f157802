//! Extent recycling on block tiers (NVMFS §III-D, "segment cleaning"):
//! when to recycle partly valid extents, which ones, and how well it went.
//!
//! A block tier is cut into extents written sequentially and never
//! overwritten while referenced; an overwrite or a reverse migration leaves
//! invalid blocks behind, and an extent is free again only when none of its
//! blocks is valid. Recycling moves the valid blocks of partly valid extents
//! elsewhere (NVMFS: to PM; the caller chooses) and frees the extents.
//!
//! # Extent use (what `terrace status` calls fragmentation)
//!
//! For the extents in use (at least one valid block; free extents and the
//! extent 0 header are not counted), with `V` valid blocks in all and `E`
//! blocks per extent:
//!
//! ```text
//! ideal extents  = ceil(V / E)          (the fewest extents that could hold V)
//! actual extents = extents in use
//! extent use     = ideal / actual       (≤ 100%; 100% = no fragmentation)
//! ```
//!
//! [`extent_use_percent`] computes it in whole percent, rounded down, exactly
//! as the core's `SpaceStats::fragmentation_pct` does. `actual − ideal` is the
//! number of extents recycling all of them could free
//! ([`reclaimable_extents`]).
//!
//! # When
//!
//! NVMFS recycles when both hold: (a) "the fragmentation ratio of SSD is over
//! a configurable threshold (ideal extent usage/actual extent usage)", and (b)
//! "the number of free SSD extents is fewer than a configurable threshold".
//! The ratio it defines *falls* as fragmentation grows, and condition (a) is
//! there so "that we do get some free space after recycling", so Terrace reads
//! (a) as extent use *below* [`CleanerParams::fragmentation_percent`]
//! (default 80%). (b) is free extents below [`CleanerParams::free_percent`]
//! of all extents (default 10%). See [`should_clean`]. When free space is
//! plentiful nothing is recycled, however fragmented the tier.
//!
//! # Which
//!
//! "We choose LRU (Least Recently Used) fragmented extents": candidates are
//! extents with some invalid blocks whose own use is below the same threshold
//! (`valid / total < fragmentation_percent`), least recently used first (ties
//! by extent id), at most [`CleanerParams::batch`] per round (NVMFS takes one
//! extent per round; a batch lets the caller fill whole destination extents).
//! See [`pick_victims`].
//!
//! # How well
//!
//! Cleaning efficiency = `1 − moved valid blocks / recycled blocks`: 1 when
//! the recycled extents were empty of live data, 0 when every block had to
//! move ([`cleaning_efficiency`]).

/// One block-tier extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtentInfo {
    /// Extent index on its tier.
    pub id: u64,
    /// Blocks still referenced by a live write entry.
    pub valid_blocks: u64,
    /// Blocks in the extent.
    pub total_blocks: u64,
    /// Last time the extent was written or read (ns).
    pub last_use_ns: u64,
}

/// The cleaner's tunables ([`crate::Settings::cleaner_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerParams {
    /// Recycle only while free extents are fewer than this share of all
    /// extents (percent; 0 = never).
    pub free_percent: u8,
    /// Recycle only while extent use (ideal / actual) is below this percent;
    /// an extent is a candidate when its own use is below it too.
    pub fragmentation_percent: u8,
    /// Most extents recycled per round.
    pub batch: usize,
}

impl Default for CleanerParams {
    fn default() -> Self {
        CleanerParams {
            free_percent: 10,
            fragmentation_percent: 80,
            batch: 8,
        }
    }
}

/// `(extents in use, valid blocks, blocks)` over the extents in use.
fn in_use(extents: &[ExtentInfo]) -> (u64, u128, u128) {
    extents
        .iter()
        .filter(|e| e.valid_blocks > 0)
        .fold((0, 0, 0), |(n, v, t), e| {
            (
                n + 1,
                v + u128::from(e.valid_blocks),
                t + u128::from(e.total_blocks.max(e.valid_blocks)),
            )
        })
}

/// Fewest extents that could hold the valid blocks: `ceil(V / E)`, with `E`
/// the mean size of the extents in use (all extents of a tier have one size).
fn ideal_extents(used: u64, valid: u128, total: u128) -> u64 {
    if total == 0 {
        return 0;
    }
    (valid * u128::from(used)).div_ceil(total) as u64
}

/// Extent use, ideal / actual extents in use, in whole percent (100 when no
/// extent is in use).
pub fn extent_use_percent(extents: &[ExtentInfo]) -> u64 {
    let (used, valid, total) = in_use(extents);
    if used == 0 {
        return 100;
    }
    ideal_extents(used, valid, total) * 100 / used
}

/// Extents recycling every extent in use would free: actual − ideal.
pub fn reclaimable_extents(extents: &[ExtentInfo]) -> u64 {
    let (used, valid, total) = in_use(extents);
    used - ideal_extents(used, valid, total)
}

/// Whether to recycle now: free extents (`free_extents` of `total_extents`)
/// below [`CleanerParams::free_percent`] *and* extent use below
/// [`CleanerParams::fragmentation_percent`].
pub fn should_clean(
    extents: &[ExtentInfo],
    free_extents: u64,
    total_extents: u64,
    p: &CleanerParams,
) -> bool {
    let short =
        u128::from(free_extents) * 100 < u128::from(p.free_percent) * u128::from(total_extents);
    short && extent_use_percent(extents) < u64::from(p.fragmentation_percent)
}

/// The extents to recycle in one round and what it costs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleaningPlan {
    /// Extent ids, least recently used first.
    pub victims: Vec<u64>,
    /// Valid blocks that must move.
    pub moved_blocks: u64,
    /// Blocks freed (the victims' sizes).
    pub recycled_blocks: u64,
}

impl CleaningPlan {
    /// The plan's cleaning efficiency ([`cleaning_efficiency`]).
    pub fn efficiency(&self) -> Option<f64> {
        cleaning_efficiency(self.moved_blocks, self.recycled_blocks)
    }
}

/// Least-recently-used fragmented extents: those with valid blocks, invalid
/// blocks, and use below [`CleanerParams::fragmentation_percent`], oldest
/// `last_use_ns` first, at most [`CleanerParams::batch`]. Does not check
/// [`should_clean`]; the caller does.
pub fn pick_victims(extents: &[ExtentInfo], p: &CleanerParams) -> CleaningPlan {
    let mut cands: Vec<&ExtentInfo> = extents
        .iter()
        .filter(|e| {
            e.valid_blocks > 0
                && e.valid_blocks < e.total_blocks
                && u128::from(e.valid_blocks) * 100
                    < u128::from(p.fragmentation_percent) * u128::from(e.total_blocks)
        })
        .collect();
    cands.sort_by_key(|e| (e.last_use_ns, e.id));
    cands.truncate(p.batch);
    CleaningPlan {
        victims: cands.iter().map(|e| e.id).collect(),
        moved_blocks: cands.iter().map(|e| e.valid_blocks).sum(),
        recycled_blocks: cands.iter().map(|e| e.total_blocks).sum(),
    }
}

/// `1 − moved / recycled`, or `None` when nothing was recycled.
pub fn cleaning_efficiency(moved_valid_blocks: u64, recycled_blocks: u64) -> Option<f64> {
    if recycled_blocks == 0 {
        return None;
    }
    Some(1.0 - moved_valid_blocks as f64 / recycled_blocks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(id: u64, valid: u64, last_use_ns: u64) -> ExtentInfo {
        ExtentInfo {
            id,
            valid_blocks: valid,
            total_blocks: 128,
            last_use_ns,
        }
    }

    #[test]
    fn extent_use_is_ideal_over_actual_extents() {
        // 3 extents in use, 192 valid blocks: ideal 2 → 66%.
        let e = [ext(1, 64, 0), ext(2, 64, 0), ext(3, 64, 0), ext(4, 0, 0)];
        assert_eq!(extent_use_percent(&e), 66);
        assert_eq!(reclaimable_extents(&e), 1);
        assert_eq!(extent_use_percent(&[ext(1, 128, 0), ext(2, 1, 0)]), 100);
        assert_eq!(extent_use_percent(&[]), 100);
        assert_eq!(reclaimable_extents(&[]), 0);
    }

    #[test]
    fn nothing_is_cleaned_while_free_space_is_plentiful() {
        let p = CleanerParams::default();
        let e = [ext(1, 1, 0), ext(2, 1, 0), ext(3, 1, 0)];
        assert!(!should_clean(&e, 10, 100, &p));
        assert!(should_clean(&e, 9, 100, &p));
        let never = CleanerParams {
            free_percent: 0,
            ..p
        };
        assert!(!should_clean(&e, 0, 100, &never));
    }

    #[test]
    fn nothing_is_cleaned_when_extents_are_well_used() {
        let p = CleanerParams::default();
        // 5 extents, 4.5 extents' worth of data: ideal 5, use 100%.
        let e = [
            ext(1, 128, 0),
            ext(2, 128, 0),
            ext(3, 128, 0),
            ext(4, 128, 0),
            ext(5, 64, 0),
        ];
        assert!(!should_clean(&e, 0, 100, &p));
    }

    #[test]
    fn cleaner_picks_lru_fragmented_extents_first() {
        let p = CleanerParams {
            batch: 2,
            ..CleanerParams::default()
        };
        let e = [
            ext(1, 10, 50), // fragmented, recent
            ext(2, 128, 0), // full: never
            ext(3, 120, 1), // 93% used: not a candidate
            ext(4, 60, 20), // fragmented, older
            ext(5, 0, 0),   // free
            ext(6, 30, 20), // fragmented, as old as 4: id breaks the tie
        ];
        let plan = pick_victims(&e, &p);
        assert_eq!(plan.victims, vec![4, 6]);
        assert_eq!(plan.moved_blocks, 90);
        assert_eq!(plan.recycled_blocks, 256);
        let eff = plan.efficiency().unwrap();
        assert!((eff - (1.0 - 90.0 / 256.0)).abs() < 1e-12);
    }

    #[test]
    fn efficiency_is_one_minus_moved_over_recycled() {
        assert_eq!(cleaning_efficiency(0, 128), Some(1.0));
        assert_eq!(cleaning_efficiency(128, 128), Some(0.0));
        assert_eq!(cleaning_efficiency(32, 128), Some(0.75));
        assert_eq!(cleaning_efficiency(0, 0), None);
    }
}
