//! Property tests of the predictors, amtime, placement and settings: each test
//! is named by the property it checks.

use proptest::prelude::*;
use terrace_format::TierId;
use terrace_policy::settings::{format_duration, format_size, parse_duration, parse_size};
use terrace_policy::AccessClass;
use terrace_policy::{
    is_large, next_counter, placement_policy, placement_policy_names, predecessor, Amtime,
    Placement, SizeParams, SyncParams, SyncPredictor, TierRule, WriteObservation, PM_TIER,
};

/// One event seen by a synchronicity predictor.
#[derive(Debug, Clone)]
enum Event {
    Write { bytes: u64, o_sync: bool },
    Fsync,
}

fn events() -> impl Strategy<Value = Vec<(Event, u64)>> {
    // (event, time step in ns) with steps that sometimes exceed the idle period.
    let event = prop_oneof![
        4 => (1u64..(3 << 20), prop::bool::weighted(0.1))
            .prop_map(|(bytes, o_sync)| Event::Write { bytes, o_sync }),
        1 => Just(Event::Fsync),
    ];
    let step = prop_oneof![9 => 0u64..2_000_000_000, 1 => 0u64..100_000_000_000];
    prop::collection::vec((event, step), 0..200)
}

fn sync_params() -> impl Strategy<Value = SyncParams> {
    (0u64..(8 << 20), 0u64..60_000_000_000).prop_map(|(threshold_bytes, idle_reset_ns)| {
        SyncParams {
            threshold_bytes,
            idle_reset_ns,
        }
    })
}

/// Replays `evs` (events and time steps) into a new predictor, calling
/// `check` after each event with the predictor, the time and, for a write,
/// what `on_write` predicted; returns the predictor and the last time.
fn replay(
    evs: Vec<(Event, u64)>,
    p: &SyncParams,
    mut check: impl FnMut(&SyncPredictor, &Event, u64, Option<bool>) -> Result<(), TestCaseError>,
) -> Result<(SyncPredictor, u64), TestCaseError> {
    let mut s = SyncPredictor::new();
    let mut now = 0;
    for (e, step) in evs {
        now += step;
        let predicted = match e {
            Event::Write { bytes, o_sync } => Some(s.on_write(bytes, now, o_sync, p)),
            Event::Fsync => {
                s.on_fsync(now, p);
                None
            }
        };
        check(&s, &e, now, predicted)?;
    }
    Ok((s, now))
}

proptest! {
    #[test]
    fn o_sync_writes_are_always_predicted_synchronous(
        evs in events(), p in sync_params(), bytes in 0u64..(64 << 20)
    ) {
        let (mut s, now) = replay(evs, &p, |_, e, _, predicted| {
            if let Event::Write { o_sync: true, .. } = e {
                prop_assert_eq!(predicted, Some(true));
            }
            Ok(())
        })?;
        prop_assert!(s.on_write(bytes, now, true, &p));
    }

    #[test]
    fn on_write_returns_what_is_synchronous_says_after_the_write(
        evs in events(), p in sync_params()
    ) {
        replay(evs, &p, |s, e, now, predicted| {
            if let Event::Write { o_sync: false, .. } = e {
                prop_assert_eq!(predicted, Some(s.is_synchronous(now, &p)));
            }
            Ok(())
        })?;
    }

    #[test]
    fn interval_at_or_over_threshold_is_never_synchronous(
        evs in events(), p in sync_params()
    ) {
        replay(evs, &p, |s, _, now, _| {
            if s.bytes_since_fsync() >= p.threshold_bytes {
                prop_assert!(!s.is_synchronous(now, &p));
            }
            prop_assert!(!s.is_synchronous(now + p.idle_reset_ns + 1, &p));
            Ok(())
        })?;
    }

    #[test]
    fn every_write_is_settled_once_by_a_final_fsync(evs in events(), p in sync_params()) {
        let mut writes = 0u64;
        let (mut s, now) = replay(evs, &p, |s, e, _, _| {
            if let Event::Write { .. } = e {
                writes += 1;
            }
            let a = s.accuracy();
            prop_assert!(a.predicted_sync_correct <= a.predicted_sync_total);
            prop_assert!(a.predicted_async_correct <= a.predicted_async_total);
            prop_assert!(a.total() <= writes);
            Ok(())
        })?;
        s.on_fsync(now, &p);
        prop_assert_eq!(s.accuracy().total(), writes);
    }

    #[test]
    fn counter_never_exceeds_predecessor_plus_one(
        start in 0u64..1000, blocks in 0u64..64,
        e_start in 0u64..1000, e_blocks in 1u64..64, e_counter: u8,
        min_write_blocks in 0u64..8, threshold: u8,
    ) {
        let p = SizeParams { threshold, min_write_blocks, ..SizeParams::default() };
        let c = next_counter((start, blocks), Some((e_start, e_blocks, e_counter)), &p);
        prop_assert!(c == 0 || c == e_counter.saturating_add(1));
    }

    #[test]
    fn write_covering_less_than_half_resets_counter(
        e_start in 0u64..1000, e_blocks in 2u64..64, e_counter: u8,
        offset in 0u64..64, len in 0u64..64, min_write_blocks in 0u64..8,
    ) {
        let start = e_start + offset % e_blocks;
        let covered = len.min(e_start + e_blocks - start);
        prop_assume!(covered * 2 < e_blocks);
        let p = SizeParams { threshold: 4, min_write_blocks, ..SizeParams::default() };
        prop_assert_eq!(next_counter((start, len), Some((e_start, e_blocks, e_counter)), &p), 0);
    }

    #[test]
    fn write_covering_the_whole_entry_inherits_plus_one(
        e_start in 0u64..1000, e_blocks in 4u64..64, e_counter: u8, before in 0u64..4, after in 0u64..4,
    ) {
        let p = SizeParams::default();
        let start = e_start.saturating_sub(before);
        let len = (e_start - start) + e_blocks + after;
        prop_assert_eq!(
            next_counter((start, len), Some((e_start, e_blocks, e_counter)), &p),
            e_counter.saturating_add(1)
        );
    }

    #[test]
    fn short_write_or_no_predecessor_gives_zero(
        start in 0u64..1000, blocks in 0u64..4, e: (u64, u64, u8)
    ) {
        let p = SizeParams::default();
        prop_assert_eq!(next_counter((start, blocks), Some(e), &p), 0);
        prop_assert_eq!(next_counter((start, blocks + 4), None, &p), 0);
    }

    #[test]
    fn large_iff_counter_above_threshold(counter: u8, threshold: u8) {
        let p = SizeParams { threshold, min_write_blocks: 4, ..SizeParams::default() };
        prop_assert_eq!(is_large(counter, &p), counter > threshold);
    }

    #[test]
    fn predecessor_holds_first_or_middle_block(
        lens in prop::collection::vec(1u64..16, 0..20), start in 0u64..200, blocks in 1u64..32
    ) {
        // An extent map from block 0 in which every third extent is a hole.
        let mut entries = Vec::new();
        let mut at = 0;
        for (i, len) in lens.into_iter().enumerate() {
            if i % 3 != 2 {
                entries.push((at, len, i as u8));
            }
            at += len;
        }
        let holds = |e: &(u64, u64, u8), b: u64| b >= e.0 && b < e.0 + e.1;
        let got = predecessor((start, blocks), entries.iter().copied());
        let first = entries.iter().find(|e| holds(e, start)).copied();
        let middle = entries.iter().find(|e| holds(e, start + blocks / 2)).copied();
        prop_assert_eq!(got, first.or(middle));
    }

    #[test]
    fn amtime_stays_within_min_and_max_live_mtime(
        writes in prop::collection::vec((0u64..64, 1u64..16, 0u64..1_000_000_000_000), 1..60)
    ) {
        // Model: the mtime of every block of a 80-block file.
        let mut model: Vec<Option<u64>> = vec![None; 80];
        let mut a = Amtime::new();
        for (start, len, mtime) in writes {
            let range = start as usize..(start + len) as usize;
            let old: Vec<(u64, u64)> = model[range.clone()].iter().flatten().map(|&m| (1, m)).collect();
            a.on_write(&old, len, mtime);
            for b in &mut model[range] {
                *b = Some(mtime);
            }
            let live: Vec<u64> = model.iter().flatten().copied().collect();
            let (lo, hi) = (*live.iter().min().unwrap(), *live.iter().max().unwrap());
            let v = a.value().unwrap();
            prop_assert!(lo <= v && v <= hi, "{} not in [{}, {}]", v, lo, hi);
            prop_assert_eq!(a, Amtime::from_extents(live.iter().map(|&m| (1, m))));
        }
    }

    #[test]
    fn placement_is_pm_or_an_available_block_tier(
        synchronous: bool, large: bool, write_bytes in 0u64..(1 << 30), pm_free in 0u64..(1 << 30),
        tier in prop::option::of(1u8..4), pin in prop::option::of(0u8..4), class in 0u8..4,
        fresh_large: bool, pm_over_threshold: bool, flags in 0u8..8,
    ) {
        let (pm_saturated, sync_writers_active, pm_over_bulk_limit) =
            (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
        let access = [AccessClass::Unknown, AccessClass::Sequential, AccessClass::Random,
                      AccessClass::ByteGranular][class as usize];
        let obs = WriteObservation {
            synchronous, large, fresh_large, pm_over_threshold, pm_saturated,
            sync_writers_active, pm_over_bulk_limit, write_bytes,
            pm_free_bytes: pm_free, pm_below_forced_bytes: pm_free, pm_capacity_bytes: 1 << 30,
            first_block_tier: tier.map(TierId),
            rule: pin.map(|tier| TierRule::Pin { tier: TierId(tier) }),
            access,
        };
        for name in placement_policy_names() {
            let p = placement_policy(name).unwrap().place(&obs);
            let allowed = p == Placement::Pm
                || Some(p.tier().get()) == tier
                || (pin.is_some() && Some(p.tier().get()) == pin);
            prop_assert!(allowed, "{} chose {:?} for {:?}", name, p, obs);
            if let Some(t) = pin.filter(|&t| t != PM_TIER.get()) {
                prop_assert_eq!(p.tier().get(), t);
            }
        }
    }

    #[test]
    fn ziggurat_keeps_sync_writes_on_pm_while_it_has_room(
        large: bool, write_bytes in 0u64..(1 << 30), pm_free in 0u64..(1 << 30), tier in prop::option::of(1u8..4),
        fresh_large: bool, pm_over_threshold: bool, pm_saturated: bool, sync_writers_active: bool,
        pm_over_bulk_limit: bool,
    ) {
        let obs = WriteObservation {
            synchronous: true, large, fresh_large, pm_over_threshold, pm_saturated,
            sync_writers_active, pm_over_bulk_limit, write_bytes,
            pm_free_bytes: pm_free, pm_below_forced_bytes: pm_free, pm_capacity_bytes: 1 << 30,
            first_block_tier: tier.map(TierId), rule: None, access: AccessClass::Unknown,
        };
        let p = placement_policy("ziggurat").unwrap().place(&obs);
        if write_bytes <= pm_free || tier.is_none() {
            prop_assert_eq!(p, Placement::Pm);
        } else {
            prop_assert_eq!(p, Placement::BlockSyncWriteThrough { tier: TierId(tier.unwrap()) });
        }
    }

    #[test]
    fn size_and_duration_text_round_trips(n in 0u64..(1 << 50)) {
        prop_assert_eq!(parse_size(&format_size(n)).unwrap(), n);
        prop_assert_eq!(parse_duration(&format_duration(n)).unwrap(), n);
    }
}
