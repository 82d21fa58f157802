//! Unit tests of the migration decisions and policies on synthetic
//! snapshots.

use super::*;
use terrace_format::TierId;

const SEC: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;

fn io(reads: u64, writes: u64) -> IoCounters {
    IoCounters { reads, writes }
}

fn e(file_block: u64, blocks: u64, mtime_ns: u64) -> EntrySnapshot {
    EntrySnapshot {
        file_block,
        blocks,
        mtime_ns,
        tier: TierId::PM,
    }
}

#[test]
fn dynamic_threshold_is_50_for_equal_mix_and_rises_10_per_doubling_of_reads() {
    assert_eq!(dynamic_threshold(io(0, 0)), 50);
    assert_eq!(dynamic_threshold(io(1000, 1000)), 50);
    assert_eq!(dynamic_threshold(io(2000, 1000)), 60);
    assert_eq!(dynamic_threshold(io(4096, 1024)), 70);
    assert_eq!(dynamic_threshold(io(16 << 10, 1 << 10)), 90);
    assert_eq!(dynamic_threshold(io(u64::MAX, 0)), 90);
    assert_eq!(dynamic_threshold(io(1, 1 << 20)), 50);
    assert_eq!(dynamic_threshold(io(100, 0)), 90);
}

#[test]
fn static_threshold_ignores_counters() {
    assert_eq!(
        migration_threshold(ThresholdMode::Static(70), io(1 << 30, 1)),
        70
    );
    assert_eq!(migration_threshold(ThresholdMode::Dynamic, io(8, 1)), 80);
    assert_eq!(ThresholdMode::Static(70).to_string(), "70");
    assert_eq!(ThresholdMode::Dynamic.to_string(), "dynamic");
}

#[test]
fn migration_starts_above_threshold_and_runs_until_below_it() {
    // Threshold 50% of 100 bytes = 50.
    assert_eq!(should_migrate(50, 100, 50, 95, false), MigrationNeed::None);
    assert_eq!(
        should_migrate(51, 100, 50, 95, false),
        MigrationNeed::Background { bytes_to_free: 2 }
    );
    // Running: at exactly the threshold it continues, below it stops.
    assert_eq!(
        should_migrate(50, 100, 50, 95, true),
        MigrationNeed::Background { bytes_to_free: 1 }
    );
    assert_eq!(should_migrate(49, 100, 50, 95, true), MigrationNeed::None);
}

#[test]
fn above_forced_mark_migration_is_forced() {
    assert_eq!(
        should_migrate(96, 100, 50, 95, false),
        MigrationNeed::Forced { bytes_to_free: 47 }
    );
    assert!(!should_migrate(100, 100, 50, 100, false).is_forced());
    // A static threshold above the forced mark: the forced mark rules.
    assert_eq!(
        should_migrate(97, 100, 99, 95, false),
        MigrationNeed::Forced { bytes_to_free: 3 }
    );
}

#[test]
fn empty_or_zero_capacity_tier_needs_nothing() {
    assert_eq!(should_migrate(0, 100, 1, 2, true), MigrationNeed::None);
    assert_eq!(should_migrate(10, 0, 50, 95, true), MigrationNeed::None);
}

fn file(mtime_ns: u64, entries: Vec<EntrySnapshot>) -> FileSnapshot {
    let amtime = crate::Amtime::from_extents(entries.iter().map(|e| (e.blocks, e.mtime_ns)));
    FileSnapshot {
        ino: 7,
        mtime_ns,
        amtime_ns: amtime.value(),
        entries,
    }
}

#[test]
fn old_file_migrates_whole_on_its_tier() {
    let mut entries = vec![e(4, 2, 6 * SEC), e(0, 2, 2 * SEC), e(2, 2, 4 * SEC)];
    entries.push(EntrySnapshot {
        tier: TierId(1),
        ..e(6, 2, SEC)
    });
    let f = file(6 * SEC, entries);
    let c = cold_entries(&f, TierId::PM, 37 * SEC, 30 * SEC);
    assert!(c.whole_file);
    assert_eq!(
        c.entries,
        vec![e(0, 2, 2 * SEC), e(2, 2, 4 * SEC), e(4, 2, 6 * SEC)]
    );
}

#[test]
fn a_young_file_written_at_one_time_moves_whole_only_in_a_second_round() {
    let f = file(7 * SEC, vec![e(0, 2, 7 * SEC), e(2, 3, 7 * SEC)]);
    let first = MigrationParams::default();
    assert!(cold_entries_with(&f, TierId::PM, 8 * SEC, &first)
        .entries
        .is_empty());
    let second = MigrationParams {
        whole_when_uniform: true,
        ..first
    };
    let c = cold_entries_with(&f, TierId::PM, 8 * SEC, &second);
    assert!(!c.whole_file);
    assert_eq!(c.entries, vec![e(0, 2, 7 * SEC), e(2, 3, 7 * SEC)]);
    // A file with blocks of different ages is chosen as before.
    let g = file(7 * SEC, vec![e(0, 2, 2 * SEC), e(2, 3, 7 * SEC)]);
    assert_eq!(
        cold_entries_with(&g, TierId::PM, 8 * SEC, &second).entries,
        vec![e(0, 2, 2 * SEC)]
    );
}

#[test]
fn recent_file_migrates_only_entries_older_than_amtime() {
    // The slides' file: (0,2,2) (2,2,4) (4,2,6) (6,2,8), amtime 5.
    let f = file(
        8 * SEC,
        vec![
            e(0, 2, 2 * SEC),
            e(2, 2, 4 * SEC),
            e(4, 2, 6 * SEC),
            e(6, 2, 8 * SEC),
        ],
    );
    assert_eq!(f.amtime_ns, Some(5 * SEC));
    let c = cold_entries(&f, TierId::PM, 10 * SEC, 30 * SEC);
    assert!(!c.whole_file);
    assert_eq!(c.entries, vec![e(0, 2, 2 * SEC), e(2, 2, 4 * SEC)]);
    // Exactly `age` ago is still recent.
    assert!(!cold_entries(&f, TierId::PM, 38 * SEC, 30 * SEC).whole_file);
    assert!(cold_entries(&f, TierId::PM, 38 * SEC + 1, 30 * SEC).whole_file);
}

#[test]
fn recent_file_written_at_one_time_has_no_cold_part() {
    let f = file(SEC, vec![e(0, 4, SEC), e(4, 4, SEC)]);
    assert!(cold_entries(&f, TierId::PM, SEC, 30 * SEC)
        .entries
        .is_empty());
    // Clock before the file's mtime: recent.
    assert!(!cold_entries(&f, TierId::PM, 0, 30 * SEC).whole_file);
}

#[test]
fn a_hot_pm_region_of_an_old_file_still_has_a_cold_part() {
    // 100 blocks on disk written at 1 s, PM entries rewritten at 50..53 s:
    // the file's amtime (~10 s) is older than every PM entry.
    let mut es = vec![EntrySnapshot {
        tier: TierId(1),
        ..e(0, 100, SEC)
    }];
    es.extend((0..4).map(|k| e(100 + k, 1, (50 + k) * SEC)));
    let f = file(53 * SEC, es);
    assert!(f.amtime_ns.unwrap() < 50 * SEC);
    let c = cold_entries(&f, TierId::PM, 54 * SEC, 30 * SEC);
    // PM's own average is 51.5 s: the two older PM entries move.
    assert_eq!(c.entries, vec![e(100, 1, 50 * SEC), e(101, 1, 51 * SEC)]);
}

#[test]
fn adjacent_small_entries_coalesce_up_to_group_size() {
    let entries = [e(0, 1, 0), e(1, 1, 0), e(2, 2, 0), e(10, 1, 0), e(11, 3, 0)];
    let g = group_entries(&entries, 3);
    let spans: Vec<(u64, u64)> = g.iter().map(|g| (g.file_block, g.blocks)).collect();
    assert_eq!(spans, vec![(0, 3), (3, 1), (10, 3), (13, 1)]);
    assert_eq!(g[0].sources, vec![e(0, 1, 0), e(1, 1, 0), e(2, 1, 0)]);
    assert_eq!(g[1].sources, vec![e(3, 1, 0)]);
}

#[test]
fn large_entry_is_cut_into_group_size_pieces() {
    let g = group_entries(&[e(5, 10, 9)], 4);
    let spans: Vec<(u64, u64)> = g.iter().map(|g| (g.file_block, g.blocks)).collect();
    assert_eq!(spans, vec![(5, 4), (9, 4), (13, 2)]);
    assert!(g.iter().all(|g| g.sources[0].mtime_ns == 9));
}

#[test]
fn scattered_small_groups_share_a_batch_up_to_group_size() {
    // Random 4 KiB overwrites: single blocks far apart in the file.
    let entries = [
        e(0, 1, 0),
        e(7, 1, 0),
        e(20, 2, 0),
        e(40, 1, 0),
        e(90, 4, 0),
    ];
    let groups = group_entries(&entries, 4);
    let b = batch_groups(&groups, 4);
    let spans: Vec<Vec<(u64, u64)>> = b
        .iter()
        .map(|b| b.iter().map(|g| (g.file_block, g.blocks)).collect())
        .collect();
    assert_eq!(
        spans,
        vec![vec![(0, 1), (7, 1), (20, 2)], vec![(40, 1)], vec![(90, 4)]]
    );
}

#[test]
fn entries_on_different_tiers_are_not_grouped() {
    let other = EntrySnapshot {
        tier: TierId(1),
        ..e(2, 2, 0)
    };
    let g = group_entries(&[e(0, 2, 0), other], 16);
    assert_eq!(g.len(), 2);
}

#[test]
fn group_size_default_is_16m_in_blocks() {
    let p = MigrationParams::default();
    assert_eq!(p.group_blocks(), 16 * MIB / BLOCK_BYTES);
    assert_eq!(p.threads_for(8), 8);
    assert_eq!(p.threads_for(0), 1);
    let p = MigrationParams {
        threads: 3,
        group_bytes: 100,
        ..p
    };
    assert_eq!(p.threads_for(8), 3);
    assert_eq!(p.group_blocks(), 1);
}

#[test]
fn cache_copy_kept_only_below_half_full_cache() {
    assert!(keep_cache_copy(49, 100));
    assert!(!keep_cache_copy(50, 100));
    assert!(!keep_cache_copy(0, 0));
}

fn fr(ino: u64, blocks: u64, reads: u64) -> FileReads {
    FileReads {
        ino,
        block_tier_blocks: blocks,
        reads,
    }
}

#[test]
fn reverse_migration_picks_hottest_files_that_fit_below_low_mark() {
    let p = MigrationParams::default();
    let files = [fr(1, 100, 5), fr(2, 10, 50), fr(3, 10, 0), fr(4, 1000, 40)];
    // Low mark 50% of 8 MiB = 4 MiB = 1024 blocks; 1 MiB used: 768 blocks of room.
    let got = reverse_candidates(io(100, 10), MIB, 8 * MIB, &files, &p);
    assert_eq!(got, vec![fr(2, 10, 50), fr(1, 100, 5)]);
}

#[test]
fn reverse_migration_needs_read_dominance_and_pm_below_low_mark() {
    let p = MigrationParams::default();
    let files = [fr(1, 1, 5)];
    assert!(reverse_candidates(io(39, 10), 0, 8 * MIB, &files, &p).is_empty());
    assert_eq!(
        reverse_candidates(io(40, 10), 0, 8 * MIB, &files, &p).len(),
        1
    );
    assert!(reverse_candidates(io(40, 10), 4 * MIB, 8 * MIB, &files, &p).is_empty());
    assert!(reverse_candidates(io(0, 0), 0, 8 * MIB, &files, &p).is_empty());
    let off = MigrationParams {
        reverse_read_ratio: 0,
        ..p
    };
    assert!(reverse_candidates(io(1000, 0), 0, 8 * MIB, &files, &off).is_empty());
}

#[test]
fn registry_finds_every_listed_name_under_its_own_name() {
    for name in migration_policy_names() {
        assert_eq!(migration_policy(name).unwrap().name(), *name);
    }
    assert!(migration_policy("nope").is_none());
}

#[test]
fn policies_differ_in_selection_and_clean_copies() {
    let f = file(
        8 * SEC,
        vec![e(0, 2, 4 * SEC), e(2, 2, 2 * SEC), e(4, 2, 8 * SEC)],
    );
    let p = MigrationParams::default();
    let now = 9 * SEC;
    let zig = migration_policy("ziggurat")
        .unwrap()
        .choose(&f, TierId::PM, now, &p);
    let def = migration_policy("default")
        .unwrap()
        .choose(&f, TierId::PM, now, &p);
    let nv = migration_policy("nvmfs")
        .unwrap()
        .choose(&f, TierId::PM, now, &p);
    assert_eq!(zig, def);
    assert_eq!(zig.entries, vec![e(0, 2, 4 * SEC), e(2, 2, 2 * SEC)]);
    // NVMFS: everything, least recently written first.
    assert_eq!(
        nv.entries,
        vec![e(2, 2, 2 * SEC), e(0, 2, 4 * SEC), e(4, 2, 8 * SEC)]
    );

    let bg = CopyObservation {
        need: MigrationNeed::Background { bytes_to_free: 1 },
        pm_used: 60,
        pm_capacity: 100,
    };
    let forced = CopyObservation {
        need: MigrationNeed::Forced { bytes_to_free: 1 },
        ..bg
    };
    let keep = |name: &str, o: &CopyObservation| migration_policy(name).unwrap().keep_clean_copy(o);
    assert!(!keep("ziggurat", &bg) && !keep("ziggurat", &forced));
    assert!(keep("nvmfs", &bg) && keep("nvmfs", &forced));
    assert!(keep("default", &bg) && !keep("default", &forced));
}

#[test]
fn only_nvmfs_keeps_pm_dirty_data_between_the_dirty_lists_own_marks() {
    for name in migration_policy_names() {
        let p = migration_policy(name).unwrap();
        assert_eq!(p.flushes_dirty_list(), *name == "nvmfs", "{name}");
    }
}
