//! Cleaning of an object tier's parts (design §5n, "Object cleaning"): which
//! partly dead parts to rewrite, and how much at a time.
//!
//! An object tier stores data in immutable *parts*. A delete or an overwrite
//! makes some of a part's blocks dead, but the object keeps costing its full
//! size until every block in it is dead. Cleaning copies the live blocks of a
//! mostly dead part into new parts (with the migration mechanism), after which
//! the old part is entirely dead and is deleted. This module is the choice
//! only; the core does the moving.
//!
//! # Which parts
//!
//! A part is a *candidate* when it has live blocks and its live fraction
//! `u = live / stored` is below [`ObjectCleanParams::live_percent`] (default
//! 50%). Parts with no live block are not candidates: they are deleted
//! without any copying.
//!
//! Candidates are taken in order of LFS's cost-benefit ratio adapted to
//! objects (Rosenblum and Ousterhout 1992): LFS reads a whole segment and
//! writes its live part, cost `1 + u`; an object tier reads only the live
//! blocks (ranged GETs) and writes them again, cost `2u`. The benefit is the
//! space won, `1 − u`, weighted by the part's age (older data is colder and
//! less likely to die on its own soon, so space won there stays won):
//!
//! ```text
//! score = (1 − u) · (age + 1 s) / (2u)
//! ```
//!
//! so the emptiest and oldest parts go first; ties by part id (upload order).
//!
//! # How much
//!
//! A pass rewrites at most [`ObjectCleanParams::bytes_per_pass`] bytes of live
//! data (greedily: a candidate that does not fit the rest of the budget is
//! skipped, a smaller one after it may still fit). The core runs a pass at
//! most once per [`ObjectCleanParams::interval_ns`], so cleaning never takes
//! more than `bytes_per_pass / interval` of the store's bandwidth.
//!
//! # Why 50%
//!
//! With threshold `t`, every part cleaned frees its whole size by rewriting
//! at most `t` of it: cleaning efficiency `1 − rewritten / reclaimed` is at
//! least `1 − t` (0.5: every byte rewritten wins at least one byte back, net).
//! And parts left alone are at least `t` live, so the dead bytes stored stay
//! below `(1 − t) / t` of the live bytes of the parts that hold them (at 50%,
//! at most one dead byte per live byte: the bucket holds at most twice the
//! live data, once cleaning caught up). A higher threshold stores less dead
//! data but rewrites more for each byte won back (at 80%: up to 4 bytes per
//! byte); a lower one the reverse.

use crate::cleaner::cleaning_efficiency;

/// One part of an object tier, as the choice needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartUsage {
    /// The part's id (its upload number: larger is newer).
    pub id: u64,
    /// Blocks in the object.
    pub stored_blocks: u64,
    /// Blocks of it that still hold live data.
    pub live_blocks: u64,
    /// Seconds since it was uploaded.
    pub age_secs: u64,
}

/// The object cleaner's tunables ([`crate::Settings::object_clean_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectCleanParams {
    /// Parts less live than this percentage are cleaned (0 = never).
    pub live_percent: u8,
    /// Most live bytes rewritten per pass (0 = never).
    pub bytes_per_pass: u64,
    /// Least time between two passes (ns).
    pub interval_ns: u64,
}

impl Default for ObjectCleanParams {
    fn default() -> Self {
        ObjectCleanParams {
            live_percent: 50,
            bytes_per_pass: 64 << 20,
            interval_ns: 5_000_000_000,
        }
    }
}

/// Whether `p` is worth cleaning: some of it is live, and less than
/// `live_percent` of it.
pub fn is_candidate(p: &PartUsage, params: &ObjectCleanParams) -> bool {
    p.live_blocks > 0
        && p.live_blocks < p.stored_blocks
        && u128::from(p.live_blocks) * 100
            < u128::from(params.live_percent) * u128::from(p.stored_blocks)
}

/// The cost-benefit score of a candidate (module docs): higher goes first.
pub fn score(p: &PartUsage) -> f64 {
    let u = p.live_blocks as f64 / p.stored_blocks.max(1) as f64;
    (1.0 - u) * (p.age_secs as f64 + 1.0) / (2.0 * u.max(f64::MIN_POSITIVE))
}

/// What one pass cleans.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectCleanPlan {
    /// Part ids, in the order chosen.
    pub parts: Vec<u64>,
    /// Live blocks to rewrite.
    pub rewrite_blocks: u64,
    /// Blocks the chosen parts store (won back once they are deleted).
    pub reclaim_blocks: u64,
}

impl ObjectCleanPlan {
    /// The plan's cleaning efficiency, `1 − rewritten / reclaimed`.
    pub fn efficiency(&self) -> Option<f64> {
        cleaning_efficiency(self.rewrite_blocks, self.reclaim_blocks)
    }
}

/// The parts one pass cleans: candidates by descending [`score`] (ties by
/// id), as long as their live blocks fit in `bytes_per_pass` (blocks of
/// `block_size` bytes).
pub fn pick_parts(
    parts: &[PartUsage],
    params: &ObjectCleanParams,
    block_size: u64,
) -> ObjectCleanPlan {
    let mut cands: Vec<(f64, &PartUsage)> = parts
        .iter()
        .filter(|p| is_candidate(p, params))
        .map(|p| (score(p), p))
        .collect();
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let budget = params.bytes_per_pass / block_size.max(1);
    let mut plan = ObjectCleanPlan::default();
    for (_, p) in cands {
        if plan.rewrite_blocks + p.live_blocks > budget {
            continue;
        }
        plan.parts.push(p.id);
        plan.rewrite_blocks += p.live_blocks;
        plan.reclaim_blocks += p.stored_blocks;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u64 = 4096;

    fn part(id: u64, live: u64, stored: u64, age_secs: u64) -> PartUsage {
        PartUsage {
            id,
            stored_blocks: stored,
            live_blocks: live,
            age_secs,
        }
    }

    fn params(live_percent: u8, bytes_per_pass: u64) -> ObjectCleanParams {
        ObjectCleanParams {
            live_percent,
            bytes_per_pass,
            interval_ns: 0,
        }
    }

    #[test]
    fn only_partly_dead_parts_under_the_threshold_are_candidates() {
        let p = params(50, u64::MAX);
        assert!(is_candidate(&part(1, 1, 100, 0), &p));
        assert!(is_candidate(&part(1, 49, 100, 0), &p));
        assert!(
            !is_candidate(&part(1, 50, 100, 0), &p),
            "50% is not under 50%"
        );
        assert!(
            !is_candidate(&part(1, 0, 100, 0), &p),
            "dead parts are deleted, not cleaned"
        );
        assert!(!is_candidate(&part(1, 100, 100, 0), &p));
        assert!(!is_candidate(&part(1, 1, 100, 0), &params(0, u64::MAX)));
        assert!(is_candidate(&part(1, 99, 100, 0), &params(100, u64::MAX)));
    }

    #[test]
    fn candidates_go_by_cost_benefit() {
        let p = params(50, u64::MAX);
        let parts = [
            part(1, 40, 100, 10), // 0.6 · 11 / 0.8 = 8.25
            part(2, 10, 100, 10), // 0.9 · 11 / 0.2 = 49.5
            part(3, 40, 100, 99), // 0.6 · 100 / 0.8 = 75: old enough to beat 2
            part(4, 60, 100, 99), // over the threshold
            part(5, 0, 100, 99),  // dead
        ];
        let plan = pick_parts(&parts, &p, BS);
        assert_eq!(plan.parts, vec![3, 2, 1]);
        assert_eq!(plan.rewrite_blocks, 90);
        assert_eq!(plan.reclaim_blocks, 300);
        let eff = plan.efficiency().unwrap();
        assert!((eff - 0.7).abs() < 1e-12, "{eff}");
    }

    #[test]
    fn equal_scores_go_in_upload_order() {
        let parts = [part(9, 5, 10, 0), part(3, 5, 10, 0), part(7, 5, 10, 0)];
        assert_eq!(
            pick_parts(&parts, &params(60, u64::MAX), BS).parts,
            vec![3, 7, 9]
        );
    }

    #[test]
    fn a_pass_rewrites_at_most_its_budget() {
        // Budget of 100 blocks: 60 fits, 50 does not after it, 30 does.
        let parts = [
            part(1, 60, 1000, 50),
            part(2, 50, 1000, 40),
            part(3, 30, 1000, 1),
        ];
        let plan = pick_parts(&parts, &params(50, 100 * BS), BS);
        assert_eq!(plan.parts, vec![1, 3]);
        assert_eq!(plan.rewrite_blocks, 90);
        assert!(pick_parts(&parts, &params(50, 0), BS).parts.is_empty());
        assert!(pick_parts(&parts, &params(50, 29 * BS), BS)
            .parts
            .is_empty());
    }

    #[test]
    fn efficiency_is_at_least_one_minus_the_threshold() {
        // Every candidate is under t live, so the plan's efficiency ≥ 1 − t.
        for t in [10u8, 50, 80] {
            let parts: Vec<PartUsage> = (1..200)
                .map(|i| part(i, (i * 37) % 101, 100, i % 7))
                .collect();
            let plan = pick_parts(&parts, &params(t, u64::MAX), BS);
            assert!(!plan.parts.is_empty());
            assert!(plan.efficiency().unwrap() >= 1.0 - f64::from(t) / 100.0);
        }
        assert_eq!(ObjectCleanPlan::default().efficiency(), None);
    }

    #[test]
    fn score_prefers_emptier_then_older() {
        assert!(score(&part(1, 10, 100, 0)) > score(&part(2, 40, 100, 0)));
        assert!(score(&part(1, 40, 100, 100)) > score(&part(2, 40, 100, 0)));
        assert!(score(&part(1, 1, 100, 0)).is_finite());
    }
}
