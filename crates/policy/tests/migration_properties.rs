//! Property tests of migration, cold lists, NVMFS lists and the cleaner:
//! each test is named by the property it checks.

use std::collections::BTreeMap;

use proptest::prelude::*;
use terrace_format::TierId;
use terrace_policy::cleaner::{
    extent_use_percent, pick_victims, reclaimable_extents, should_clean, CleanerParams, ExtentInfo,
};
use terrace_policy::cold_list::{coldest, ColdLists, Shard};
use terrace_policy::migration::{
    batch_groups, cold_entries, cold_entries_with, dynamic_threshold, group_entries, is_old,
    reverse_candidates, should_migrate, tier_amtime, EntrySnapshot, FileReads, FileSnapshot, Group,
    IoCounters, MigrationNeed, MigrationParams, BLOCK_BYTES,
};
use terrace_policy::nvmfs::{flush_pages, AdaptiveSplit, NvmfsParams, PageKind, SplitParams};
use terrace_policy::{migration_policy, migration_policy_names, Amtime, Settings};

/// A file's live entries: non-overlapping, in file order, with gaps, on tiers
/// 0 and 1.
fn entries() -> impl Strategy<Value = Vec<EntrySnapshot>> {
    prop::collection::vec((0u64..4, 1u64..40, 0u64..1000, 0u8..2), 0..30).prop_map(|v| {
        let mut at = 0;
        v.into_iter()
            .map(|(gap, blocks, mtime, tier)| {
                at += gap;
                let e = EntrySnapshot {
                    file_block: at,
                    blocks,
                    mtime_ns: mtime,
                    tier: TierId(tier),
                };
                at += blocks;
                e
            })
            .collect()
    })
}

fn file_of(entries: Vec<EntrySnapshot>, mtime_ns: u64) -> FileSnapshot {
    let amtime = Amtime::from_extents(entries.iter().map(|e| (e.blocks, e.mtime_ns)));
    FileSnapshot {
        ino: 1,
        mtime_ns,
        amtime_ns: amtime.value(),
        entries,
    }
}

proptest! {
    #[test]
    fn dynamic_threshold_is_clamped_and_monotone_in_read_ratio(
        reads in 0u64..u64::MAX / 2, writes in 0u64..u64::MAX / 2, more in 0u64..1 << 40,
    ) {
        let t = dynamic_threshold(IoCounters { reads, writes });
        prop_assert!((50..=90).contains(&t));
        let more_reads = dynamic_threshold(IoCounters { reads: reads + more, writes });
        let more_writes = dynamic_threshold(IoCounters { reads, writes: writes + more });
        prop_assert!(more_reads >= t);
        prop_assert!(more_writes <= t);
    }

    #[test]
    fn migration_need_frees_enough_to_go_below_threshold(
        capacity in 1u64..1 << 40, used_share in 0u64..=1000, threshold in 1u8..100,
        forced in 50u8..=100, running: bool,
    ) {
        let used = (u128::from(capacity) * u128::from(used_share) / 1000) as u64;
        let need = should_migrate(used, capacity, threshold, forced, running);
        let limit = (u128::from(capacity) * u128::from(threshold.min(forced)) / 100) as u64;
        let forced_limit = (u128::from(capacity) * u128::from(forced) / 100) as u64;
        prop_assert_eq!(need.is_forced(), used > forced_limit && used > 0);
        if need.is_needed() {
            prop_assert!(used - need.bytes_to_free() < limit.max(1));
            prop_assert!(used >= limit);
        } else {
            prop_assert!(used <= limit);
        }
        // A running migration continues wherever a stopped one would start.
        if should_migrate(used, capacity, threshold, forced, false).is_needed() {
            prop_assert!(should_migrate(used, capacity, threshold, forced, true).is_needed());
        }
    }

    #[test]
    fn cold_choice_is_whole_tier_when_old_else_entries_before_amtime(
        es in entries(), mtime in 0u64..1000, now in 0u64..2000, age in 0u64..1000, tier in (0u8..2).prop_map(TierId),
    ) {
        let f = file_of(es.clone(), mtime);
        let c = cold_entries(&f, tier, now, age);
        prop_assert_eq!(c.whole_file, is_old(mtime, now, age));
        let on_tier: Vec<EntrySnapshot> = es.iter().filter(|e| e.tier == tier).copied().collect();
        if c.whole_file {
            prop_assert_eq!(&c.entries, &on_tier);
        } else {
            let a = f.amtime_ns.unwrap_or(0);
            let mut want: Vec<EntrySnapshot> =
                on_tier.iter().filter(|e| e.mtime_ns < a).copied().collect();
            if want.is_empty() {
                // Fallback: older than the average of the tier's own blocks.
                if let Some(t) = tier_amtime(&f, tier) {
                    want = on_tier.iter().filter(|e| e.mtime_ns < t).copied().collect();
                }
            }
            if want.is_empty() {
                // Truncated averages: the oldest entries, if not all are equal.
                let lo = on_tier.iter().map(|e| e.mtime_ns).min();
                let hi = on_tier.iter().map(|e| e.mtime_ns).max();
                if lo < hi {
                    want = on_tier.iter().filter(|e| Some(e.mtime_ns) == lo).copied().collect();
                }
            }
            prop_assert_eq!(&c.entries, &want);
            // Whenever the tier holds entries of different ages, something
            // older than the rest is chosen: migration never stalls on them.
            let ages: std::collections::BTreeSet<u64> = on_tier.iter().map(|e| e.mtime_ns).collect();
            if ages.len() > 1 {
                prop_assert!(!c.entries.is_empty());
            }
            // A drain's second round takes a file whose blocks there all have
            // one age whole: nothing on the tier is left unchoosable.
            let second = MigrationParams { whole_when_uniform: true, ..MigrationParams::default() };
            let c2 = cold_entries_with(&f, tier, now, &MigrationParams { age_ns: age, ..second });
            if on_tier.iter().any(|e| e.blocks > 0) {
                prop_assert!(!c2.entries.is_empty());
            }
        }
    }

    #[test]
    fn every_policy_chooses_only_entries_of_the_tier(
        es in entries(), mtime in 0u64..1000, now in 0u64..2000, tier in (0u8..2).prop_map(TierId),
    ) {
        let f = file_of(es.clone(), mtime);
        for name in migration_policy_names() {
            let c = migration_policy(name).unwrap().choose(&f, tier, now, &MigrationParams::default());
            for e in &c.entries {
                prop_assert!(e.tier == tier && es.contains(e), "{} chose {:?}", name, e);
            }
        }
    }

    #[test]
    fn groups_never_exceed_group_size_nor_merge_non_adjacent_entries(
        es in entries(), group_blocks in 1u64..64,
    ) {
        let groups = group_entries(&es, group_blocks);
        // Every block of every entry lands in exactly one group, unchanged.
        let mut want: BTreeMap<u64, (u64, TierId)> = BTreeMap::new();
        for e in &es {
            for b in e.file_block..e.end() {
                want.insert(b, (e.mtime_ns, e.tier));
            }
        }
        let mut got: BTreeMap<u64, (u64, TierId)> = BTreeMap::new();
        let mut prev_end = None;
        for g in &groups {
            prop_assert!(g.blocks >= 1 && g.blocks <= group_blocks);
            if let Some(p) = prev_end {
                prop_assert!(g.file_block >= p, "groups out of file order");
            }
            prev_end = Some(g.file_block + g.blocks);
            let mut at = g.file_block;
            for s in &g.sources {
                prop_assert_eq!(s.file_block, at, "sources must tile the group");
                prop_assert_eq!(s.tier, g.sources[0].tier);
                // A source piece lies within one original entry.
                prop_assert!(es.iter().any(|e| e.file_block <= s.file_block
                    && s.end() <= e.end() && e.mtime_ns == s.mtime_ns && e.tier == s.tier));
                for b in s.file_block..s.end() {
                    prop_assert!(got.insert(b, (s.mtime_ns, s.tier)).is_none());
                }
                at = s.end();
            }
            prop_assert_eq!(at, g.file_block + g.blocks);
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn batches_keep_every_group_once_in_order_within_group_size(
        es in entries(), group_blocks in 1u64..64,
    ) {
        let groups = group_entries(&es, group_blocks);
        let batches = batch_groups(&groups, group_blocks);
        for b in &batches {
            prop_assert!(!b.is_empty());
            let total: u64 = b.iter().map(|g| g.blocks).sum();
            prop_assert!(total <= group_blocks, "batch of {} blocks", total);
        }
        let flat: Vec<Group> = batches.into_iter().flatten().collect();
        prop_assert_eq!(flat, groups);
    }

    #[test]
    fn reverse_candidates_fit_below_low_mark_hottest_first(
        files in prop::collection::vec((0u64..100, 0u64..200, 0u64..50), 0..20),
        reads in 0u64..1000, writes in 0u64..1000, pm_used in 0u64..(8 << 20),
    ) {
        let files: Vec<FileReads> = files.into_iter().enumerate()
            .map(|(i, (b, r, _))| FileReads { ino: i as u64, block_tier_blocks: b, reads: r })
            .collect();
        let p = MigrationParams::default();
        let cap = 8u64 << 20;
        let got = reverse_candidates(IoCounters { reads, writes }, pm_used, cap, &files, &p);
        let bytes: u64 = got.iter().map(|f| f.block_tier_blocks * BLOCK_BYTES).sum();
        prop_assert!(pm_used + bytes <= cap / 2 || got.is_empty());
        prop_assert!(got.windows(2).all(|w| w[0].reads >= w[1].reads));
        prop_assert!(got.iter().all(|f| f.reads > 0));
        if reads < 4 * writes || reads == 0 {
            prop_assert!(got.is_empty());
        }
    }

    #[test]
    fn cold_lists_return_the_coldest_file_over_all_shards(
        ops in prop::collection::vec((0u64..40, prop::option::of(0u64..1000)), 0..200),
        shards in 1usize..6,
    ) {
        let mut lists = ColdLists::new(shards);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        for (ino, amtime) in ops {
            let old = model.get(&ino).copied();
            lists.update(ino, old, amtime);
            match amtime {
                Some(a) => { model.insert(ino, a); }
                None => { model.remove(&ino); }
            }
            let want = model.iter().map(|(&i, &a)| (a, i)).min();
            prop_assert_eq!(lists.coldest(), want);
            let all: Vec<&Shard> = (0..lists.shards()).map(|i| lists.shard(i)).collect();
            prop_assert_eq!(coldest(&all), want);
            prop_assert_eq!(lists.len(), model.len());
        }
    }

    #[test]
    fn adaptive_split_stays_within_bounds_and_moves_toward_more_hits_per_page(
        windows in prop::collection::vec((0u64..100, 0u64..100, 0u64..1000, 0u64..1000), 1..50),
        min in 0u8..50, max in 50u8..=100, step in 0u8..30,
    ) {
        let p = SplitParams { min_percent: min, max_percent: max, step_percent: step, initial_percent: 50 };
        let mut s = AdaptiveSplit::new(&p, 0);
        for (t, (ch, dh, cp, dp)) in windows.into_iter().enumerate() {
            let before = s.dirty_percent();
            for _ in 0..ch { s.on_hit(PageKind::Clean); }
            for _ in 0..dh { s.on_hit(PageKind::Dirty); }
            let after = s.on_window_end(cp, dp, t as u64, &p);
            prop_assert!((min..=max).contains(&after));
            let (c, d) = (u128::from(ch) * u128::from(dp.max(1)), u128::from(dh) * u128::from(cp.max(1)));
            if d > c { prop_assert!(after >= before); }
            if c > d { prop_assert!(after <= before); }
            prop_assert_eq!(s.hits(), (0, 0));
        }
    }

    #[test]
    fn flush_runs_between_the_marks(
        dirty in 0u64..1000, target in 0u64..1000, running: bool,
    ) {
        let p = NvmfsParams::default();
        let n = flush_pages(dirty, target, running, &p);
        let low = target * 50 / 100;
        if n > 0 {
            prop_assert_eq!(dirty - n, low);
        }
        if !running && dirty * 100 < 80 * target {
            prop_assert_eq!(n, 0);
        }
    }

    #[test]
    fn cleaner_takes_lru_fragmented_extents_and_only_when_short_of_space(
        ext in prop::collection::vec((0u64..=128, 0u64..1000), 0..40),
        free in 0u64..100, batch in 0usize..10,
    ) {
        let extents: Vec<ExtentInfo> = ext.iter().enumerate()
            .map(|(i, &(v, t))| ExtentInfo { id: i as u64, valid_blocks: v, total_blocks: 128, last_use_ns: t })
            .collect();
        let p = CleanerParams { batch, ..CleanerParams::default() };
        let plan = pick_victims(&extents, &p);
        prop_assert!(plan.victims.len() <= batch);
        let is_cand = |e: &ExtentInfo| e.valid_blocks > 0 && e.valid_blocks * 100 < 80 * 128;
        let victims: Vec<&ExtentInfo> = plan.victims.iter().map(|&id| &extents[id as usize]).collect();
        prop_assert!(victims.iter().all(|e| is_cand(e)));
        prop_assert!(victims.windows(2).all(|w| (w[0].last_use_ns, w[0].id) < (w[1].last_use_ns, w[1].id)));
        if let Some(last) = victims.last() {
            for e in extents.iter().filter(|e| is_cand(e) && !plan.victims.contains(&e.id)) {
                prop_assert!((e.last_use_ns, e.id) > (last.last_use_ns, last.id));
            }
        }
        if let Some(eff) = plan.efficiency() {
            prop_assert!((0.0..=1.0).contains(&eff));
        }
        let total = 100;
        if free * 100 >= 10 * total {
            prop_assert!(!should_clean(&extents, free, total, &p));
        }
        prop_assert!(extent_use_percent(&extents) <= 100);
        let used = extents.iter().filter(|e| e.valid_blocks > 0).count() as u64;
        prop_assert!(reclaimable_extents(&extents) <= used);
    }

    #[test]
    fn percent_settings_round_trip_their_text(v in 0u8..=100) {
        for key in [
            "migration_forced_percent", "migration_block_threshold", "reverse_pm_low_percent",
            "cleaner_free_percent",
            "cleaner_fragmentation_percent", "migration_threshold",
        ] {
            let mut s = Settings::default();
            if s.set(key, &v.to_string()).is_ok() {
                let text = s.get(key).unwrap();
                let mut t = Settings::default();
                t.set(key, &text).unwrap();
                prop_assert_eq!(&t, &s);
            }
        }
    }
}

#[test]
fn forced_need_is_a_need() {
    let n = MigrationNeed::Forced { bytes_to_free: 3 };
    assert!(n.is_needed() && n.is_forced());
    assert_eq!(n.bytes_to_free(), 3);
    assert_eq!(MigrationNeed::None.bytes_to_free(), 0);
}
