//! Failures: PUTs failing midway, reads and trims during an upload, orphans
//! of failed syncs, `retain`, refused prefixes and pools, malformed and
//! foreign keys, bad requests, a failing store in the stats.

use object_store::{ObjectStoreExt, PutPayload};

use super::*;

#[test]
fn a_put_failing_midway_leaves_no_visible_part_and_keeps_the_data_pending() {
    for how in [PutFault::Refuse, PutFault::LoseAnswer, PutFault::NoEtag] {
        let store = new_store();
        let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
        let dynf: Arc<dyn ObjectStore> = fault.clone();
        let m = ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap();
        m.write_blocks(0, &blocks(0, 1, 7)).unwrap();
        m.sync().unwrap();
        // Four parts; the second PUT fails (with concurrency 4, all start).
        m.write_blocks(8, &blocks(8, 32, 1)).unwrap();
        fault.fail_puts_after(1, how);
        let e = m.sync().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("memory://test/pool/tier1/seg-"),
            "{how:?}: {msg}"
        );
        assert!(msg.contains("nothing made durable"), "{how:?}: {msg}");
        assert!(
            msg.contains("injected") || msg.contains("ETag"),
            "{how:?}: the cause is named: {msg}"
        );
        assert_eq!(m.object_stats().parts, 1, "{how:?}: no new part visible");
        assert_eq!(
            parts_in(&store).len(),
            1,
            "{how:?}: what landed was deleted"
        );
        assert_eq!(m.stats().syncs, 1, "a failed sync is not counted");
        // The data is still readable and goes up with the next sync.
        assert_eq!(read(&m, 8, 32), blocks(8, 32, 1));
        fault.heal();
        drop(m);
        let m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
        assert_eq!(read(&m, 8, 32), vec![0; 32 * BLOCK], "{how:?}: not durable");
        assert_eq!(read(&m, 0, 1), blocks(0, 1, 7));

        // Again, healed before the retry: the retry makes it durable.
        m.write_blocks(8, &blocks(8, 32, 2)).unwrap();
        fault.fail_puts_after(3, how);
        assert!(m.sync().is_err());
        fault.heal();
        m.sync().unwrap();
        drop(m);
        let m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
        assert_eq!(read(&m, 8, 32), blocks(8, 32, 2), "{how:?}");
        assert_eq!(parts_in(&store).len(), 5, "{how:?}");
    }
}

#[test]
fn reads_writes_and_trims_while_a_sync_uploads() {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = Arc::new(ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap());
    m.write_blocks(0, &blocks(0, 8, 1)).unwrap(); // part A: blocks 0..8
    m.write_blocks(8, &blocks(8, 8, 1)).unwrap(); // part B: blocks 8..16
    fault.hold_puts();
    let syncer = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || m.sync())
    };
    while fault.puts_waiting() == 0 {
        std::thread::yield_now();
    }
    // In flight: reads see the data, a new write wins over it, a trim
    // applies to the part once it lands.
    assert_eq!(read(&m, 0, 16), blocks(0, 16, 1));
    m.write_blocks(3, &blocks(3, 1, 2)).unwrap();
    m.trim(8, 8).unwrap();
    assert_eq!(read(&m, 3, 1), blocks(3, 1, 2));
    fault.release_puts();
    syncer.join().unwrap().unwrap();
    let mut want = blocks(0, 8, 1);
    want[3 * BLOCK..4 * BLOCK].copy_from_slice(&blocks(3, 1, 2));
    assert_eq!(read(&m, 0, 8), want, "the newer write is still pending");
    assert_eq!(m.object_stats().pending_bytes, BLOCK_SIZE);
    // Part B was trimmed whole while it uploaded: dead on arrival, and
    // deleted by the same sync.
    assert_eq!(m.object_stats().parts, 1);
    assert_eq!(parts_in(&store).len(), 1);
    m.sync().unwrap();
    let s = m.object_stats();
    assert_eq!(
        (s.parts, s.live_bytes, s.dead_parts),
        (2, 8 * BLOCK_SIZE, 0)
    );
    drop(m);
    let m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
    assert_eq!(read(&m, 0, 8), want);
}

#[test]
fn orphans_of_a_failed_sync_whose_cleanup_failed_are_removed_by_retain() {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 4, 1)).unwrap();
    m.sync().unwrap(); // committed: blocks 0..4
    m.write_blocks(16, &blocks(16, 16, 2)).unwrap(); // two parts
    fault.fail_puts_after(1, PutFault::LoseAnswer);
    fault.fail_deletes_after(0);
    assert!(m.sync().is_err());
    assert_eq!(parts_in(&store).len(), 3, "both landed, the cleanup failed");
    assert_eq!(m.object_stats().dead_parts, 2, "kept as strays");
    fault.heal();
    drop(m); // crash before the next sync: the strays are forgotten

    let m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
    assert_eq!(
        m.object_stats().parts,
        3,
        "orphans are visible after the reopen"
    );
    let used = [(0, 4)];
    let orphans = m.orphans(&used);
    assert_eq!(
        orphans
            .iter()
            .map(|o| (o.block, o.blocks))
            .collect::<Vec<_>>(),
        vec![(16, 8), (24, 8)]
    );
    assert!(
        orphans[0]
            .key
            .starts_with("pool/tier1/seg-0000000000000002/"),
        "{orphans:?}"
    );
    assert_eq!(parts_in(&store).len(), 3, "orphans() deletes nothing");
    let r = m.retain(&used).unwrap();
    assert_eq!(
        r,
        SweepReport {
            parts: 2,
            bytes: 16 * BLOCK_SIZE
        }
    );
    assert_eq!(parts_in(&store).len(), 1);
    assert_eq!(read(&m, 0, 4), blocks(0, 4, 1));
    let s = m.object_stats();
    assert_eq!((s.parts, s.live_bytes), (1, 4 * BLOCK_SIZE));
}

#[test]
fn retain_keeps_parts_with_a_used_block_and_deletes_the_rest() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 8, 1)).unwrap(); // used in part
    m.write_blocks(8, &blocks(8, 8, 1)).unwrap(); // unused
    m.write_blocks(16, &blocks(16, 8, 1)).unwrap(); // used at its last block
    m.sync().unwrap();
    let used = [(2, 3), (23, 1), (60, 4)];
    assert_eq!(m.orphans(&used).len(), 1);
    let r = m.retain(&used).unwrap();
    assert_eq!(
        r,
        SweepReport {
            parts: 1,
            bytes: 8 * BLOCK_SIZE
        }
    );
    let left = parts_in(&store);
    assert_eq!(left.len(), 2);
    assert!(
        left.iter().all(|k| !k.contains("seg-0000000000000001/")),
        "{left:?}"
    );
    assert_eq!(read(&m, 2, 3), blocks(2, 3, 1));
    assert_eq!(read(&m, 23, 1), blocks(23, 1, 1));
    assert_eq!(
        m.object_stats().live_bytes,
        4 * BLOCK_SIZE,
        "unused blocks count as dead"
    );
}

#[test]
fn create_refuses_a_used_prefix_and_open_refuses_another_pool() {
    let store = new_store();
    drop(ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 8).unwrap());
    let e = ObjectMedia::create_in(bucket(&store), OTHER, 64 * BLOCK_SIZE, 8).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert!(e.to_string().contains("holds a tier marker already"), "{e}");
    let e = ObjectMedia::open_in(bucket(&store), OTHER).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(
        e.to_string().contains(
            "belongs to pool 5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a, not to pool a5a5a5a5-"
        ),
        "{e}"
    );
    // No marker: open refuses; parts without a marker: create refuses.
    let elsewhere = Bucket::with_store(Arc::clone(&store), "memory://test", "pool/tier2").unwrap();
    let e = ObjectMedia::open_in(elsewhere, UUID).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(
        e.to_string()
            .contains("memory://test/pool/tier2: no Terrace tier here"),
        "{e}"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(store.put(
        &Path::from("pool/tier3/seg-0000000000000000/0000000000000000-00000000-00000001"),
        PutPayload::from(vec![0u8; BLOCK]),
    ))
    .unwrap();
    let b3 = Bucket::with_store(Arc::clone(&store), "memory://test", "pool/tier3").unwrap();
    let e = ObjectMedia::create_in(b3, UUID, 64 * BLOCK_SIZE, 8).unwrap_err();
    assert!(
        e.to_string().contains("holds 1 part objects already"),
        "{e}"
    );
    // A foreign object does not stop create; a bad geometry does.
    rt.block_on(store.put(&Path::from("pool/tier4/README"), PutPayload::from("hi")))
        .unwrap();
    let b4 = || Bucket::with_store(Arc::clone(&store), "memory://test", "pool/tier4").unwrap();
    for (len, seg) in [(0, 8), (100, 8), (4096, 0), (4096, MAX_SEGMENT_BLOCKS + 1)] {
        let e = ObjectMedia::create_in(b4(), UUID, len, seg).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{len} {seg}");
    }
    ObjectMedia::create_in(b4(), UUID, 4096, 1).unwrap();
    // The tier's other prefix was not touched.
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    assert_eq!(m.object_stats().parts, 0);
}

#[test]
fn malformed_and_foreign_keys_are_reported_and_left_alone() {
    let store = new_store();
    drop(ObjectMedia::create_in(bucket(&store), UUID, 32 * BLOCK_SIZE, 8).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let put = |k: &str, n: usize| {
        rt.block_on(store.put(&Path::from(k), PutPayload::from(vec![1u8; n])))
            .unwrap();
    };
    let p = "pool/tier1/seg-0000000000000000";
    put(&format!("{p}/zz"), 1);
    put(&format!("{p}/0000000000000007-00000000-00000002"), BLOCK); // size wrong
    put(
        &format!("{p}/0000000000000008-00000006-00000004"),
        4 * BLOCK,
    ); // past segment
    put(
        "pool/tier1/seg-0000000000000004/0000000000000009-00000000-00000001",
        BLOCK,
    ); // past len
    put("pool/tier1/notes.txt", 3);
    put(&format!("{p}/0000000000000005-00000000-00000001"), BLOCK); // good
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    let ig = m.ignored_keys().join("\n");
    assert_eq!(m.ignored_keys().len(), 5, "{ig}");
    for why in [
        "SEQ-FIRST-COUNT",
        "4096 bytes, its name says 8192",
        "outside the tier",
        "not a Terrace object",
    ] {
        assert!(ig.contains(why), "{why}: {ig}");
    }
    assert_eq!(read(&m, 0, 1), vec![1u8; BLOCK]);
    // The next upload number is past the good part's (not the ignored ones').
    m.write_blocks(1, &blocks(1, 1, 1)).unwrap();
    m.sync().unwrap();
    let new = part_keys(&store)
        .into_iter()
        .find(|k| k.first == 1)
        .unwrap();
    assert!(
        new.seq > 9,
        "past every listed number, ignored ones too: {new:?}"
    );
    // Nothing ignored was deleted.
    assert_eq!(keys_in(&store).len(), 8);
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 4 * BLOCK_SIZE, 8).unwrap();
    let mut b = vec![0u8; 2 * BLOCK];
    for (block, len) in [(3, 2 * BLOCK), (4, BLOCK), (u64::MAX, BLOCK)] {
        let e = m.read_blocks(block, &mut b[..len]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = m.write_blocks(block, &b[..len]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    assert_eq!(
        m.write_blocks(0, &b[..100]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        m.trim(3, 2).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        m.trim(u64::MAX, 2).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    m.read_blocks(4, &mut []).unwrap();
    m.trim(0, 0).unwrap();
    assert_eq!(m.stats(), BlockStats::default());
}

#[test]
fn calling_from_inside_an_async_runtime_is_an_error_not_a_panic() {
    let store = new_store();
    let m = ObjectMedia::create_in(bucket(&store), UUID, 4 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 1, 1)).unwrap();
    m.sync().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = rt.block_on(async {
        let mut b = vec![0u8; BLOCK];
        m.read_blocks(0, &mut b).unwrap_err()
    });
    assert!(e.to_string().contains("inside an async runtime"), "{e}");
    // Dropping it there is no panic either.
    rt.block_on(async { drop(m) });
}

/// Two synced blocks on a store behind a fault wrapper (and the plain store).
fn two_blocks_behind_faults() -> (Arc<dyn ObjectStore>, Arc<FaultStore>, ObjectMedia) {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = ObjectMedia::create_in(bucket(&dynf), UUID, 16 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 2, 1)).unwrap();
    m.sync().unwrap();
    (store, fault, m)
}

#[test]
fn a_failing_store_shows_in_the_stats_until_a_request_succeeds() {
    let (_store, fault, m) = two_blocks_behind_faults();
    assert_eq!(m.object_stats().failing, None);
    fault.fail_gets_after(0);
    let mut b = vec![0u8; 2 * BLOCK];
    m.read_blocks(0, &mut b).unwrap_err();
    let first = m.object_stats().failing.expect("a failed GET is shown");
    assert!(first.error.contains("s3 GET"), "{}", first.error);
    // Still failing: the first failure's time stays.
    m.read_blocks(0, &mut b).unwrap_err();
    assert_eq!(
        m.object_stats().failing.map(|f| f.since_unix),
        Some(first.since_unix)
    );
    fault.heal();
    m.read_blocks(0, &mut b).unwrap();
    assert_eq!(m.object_stats().failing, None, "a success clears it");
}

#[test]
fn read_errors_name_the_object_and_a_vanished_part_does_not_loop() {
    let (store, fault, m) = two_blocks_behind_faults();
    fault.fail_gets_after(0);
    let mut b = vec![0u8; 2 * BLOCK];
    let e = m.read_blocks(0, &mut b).unwrap_err();
    assert!(
        e.to_string()
            .contains("s3 GET memory://test/pool/tier1/seg-"),
        "{e}"
    );
    fault.heal();
    // Deleted behind the media's back: NotFound after a few plans, no hang.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let key = parts_in(&store).remove(0);
    rt.block_on(store.delete(&Path::from(key.as_str())))
        .unwrap();
    let e = m.read_blocks(0, &mut b).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert_eq!(m.stats().read_requests, 0);
}

#[test]
fn a_failed_list_fails_open_with_the_url() {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    drop(ObjectMedia::create_in(bucket(&dynf), UUID, 16 * BLOCK_SIZE, 8).unwrap());
    fault.fail_lists_after(0);
    let e = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap_err();
    assert!(
        e.to_string().contains("s3 LIST memory://test/pool/tier1/"),
        "{e}"
    );
    assert_eq!(fault.injected().lists, 1);
}

#[test]
fn an_earlier_upload_failing_while_a_later_one_holds_newer_blocks_puts_back_only_what_nothing_newer_holds(
) {
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 4, 1)).unwrap();
    let t1 = m.seal();
    m.write_blocks(0, &blocks(0, 1, 3)).unwrap();
    let t2 = m.seal();
    fault.hold_puts();
    std::thread::scope(|s| {
        let _release = ReleasePuts(&fault);
        let first = s.spawn(|| m.sync_sealed(t1));
        let start = std::time::Instant::now();
        while fault.puts_waiting() < 1 {
            assert!(start.elapsed().as_secs() < 10);
            std::thread::yield_now();
        }
        let second = s.spawn(|| m.sync_sealed(t2));
        while fault.puts_waiting() < 2 {
            assert!(start.elapsed().as_secs() < 10);
            std::thread::yield_now();
        }
        // Both fail: the first puts back blocks 1-3 (block 0 is held newer
        // by the second), the second block 0 as written last.
        fault.fail_puts_after(0, PutFault::Refuse);
        fault.release_puts();
        assert!(first.join().unwrap().is_err());
        assert!(second.join().unwrap().is_err());
    });
    fault.heal();
    let mut want = blocks(0, 1, 3);
    want.extend(blocks(1, 3, 1));
    assert_eq!(read(&m, 0, 4), want, "the newest data reads back");
    assert_eq!(m.object_stats().pending_bytes, 4 * BLOCK_SIZE);
    m.sync().unwrap();
    drop(m);
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    assert_eq!(
        read(&m, 0, 4),
        want,
        "and is what the next sync made durable"
    );
}

#[test]
fn a_sealed_ticket_waits_for_and_fails_with_the_upload_that_took_its_writers_blocks_before_the_seal(
) {
    // A mover writes blocks, then another writer's `sync` takes them with
    // its own before the mover seals: the mover's ticket holds nothing.
    // Its `sync_sealed` answered Ok at once, and the move committed while
    // its blocks were still on their way — or after their upload failed.
    let store = new_store();
    let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
    let dynf: Arc<dyn ObjectStore> = fault.clone();
    let m = ObjectMedia::create_in(bucket(&dynf), UUID, 64 * BLOCK_SIZE, 8).unwrap();
    m.write_blocks(0, &blocks(0, 4, 1)).unwrap(); // the mover's
    fault.hold_puts();
    std::thread::scope(|s| {
        let _release = ReleasePuts(&fault);
        let other = s.spawn(|| m.sync());
        let start = std::time::Instant::now();
        while fault.puts_waiting() < 1 {
            assert!(start.elapsed().as_secs() < 10);
            std::thread::yield_now();
        }
        let t = m.seal();
        let m = &m;
        let mover = s.spawn(move || m.sync_sealed(t));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            !mover.is_finished(),
            "the ticket answered before the upload holding its writer's blocks landed"
        );
        fault.fail_puts_after(0, PutFault::Refuse);
        fault.release_puts();
        assert!(other.join().unwrap().is_err());
        assert!(
            mover.join().unwrap().is_err(),
            "the upload of the mover's blocks failed, so must its ticket"
        );
    });
    fault.heal();
    // The blocks are pending again, and a later sync makes them durable.
    assert_eq!(read(&m, 0, 4), blocks(0, 4, 1));
    let t = m.seal();
    m.sync_sealed(t).unwrap();
    drop(m);
    let m = ObjectMedia::open_in(bucket(&store), UUID).unwrap();
    assert_eq!(read(&m, 0, 4), blocks(0, 4, 1));
}
