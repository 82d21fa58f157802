//! Inode slots of the inode table and the header of log pages.
//!
//! A slot holds the two log pointers and the attributes an inode is born with.
//! Later attribute changes are log entries ([`crate::AttrEntry`]); the slot's
//! static part is written once, before the operation that makes the inode
//! reachable commits.
//!
//! Slot words that commit state, each one aligned 8-byte store:
//! - `log_tail` (offset 8): commit word of every single-inode operation.
//! - `log_head` (offset 0): only meaningful while `log_tail != 0`.
//! - `state` (offset 16): 0 free, 1 in use with its log on PM, 2 in use with
//!   its log moved to a block tier (format version 4: `log_head` then names
//!   the tier and block of a [`crate::LogBlob`] — since version 11 also its
//!   offset in that block —, `log_tail` its length). An
//!   in-use slot that no directory entry reaches is an orphan; mount frees it.

use crate::le::*;
use crate::{crc, FormatError, PhysBlock, TierId, BLOCK_SIZE};

/// Bytes per inode slot.
pub const INODE_SIZE: usize = 128;
/// Inode slots in one block.
pub const INODES_PER_BLOCK: u64 = crate::BLOCK_SIZE / INODE_SIZE as u64;
/// Offset of `log_head` in a slot.
pub const INODE_OFF_LOG_HEAD: u64 = 0;
/// Offset of `log_tail` in a slot.
pub const INODE_OFF_LOG_TAIL: u64 = 8;
/// Offset of `state` in a slot.
pub const INODE_OFF_STATE: u64 = 16;
const OFF_MODE: usize = 24;
const OFF_UID: usize = 28;
const OFF_GID: usize = 32;
/// Offset of the slot's generation (u32): kept when a slot is freed, so
/// that its next owner gets a new one (file handles of the old owner go
/// stale).
pub const INODE_OFF_GENERATION: u64 = 36;
const OFF_GENERATION: usize = INODE_OFF_GENERATION as usize;
const OFF_RDEV: usize = 40;
const OFF_BTIME: usize = 48;
const OFF_PARENT: usize = 56;
const OFF_CRC: usize = 120;
/// The static part covered by the slot checksum.
const STATIC_RANGE: std::ops::Range<usize> = 24..120;

/// Slot state: free.
pub const INODE_FREE: u64 = 0;
/// Slot state: in use, its log on PM.
pub const INODE_USED: u64 = 1;
/// Slot state: in use, its log moved to a block tier as one blob (format
/// version 4, Ziggurat's log migration): `log_head` holds
/// [`encode_tier_log_head`] and `log_tail` the blob's length in bytes,
/// encoded with [`encode_tail`] like a PM tail.
pub const INODE_USED_TIER_LOG: u64 = 2;

/// True for the states of a slot in use (log on PM or on a block tier).
pub fn is_used_state(state: u64) -> bool {
    state == INODE_USED || state == INODE_USED_TIER_LOG
}

/// Alignment of a log blob inside its first block (format version 11): a
/// blob of at most [`LOG_BLOB_PACK_MAX`] bytes may share one block with other
/// such blobs, each starting at a multiple of this.
pub const LOG_BLOB_ALIGN: u64 = 256;
/// The longest blob that is packed with others into one block (longer ones
/// start a block of their own, at offset 0).
pub const LOG_BLOB_PACK_MAX: u64 = BLOCK_SIZE / 2;
/// Bits of a tier log head that hold the block; the byte above them holds
/// the blob's offset in its block in units of [`LOG_BLOB_ALIGN`].
const TIER_LOG_BLOCK_BITS: u32 = 48;

/// The `log_head` word of a slot whose log is a blob on block tier `tier`
/// starting `offset` bytes into block `block`: the tier id in the top byte,
/// the offset in units of [`LOG_BLOB_ALIGN`] in the byte below it (0 for
/// every blob before format version 11), the block in the low 48 bits.
pub fn encode_tier_log_head(tier: TierId, block: PhysBlock, offset: u64) -> u64 {
    debug_assert!(offset % LOG_BLOB_ALIGN == 0 && offset < BLOCK_SIZE);
    debug_assert!(block.get() < 1 << TIER_LOG_BLOCK_BITS);
    u64::from(tier.get()) << 56
        | ((offset / LOG_BLOB_ALIGN) & 0xff) << TIER_LOG_BLOCK_BITS
        | block.get() & ((1 << TIER_LOG_BLOCK_BITS) - 1)
}

/// The tier id, first block and byte offset in that block of a `log_head`
/// word written by [`encode_tier_log_head`]. The offset is as stored: a
/// reader checks that it lies inside the block.
pub fn decode_tier_log_head(word: u64) -> (TierId, PhysBlock, u64) {
    (
        TierId((word >> 56) as u8),
        PhysBlock(word & ((1 << TIER_LOG_BLOCK_BITS) - 1)),
        ((word >> TIER_LOG_BLOCK_BITS) & 0xff) * LOG_BLOB_ALIGN,
    )
}

/// Bits of the tail word that hold the PM offset; the 16 above them hold a
/// check of it (format version 3).
const TAIL_OFFSET_BITS: u32 = 48;
/// The bits of a tail or page pointer word that hold the offset (or a
/// state-2 tail's length); the bits above them are its check.
pub const PAGE_POINTER_OFFSET_MASK: u64 = (1 << TAIL_OFFSET_BITS) - 1;

fn tail_check(off: u64) -> u64 {
    // Never 0: a check of 0 marks a tail written by a version-2 build.
    u64::from(crc(&off.to_le_bytes()[..6]) & 0xffff).max(1)
}

/// The tail word stored for a log tail at PM offset `off` (0: no log). The
/// tail is the one word of a log that no entry checksum covers, so it carries
/// its own 16-bit check: a damaged tail is refused instead of replaying a
/// prefix of the log, or entries staged beyond it that never committed.
pub fn encode_tail(off: u64) -> u64 {
    if off == 0 {
        0
    } else {
        off | tail_check(off) << TAIL_OFFSET_BITS
    }
}

/// The PM offset of a stored tail word. Words with a zero check are taken as
/// written by version-2 builds (no check); any other check must match.
pub fn decode_tail(word: u64) -> Result<u64, FormatError> {
    let off = word & ((1 << TAIL_OFFSET_BITS) - 1);
    match word >> TAIL_OFFSET_BITS {
        0 => Ok(off),
        c if off != 0 && c == tail_check(off) => Ok(off),
        _ => Err(FormatError::BadChecksum),
    }
}

/// The word stored for a pointer to a log page at PM offset `off` (0: none):
/// a state-1 slot's head and a log page's `next` (format version 12). It
/// carries the tail's 16-bit check: a page's owner word cannot tell the
/// first page of a log from a later one, so a damaged head or `next` that
/// lands on a later page of the same log would replay the log without the
/// entries it skipped. A state-2 head is [`encode_tier_log_head`] instead;
/// the blob it names carries its own checks.
pub fn encode_page_pointer(off: u64) -> u64 {
    encode_tail(off)
}

/// The PM offset of a stored log page pointer. As for tails, a zero check is
/// read unchecked: every pointer written before format version 12 has one.
pub fn decode_page_pointer(word: u64) -> Result<u64, FormatError> {
    decode_tail(word)
}

/// Byte offset in the PM tier of slot `ino` of the base inode table (the
/// slots mkfs laid out; [`InodeMap`] places every slot).
pub fn inode_offset(ino: u64) -> u64 {
    crate::INODE_TABLE_BLOCK * BLOCK_SIZE + ino * INODE_SIZE as u64
}

/// Where each inode slot lies on PM: slots `0..inode_count` in the base
/// table, then 32 slots in each group block, in group order (the inode map
/// blocks' entries, [`crate::superblock`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeMap {
    base: u64,
    /// PM block of each group.
    groups: Vec<u64>,
}

impl InodeMap {
    /// The map of a table of `base` slots followed by `groups`.
    pub fn new(base: u64, groups: Vec<u64>) -> InodeMap {
        InodeMap { base, groups }
    }

    /// PM byte offset of slot `ino`; `None` past the table.
    pub fn offset(&self, ino: u64) -> Option<u64> {
        if ino < self.base {
            return Some(inode_offset(ino));
        }
        let i = ino - self.base;
        let block = *self
            .groups
            .get(usize::try_from(i / INODES_PER_BLOCK).ok()?)?;
        Some(block * BLOCK_SIZE + (i % INODES_PER_BLOCK) * INODE_SIZE as u64)
    }

    /// Slots of the whole table.
    pub fn total(&self) -> u64 {
        self.base + self.groups.len() as u64 * INODES_PER_BLOCK
    }

    /// Slots of the base table.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The group blocks, in group order.
    pub fn groups(&self) -> &[u64] {
        &self.groups
    }
}

/// A decoded inode slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InodeSlot {
    /// State 1: PM byte offset of the first log page, 0 when the inode has
    /// no log (stored with [`encode_page_pointer`]'s check). State 2: the word of
    /// [`encode_tier_log_head`], as stored.
    pub log_head: u64,
    /// PM byte offset just past the last committed entry, 0 when no log.
    pub log_tail: u64,
    /// [`INODE_FREE`], [`INODE_USED`] or [`INODE_USED_TIER_LOG`].
    pub state: u64,
    /// File type and permission bits at creation (`st_mode`).
    pub mode: u32,
    /// Owner at creation.
    pub uid: u32,
    /// Group at creation.
    pub gid: u32,
    /// Incremented each time the slot is reused.
    pub generation: u32,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Creation time, ns since the epoch; also the initial atime/mtime/ctime.
    pub btime_ns: i64,
    /// Inode number of the directory it was created in (for fsck messages).
    pub parent_hint: u64,
}

/// The in-use slot `raw` with one flipped bit corrected: when its state
/// word is in use and its static part (bytes 24..120) fails its crc32c,
/// and exactly one single-bit change of bytes 24..124 (static part and
/// check) makes them agree, the slot with that bit set right, and the
/// byte it was in. A crc32c tells every single-bit error in a slot this
/// size apart from every other, so the bit found is the one that flipped
/// — unless more bits did, which a correction takes for one only about
/// once in 5 million (800 candidates against 2^32 checks). None when the
/// slot has another fault, or none or several bits would do.
pub fn correct_one_flipped_bit(raw: &[u8]) -> Option<([u8; INODE_SIZE], usize)> {
    let raw: [u8; INODE_SIZE] = raw.get(..INODE_SIZE)?.try_into().ok()?;
    if !is_used_state(u64_at(&raw, INODE_OFF_STATE as usize))
        || crc(&raw[STATIC_RANGE]) == u32_at(&raw, OFF_CRC)
    {
        return None;
    }
    let mut found = None;
    for byte in STATIC_RANGE.start..OFF_CRC + 4 {
        for bit in 0..8 {
            let mut b = raw;
            b[byte] ^= 1 << bit;
            if crc(&b[STATIC_RANGE]) == u32_at(&b, OFF_CRC) {
                if found.is_some() {
                    return None;
                }
                found = Some((b, byte));
            }
        }
    }
    found.filter(|(b, _)| InodeSlot::decode(b).is_ok())
}

impl InodeSlot {
    /// Encodes into [`INODE_SIZE`] bytes.
    pub fn encode(&self) -> [u8; INODE_SIZE] {
        let mut b = [0u8; INODE_SIZE];
        // A slot may be written marked free and then published by a store
        // of its state word alone (a new inode): every head but a state-2
        // one is written with its check.
        let head = if self.state == INODE_USED_TIER_LOG {
            self.log_head
        } else {
            encode_page_pointer(self.log_head)
        };
        put_u64(&mut b, INODE_OFF_LOG_HEAD as usize, head);
        put_u64(
            &mut b,
            INODE_OFF_LOG_TAIL as usize,
            encode_tail(self.log_tail),
        );
        put_u64(&mut b, INODE_OFF_STATE as usize, self.state);
        put_u32(&mut b, OFF_MODE, self.mode);
        put_u32(&mut b, OFF_UID, self.uid);
        put_u32(&mut b, OFF_GID, self.gid);
        put_u32(&mut b, OFF_GENERATION, self.generation);
        put_u64(&mut b, OFF_RDEV, self.rdev);
        put_i64(&mut b, OFF_BTIME, self.btime_ns);
        put_u64(&mut b, OFF_PARENT, self.parent_hint);
        let c = crc(&b[STATIC_RANGE]);
        put_u32(&mut b, OFF_CRC, c);
        b
    }

    /// Decodes a slot. A free slot decodes without a checksum check (its static
    /// part may be stale); an in-use slot must have a valid checksum.
    pub fn decode(b: &[u8]) -> Result<InodeSlot, FormatError> {
        if b.len() < INODE_SIZE {
            return Err(FormatError::Invalid("inode slot shorter than INODE_SIZE"));
        }
        let slot = InodeSlot {
            log_head: u64_at(b, INODE_OFF_LOG_HEAD as usize),
            log_tail: 0,
            state: u64_at(b, INODE_OFF_STATE as usize),
            mode: u32_at(b, OFF_MODE),
            uid: u32_at(b, OFF_UID),
            gid: u32_at(b, OFF_GID),
            generation: u32_at(b, OFF_GENERATION),
            rdev: u64_at(b, OFF_RDEV),
            btime_ns: i64_at(b, OFF_BTIME),
            parent_hint: u64_at(b, OFF_PARENT),
        };
        let mut slot = slot;
        match slot.state {
            INODE_FREE => Ok(InodeSlot {
                // A free slot's words are not read.
                log_tail: decode_tail(u64_at(b, INODE_OFF_LOG_TAIL as usize)).unwrap_or(0),
                ..slot
            }),
            INODE_USED | INODE_USED_TIER_LOG => {
                if crc(&b[STATIC_RANGE]) != u32_at(b, OFF_CRC) {
                    return Err(FormatError::BadChecksum);
                }
                slot.log_tail = decode_tail(u64_at(b, INODE_OFF_LOG_TAIL as usize))?;
                if slot.state == INODE_USED {
                    // Without a log (tail 0) the head word is not read: it
                    // may hold a page staged by a commit that never
                    // happened, or nothing.
                    slot.log_head = if slot.log_tail == 0 {
                        0
                    } else {
                        decode_page_pointer(slot.log_head)?
                    };
                }
                if slot.state == INODE_USED_TIER_LOG && slot.log_tail == 0 {
                    return Err(FormatError::Invalid("a log on a block tier of 0 bytes"));
                }
                Ok(slot)
            }
            _ => Err(FormatError::Invalid("inode state")),
        }
    }
}

/// Size of the header at the start of every log page.
pub const LOG_PAGE_HEADER: u64 = 16;
/// Offset of `next` in a log page: the PM byte offset of the next log page,
/// 0 = none, stored with [`encode_page_pointer`]'s check.
pub const LOG_PAGE_OFF_NEXT: u64 = 0;
/// Offset of the owner word in a log page: the owner inode number in the low
/// 56 bits, the page's size class in the top byte (byte 15 of the page).
pub const LOG_PAGE_OFF_OWNER: u64 = 8;
/// Smallest log page (format version 3). Log pages are 256, 512, 1024, 2048 or
/// 4096 bytes, each aligned to its size; the small ones share pool blocks.
pub const LOG_PAGE_MIN: u64 = 256;
/// Largest log page: one pool block.
pub const LOG_PAGE_MAX: u64 = crate::BLOCK_SIZE;

/// Size in bytes of a log page of size class `class` (the top byte of its
/// owner word): 0 is a whole block (every page of version-2 pools), 1..=4
/// are 256, 512, 1024 and 2048 bytes. `None` for any other class.
pub fn log_page_size(class: u8) -> Option<u64> {
    match class {
        0 => Some(LOG_PAGE_MAX),
        1..=4 => Some(LOG_PAGE_MIN << (class - 1)),
        _ => None,
    }
}

/// Size class of a log page of `size` bytes (a power of two in 256..=4096).
pub fn log_page_class(size: u64) -> u8 {
    debug_assert!(size.is_power_of_two() && (LOG_PAGE_MIN..=LOG_PAGE_MAX).contains(&size));
    if size >= LOG_PAGE_MAX {
        0
    } else {
        (size / LOG_PAGE_MIN).trailing_zeros() as u8 + 1
    }
}

/// The owner word of a log page: owner inode and size class.
pub fn log_page_owner_word(owner: u64, size: u64) -> u64 {
    owner & ((1 << 56) - 1) | u64::from(log_page_class(size)) << 56
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_words_carry_a_check_that_refuses_any_flipped_bit() {
        for off in [4096u64 * 9 + 80, 1 << 30, (1 << 40) - 8, 16] {
            let w = encode_tail(off);
            assert_eq!(decode_tail(w), Ok(off));
            for bit in 0..64 {
                let d = decode_tail(w ^ (1 << bit));
                assert!(
                    d.is_err() || bit >= 48 && d == Ok(off) && (w ^ (1 << bit)) >> 48 == 0,
                    "bit {bit} of the tail of {off}: {d:?}"
                );
            }
        }
        assert_eq!(encode_tail(0), 0);
        assert_eq!(decode_tail(0), Ok(0));
        // A tail written by a version-2 build (no check) still reads.
        assert_eq!(decode_tail(4096 * 9 + 80), Ok(4096 * 9 + 80));
    }

    #[test]
    fn log_page_classes_round_trip_and_class_0_is_a_block() {
        for size in [256u64, 512, 1024, 2048, 4096] {
            assert_eq!(log_page_size(log_page_class(size)), Some(size));
        }
        assert_eq!(log_page_size(0), Some(crate::BLOCK_SIZE));
        assert_eq!(log_page_size(5), None);
        let w = log_page_owner_word(77, 512);
        assert_eq!(w & 0xff_ffff_ffff_ffff, 77);
        assert_eq!(log_page_size((w >> 56) as u8), Some(512));
    }

    #[test]
    fn every_single_flipped_bit_of_a_slots_checked_part_is_corrected_and_two_are_not() {
        let s = InodeSlot {
            log_head: 4096 * 9,
            log_tail: 4096 * 9 + 80,
            state: INODE_USED,
            mode: 0o100640,
            uid: 1000,
            gid: 100,
            generation: 5,
            rdev: 0,
            btime_ns: 1_764_000_000_123_456_789,
            parent_hint: 1,
        };
        let good = s.encode();
        assert_eq!(correct_one_flipped_bit(&good), None, "nothing to correct");
        for byte in STATIC_RANGE.start..OFF_CRC + 4 {
            for bit in 0..8 {
                let mut bad = good;
                bad[byte] ^= 1 << bit;
                assert_eq!(
                    correct_one_flipped_bit(&bad),
                    Some((good, byte)),
                    "byte {byte} bit {bit}"
                );
            }
        }
        // Two flipped bits: never "corrected" to a slot that is not the one
        // written (the check may find no single bit, never a wrong one here).
        let mut wrong = 0;
        for (a, b) in [(24, 30), (28, 120), (40, 41), (56, 100), (33, 119)] {
            let mut bad = good;
            bad[a] ^= 1;
            bad[b] ^= 0x10;
            match correct_one_flipped_bit(&bad) {
                None => {}
                Some((fixed, _)) => wrong += usize::from(fixed != good),
            }
        }
        assert_eq!(wrong, 0);
        // A free slot, or a slot whose fault is elsewhere (its state word),
        // is not the check's to correct.
        let mut free = good;
        free[INODE_OFF_STATE as usize] = INODE_FREE as u8;
        free[30] ^= 1;
        assert_eq!(correct_one_flipped_bit(&free), None);
        let mut state = good;
        state[INODE_OFF_STATE as usize] ^= 4;
        assert_eq!(correct_one_flipped_bit(&state), None);
    }

    #[test]
    fn slot_round_trips() {
        let s = InodeSlot {
            log_head: 4096 * 9,
            log_tail: 4096 * 9 + 80,
            state: INODE_USED,
            mode: 0o100644,
            uid: 1000,
            gid: 100,
            generation: 5,
            rdev: 0,
            btime_ns: 1_700_000_000_000_000_000,
            parent_hint: 1,
        };
        assert_eq!(InodeSlot::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn pm_log_heads_carry_a_check_and_tier_heads_are_stored_as_given() {
        let s = InodeSlot {
            log_head: 4096 * 9 + 512,
            log_tail: 4096 * 12 + 80,
            state: INODE_USED,
            mode: 0o40755,
            ..Default::default()
        };
        let b = s.encode();
        let word = u64_at(&b, INODE_OFF_LOG_HEAD as usize);
        assert_eq!(word, encode_page_pointer(4096 * 9 + 512));
        assert_ne!(word >> 48, 0, "a version-12 head has a check");
        for bit in 0..48 {
            let mut d = b;
            put_u64(&mut d, INODE_OFF_LOG_HEAD as usize, word ^ (1 << bit));
            assert!(InodeSlot::decode(&d).is_err(), "head bit {bit} flipped");
        }
        // A new inode's slot is written marked free, then published by a
        // store of its state word: its head carries the check as well.
        let mut free = s.clone();
        free.state = INODE_FREE;
        let mut f = free.encode();
        put_u64(&mut f, INODE_OFF_STATE as usize, INODE_USED);
        assert_eq!(u64_at(&f, INODE_OFF_LOG_HEAD as usize), word);
        assert_eq!(InodeSlot::decode(&f).unwrap(), s);
        // A head written before version 12 (no check) still reads.
        let mut old = b;
        put_u64(&mut old, INODE_OFF_LOG_HEAD as usize, 4096 * 9 + 512);
        assert_eq!(InodeSlot::decode(&old).unwrap(), s);
        // Without a log, the head word is not read.
        let mut empty = s.clone();
        empty.log_tail = 0;
        let mut e = empty.encode();
        put_u64(&mut e, INODE_OFF_LOG_HEAD as usize, 0xdead_beef);
        assert_eq!(InodeSlot::decode(&e).unwrap().log_head, 0);
        // A state-2 head names a blob on a block tier: stored as given.
        let tier = InodeSlot {
            log_head: encode_tier_log_head(TierId(1), PhysBlock(77), 256),
            state: INODE_USED_TIER_LOG,
            ..s
        };
        let t = tier.encode();
        assert_eq!(u64_at(&t, INODE_OFF_LOG_HEAD as usize), tier.log_head);
        assert_eq!(InodeSlot::decode(&t).unwrap(), tier);
    }

    #[test]
    fn corrupt_used_slot_is_rejected() {
        let s = InodeSlot {
            state: INODE_USED,
            mode: 0o40755,
            ..Default::default()
        };
        let mut b = s.encode();
        b[OFF_UID] ^= 1;
        assert_eq!(InodeSlot::decode(&b), Err(FormatError::BadChecksum));
        let mut b = s.encode();
        b[INODE_OFF_STATE as usize] = 9;
        assert!(InodeSlot::decode(&b).is_err());
    }

    #[test]
    fn slot_offsets_do_not_overlap() {
        assert_eq!(inode_offset(1) - inode_offset(0), INODE_SIZE as u64);
        let map = InodeMap::new(64, vec![900, 500]);
        assert_eq!(map.total(), 128);
        assert_eq!(map.offset(63), Some(inode_offset(63)));
        assert_eq!(map.offset(64), Some(900 * BLOCK_SIZE));
        assert_eq!(
            map.offset(95),
            Some(900 * BLOCK_SIZE + 31 * INODE_SIZE as u64)
        );
        assert_eq!(map.offset(96), Some(500 * BLOCK_SIZE));
        assert_eq!(map.offset(128), None);
        assert_eq!(inode_offset(0) % 8, 0);
    }

    #[test]
    fn tier_log_heads_round_trip_and_version_4_heads_read_as_offset_zero() {
        for (tier, block, offset) in [(1, 1, 0), (2, 123_456_789, 256), (7, (1 << 48) - 1, 3840)] {
            let w = encode_tier_log_head(TierId(tier), PhysBlock(block), offset);
            assert_eq!(
                decode_tier_log_head(w),
                (TierId(tier), PhysBlock(block), offset)
            );
        }
        // A version-4 build wrote the tier above a 56-bit block.
        let v4 = 3u64 << 56 | 4242;
        assert_eq!(decode_tier_log_head(v4), (TierId(3), PhysBlock(4242), 0));
        // An offset byte past the block decodes as such; readers refuse it.
        let bad = 1u64 << 56 | 16 << 48 | 9;
        assert_eq!(decode_tier_log_head(bad).2, BLOCK_SIZE);
    }
}
