//! A log moved to a block tier (format version 4, Ziggurat's log migration).
//!
//! A cold inode's log leaves PM as one *blob*: a header and the entries that
//! describe the inode's whole state (the same entries log compaction writes),
//! packed one after another and padded with zeros to whole blocks. The
//! inode's slot then has state [`crate::INODE_USED_TIER_LOG`], `log_head` =
//! [`crate::encode_tier_log_head`] (tier, first block) and `log_tail` = the
//! blob's length in bytes (with the tail check). Blobs are written to fresh
//! blocks and synced before the journal commit that publishes those slot
//! words, and never written again: a later change of the inode first writes
//! its state back into a PM log in the same commit (log recall).
//!
//! Header (64 bytes, little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TERRLOG1` |
//! | 8 | 8 | owner inode |
//! | 16 | 4 | owner's slot generation |
//! | 20 | 4 | entry count |
//! | 24 | 8 | payload bytes (the entries) |
//! | 32 | 4 | crc32c of the payload |
//! | 60 | 4 | crc32c of bytes 0..60 |
//!
//! The entries follow at offset 64; each keeps its own header and checksum.
//! The blob's length is `64 + payload bytes`; what follows it up to the end
//! of its last block is zeros.

use crate::le::*;
use crate::{crc, Entry, FormatError, BLOCK_SIZE};

/// Magic number at the start of a log blob.
pub const LOG_BLOB_MAGIC: u64 = u64::from_le_bytes(*b"TERRLOG1");
/// Bytes of a blob header.
pub const LOG_BLOB_HEADER: usize = 64;
const OFF_OWNER: usize = 8;
const OFF_GENERATION: usize = 16;
const OFF_COUNT: usize = 20;
const OFF_PAYLOAD: usize = 24;
const OFF_PAYLOAD_CRC: usize = 32;
const OFF_HEADER_CRC: usize = 60;

/// A log blob: whose it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlob {
    /// Owner inode.
    pub owner: u64,
    /// The owner's slot generation when the blob was written.
    pub generation: u32,
    /// The entries, in replay order.
    pub entries: Vec<Entry>,
}

impl LogBlob {
    /// Encodes the blob, padded with zeros to whole blocks. The blob's own
    /// length (what the slot's tail word records) is [`LogBlob::len_of`].
    pub fn encode(&self) -> Vec<u8> {
        let payload: Vec<u8> = self.entries.iter().flat_map(|e| e.encode()).collect();
        let len = LOG_BLOB_HEADER + payload.len();
        let mut b = vec![0u8; len.div_ceil(BLOCK_SIZE as usize) * BLOCK_SIZE as usize];
        put_u64(&mut b, 0, LOG_BLOB_MAGIC);
        put_u64(&mut b, OFF_OWNER, self.owner);
        put_u32(&mut b, OFF_GENERATION, self.generation);
        put_u32(&mut b, OFF_COUNT, self.entries.len() as u32);
        put_u64(&mut b, OFF_PAYLOAD, payload.len() as u64);
        put_u32(&mut b, OFF_PAYLOAD_CRC, crc(&payload));
        let h = crc(&b[..OFF_HEADER_CRC]);
        put_u32(&mut b, OFF_HEADER_CRC, h);
        b[LOG_BLOB_HEADER..len].copy_from_slice(&payload);
        b
    }

    /// The length in bytes of an encoded blob (without the padding).
    pub fn len_of(encoded: &[u8]) -> u64 {
        LOG_BLOB_HEADER as u64 + u64_at(encoded, OFF_PAYLOAD)
    }

    /// Decodes a blob of `len` bytes (the slot's tail) from `b` (its blocks),
    /// checking that it belongs to inode `owner` of slot generation
    /// `generation`: magic, both checksums, length, every entry.
    pub fn decode(b: &[u8], len: u64, owner: u64, generation: u32) -> Result<LogBlob, FormatError> {
        if b.len() < LOG_BLOB_HEADER || (len as usize) > b.len() {
            return Err(FormatError::Invalid("log blob shorter than its length"));
        }
        if u64_at(b, 0) != LOG_BLOB_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc(&b[..OFF_HEADER_CRC]) != u32_at(b, OFF_HEADER_CRC) {
            return Err(FormatError::BadChecksum);
        }
        if u64_at(b, OFF_OWNER) != owner || u32_at(b, OFF_GENERATION) != generation {
            return Err(FormatError::Invalid("log blob of another inode"));
        }
        let payload = u64_at(b, OFF_PAYLOAD);
        if LOG_BLOB_HEADER as u64 + payload != len {
            return Err(FormatError::Invalid(
                "log blob length differs from its slot's",
            ));
        }
        let body = &b[LOG_BLOB_HEADER..len as usize];
        if crc(body) != u32_at(b, OFF_PAYLOAD_CRC) {
            return Err(FormatError::BadChecksum);
        }
        let count = u32_at(b, OFF_COUNT) as usize;
        let mut entries = Vec::with_capacity(count.min(body.len() / 8));
        let mut at = 0;
        while at < body.len() {
            let (e, n) = Entry::decode(&body[at..])?;
            if matches!(e, Entry::PageEnd) {
                return Err(FormatError::Invalid("page end in a log blob"));
            }
            entries.push(e);
            at += n;
        }
        if entries.len() != count {
            return Err(FormatError::Invalid("log blob entry count"));
        }
        Ok(LogBlob {
            owner,
            generation,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttrEntry, FileBlock, PhysBlock, TierId, WriteEntry};

    fn blob() -> LogBlob {
        LogBlob {
            owner: 42,
            generation: 3,
            entries: vec![
                Entry::Write(WriteEntry {
                    file_block: FileBlock(0),
                    blocks: 2,
                    tier: TierId(1),
                    size_counter: 0,
                    wflags: crate::WRITE_FLAG_MOVED,
                    block: PhysBlock(900),
                    size_after: 8000,
                    mtime: 5,
                }),
                Entry::XattrSet {
                    name: b"user.a".to_vec(),
                    value: vec![7; 300],
                },
                Entry::Attr(AttrEntry {
                    nlink: 1,
                    size: 8000,
                    ..Default::default()
                }),
            ],
        }
    }

    #[test]
    fn blobs_round_trip_and_are_padded_to_blocks() {
        let b = blob();
        let enc = b.encode();
        assert_eq!(enc.len() % BLOCK_SIZE as usize, 0);
        let len = LogBlob::len_of(&enc);
        assert!(len < enc.len() as u64);
        assert_eq!(LogBlob::decode(&enc, len, 42, 3).unwrap(), b);
    }

    #[test]
    fn any_flipped_bit_of_a_blob_or_a_wrong_owner_is_refused() {
        let enc = blob().encode();
        let len = LogBlob::len_of(&enc);
        for byte in 0..len as usize {
            let mut d = enc.clone();
            d[byte] ^= 0x10;
            assert!(
                LogBlob::decode(&d, len, 42, 3).is_err(),
                "flip in byte {byte} accepted"
            );
        }
        assert!(LogBlob::decode(&enc, len, 43, 3).is_err());
        assert!(LogBlob::decode(&enc, len, 42, 4).is_err());
        assert!(LogBlob::decode(&enc, len - 8, 42, 3).is_err());
        assert!(LogBlob::decode(&enc[..100], len, 42, 3).is_err());
    }
}
