//! Read-ahead of an object tier ([`BlockMedia::read_ahead`]): ranged GETs
//! started in the background for blocks a sequential reader will want next,
//! so that their round trips overlap the serving of what it reads now
//! (design.md §5n "Reads").
//!
//! A read-ahead plans the blocks as a read does (`read.rs`) and starts one
//! GET per piece of a part (at most `AHEAD_PIECE_BLOCKS`, 8 MiB) on the bucket's
//! runtime, without waiting. Each GET is kept here keyed by *part key and
//! byte range*, not by block: parts are immutable, so the bytes of a part's
//! range are right for any later read whose plan maps its blocks to that
//! range — a block written or trimmed since maps elsewhere and simply does
//! not find it. Nothing has to be invalidated.
//!
//! A read whose plan wants a range held here takes it (waiting for it when
//! it is still in flight) instead of sending its own GET. A read-ahead GET
//! that failed (after the store's retries) fails the read that waited for
//! it; one that had failed before the read came is dropped, and the read
//! sends its own GET (with its own retries): a read-ahead failure never
//! fails a read that did not wait for it.
//!
//! Bound: at most [`AHEAD_BYTES`] of GETs are held per tier, in flight or
//! done and not yet taken. A read-ahead that would go past it first drops
//! finished ranges nobody took (oldest first); it starts no more GETs than
//! fit. Held bytes are apart from the DRAM cache: a range taken by a read
//! enters the cache through that read (and its bound), and leaves here.
//!
//! [`BlockMedia::read_ahead`]: crate::BlockMedia::read_ahead

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

/// Bytes of read-ahead GETs one object tier holds at most (in flight, or
/// done and not yet taken by a read): four 8 MiB windows (the core asks
/// for three ahead of the one being read).
pub(crate) const AHEAD_BYTES: u64 = 32 << 20;

/// What a read-ahead GET gave: the bytes, or the store's error.
pub(crate) type Fetched = Result<Bytes, Arc<object_store::Error>>;

/// Where a read-ahead GET leaves its answer.
#[derive(Default)]
pub(crate) struct Slot {
    done: Mutex<Option<Fetched>>,
    cv: Condvar,
}

impl Slot {
    /// Records the answer and wakes the reads waiting for it.
    pub(crate) fn fill(&self, r: Fetched) {
        *self.done.lock() = Some(r);
        self.cv.notify_all();
    }

    fn is_done(&self) -> bool {
        self.done.lock().is_some()
    }

    /// The answer, waiting for it if needed; and whether it had to wait.
    fn wait(&self) -> (Fetched, bool) {
        let mut g = self.done.lock();
        let mut waited = false;
        while g.is_none() {
            waited = true;
            self.cv.wait(&mut g);
        }
        (g.clone().expect("filled"), waited)
    }
}

struct Entry {
    key: String,
    range: Range<u64>,
    slot: Arc<Slot>,
    /// Bytes of `range` reads have taken so far.
    taken: u64,
}

/// The read-ahead GETs of one object tier.
#[derive(Default)]
pub(crate) struct Ahead {
    /// Oldest first.
    entries: Mutex<VecDeque<Entry>>,
    /// Counters (see [`AheadStats`]).
    stats: Mutex<AheadStats>,
}

/// Counters of an object tier's read-ahead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AheadStats {
    /// Read-ahead GETs started.
    pub started: u64,
    /// Bytes they asked for.
    pub started_bytes: u64,
    /// Bytes reads took from them (instead of sending GETs of their own).
    pub taken_bytes: u64,
    /// GETs a read waited for while in flight.
    pub waited: u64,
    /// Finished GETs dropped without being taken (room for newer ones), or
    /// failed ones dropped.
    pub dropped: u64,
    /// Most bytes held at once.
    pub peak_bytes: u64,
}

/// What [`Ahead::take`] found for a range a read wants.
pub(crate) enum Take {
    /// Bytes from the range's start up to the offset given (in the
    /// object); the rest, if any, is the read's to fetch.
    Bytes(Vec<Bytes>, u64),
    /// The read-ahead GET this read waited for failed.
    Failed(Arc<object_store::Error>),
    /// Nothing from the range's start: the read sends its own GET.
    Miss,
}

impl Ahead {
    /// Bytes held now.
    fn held(entries: &VecDeque<Entry>) -> u64 {
        entries.iter().map(|e| e.range.end - e.range.start).sum()
    }

    /// Registers GETs for those of `pieces` (key, byte range) no held GET
    /// overlaps, as far as [`AHEAD_BYTES`] allows; returns the slots to
    /// fill, with their pieces, for the caller to start.
    pub(crate) fn plan(
        &self,
        pieces: Vec<(String, Range<u64>)>,
    ) -> Vec<(String, Range<u64>, Arc<Slot>)> {
        let mut es = self.entries.lock();
        let mut out = Vec::new();
        let mut dropped = 0;
        for (key, range) in pieces {
            if es
                .iter()
                .any(|e| e.key == key && e.range.start < range.end && range.start < e.range.end)
            {
                continue;
            }
            let len = range.end - range.start;
            while Self::held(&es) + len > AHEAD_BYTES {
                // The oldest finished range nobody took makes room.
                let Some(i) = es.iter().position(|e| e.slot.is_done()) else {
                    break;
                };
                es.remove(i);
                dropped += 1;
            }
            if Self::held(&es) + len > AHEAD_BYTES {
                break;
            }
            let slot = Arc::new(Slot::default());
            es.push_back(Entry {
                key: key.clone(),
                range: range.clone(),
                slot: slot.clone(),
                taken: 0,
            });
            out.push((key, range, slot));
        }
        let held = Self::held(&es);
        drop(es);
        let mut st = self.stats.lock();
        st.started += out.len() as u64;
        st.started_bytes += out.iter().map(|(_, r, _)| r.end - r.start).sum::<u64>();
        st.dropped += dropped;
        st.peak_bytes = st.peak_bytes.max(held);
        out
    }

    /// The bytes of `range` of object `key` that held GETs cover, from its
    /// start on, waiting for those in flight (see the module docs for a
    /// failed one). Ranges taken whole leave.
    pub(crate) fn take(&self, key: &str, range: &Range<u64>) -> Take {
        let mut got: Vec<Bytes> = Vec::new();
        let mut pos = range.start;
        while pos < range.end {
            let found = {
                let es = self.entries.lock();
                es.iter()
                    .find(|e| e.key == key && e.range.start <= pos && pos < e.range.end)
                    .map(|e| (e.slot.clone(), e.range.clone()))
            };
            let Some((slot, held)) = found else {
                break;
            };
            let (r, waited) = slot.wait();
            self.stats.lock().waited += u64::from(waited);
            let to = range.end.min(held.end);
            match r {
                Ok(b) if b.len() as u64 == held.end - held.start => {
                    got.push(b.slice((pos - held.start) as usize..(to - held.start) as usize));
                    self.note_taken(&slot, to - pos);
                    pos = to;
                }
                Err(e) if waited => {
                    self.forget(&slot);
                    return Take::Failed(e);
                }
                // Failed before this read came, or short: the read fetches
                // the rest itself.
                _ => {
                    self.forget(&slot);
                    break;
                }
            }
        }
        if got.is_empty() {
            Take::Miss
        } else {
            Take::Bytes(got, pos)
        }
    }

    /// Counts `n` bytes of `slot`'s range taken; the range leaves once all
    /// of it was.
    fn note_taken(&self, slot: &Arc<Slot>, n: u64) {
        let mut es = self.entries.lock();
        if let Some(i) = es.iter().position(|e| Arc::ptr_eq(&e.slot, slot)) {
            es[i].taken += n;
            if es[i].taken >= es[i].range.end - es[i].range.start {
                es.remove(i);
            }
        }
        drop(es);
        self.stats.lock().taken_bytes += n;
    }

    /// Drops the range of `slot` (failed or short).
    fn forget(&self, slot: &Arc<Slot>) {
        let mut es = self.entries.lock();
        if let Some(i) = es.iter().position(|e| Arc::ptr_eq(&e.slot, slot)) {
            es.remove(i);
            drop(es);
            self.stats.lock().dropped += 1;
        }
    }

    /// Counters now, and the bytes held now.
    pub(crate) fn stats(&self) -> (AheadStats, u64) {
        let held = Self::held(&self.entries.lock());
        (*self.stats.lock(), held)
    }
}
