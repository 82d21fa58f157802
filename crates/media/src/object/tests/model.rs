//! A property test: reads equal a per-block model of writes, syncs, seals
//! and syncs of the sealed blocks, trims, failed syncs, reclaims and
//! reopens.

use proptest::prelude::*;

use super::*;

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
    /// Set aside what was written so far, under a new ticket.
    Seal,
    /// `sync_sealed` of one of the tickets not yet answered (picked by the
    /// index, modulo their number); its upload fails after `n` PUTs when
    /// `Some(n)`.
    SyncSealed(usize, Option<u64>),
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
        2 => Just(Op::Seal),
        2 => (0..4usize, prop::option::of(0..3u64)).prop_map(|(i, f)| Op::SyncSealed(i, f)),
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
        // Written since the last seal (or put back by a failed upload), and
        // each ticket's sealed blocks with its state: `None` while sealed,
        // `Some(ok)` once an upload took it.
        let never = vec![Cell::Never; MODEL_BLOCKS as usize];
        let mut unsealed = never.clone();
        let mut tickets: Vec<(u64, Vec<Cell>, Option<bool>)> = Vec::new();
        for op in ops {
            match op {
                Op::Write(s, n, v) => {
                    m.write_blocks(s, &blocks(s, n, v)).unwrap();
                    for b in s..s + n {
                        live[b as usize] = Cell::Data(v);
                        unsealed[b as usize] = Cell::Data(v);
                    }
                }
                Op::Sync => {
                    m.sync().unwrap();
                    durable = live.clone();
                    unsealed = never.clone();
                    for t in tickets.iter_mut().filter(|t| t.2.is_none()) {
                        t.2 = Some(true);
                    }
                }
                Op::FailingSync(n, lose) => {
                    let how = if lose { PutFault::LoseAnswer } else { PutFault::Refuse };
                    fault.fail_puts_after(n, how);
                    let r = m.sync();
                    fault.heal();
                    let ok = r.is_ok();
                    if ok {
                        durable = live.clone(); // fewer parts than n
                        unsealed = never.clone();
                    } else {
                        // Everything not durable is pending again.
                        for (b, c) in live.iter().enumerate() {
                            unsealed[b] = if *c == durable[b] { Cell::Never } else { *c };
                        }
                    }
                    for t in tickets.iter_mut().filter(|t| t.2.is_none()) {
                        t.2 = Some(ok);
                    }
                }
                Op::Seal => {
                    let t = m.seal();
                    prop_assert!(tickets.iter().all(|(old, _, _)| *old < t), "tickets grow");
                    tickets.push((t, std::mem::replace(&mut unsealed, never.clone()), None));
                }
                Op::SyncSealed(i, fail) => {
                    if tickets.is_empty() {
                        continue;
                    }
                    let i = i % tickets.len();
                    let (t, _, state) = tickets[i].clone();
                    if let Some(n) = fail {
                        fault.fail_puts_after(n, PutFault::Refuse);
                    }
                    let r = m.sync_sealed(t);
                    fault.heal();
                    match state {
                        // Answered with the outcome of the upload that took it.
                        Some(ok) => prop_assert_eq!(r.is_ok(), ok, "ticket {}", t),
                        None => {
                            // It took every sealed ticket up to `t`, oldest first.
                            let ok = r.is_ok();
                            let mut merged = never.clone();
                            for (tk, cells, st) in tickets.iter_mut() {
                                if *tk <= t && st.is_none() {
                                    *st = Some(ok);
                                    for (m, c) in merged.iter_mut().zip(cells.iter()) {
                                        if *c != Cell::Never {
                                            *m = *c;
                                        }
                                    }
                                }
                            }
                            for (b, c) in merged.iter().enumerate() {
                                if *c == Cell::Never {
                                    continue;
                                }
                                if ok {
                                    durable[b] = *c;
                                    continue;
                                }
                                // Put back unless held newer.
                                let newer = unsealed[b] != Cell::Never
                                    || tickets.iter().any(|(_, cells, st)| {
                                        st.is_none() && cells[b] != Cell::Never
                                    });
                                if !newer {
                                    unsealed[b] = *c;
                                }
                            }
                        }
                    }
                    tickets.remove(i);
                    // Answered once: a second ask is refused.
                    prop_assert!(m.sync_sealed(t).is_err());
                }
                Op::Trim(s, n) => {
                    m.trim(s, n).unwrap();
                    for b in s..s + n {
                        live[b as usize] = Cell::Any;
                        durable[b as usize] = Cell::Any;
                        unsealed[b as usize] = Cell::Never;
                        for (_, cells, _) in tickets.iter_mut() {
                            cells[b as usize] = Cell::Never;
                        }
                    }
                }
                Op::Reclaim => {
                    m.reclaim().unwrap();
                }
                Op::Reopen => {
                    drop(m);
                    m = ObjectMedia::open_in(bucket(&dynf), UUID).unwrap();
                    live = durable.clone();
                    unsealed = never.clone();
                    tickets.clear();
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
