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

/// What [`LogBlob::salvage`] could read of a damaged blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvagedBlob {
    /// The entries whose own checksums hold, in replay order, without
    /// the pieces of an xattr value a lost entry cut in two.
    pub entries: Vec<Entry>,
    /// Entries the header counts that are not in `entries` (at least one
    /// per damaged entry when the header itself is damaged).
    pub lost: u64,
}

impl LogBlob {
    /// Reads what can be trusted of a blob that [`LogBlob::decode`]
    /// refused: its magic, owner and generation must be `owner`'s of slot
    /// generation `generation` (else nothing of it is known to be this
    /// inode's, and `None` is returned; with an intact header, so must its
    /// length `len`); then every entry whose own checksum holds is kept, in
    /// two ways:
    ///
    /// - A damaged entry is stepped over by the length in its header when
    ///   an entry reads there. What follows a step is kept only when the
    ///   walk then ends exactly at the blob's end with exactly the entry
    ///   count the header gives (each damaged entry counted as one; with a
    ///   damaged header, whose count is unknown, never): a
    ///   damaged length could land inside an xattr value, whose bytes any
    ///   user may have written to look like entries, and such a walk would
    ///   not come out even.
    /// - Otherwise only the entries before the first damaged one are kept.
    ///
    /// The pieces of an xattr value a lost entry may have cut in two (a set
    /// and its appends) are dropped whole: half a value would be a silently
    /// wrong answer.
    pub fn salvage(b: &[u8], len: u64, owner: u64, generation: u32) -> Option<SalvagedBlob> {
        if b.len() < LOG_BLOB_HEADER
            || (len as usize) > b.len()
            || (len as usize) < LOG_BLOB_HEADER
            || u64_at(b, 0) != LOG_BLOB_MAGIC
            || u64_at(b, OFF_OWNER) != owner
            || u32_at(b, OFF_GENERATION) != generation
        {
            return None;
        }
        // Magic, owner and generation, each as the slot expects, say the
        // blob is the inode's even when the header's check fails; its entry
        // count is then unknown (`None`), and its length is the slot's.
        let count = if crc(&b[..OFF_HEADER_CRC]) == u32_at(b, OFF_HEADER_CRC) {
            if LOG_BLOB_HEADER as u64 + u64_at(b, OFF_PAYLOAD) != len {
                return None;
            }
            Some(u32_at(b, OFF_COUNT) as usize)
        } else {
            None
        };
        let body = &b[LOG_BLOB_HEADER..len as usize];
        let mut entries: Vec<Entry> = Vec::new();
        // Before which entry each damaged one was (an index into `entries`).
        let mut gaps: Vec<usize> = Vec::new();
        let mut at = 0;
        let mut even = false;
        loop {
            if at == body.len() {
                even = true;
                break;
            }
            match Entry::decode(&body[at..]) {
                Ok((Entry::PageEnd, _)) | Err(_) => {
                    gaps.push(entries.len());
                    if body.len() - at < 8 {
                        break;
                    }
                    // Step over by the damaged entry's own length, if an
                    // entry reads there; else nothing further is trusted.
                    let step = u16_at(&body[at..], 2) as usize;
                    let next_reads = step >= 8
                        && step % 8 == 0
                        && at + step < body.len()
                        && Entry::decode(&body[at + step..]).is_ok();
                    if !next_reads {
                        break;
                    }
                    at += step;
                }
                Ok((e, n)) => {
                    entries.push(e);
                    at += n;
                }
            }
        }
        let complete = match count {
            Some(count) => entries.len() + gaps.len() == count,
            None => gaps.is_empty(),
        };
        if !(even && complete) {
            // Only the entries before the first damaged one are sure.
            let first = gaps.first().copied().unwrap_or(entries.len());
            entries.truncate(first);
            gaps = vec![first];
        }
        // Names of xattr values a gap may have cut: every piece of them goes.
        let mut cut_values: Vec<Vec<u8>> = Vec::new();
        for &g in &gaps {
            if let Some(name) = value_continued(g.checked_sub(1).and_then(|i| entries.get(i))) {
                cut_values.push(name);
            }
            if let Some(Entry::XattrAppend { name, .. }) = entries.get(g) {
                cut_values.push(name.clone());
            }
        }
        entries.retain(|e| match e {
            Entry::XattrSet { name, .. } | Entry::XattrAppend { name, .. } => {
                !cut_values.contains(name)
            }
            _ => true,
        });
        // Without a count, what was lost is at least one entry per gap.
        let lost = match count {
            Some(count) => (count as u64).saturating_sub(entries.len() as u64),
            None => gaps.len() as u64,
        };
        Some(SalvagedBlob { lost, entries })
    }
}

/// The name of the xattr whose value `e` is a piece of, if more pieces
/// may follow it: a value is cut into [`crate::XATTR_CHUNK`]-byte pieces,
/// so only a full piece can be continued (by appends a gap after it took).
fn value_continued(e: Option<&Entry>) -> Option<Vec<u8>> {
    match e? {
        Entry::XattrSet { name, value } | Entry::XattrAppend { name, value }
            if value.len() >= crate::XATTR_CHUNK =>
        {
            Some(name.clone())
        }
        _ => None,
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
    fn many() -> LogBlob {
        let mut b = blob();
        for i in 0..6u64 {
            b.entries.insert(
                1,
                Entry::DentryAdd {
                    ino: 100 + i,
                    file_type: 8,
                    name: format!("name-{i}").into_bytes(),
                },
            );
        }
        b
    }

    /// Byte offsets (in the encoded blob) where each entry starts.
    fn starts(b: &LogBlob) -> Vec<usize> {
        let mut at = LOG_BLOB_HEADER;
        b.entries
            .iter()
            .map(|e| {
                let s = at;
                at += e.encode().len();
                s
            })
            .collect()
    }

    #[test]
    fn a_flip_inside_one_entry_loses_that_entry_alone() {
        let b = many();
        let enc = b.encode();
        let len = LogBlob::len_of(&enc);
        let at = starts(&b);
        for victim in 0..b.entries.len() {
            let mut d = enc.clone();
            d[at[victim] + 9] ^= 0x04; // in the payload, not the length
            assert!(LogBlob::decode(&d, len, 42, 3).is_err());
            let got = LogBlob::salvage(&d, len, 42, 3).expect("header intact");
            let mut want = b.entries.clone();
            want.remove(victim);
            assert_eq!(got.entries, want, "victim {victim}");
            assert_eq!(got.lost, (b.entries.len() - want.len()) as u64);
        }
    }

    /// [`many`] with an xattr whose value any user could have written:
    /// well-formed entries, 8-byte aligned, at every 256-byte step.
    fn forged() -> LogBlob {
        let fake = Entry::DentryAdd {
            ino: 999,
            file_type: 8,
            name: b"forged".to_vec(),
        }
        .encode();
        let mut value = Vec::new();
        while value.len() + fake.len() <= 3000 {
            value.extend_from_slice(&fake);
        }
        let mut b = many();
        b.entries.insert(
            1,
            Entry::XattrSet {
                name: b"user.forged-0123".to_vec(), // 16 bytes: the value is aligned
                value,
            },
        );
        b
    }

    #[test]
    fn salvage_never_returns_an_entry_the_blob_did_not_hold_in_that_order() {
        for b in [many(), forged()] {
            every_flip_salvages_a_subsequence(&b);
        }
    }

    fn every_flip_salvages_a_subsequence(b: &LogBlob) {
        let enc = b.encode();
        let len = LogBlob::len_of(&enc);
        for byte in 0..len as usize {
            for bit in [0x01u8, 0x80] {
                let mut d = enc.clone();
                d[byte] ^= bit;
                let Some(got) = LogBlob::salvage(&d, len, 42, 3) else {
                    assert!(
                        byte < LOG_BLOB_HEADER,
                        "flip in byte {byte}: nothing salvaged"
                    );
                    continue;
                };
                let mut rest = b.entries.iter();
                for e in &got.entries {
                    assert!(
                        rest.any(|o| o == e),
                        "flip in byte {byte}: {e:?} is not in the blob, or out of order"
                    );
                }
                assert_eq!(got.lost, (b.entries.len() - got.entries.len()) as u64);
            }
        }
    }

    #[test]
    fn a_header_naming_another_owner_salvages_nothing_and_one_damaged_elsewhere_everything() {
        let b = many();
        let enc = b.encode();
        let len = LogBlob::len_of(&enc);
        for byte in 0..LOG_BLOB_HEADER {
            let mut d = enc.clone();
            d[byte] ^= 0x20;
            let got = LogBlob::salvage(&d, len, 42, 3);
            if byte < OFF_COUNT {
                // Magic, owner, generation: not known to be this inode's.
                assert_eq!(got, None, "byte {byte}");
            } else {
                // Count, length, checksums, padding: every entry reads.
                let got = got.unwrap_or_else(|| panic!("byte {byte}: nothing salvaged"));
                assert_eq!(got.entries, b.entries, "byte {byte}");
                assert_eq!(got.lost, 0, "byte {byte}");
            }
        }
        // A damaged header and a damaged entry: only what precedes it.
        let mut d = enc.clone();
        d[OFF_HEADER_CRC] ^= 1;
        d[starts(&b)[3] + 9] ^= 4;
        let got = LogBlob::salvage(&d, len, 42, 3).unwrap();
        assert_eq!(got.entries, b.entries[..3].to_vec());
        assert_eq!(got.lost, 1);
        assert_eq!(LogBlob::salvage(&enc, len, 43, 3), None);
        assert_eq!(LogBlob::salvage(&enc, len, 42, 4), None);
        assert_eq!(LogBlob::salvage(&enc, len + 8, 42, 3), None);
    }

    #[test]
    fn an_xattr_value_a_lost_entry_cut_in_two_is_dropped_whole() {
        let b = LogBlob {
            owner: 42,
            generation: 3,
            entries: vec![
                Entry::XattrSet {
                    name: b"user.big".to_vec(),
                    value: vec![1; crate::XATTR_CHUNK],
                },
                Entry::XattrAppend {
                    name: b"user.big".to_vec(),
                    value: vec![2; crate::XATTR_CHUNK],
                },
                Entry::XattrAppend {
                    name: b"user.big".to_vec(),
                    value: vec![3; 10],
                },
                Entry::XattrSet {
                    name: b"user.small".to_vec(),
                    value: vec![4; 10],
                },
                Entry::Attr(AttrEntry {
                    nlink: 1,
                    ..Default::default()
                }),
            ],
        };
        let enc = b.encode();
        let len = LogBlob::len_of(&enc);
        let at = starts(&b);
        let mut d = enc.clone();
        d[at[1] + 40] ^= 0x01; // the first append's value
        let got = LogBlob::salvage(&d, len, 42, 3).unwrap();
        assert_eq!(got.entries, b.entries[3..].to_vec());
        assert_eq!(got.lost, 3);
    }
}
