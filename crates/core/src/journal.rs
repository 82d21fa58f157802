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

/// Journal slot `i` as stored, when it is readable: its records pass their
/// checksum and each names an aligned word inside the media (a record that
/// does not could only come from damage, and must not be stored to).
fn read_slot(media: &dyn PmMedia, i: usize) -> Result<JournalSlot, String> {
    let mut b = vec![0u8; terrace_format::JOURNAL_SLOT_SIZE];
    media.read(journal_slot_offset(i), &mut b);
    let slot = JournalSlot::decode(&b).map_err(|e| e.to_string())?;
    match slot
        .records
        .iter()
        .find(|&&(a, _)| a % 8 != 0 || a >= media.len().saturating_sub(7))
    {
        Some((a, _)) => Err(format!("a record names offset {a}, not a word of the pool")),
        None => Ok(slot),
    }
}

/// Stores the old values of one open transaction, then frees its slot.
fn roll_back(media: &dyn PmMedia, i: usize, slot: &JournalSlot) {
    for &(a, v) in &slot.records {
        media.store_u64(a, v);
        media.flush(a, 8);
    }
    media.fence();
    media.store_u64(journal_slot_offset(i), 0);
    media.persist(journal_slot_offset(i), 8);
}

/// The undo records of every open transaction, without changing anything.
/// Fails with the slot index and reason when a slot is unreadable.
pub fn open_transactions(media: &dyn PmMedia) -> Result<Vec<UndoRecords>, (usize, String)> {
    let mut out = Vec::new();
    for i in 0..JOURNAL_SLOTS {
        let slot = read_slot(media, i).map_err(|e| (i, e))?;
        if slot.txid != 0 {
            // A word named twice holds the same old value in both records
            // (they are read before any store): keep one.
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
/// Nothing is written unless every slot is readable.
pub fn recover(media: &dyn PmMedia, write: bool) -> Result<usize, (usize, String)> {
    let slots = (0..JOURNAL_SLOTS)
        .map(|i| read_slot(media, i).map_err(|e| (i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut n = 0;
    for (i, slot) in slots.iter().enumerate() {
        if slot.txid == 0 {
            continue;
        }
        n += 1;
        if write {
            roll_back(media, i, slot);
        }
    }
    Ok(n)
}

/// What `fsck --repair` does first: rolls back every readable open
/// transaction and clears every unreadable slot. Returns how many were
/// rolled back and the cleared slots with the reason.
pub fn roll_back_or_clear(media: &dyn PmMedia) -> (usize, Vec<(usize, String)>) {
    let mut rolled = 0;
    let mut cleared = Vec::new();
    for i in 0..JOURNAL_SLOTS {
        match read_slot(media, i) {
            Ok(slot) if slot.txid == 0 => {}
            Ok(slot) => {
                roll_back(media, i, &slot);
                rolled += 1;
            }
            Err(what) => {
                media.store_u64(journal_slot_offset(i), 0);
                media.persist(journal_slot_offset(i), 8);
                cleared.push((i, what));
            }
        }
    }
    (rolled, cleared)
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

    #[test]
    fn a_record_outside_the_pool_is_refused_never_stored_to() {
        let m = MemMedia::new(16 * 4096);
        m.store_u64(4096 * 5, 11);
        for (k, bad) in [16 * 4096u64, 4096 * 5 + 3, u64::MAX - 3]
            .into_iter()
            .enumerate()
        {
            let base = journal_slot_offset(k);
            let rec = JournalSlot::encode_records(&[(4096 * 5, 1), (bad, 7)]);
            m.write(base + JOURNAL_OFF_BODY, &rec);
            m.store_u64(base, 5);
        }
        assert_eq!(recover(&m, true).map_err(|(slot, _)| slot), Err(0));
        assert!(open_transactions(&m).is_err());
        assert_eq!(m.load_u64(4096 * 5), 11, "nothing is stored");
        // Repair clears the unreadable slots instead.
        let (rolled, cleared) = roll_back_or_clear(&m);
        assert_eq!(rolled, 0);
        assert_eq!(cleared.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(
            cleared[0].1.contains("not a word of the pool"),
            "{cleared:?}"
        );
        assert_eq!(m.load_u64(4096 * 5), 11);
        assert_eq!(recover(&m, true), Ok(0));
    }

    #[test]
    fn repair_rolls_back_readable_transactions_and_clears_the_rest() {
        let m = MemMedia::new(16 * 4096);
        m.store_u64(4096 * 5, 999);
        let good = journal_slot_offset(1);
        m.write(
            good + JOURNAL_OFF_BODY,
            &JournalSlot::encode_records(&[(4096 * 5, 111)]),
        );
        m.store_u64(good, 3);
        let bad = journal_slot_offset(4);
        let mut rec = JournalSlot::encode_records(&[(4096 * 6, 1)]);
        rec[9] ^= 1; // a byte under the records' checksum
        m.write(bad + JOURNAL_OFF_BODY, &rec);
        m.store_u64(bad, 4);
        assert!(recover(&m, false).is_err());
        let (rolled, cleared) = roll_back_or_clear(&m);
        assert_eq!((rolled, cleared.len(), cleared[0].0), (1, 1, 4));
        assert_eq!(m.load_u64(4096 * 5), 111);
        assert_eq!((m.load_u64(good), m.load_u64(bad)), (0, 0));
    }
}
