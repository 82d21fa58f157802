//! Commits that change several 8-byte commit words at once, through the undo
//! journal of `terrace_format::journal` (NOVA's lightweight journal).
//!
//! Single-word commits skip the journal: one aligned store is already atomic.
//! Every caller persists (flush, no fence needed) the bytes the words make
//! visible before calling [`Journal::commit`]; the first fence here orders them.

use crate::lock_order::{Mutex, MutexGuard, Rank};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use terrace_format::{
    journal_slot_offset, JournalSlot, JOURNAL_MAX_RECORDS, JOURNAL_OFF_BODY, JOURNAL_OFF_TXID,
    JOURNAL_SLOTS,
};
use terrace_media::PmMedia;

/// The journal slots of a mounted pool.
pub struct Journal {
    slots: Vec<Mutex<()>>,
    next_txid: AtomicU64,
    next_slot: AtomicUsize,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            slots: (0..JOURNAL_SLOTS)
                .map(|_| Mutex::new(Rank::leaf("journal slot"), ()))
                .collect(),
            next_txid: AtomicU64::new(1),
            next_slot: AtomicUsize::new(0),
        }
    }
}

impl Journal {
    fn take_slot(&self) -> (usize, MutexGuard<'_, ()>) {
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed);
        loop {
            for k in 0..JOURNAL_SLOTS {
                let i = (start + k) % JOURNAL_SLOTS;
                if let Some(g) = self.slots[i].try_lock() {
                    return (i, g);
                }
            }
            std::thread::yield_now();
        }
    }

    /// Atomically sets every `(address, value)` word. Returns after the commit
    /// point: all new values are durable and the journal slot is free again.
    pub fn commit(&self, media: &dyn PmMedia, words: &[(u64, u64)]) {
        match words {
            [] => media.fence(),
            [(addr, value)] => {
                media.fence();
                media.store_u64(*addr, *value);
                // Commit point of a single-word operation.
                media.persist(*addr, 8);
            }
            _ => {
                assert!(
                    words.len() <= JOURNAL_MAX_RECORDS,
                    "transaction too large for a journal slot"
                );
                let (slot, _guard) = self.take_slot();
                let base = journal_slot_offset(slot);
                let old: Vec<(u64, u64)> =
                    words.iter().map(|&(a, _)| (a, media.load_u64(a))).collect();
                let rec = JournalSlot::encode_records(&old);
                media.write(base + JOURNAL_OFF_BODY, &rec);
                media.flush(base + JOURNAL_OFF_BODY, rec.len() as u64);
                media.fence();
                let txid = self.next_txid.fetch_add(1, Ordering::Relaxed);
                media.store_u64(base + JOURNAL_OFF_TXID, txid);
                media.persist(base, 8);
                for &(a, v) in words {
                    media.store_u64(a, v);
                    media.flush(a, 8);
                }
                media.fence();
                media.store_u64(base + JOURNAL_OFF_TXID, 0);
                // Commit point of a multi-word operation: the journal slot is cleared.
                media.persist(base, 8);
            }
        }
    }
}

/// `(address, old value)` words of one transaction.
pub type UndoRecords = Vec<(u64, u64)>;

/// The undo records of every open transaction, without changing anything.
/// Fails with the slot index and reason when a slot is unreadable.
pub fn open_transactions(media: &dyn PmMedia) -> Result<Vec<UndoRecords>, (usize, String)> {
    let mut out = Vec::new();
    for i in 0..JOURNAL_SLOTS {
        let mut b = vec![0u8; terrace_format::JOURNAL_SLOT_SIZE];
        media.read(journal_slot_offset(i), &mut b);
        let slot = JournalSlot::decode(&b).map_err(|e| (i, e.to_string()))?;
        if slot.txid != 0 {
            // Later records restore older values last: apply in order, keep the first per address.
            let mut seen = std::collections::BTreeMap::new();
            for (a, v) in slot.records {
                seen.entry(a).or_insert(v);
            }
            out.push(seen.into_iter().collect());
        }
    }
    Ok(out)
}

/// Rolls back every open transaction found in the journal (mount-time recovery).
/// Returns how many were rolled back, or the slot whose records are corrupt.
pub fn recover(media: &dyn PmMedia, write: bool) -> Result<usize, (usize, String)> {
    let mut n = 0;
    for i in 0..JOURNAL_SLOTS {
        let off = journal_slot_offset(i);
        let mut b = vec![0u8; terrace_format::JOURNAL_SLOT_SIZE];
        media.read(off, &mut b);
        let slot = JournalSlot::decode(&b).map_err(|e| (i, e.to_string()))?;
        if slot.txid == 0 {
            continue;
        }
        n += 1;
        if write {
            for &(a, v) in &slot.records {
                media.store_u64(a, v);
                media.flush(a, 8);
            }
            media.fence();
            media.store_u64(off, 0);
            media.persist(off, 8);
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_media::MemMedia;

    #[test]
    fn open_transaction_is_rolled_back() {
        let m = MemMedia::new(16 * 4096);
        m.store_u64(4096 * 5, 11);
        m.store_u64(4096 * 6, 22);
        let j = Journal::default();
        j.commit(&m, &[(4096 * 5, 111), (4096 * 6, 222)]);
        assert_eq!((m.load_u64(4096 * 5), m.load_u64(4096 * 6)), (111, 222));
        assert_eq!(recover(&m, true), Ok(0));
        // Simulate a crash after the txid was set and one word was changed.
        let base = journal_slot_offset(3);
        let rec = JournalSlot::encode_records(&[(4096 * 5, 111), (4096 * 6, 222)]);
        m.write(base + JOURNAL_OFF_BODY, &rec);
        m.store_u64(base, 9);
        m.store_u64(4096 * 5, 999);
        assert_eq!(recover(&m, true), Ok(1));
        assert_eq!((m.load_u64(4096 * 5), m.load_u64(4096 * 6)), (111, 222));
        assert_eq!(m.load_u64(base), 0);
    }
}
