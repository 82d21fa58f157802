//! Unit tests of `extent_space.rs` (the random sequences against a model
//! are `tests/extent_space_model.rs`).

use super::*;

#[test]
fn allocation_appends_sequentially_across_extents() {
    let s = ExtentSpace::new(128 * 10, 128, vec![]).unwrap();
    assert_eq!(s.alloc(100).unwrap(), vec![(PhysBlock(128), 100)]);
    assert_eq!(s.alloc(100).unwrap(), vec![(PhysBlock(228), 100)]);
    assert_eq!(s.stats().free_extents, 7);
}

#[test]
fn overwritten_blocks_are_not_reused_until_their_extent_empties() {
    let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
    let a = s.alloc(128).unwrap();
    let b = s.alloc(10).unwrap();
    s.release(a[0].0, 5);
    assert_eq!(s.stats().dead_blocks, 5);
    assert_eq!(
        s.alloc(1).unwrap(),
        vec![(b[0].0 + 10, 1)],
        "freed blocks of a partly valid extent must not be reused"
    );
    s.release(a[0].0 + 5, 123);
    assert_eq!(
        s.stats().free_extents,
        2,
        "the emptied extent is free again"
    );
    let st = s.stats();
    assert_eq!(st.valid_blocks, 11);
    assert_eq!(st.fragmentation_pct, 100);
    assert_eq!(st.dead_blocks, 0);
}

#[test]
fn rebuilt_space_rejects_overlaps_and_counts_valid_blocks() {
    assert!(ExtentSpace::new(
        128 * 4,
        128,
        vec![(PhysBlock(130), 10), (PhysBlock(135), 2)]
    )
    .is_err());
    assert!(ExtentSpace::new(128 * 4, 128, vec![(PhysBlock(0), 1)]).is_err());
    let s = ExtentSpace::new(
        128 * 4,
        128,
        vec![(PhysBlock(130), 10), (PhysBlock(300), 2)],
    )
    .unwrap();
    let st = s.stats();
    assert_eq!(
        (st.free_extents, st.valid_blocks, st.fragmentation_pct),
        (1, 12, 50)
    );
}

#[test]
fn a_retiring_tier_allocates_nothing_and_shows_no_room_until_taken_back() {
    let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
    let held = s.alloc(10).unwrap();
    s.set_retiring(true);
    assert!(s.alloc(1).is_none());
    assert_eq!(s.free_blocks(), 0);
    assert_eq!(
        s.stats().valid_blocks,
        10,
        "blocks taken before still count"
    );
    s.release(held[0].0, 10);
    assert_eq!(s.stats().valid_blocks, 0);
    s.set_retiring(false);
    assert_eq!(s.free_blocks(), 3 * 128);
    assert!(s.alloc(1).is_some());
}

#[test]
fn blocks_released_at_the_end_of_the_open_extent_are_given_again() {
    let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
    let kept = s.alloc(10).unwrap();
    let dropped = s.alloc(6).unwrap();
    assert_eq!(dropped, vec![(PhysBlock(138), 6)]);
    let free = s.free_blocks();
    s.release(dropped[0].0, 6);
    assert_eq!(s.free_blocks(), free + 6, "taken back");
    assert_eq!(s.alloc(2).unwrap(), vec![(PhysBlock(138), 2)]);
    // Blocks before the end stay dead until their extent empties.
    s.release(PhysBlock(130), 2);
    assert_eq!(s.free_blocks(), free + 4);
    assert_eq!(s.stats().valid_blocks, 10);
    s.release(kept[0].0, 2);
    s.release(PhysBlock(132), 6);
    s.release(PhysBlock(138), 2);
    assert_eq!(s.stats().valid_blocks, 0);
    assert_eq!(s.free_blocks(), 3 * 128, "the emptied open extent rewinds");
}

#[test]
fn an_allocation_across_two_extents_given_back_leaves_no_dead_blocks() {
    // Either order of the two releases: the blocks at the end of the
    // extent the allocation filled are given again too.
    for first_part_first in [true, false] {
        let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
        let kept = s.alloc(100).unwrap();
        let free = s.free_blocks();
        let split = s.alloc(60).unwrap();
        // Extents 1 and 2 are adjacent: one run.
        assert_eq!(split, vec![(PhysBlock(228), 60)]);
        let split = vec![(PhysBlock(228), 28), (PhysBlock(256), 32)];
        let order: Vec<Run> = if first_part_first {
            split.clone()
        } else {
            split.iter().rev().copied().collect()
        };
        for (b, n) in order {
            s.release(b, n);
        }
        assert_eq!(s.free_blocks(), free, "order {first_part_first}");
        assert_eq!(s.stats().valid_blocks, 100);
        // Extent 2 stays open; once it is full, extent 1's end is
        // given before extent 3.
        assert_eq!(s.alloc(128).unwrap(), vec![(PhysBlock(256), 128)]);
        assert_eq!(s.alloc(30).unwrap(), vec![(PhysBlock(384), 30)]);
        assert_eq!(
            s.alloc(98 + 28).unwrap(),
            vec![(PhysBlock(414), 98), (PhysBlock(228), 28)]
        );
        s.release(kept[0].0, 100);
    }
}

#[test]
fn the_unwritten_rest_of_partly_valid_extents_is_given_after_a_mount() {
    // Extent 1 was open with 10 blocks given; extent 2 holds one block
    // at 300 (block 44 of it), dead blocks before it.
    let s = ExtentSpace::new(
        128 * 5,
        128,
        vec![(PhysBlock(128), 10), (PhysBlock(300), 1)],
    )
    .unwrap();
    assert_eq!(s.stats().free_blocks, 2 * 128 + 118 + 83);
    // Free extents first, then the ends past the last live blocks.
    assert_eq!(s.alloc(2 * 128).unwrap(), vec![(PhysBlock(384), 256)]);
    assert_eq!(
        s.alloc(120).unwrap(),
        vec![(PhysBlock(138), 118), (PhysBlock(301), 2)],
    );
    assert_eq!(s.alloc(81).unwrap(), vec![(PhysBlock(303), 81)]);
    // Only extent 2's blocks before its live one stay dead.
    let st = s.stats();
    assert_eq!((st.free_blocks, st.valid_blocks), (0, 4 * 128 - 44));
    assert!(s.alloc(1).is_none());
}

#[test]
fn object_tiers_keep_released_blocks_dead() {
    let mut s = ExtentSpace::new(128 * 4, 128, vec![(PhysBlock(128), 10)]).unwrap();
    s.keep_released_blocks_dead();
    assert_eq!(s.stats().free_blocks, 2 * 128, "no tail after a mount");
    let a = s.alloc(20).unwrap();
    assert_eq!(a, vec![(PhysBlock(256), 20)]);
    s.release(a[0].0, 20);
    assert_eq!(s.stats().free_blocks, 2 * 128, "the open extent rewinds");
    let b = s.alloc(100).unwrap();
    let c = s.alloc(10).unwrap();
    assert_eq!(s.stats().free_blocks, 128 + 18);
    s.release(c[0].0, 10);
    assert_eq!(s.stats().free_blocks, 128 + 18, "dead while b lives");
    s.release(b[0].0, 100);
    assert_eq!(s.stats().free_blocks, 2 * 128);
}

#[test]
fn a_sealed_extent_takes_no_allocation_until_it_empties() {
    let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
    let a = s.alloc(128).unwrap();
    let b = s.alloc(10).unwrap();
    // Extent 1 gives back its end: a tail extent.
    s.release(PhysBlock(200), 56);
    assert_eq!(s.stats().free_blocks, 128 + 118 + 56);
    let (infos, _, _) = s.cleaning_view();
    assert_eq!(
        (infos[0].id, infos[0].valid_blocks, infos[0].total_blocks),
        (1, 72, 72),
        "its end is free, not dead: no candidate for recycling"
    );
    // Recycling seals it and the open extent 2: their ends are not
    // given, nor is what is released at their marks meanwhile.
    s.seal(&[1, 2]);
    assert_eq!(s.stats().free_blocks, 128);
    assert_eq!(s.alloc(5).unwrap(), vec![(PhysBlock(384), 5)]);
    s.release(PhysBlock(190), 10);
    assert_eq!(s.stats().free_blocks, 128 - 5);
    let c = s.alloc(123).unwrap();
    assert_eq!(c, vec![(PhysBlock(389), 123)], "extent 3 to its end");
    s.release(c[0].0, 123);
    assert_eq!(s.stats().free_blocks, 123, "extent 3 is not sealed");
    s.seal(&[3]);
    assert_eq!(s.stats().free_blocks, 0);
    s.release(PhysBlock(384), 5);
    assert_eq!(s.stats().free_blocks, 128, "an emptied extent is free");
    s.seal(&[3]);
    assert_eq!(s.stats().free_blocks, 128, "a free extent is not sealed");
    s.unseal(&[1, 2, 3]);
    s.release(b[0].0, 10);
    s.release(a[0].0, 62);
    assert_eq!(s.stats().free_blocks, 3 * 128);
    assert_eq!(s.stats().free_extents, 3);
    let d = s.alloc(128).unwrap();
    s.alloc(1).unwrap();
    s.seal(&[d[0].0.get() / 128]);
    s.release(PhysBlock(d[0].0.get() + 100), 28);
    assert_eq!(s.stats().free_blocks, 2 * 128 - 1, "dead while sealed");
    // An open extent rewound to its start has nothing to move out.
    let t = ExtentSpace::new(128 * 3, 128, vec![]).unwrap();
    let x = t.alloc(5).unwrap();
    t.release(x[0].0, 5);
    t.seal(&[1]);
    assert_eq!(t.stats().free_blocks, 2 * 128);
    assert_eq!(t.alloc(2 * 128).unwrap().len(), 1);
}

#[test]
fn the_rest_of_an_extent_recycling_opened_stays_the_reserve() {
    // 17 extents: the header, 16 to use, 2 of them held back.
    let s = ExtentSpace::new(128 * 17, 128, vec![]).unwrap();
    s.alloc(14 * 128).unwrap();
    // Recycling opens a reserve extent and takes 10 blocks of it.
    s.alloc_recycling(10).unwrap();
    assert_eq!(s.stats().free_extents, 1);
    assert_eq!(s.free_blocks(), 0, "data gets none of its other 118");
    assert!(s.alloc(1).is_none());
    let runs = s.alloc_recycling(128 + 118).unwrap();
    assert_eq!(
        runs.iter().map(|r| r.1).sum::<u64>(),
        246,
        "recycling gets all"
    );
    assert_eq!(s.stats().free_blocks, 0);
}

#[test]
fn full_tier_refuses_allocation_without_side_effects() {
    let s = ExtentSpace::new(128 * 2, 128, vec![]).unwrap();
    assert!(s.alloc(129).is_none());
    assert_eq!(s.alloc(128).unwrap(), vec![(PhysBlock(128), 128)]);
    assert!(s.alloc(1).is_none());
}

#[test]
fn the_last_free_extents_are_left_to_recycling() {
    // 17 extents: the header, 16 to use, 2 of them held back.
    let s = ExtentSpace::new(128 * 17, 128, vec![]).unwrap();
    assert_eq!(s.recycling_reserve_extents(), 2);
    assert_eq!(s.free_blocks(), 14 * 128, "data sees 14 extents");
    assert!(s.alloc(14 * 128 + 1).is_none());
    s.alloc(14 * 128).unwrap();
    assert_eq!(s.free_blocks(), 0);
    assert!(s.alloc(1).is_none(), "the reserve is not for data");
    assert_eq!(
        s.alloc_recycling(128).unwrap().len(),
        1,
        "recycling takes it"
    );
    assert_eq!(s.stats().free_extents, 1);
    // Small tiers keep at most an eighth of their extents.
    assert_eq!(
        ExtentSpace::new(128 * 9, 128, vec![])
            .unwrap()
            .recycling_reserve_extents(),
        1
    );
}

/// Runs `discard_free` over every extent, returning the runs it
/// discarded and the blocks it reported.
fn discard_all(s: &ExtentSpace, min_blocks: u64) -> (Vec<(u64, u64)>, u64) {
    let mut runs = Vec::new();
    let (n, err) = s.discard_free(0..u64::MAX, min_blocks, &mut |b, n| {
        runs.push((b, n));
        Ok(())
    });
    assert!(err.is_none());
    (runs, n)
}

#[test]
fn discard_takes_only_free_extents_and_each_once_until_it_is_used_again() {
    // 8 extents: the header, one partly valid (and open), six free.
    let s = ExtentSpace::new(128 * 8, 128, vec![]).unwrap();
    let held = s.alloc(10).unwrap();
    assert_eq!(held, vec![(PhysBlock(128), 10)]);
    let (runs, n) = discard_all(&s, 0);
    assert_eq!(runs, vec![(256, 6 * 128)], "extents 2..8 in one call");
    assert_eq!(n, 6 * 128);
    assert_eq!(discard_all(&s, 0), (vec![], 0), "nothing new to discard");
    // Filling the open extent opens extent 2; freeing it again makes it
    // discardable again, the others stay discarded.
    let more = s.alloc(128).unwrap();
    assert_eq!(
        more,
        vec![(PhysBlock(138), 128)],
        "extent 1 full, 10 blocks of 2"
    );
    assert_eq!(discard_all(&s, 0), (vec![], 0));
    s.release(PhysBlock(128), 10);
    s.release(PhysBlock(138), 118);
    assert_eq!(discard_all(&s, 0), (vec![(128, 128)], 128));
    // Long runs go to the device in pieces of DISCARD_EXTENTS extents.
    let big = ExtentSpace::new(128 * 20, 128, vec![]).unwrap();
    let (runs, n) = discard_all(&big, 0);
    assert_eq!(n, 19 * 128);
    assert!(runs.iter().all(|&(_, n)| n <= DISCARD_EXTENTS * 128));
    assert_eq!(runs.len(), 3);
}

#[test]
fn discard_skips_runs_of_free_extents_shorter_than_the_minimum() {
    // Extents 1, 3 and 5 hold data: 2 and 4 are single free extents,
    // 6..10 a run of four.
    let used = vec![
        (PhysBlock(128), 1),
        (PhysBlock(384), 1),
        (PhysBlock(640), 1),
    ];
    let s = ExtentSpace::new(128 * 10, 128, used).unwrap();
    let (runs, _) = discard_all(&s, 2 * 128);
    assert_eq!(runs, vec![(768, 4 * 128)]);
    let (runs, _) = discard_all(&s, 128);
    assert_eq!(runs, vec![(256, 128), (512, 128)]);
    // A range counts whole extents and cuts runs, but the minimum
    // applies to the whole run.
    let t = ExtentSpace::new(128 * 10, 128, vec![]).unwrap();
    let mut runs = Vec::new();
    let (n, _) = t.discard_free(3..5, 9 * 128, &mut |b, n| {
        runs.push((b, n));
        Ok(())
    });
    assert_eq!((runs, n), (vec![(384, 256)], 256));
}

#[test]
fn a_failed_discard_stops_and_reports_what_was_done() {
    let s = ExtentSpace::new(128 * 30, 128, vec![]).unwrap();
    let mut calls = 0;
    let (n, err) = s.discard_free(0..u64::MAX, 0, &mut |_, _| {
        calls += 1;
        if calls == 2 {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    });
    assert_eq!(n, DISCARD_EXTENTS * 128);
    assert_eq!(err.unwrap().raw_os_error(), Some(libc::EIO));
    // The failed part is tried again next time.
    let (_, n) = discard_all(&s, 0);
    assert_eq!(n, (29 - DISCARD_EXTENTS) * 128);
}

#[test]
fn an_allocation_waits_for_the_discard_of_the_extent_it_takes() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;
    let s = Arc::new(ExtentSpace::new(128 * 3, 128, vec![]).unwrap());
    let discarding = Arc::new(AtomicBool::new(false));
    let started = Arc::new(std::sync::Barrier::new(2));
    let trimmer = {
        let (s, discarding, started) = (s.clone(), discarding.clone(), started.clone());
        std::thread::spawn(move || {
            s.discard_free(0..u64::MAX, 0, &mut |_, _| {
                discarding.store(true, Ordering::SeqCst);
                started.wait();
                std::thread::sleep(Duration::from_millis(100));
                discarding.store(false, Ordering::SeqCst);
                Ok(())
            })
        })
    };
    started.wait();
    // The discard of extents 1 and 2 is under way: the allocation (which
    // would take extent 1) must not return before it is done.
    let got = s.alloc(1).unwrap();
    assert!(
        !discarding.load(Ordering::SeqCst),
        "an allocation returned {got:?} while its extent was being discarded"
    );
    assert_eq!(trimmer.join().unwrap().0, 2 * 128);
    assert_eq!(discard_all(&s, 0).1, 0, "extent 2 stays discarded");
}
