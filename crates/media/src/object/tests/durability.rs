//! What `sync` makes durable and what a reopen sees: synced blocks, ranged
//! GETs, dead parts deleted, upload numbers that never repeat, part ages.

use super::*;

#[test]
fn synced_writes_survive_a_reopen_and_unwritten_blocks_read_as_zeros() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    // 12 blocks from 6: three parts (segments 0, 1 and 2 of 8 blocks).
    m.write_blocks(6, &blocks(6, 12, 1)).unwrap();
    m.write_blocks(40, &blocks(40, 1, 2)).unwrap();
    assert_eq!(read(&m, 6, 12), blocks(6, 12, 1), "pending data reads back");
    assert!(parts_in(&store).is_empty(), "nothing uploaded before sync");
    m.sync().unwrap();
    let parts = part_keys(&store);
    assert_eq!(
        parts
            .iter()
            .map(|k| (k.segment, k.first, k.count))
            .collect::<Vec<_>>(),
        vec![(0, 6, 2), (1, 0, 8), (2, 0, 2), (5, 0, 1)]
    );
    let mut seqs: Vec<u64> = parts.iter().map(|k| k.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), 4, "one upload number each: {parts:?}");
    let s = m.object_stats();
    assert_eq!(
        (s.parts, s.live_bytes, s.pending_bytes),
        (4, 13 * BLOCK_SIZE, 0)
    );
    assert_eq!(m.stats().syncs, 1);
    drop(m);

    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    assert_eq!((m.len(), m.segment_blocks()), (64 * BLOCK_SIZE, 8));
    assert_eq!(read(&m, 6, 12), blocks(6, 12, 1));
    assert_eq!(read(&m, 40, 1), blocks(40, 1, 2));
    assert_eq!(read(&m, 0, 6), vec![0; 6 * BLOCK], "never written: zeros");
    assert!(m.ignored_keys().is_empty());
    assert_eq!(m.describe(), "s3 memory://test/pool/tier1");
}

#[test]
fn unsynced_writes_are_not_visible_after_a_reopen() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 32 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 4, 1)).unwrap();
    m.sync().unwrap();
    m.write_blocks(2, &blocks(2, 4, 2)).unwrap(); // overwrites two, adds two
    assert_eq!(read(&m, 0, 6)[2 * BLOCK..], blocks(2, 4, 2)[..]);
    drop(m); // a crash: nothing synced since
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    let mut want = blocks(0, 4, 1);
    want.extend(vec![0; 2 * BLOCK]);
    assert_eq!(read(&m, 0, 6), want);
}

#[test]
fn contiguous_blocks_of_one_part_are_one_ranged_get() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 16).unwrap();
    m.write_blocks(0, &blocks(0, 16, 1)).unwrap();
    m.sync().unwrap();
    m.write_blocks(4, &blocks(4, 2, 2)).unwrap();
    m.sync().unwrap();
    let gets = |m: &ObjectMedia| m.object_stats().requests.gets;
    let g0 = gets(&m);
    let mut want = blocks(0, 16, 1);
    want[4 * BLOCK..6 * BLOCK].copy_from_slice(&blocks(4, 2, 2));
    assert_eq!(read(&m, 0, 16), want);
    assert_eq!(
        gets(&m) - g0,
        3,
        "[0,4) and [6,16) of part 0, [4,6) of part 1"
    );
    assert_eq!(read(&m, 8, 4), blocks(8, 4, 1));
    assert_eq!(gets(&m) - g0, 4);
    assert_eq!(m.object_stats().requests.get_bytes, 20 * BLOCK_SIZE);
    // Pending blocks and holes need no request.
    m.write_blocks(8, &blocks(8, 1, 3)).unwrap();
    assert_eq!(read(&m, 8, 1), blocks(8, 1, 3));
    assert_eq!(read(&m, 40, 8), vec![0; 8 * BLOCK]);
    assert_eq!(gets(&m) - g0, 4);
}

#[test]
fn superseded_and_trimmed_parts_are_deleted_at_the_next_sync() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 16).unwrap();
    m.write_blocks(0, &blocks(0, 4, 1)).unwrap(); // part 0
    m.write_blocks(16, &blocks(16, 4, 1)).unwrap(); // part 1
    m.write_blocks(32, &blocks(32, 4, 1)).unwrap(); // part 2
    m.sync().unwrap();
    assert_eq!(parts_in(&store).len(), 3);
    // Part 0 superseded whole, part 1 trimmed whole, part 2 trimmed in half.
    m.write_blocks(0, &blocks(0, 4, 2)).unwrap();
    m.trim(16, 4).unwrap();
    m.trim(32, 2).unwrap();
    assert_eq!(
        m.object_stats().dead_parts,
        1,
        "part 1 is dead before the sync"
    );
    m.sync().unwrap();
    let left = part_keys(&store);
    assert_eq!(
        left.iter()
            .map(|k| (k.segment, k.first, k.count))
            .collect::<Vec<_>>(),
        vec![(2, 0, 4), (0, 0, 4)],
        "the new part of segment 0 and the half-trimmed one of segment 2: {left:?}"
    );
    let s = m.object_stats();
    assert_eq!(
        (s.parts, s.stored_bytes, s.live_bytes, s.dead_parts),
        (2, 8 * BLOCK_SIZE, 6 * BLOCK_SIZE, 0)
    );
    assert_eq!(s.requests.deletes, 2);
    // Trimmed blocks hold nothing; the rest reads as before.
    assert_eq!(read(&m, 0, 4), blocks(0, 4, 2));
    assert_eq!(read(&m, 34, 2), blocks(34, 2, 1));
    // reclaim deletes without a sync; a trim of pending blocks drops them.
    m.trim(34, 2).unwrap();
    m.write_blocks(50, &blocks(50, 1, 1)).unwrap();
    m.trim(50, 1).unwrap();
    assert_eq!(m.object_stats().pending_bytes, 0);
    let r = m.reclaim().unwrap();
    assert_eq!(
        r,
        SweepReport {
            parts: 1,
            bytes: 4 * BLOCK_SIZE
        }
    );
    assert_eq!(parts_in(&store).len(), 1);
    assert_eq!(m.reclaim().unwrap(), SweepReport::default());
}

#[test]
fn upload_numbers_continue_after_a_reopen_so_no_object_is_overwritten() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 16 * BLOCK_SIZE, 16).unwrap();
    for v in 1..=3 {
        m.write_blocks(0, &blocks(0, 2, v)).unwrap();
        m.sync().unwrap();
    }
    drop(m);
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    let before = part_keys(&store);
    assert_eq!(before.len(), 1, "superseded parts were deleted: {before:?}");
    m.write_blocks(0, &blocks(0, 1, 9)).unwrap();
    m.sync().unwrap();
    let after = part_keys(&store);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[0], before[0], "the old part keeps block 1");
    assert!(after[1].seq > before[0].seq, "numbers go on after a reopen");
    let mut want = blocks(0, 1, 9);
    want.extend(blocks(1, 1, 3));
    assert_eq!(read(&m, 0, 2), want);
}

#[test]
fn upload_numbers_start_past_the_clock_so_late_puts_of_a_previous_run_collide_with_nothing() {
    let store = new_store();
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let m = ObjectMedia::create_in(bucket(&store), UUID, 16 * BLOCK_SIZE, 16).unwrap();
    m.write_blocks(0, &blocks(0, 1, 1)).unwrap();
    m.sync().unwrap();
    let k = part_keys(&store)[0];
    assert!(k.seq >= t0, "{} < {t0}", k.seq);
}

#[test]
fn parts_report_live_counts_and_upload_times_across_a_reopen() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    let before = unix_now();
    m.write_blocks(8, &blocks(8, 8, 1)).unwrap();
    m.write_blocks(16, &blocks(16, 4, 2)).unwrap();
    m.sync().unwrap();
    m.trim(9, 5).unwrap();
    m.trim(16, 4).unwrap(); // the whole second part: dead
    let after = unix_now();
    let parts = m.parts();
    assert_eq!(
        parts
            .iter()
            .map(|p| (p.block, p.blocks, p.live))
            .collect::<Vec<_>>(),
        vec![(8, 8, 3), (16, 4, 0)],
        "oldest first, the dead part until its delete"
    );
    assert!(parts[0].seq < parts[1].seq);
    for p in &parts {
        assert!((before..=after).contains(&p.uploaded_unix), "{p:?}");
    }
    m.reclaim().unwrap();
    assert_eq!(m.parts().len(), 1, "the dead part is deleted");
    assert_eq!(m.object_parts(), Some(m.parts()));
    drop(m);

    // Trims are not stored: after a reopen the part is whole again; its
    // upload time comes from the LIST.
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    let parts = m.parts();
    assert_eq!(parts.len(), 1);
    assert_eq!((parts[0].block, parts[0].live), (8, 8));
    assert!(
        (before.saturating_sub(1)..=unix_now()).contains(&parts[0].uploaded_unix),
        "{parts:?}"
    );
}

/// Waits (up to 10 s) until `cond` holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed().as_secs() < 10, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn a_later_tickets_upload_runs_while_an_earlier_one_is_held_and_newer_data_wins_in_the_index() {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 8, 1)).unwrap();
    let t1 = m.seal();
    // The second ticket overwrites block 0 and fills segment 1.
    m.write_blocks(0, &blocks(0, 1, 3)).unwrap();
    m.write_blocks(8, &blocks(8, 8, 2)).unwrap();
    let t2 = m.seal();
    assert!(t2 > t1);
    fault.hold_puts();
    std::thread::scope(|s| {
        let _release = ReleasePuts(&fault);
        let first = s.spawn(|| m.sync_sealed(t1));
        eventually("the first upload's PUT waits", || fault.puts_waiting() == 1);
        let second = s.spawn(|| m.sync_sealed(t2));
        // Both uploads have PUTs out at once (one each segment for the
        // second): it did not wait for the first to finish.
        eventually("the second upload's PUTs wait too", || {
            fault.puts_waiting() == 3
        });
        assert_eq!(m.object_stats().parts, 0, "nothing indexed while held");
        fault.release_puts();
        first.join().unwrap().unwrap();
        second.join().unwrap().unwrap();
    });
    let mut want = blocks(0, 1, 3);
    want.extend(blocks(1, 7, 1));
    want.extend(blocks(8, 8, 2));
    assert_eq!(read(&m, 0, 16), want);
    // Each ticket is answered once.
    assert!(m.sync_sealed(t1).is_err());
    drop(m);
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    assert_eq!(read(&m, 0, 16), want, "the newer part wins after a reopen");
}
