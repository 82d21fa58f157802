//! Making writes durable and deleting what is dead: `sync` and
//! `sync_sealed` upload blocks as new parts that enter the index only when
//! all landed (rules 1 and 2 of the module docs), then delete dead parts;
//! `reclaim`, `retain` and `orphans` sweep parts no block reads from
//! (rule 3).
//!
//! Uploads may overlap (the mover starts a window's upload while the one
//! before finishes), under three rules:
//! - **Turns.** An upload takes its blocks and its part numbers in one step
//!   under the state lock, and gets the next *turn*; it enters the index
//!   only once every upload of an earlier turn has finished, so part
//!   numbers enter the index in increasing order and newer data always
//!   wins.
//! - **Tickets.** `seal` sets the pending blocks aside under a new ticket;
//!   `sync_sealed(t)` takes ticket `t` together with every older ticket
//!   still sealed (older data may not enter the index after newer), and
//!   answers with the outcome of whichever upload took `t` — and fails
//!   when an upload that had taken blocks before `t` was sealed failed
//!   after it: a writer's blocks may have gone with another writer's
//!   `sync` before its seal, and `t` then holds fewer of them or none (a
//!   mover committed a move to S3 whose blocks were still on their way, or
//!   whose upload had failed). `sync` takes
//!   the pending blocks and every sealed ticket, and fails when an upload
//!   of an earlier turn failed (its blocks, written before the `sync`, are
//!   pending again).
//! - **Failures.** A failed upload enters nothing in the index; its blocks
//!   go back to the pending ones, except blocks held newer (pending, sealed,
//!   or in a later upload) or trimmed since.

use std::io;
use std::sync::Arc;

use object_store::PutPayload;

use super::buffer::BlockBuffer;
use super::{ObjectMedia, Orphan, PartKey, SweepReport};
use crate::block::BLOCK_SIZE;

/// How an upload that took a ticket ended: `Err` keeps the error's kind
/// and text, to answer each ticket's `sync_sealed` with.
pub(super) type Outcome = Result<(), (io::ErrorKind, String)>;

/// An upload running: its turn, the blocks it took (still read from
/// here), and the trims that arrived meanwhile (applied to its parts when
/// they enter the index).
#[derive(Debug)]
pub(super) struct Inflight {
    turn: u64,
    pub(super) batch: Arc<BlockBuffer>,
    pub(super) trims: Vec<(u64, u64)>,
}

/// The uploads running when a ticket was sealed, and how many of them
/// failed once the last of them finished.
#[derive(Debug, Clone, Copy)]
pub(super) struct SealMark {
    /// `next_turn` at the seal: those turns had taken blocks.
    turns_before: u64,
    /// `failed_uploads` at the seal.
    failed_at_seal: u64,
    /// Failures among those uploads, once turn `turns_before - 1` finished
    /// (turns finish in order, so no later one had yet).
    failed: Option<u64>,
}

/// What an upload took, under the state lock.
struct Taken {
    turn: u64,
    batch: Arc<BlockBuffer>,
    /// One per part: its key, first block and body.
    parts: Vec<(PartKey, u64, Vec<bytes::Bytes>)>,
    /// The sealed tickets it took.
    tickets: Vec<u64>,
    /// `failed_uploads` when it took its blocks.
    failed_before: u64,
}

impl ObjectMedia {
    /// The body of `BlockMedia::sync`: uploads the pending and sealed
    /// blocks, then deletes dead parts (a failed delete does not fail the
    /// sync: it is retried later).
    pub(super) fn sync_pending(&self) -> io::Result<()> {
        let taken = {
            let mut st = self.state.lock();
            let mut all = std::mem::take(&mut st.pending);
            let mut tickets = Vec::new();
            // Newest first: each older buffer fills only the gaps.
            for (t, b) in std::mem::take(&mut st.sealed).into_iter().rev() {
                all.fill_gaps(&b, &[]);
                tickets.push(t);
            }
            self.take(&mut st, all, tickets)
        };
        let earlier_failures = match taken {
            Some(t) => self.run(t)?,
            None => self.wait_for_uploads(),
        };
        if earlier_failures > 0 {
            return Err(io::Error::other(format!(
                "s3 sync to {}: {earlier_failures} upload(s) of earlier writes failed \
                 meanwhile (their blocks are pending again)",
                self.bucket.url()
            )));
        }
        {
            // Failures stay queued for the next sync or reclaim.
            let _g = self.sync_lock.lock();
            let _ = self.delete_dead();
        }
        self.stats.record_sync();
        Ok(())
    }

    /// Waits for every upload running to finish its turn; returns how many
    /// of them failed.
    fn wait_for_uploads(&self) -> u64 {
        let mut st = self.state.lock();
        let failed = st.failed_uploads;
        let last = st.next_turn;
        while st.finishing_turn < last {
            self.turns.wait(&mut st);
        }
        st.failed_uploads - failed
    }

    /// The body of `BlockMedia::sync_sealed`: uploads ticket `ticket` (and
    /// every older ticket still sealed) unless an upload took it already,
    /// and answers with that upload's outcome.
    pub(super) fn sync_ticket(&self, ticket: u64) -> io::Result<()> {
        let taken = {
            let mut st = self.state.lock();
            let mut all = BlockBuffer::default();
            let mut tickets = Vec::new();
            while st.sealed.front().is_some_and(|(t, _)| *t <= ticket) {
                let Some((t, mut b)) = st.sealed.pop_front() else {
                    break;
                };
                // Each ticket is newer than the ones before it.
                b.fill_gaps(&all, &[]);
                all = b;
                tickets.push(t);
            }
            if tickets.is_empty() {
                None
            } else {
                self.take(&mut st, all, tickets)
            }
        };
        if let Some(t) = taken {
            // The outcome is recorded for every ticket it took.
            let _ = self.run(t);
            // Failures stay queued for the next sync or reclaim; a delete
            // already running (another sync's) does them.
            if let Some(_g) = self.sync_lock.try_lock() {
                let _ = self.delete_dead();
            }
            self.stats.record_sync();
        }
        let mut st = self.state.lock();
        loop {
            match st.outcomes.get(&ticket) {
                Some(None) => self.turns.wait(&mut st),
                Some(Some(_)) => {
                    let r = st.outcomes.remove(&ticket).flatten();
                    if let Some(Err((kind, msg))) = r {
                        st.seal_marks.remove(&ticket);
                        return Err(io::Error::new(kind, msg));
                    }
                    // The uploads that had taken blocks before the seal.
                    let failed = loop {
                        match st.seal_marks.get(&ticket).map(|m| m.failed) {
                            None => break 0,
                            Some(Some(n)) => break n,
                            Some(None) => self.turns.wait(&mut st),
                        }
                    };
                    st.seal_marks.remove(&ticket);
                    if failed > 0 {
                        return Err(io::Error::other(format!(
                            "s3 sync to {}: {failed} upload(s) of writes made before \
                             this one's seal failed (their blocks are pending again)",
                            self.bucket.url()
                        )));
                    }
                    return Ok(());
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "s3 {}: ticket {ticket} was never sealed or was synced already",
                            self.bucket.url()
                        ),
                    ))
                }
            }
        }
    }

    /// The body of `BlockMedia::seal`: the pending blocks are set aside
    /// under a new ticket.
    pub(super) fn seal_pending(&self) -> u64 {
        let mut st = self.state.lock();
        st.last_ticket += 1;
        let t = st.last_ticket;
        let b = std::mem::take(&mut st.pending);
        st.sealed.push_back((t, b));
        let mark = SealMark {
            turns_before: st.next_turn,
            failed_at_seal: st.failed_uploads,
            failed: (st.finishing_turn == st.next_turn).then_some(0),
        };
        st.seal_marks.insert(t, mark);
        t
    }

    /// Registers the upload of `batch` (for `tickets`): its turn, its part
    /// numbers, its place among the uploads running. `None` when there is
    /// nothing to upload (the tickets are done).
    fn take(&self, st: &mut super::State, batch: BlockBuffer, tickets: Vec<u64>) -> Option<Taken> {
        if batch.is_empty() {
            for t in tickets {
                st.outcomes.insert(t, Some(Ok(())));
            }
            return None;
        }
        // Runs of consecutive blocks inside one segment: one part each.
        let parts: Vec<(PartKey, u64, Vec<bytes::Bytes>)> = batch
            .segment_runs(self.segment_blocks)
            .into_iter()
            .map(|(start, n, pieces)| {
                let seq = st.next_seq;
                st.next_seq += 1;
                let key = PartKey {
                    seq,
                    segment: start / self.segment_blocks,
                    first: (start % self.segment_blocks) as u32,
                    count: n as u32,
                };
                (key, start, pieces)
            })
            .collect();
        let turn = st.next_turn;
        st.next_turn += 1;
        let batch = Arc::new(batch);
        st.inflight.push_back(Inflight {
            turn,
            batch: Arc::clone(&batch),
            trims: Vec::new(),
        });
        for &t in &tickets {
            st.outcomes.insert(t, None);
        }
        Some(Taken {
            turn,
            batch,
            parts,
            tickets,
            failed_before: st.failed_uploads,
        })
    }

    /// Uploads what `t` took, then, in its turn, puts its parts in the
    /// index (or its blocks back among the pending ones) and records the
    /// outcome for its tickets. `Ok(n)`: it landed, and `n` uploads of
    /// earlier turns failed since it took its blocks.
    fn run(&self, t: Taken) -> io::Result<u64> {
        let landed = self.upload(&t);
        let mut st = self.state.lock();
        while st.finishing_turn != t.turn {
            self.turns.wait(&mut st);
        }
        let earlier_failures = st.failed_uploads - t.failed_before;
        let me = match st.inflight.iter().position(|f| f.turn == t.turn) {
            Some(i) => st.inflight.remove(i),
            None => None,
        };
        let trims = me.map(|f| f.trims).unwrap_or_default();
        let result = landed.and_then(|()| {
            let now = unix_now();
            for (k, start, _) in &t.parts {
                st.uploaded.insert(k.seq, now);
                if let Err(why) = st.index.insert(*k, *start) {
                    // Cannot happen (numbers are taken in turn order); keep
                    // the object as an orphan rather than panic.
                    return Err(io::Error::other(format!(
                        "s3 {}: part {k} not indexed: {why}",
                        self.bucket.url()
                    )));
                }
            }
            for &(b, n) in &trims {
                st.index.trim(b, n);
            }
            Ok(())
        });
        if result.is_err() {
            // Back among the pending blocks, except where something newer
            // is held (pending, sealed, a later upload) or a trim came.
            let mut skip = trims;
            for (_, b) in &st.sealed {
                skip.extend(b.ranges());
            }
            for f in &st.inflight {
                skip.extend(f.batch.ranges());
            }
            st.pending.fill_gaps(&t.batch, &skip);
            st.failed_uploads += 1;
        }
        let outcome: Outcome = match &result {
            Ok(()) => Ok(()),
            Err(e) => Err((e.kind(), e.to_string())),
        };
        for tk in &t.tickets {
            st.outcomes.insert(*tk, Some(outcome.clone()));
        }
        st.finishing_turn += 1;
        let (finished, failed_now) = (st.finishing_turn, st.failed_uploads);
        for m in st.seal_marks.values_mut() {
            if m.turns_before == finished {
                m.failed = Some(failed_now - m.failed_at_seal);
            }
        }
        self.turns.notify_all();
        result.map(|()| earlier_failures)
    }

    /// Deletes every dead part (and stray object); fails if any delete
    /// failed (those stay queued).
    pub fn reclaim(&self) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.delete_dead()
    }

    /// Given every block run `(first block, blocks)` the pool's committed
    /// log references, treats every other block as trimmed and deletes every
    /// part left without a used block — the orphans of uploads whose commit
    /// never happened — together with any other dead part. Call it once
    /// recovery knows the committed runs, before new writes (at mount).
    pub fn retain(&self, used: &[(u64, u64)]) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.state.lock().index.retain(used);
        self.delete_dead()
    }

    /// The parts [`retain`](Self::retain) would delete as orphans, without
    /// deleting anything (for fsck).
    pub fn orphans(&self, used: &[(u64, u64)]) -> Vec<Orphan> {
        let st = self.state.lock();
        st.index
            .orphans(used)
            .into_iter()
            .map(|p| Orphan {
                key: self.key(&p.key),
                block: p.start,
                blocks: p.count(),
            })
            .collect()
    }

    /// Deletes the dead parts and strays; the caller holds `sync_lock`.
    fn delete_dead(&self) -> io::Result<SweepReport> {
        let (dead, stray) = {
            let st = self.state.lock();
            (st.index.dead_parts(), st.stray.clone())
        };
        if dead.is_empty() && stray.is_empty() {
            return Ok(SweepReport::default());
        }
        let mut keys: Vec<String> = dead.iter().map(|p| self.key(&p.key)).collect();
        keys.extend(stray.iter().cloned());
        let total = keys.len();
        let mut failed = self.bucket.delete_all(keys);
        let failed_keys: std::collections::HashSet<String> =
            failed.iter().map(|(k, _)| k.clone()).collect();
        let mut report = SweepReport::default();
        {
            let mut st = self.state.lock();
            for p in &dead {
                if !failed_keys.contains(&self.key(&p.key)) && st.index.forget(p.key.seq) {
                    st.uploaded.remove(&p.key.seq);
                    report.parts += 1;
                    report.bytes += p.count() * BLOCK_SIZE;
                }
            }
            st.stray
                .retain(|k| failed_keys.contains(k) || !stray.contains(k));
        }
        if failed.is_empty() {
            return Ok(report);
        }
        let (_, e) = failed.swap_remove(0);
        Err(io::Error::new(
            e.kind(),
            format!(
                "{} of {total} deletes failed (kept for the next try), first: {e}",
                failed_keys.len()
            ),
        ))
    }

    /// Uploads the parts `t` took (their bodies slice its buffers: no
    /// copy). On a failure nothing becomes visible: what landed is deleted
    /// (or kept as stray for the next try).
    fn upload(&self, t: &Taken) -> io::Result<()> {
        let objects: Vec<(String, PutPayload)> = t
            .parts
            .iter()
            .map(|(k, _, pieces)| (self.key(k), PutPayload::from_iter(pieces.iter().cloned())))
            .collect();
        let keys: Vec<String> = objects.iter().map(|(k, _)| k.clone()).collect();
        let results = self.bucket.put_all(objects);
        let failures = results.iter().filter(|r| r.is_err()).count();
        if let Some(Err(first)) = results.into_iter().find(|r| r.is_err()) {
            let failed = self.bucket.delete_all(keys);
            self.state
                .lock()
                .stray
                .extend(failed.into_iter().map(|(k, _)| k));
            return Err(io::Error::new(
                first.kind(),
                format!(
                    "s3 sync of {} blocks in {} parts to {}: {failures} PUTs failed, \
                     nothing made durable; first: {first}",
                    t.batch.blocks(),
                    t.parts.len(),
                    self.bucket.url()
                ),
            ));
        }
        Ok(())
    }
}

/// Seconds since the epoch (0 before it).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
