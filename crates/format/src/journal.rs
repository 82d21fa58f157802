//! The lightweight undo journal that makes multi-inode operations atomic.
//!
//! The journal block holds [`JOURNAL_SLOTS`] slots of [`JOURNAL_SLOT_SIZE`] bytes.
//! An operation that must change several commit words (log tails of two or more
//! inodes, an inode's `state`, a log head) takes a slot and:
//! 1. appends its new entries to every log beyond the tails and persists them;
//! 2. writes `(address, old value)` records and their crc, persists them, then
//!    stores a non-zero transaction id in `txid` and persists it;
//! 3. stores the new values of all words and persists them;
//! 4. stores 0 in `txid` and persists it — **the commit point**.
//!
//! Recovery restores the old values of every slot whose `txid` is non-zero, so an
//! operation interrupted before step 4 leaves no trace.
//!
//! Slot layout: 0 txid u64, 8 count u32, 12 crc u32 (over the records),
//! 16 records of 16 bytes: address u64 (PM byte offset, 8-aligned), old u64.

use crate::le::*;
use crate::{crc, FormatError, BLOCK_SIZE};

/// Number of journal slots (concurrent multi-inode operations).
pub const JOURNAL_SLOTS: usize = 8;
/// Bytes per journal slot.
pub const JOURNAL_SLOT_SIZE: usize = 512;
/// Most undo records in one slot.
pub const JOURNAL_MAX_RECORDS: usize = (JOURNAL_SLOT_SIZE - 16) / 16;

/// PM byte offset of journal slot `i`.
pub fn journal_slot_offset(i: usize) -> u64 {
    crate::JOURNAL_BLOCK * BLOCK_SIZE + (i * JOURNAL_SLOT_SIZE) as u64
}

/// Offset of the transaction id (u64, 0: no open transaction) in a slot.
pub const JOURNAL_OFF_TXID: u64 = 0;

/// Offset of the part [`JournalSlot::encode_records`] encodes (the record
/// count, then the records).
pub const JOURNAL_OFF_BODY: u64 = 8;

/// Offset of the records inside a slot.
pub const JOURNAL_OFF_RECORDS: usize = 16;

/// A decoded journal slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalSlot {
    /// 0 when the slot holds no open transaction.
    pub txid: u64,
    /// `(address, old value)` pairs to restore.
    pub records: Vec<(u64, u64)>,
}

impl JournalSlot {
    /// Encodes the records part (bytes 8..) of a slot; `txid` is written apart.
    pub fn encode_records(records: &[(u64, u64)]) -> Vec<u8> {
        assert!(
            records.len() <= JOURNAL_MAX_RECORDS,
            "too many journal records"
        );
        let mut b = vec![0u8; JOURNAL_OFF_RECORDS - 8 + records.len() * 16];
        put_u32(&mut b, 0, records.len() as u32);
        let base = JOURNAL_OFF_RECORDS - 8;
        for (i, (a, v)) in records.iter().enumerate() {
            put_u64(&mut b, base + i * 16, *a);
            put_u64(&mut b, base + i * 16 + 8, *v);
        }
        let c = crc(&b[base..]);
        put_u32(&mut b, 4, c);
        b
    }

    /// Decodes a whole slot.
    pub fn decode(b: &[u8]) -> Result<JournalSlot, FormatError> {
        let txid = u64_at(b, 0);
        if txid == 0 {
            return Ok(JournalSlot::default());
        }
        let count = u32_at(b, 8) as usize;
        if count > JOURNAL_MAX_RECORDS {
            return Err(FormatError::Invalid("journal record count"));
        }
        let recs = &b[JOURNAL_OFF_RECORDS..JOURNAL_OFF_RECORDS + count * 16];
        if crc(recs) != u32_at(b, 12) {
            return Err(FormatError::BadChecksum);
        }
        let records = (0..count)
            .map(|i| (u64_at(recs, i * 16), u64_at(recs, i * 16 + 8)))
            .collect();
        Ok(JournalSlot { txid, records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_slot_round_trips() {
        let recs = vec![(8u64, 1u64), (4096 * 3 + 136, 0xdead_beef)];
        let mut slot = vec![0u8; JOURNAL_SLOT_SIZE];
        let enc = JournalSlot::encode_records(&recs);
        slot[8..8 + enc.len()].copy_from_slice(&enc);
        assert_eq!(JournalSlot::decode(&slot).unwrap(), JournalSlot::default());
        put_u64(&mut slot, 0, 77);
        assert_eq!(
            JournalSlot::decode(&slot).unwrap(),
            JournalSlot {
                txid: 77,
                records: recs
            }
        );
        slot[20] ^= 1;
        assert_eq!(JournalSlot::decode(&slot), Err(FormatError::BadChecksum));
    }

    #[test]
    fn journal_fits_its_block() {
        assert!(JOURNAL_SLOTS * JOURNAL_SLOT_SIZE <= BLOCK_SIZE as usize);
    }
}
