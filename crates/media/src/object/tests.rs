//! `ObjectMedia` over object_store's in-memory store and the fault wrapper:
//! durability at `sync` only, nothing half-visible after a failed upload,
//! deletion of dead parts and orphans, pool identity, malformed keys.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use proptest::prelude::*;

use super::*;

const UUID: [u8; 16] = [0x5a; 16];
const OTHER: [u8; 16] = [0xa5; 16];

/// Block `b` filled with `v`, its number in the first 8 bytes (so a block
/// read from the wrong place shows).
fn pattern(b: u64, v: u8) -> Vec<u8> {
    let mut d = vec![v; BLOCK];
    d[..8].copy_from_slice(&b.to_le_bytes());
    d
}

fn blocks(start: u64, n: u64, v: u8) -> Vec<u8> {
    (start..start + n).flat_map(|b| pattern(b, v)).collect()
}

fn bucket(store: &Arc<dyn ObjectStore>) -> Bucket {
    Bucket::with_store(Arc::clone(store), "memory://test", "pool/tier1").unwrap()
}

fn new_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

/// Every key in the store, sorted.
fn keys_in(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    let b = Bucket::with_store(Arc::clone(store), "memory://list", "").unwrap();
    let mut k: Vec<String> = b.list().unwrap().into_iter().map(|(k, _, _)| k).collect();
    k.sort();
    k
}

/// Parts in the store, sorted by upload number.
fn part_keys(store: &Arc<dyn ObjectStore>) -> Vec<PartKey> {
    let mut k: Vec<PartKey> = parts_in(store)
        .iter()
        .filter_map(|k| match keys::parse("pool/tier1", k) {
            keys::Parsed::Part(p) => Some(p),
            _ => None,
        })
        .collect();
    k.sort_by_key(|p| p.seq);
    k
}

/// Keys of parts only.
fn parts_in(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    keys_in(store)
        .into_iter()
        .filter(|k| k.contains("/seg-"))
        .collect()
}

fn read(m: &ObjectMedia, start: u64, n: u64) -> Vec<u8> {
    let mut b = vec![0xee; (n * BLOCK_SIZE) as usize];
    m.read_blocks(start, &mut b).unwrap();
    b
}

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

/// The per-block model of the property test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// Never written: reads as zeros.
    Never,
    /// Holds this fill value.
    Data(u8),
    /// Trimmed: anything.
    Any,
}

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u64, u8),
    Sync,
    /// A sync whose PUTs fail after `n` (deletes work).
    FailingSync(u64, bool),
    Trim(u64, u64),
    Reclaim,
    /// Drop without syncing, open again, `retain` what the model holds.
    Reopen,
}

const MODEL_BLOCKS: u64 = 48;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..MODEL_BLOCKS, 1..12u64, 1..=255u8)
            .prop_map(|(s, n, v)| Op::Write(s, n.min(MODEL_BLOCKS - s), v)),
        3 => Just(Op::Sync),
        1 => (0..3u64, any::<bool>()).prop_map(|(n, lose)| Op::FailingSync(n, lose)),
        2 => (0..MODEL_BLOCKS, 1..12u64).prop_map(|(s, n)| Op::Trim(s, n.min(MODEL_BLOCKS - s))),
        1 => Just(Op::Reclaim),
        1 => Just(Op::Reopen),
    ]
}

fn check(m: &ObjectMedia, live: &[Cell]) -> Result<(), TestCaseError> {
    let got = read(m, 0, MODEL_BLOCKS);
    for (b, cell) in live.iter().enumerate() {
        let block = &got[b * BLOCK..(b + 1) * BLOCK];
        match *cell {
            Cell::Never => prop_assert!(block.iter().all(|&x| x == 0), "block {} not zero", b),
            Cell::Data(v) => prop_assert_eq!(block, &pattern(b as u64, v)[..], "block {}", b),
            Cell::Any => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Reads equal a per-block model of writes, syncs, trims and crashes;
    /// dead parts are gone after every sync; after a reopen and `retain`,
    /// exactly the blocks the model holds are live.
    #[test]
    fn object_media_matches_a_per_block_model(ops in prop::collection::vec(op(), 1..40)) {
        let store = new_store();
        let fault = Arc::new(FaultStore::new(Arc::clone(&store)));
        let dynf: Arc<dyn ObjectStore> = fault.clone();
        let mut m = ObjectMedia::create_in(bucket(&dynf), UUID, MODEL_BLOCKS * BLOCK_SIZE, 8).unwrap();
        let mut live = vec![Cell::Never; MODEL_BLOCKS as usize];
        let mut durable = live.clone();
        for op in ops {
            match op {
                Op::Write(s, n, v) => {
                    m.write_blocks(s, &blocks(s, n, v)).unwrap();
                    for b in s..s + n {
                        live[b as usize] = Cell::Data(v);
                    }
                }
                Op::Sync => {
                    m.sync().unwrap();
                    durable = live.clone();
                }
                Op::FailingSync(n, lose) => {
                    let how = if lose { PutFault::LoseAnswer } else { PutFault::Refuse };
                    fault.fail_puts_after(n, how);
                    let r = m.sync();
                    fault.heal();
                    if r.is_ok() {
                        durable = live.clone(); // fewer parts than n
                    }
                }
                Op::Trim(s, n) => {
                    m.trim(s, n).unwrap();
                    for b in s..s + n {
                        live[b as usize] = Cell::Any;
                        durable[b as usize] = Cell::Any;
                    }
                }
                Op::Reclaim => {
                    m.reclaim().unwrap();
                }
                Op::Reopen => {
                    drop(m);
                    m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
                    live = durable.clone();
                    let used: Vec<(u64, u64)> = live
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| matches!(c, Cell::Data(_)))
                        .map(|(b, _)| (b as u64, 1))
                        .collect();
                    m.retain(&used).unwrap();
                    let s = m.object_stats();
                    prop_assert_eq!(s.live_bytes, used.len() as u64 * BLOCK_SIZE);
                }
            }
            check(&m, &live)?;
            let s = m.object_stats();
            if matches!(op, Op::Sync | Op::Reclaim | Op::Reopen) {
                prop_assert_eq!(s.dead_parts, 0);
                prop_assert_eq!(parts_in(&store).len() as u64, s.parts, "store and index agree");
            }
            // No part is kept that holds no live block, once deletes ran.
            let held = live.iter().filter(|c| !matches!(c, Cell::Never)).count() as u64;
            prop_assert!(s.live_bytes <= held * BLOCK_SIZE);
        }
    }
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
