//! Header of a block tier (SSD, HDD): block 0 of the device or file.
//!
//! It ties the device to its pool, so mounting with a device of another pool, or a
//! device that was reformatted, is a clear error. Layout: 0 magic [u8; 8],
//! 8 pool uuid [u8; 16], 24 tier id u8, 25 kind u8, 32 size u64,
//! 40 extent size u32, 48 epoch u64, 4092 crc32c over [0, 4092).
//!
//! The *epoch* (since 2026-11-30; 0 in headers written before, and in an
//! object tier's, which is never restamped) is the random stamp of the PM
//! tier that last used the tier: the superblock's tier record holds the same
//! value (`TierRecord::epoch`), and every read-write mount, thaw and clean
//! unmount writes a new one to both (design.md §3, "Stale PM tiers"). A PM
//! tier whose record disagrees with the header is an older copy of the pool
//! than the one that last wrote the tier ([`crate::Superblock::accepts_tier_epoch`]).

use crate::le::*;
use crate::{crc, FormatError, TierKind, BLOCK_SIZE};

/// Magic number of a block-tier header.
pub const TIER_MAGIC: [u8; 8] = *b"TERRTIER";
/// Default extent size on block tiers (NVMFS: 512 KiB).
pub const DEFAULT_EXTENT_SIZE: u32 = 512 * 1024;

/// A decoded block-tier header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierHeader {
    /// The pool this tier belongs to.
    pub pool_uuid: [u8; 16],
    /// The tier's id in that pool.
    pub id: u8,
    /// Media kind.
    pub kind: TierKind,
    /// Usable size in bytes.
    pub size: u64,
    /// Extent size in bytes.
    pub extent_size: u32,
    /// Stamp of the PM tier that last used this tier (0: never stamped).
    pub epoch: u64,
}

impl TierHeader {
    /// Encodes into one block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        b[..8].copy_from_slice(&TIER_MAGIC);
        b[8..24].copy_from_slice(&self.pool_uuid);
        put_u8(&mut b, 24, self.id);
        put_u8(&mut b, 25, self.kind as u8);
        put_u64(&mut b, 32, self.size);
        put_u32(&mut b, 40, self.extent_size);
        put_u64(&mut b, 48, self.epoch);
        let c = crc(&b[..4092]);
        put_u32(&mut b, 4092, c);
        b
    }

    /// [`TierHeader::decode`] of a header that a stamping's write may have
    /// torn (a power loss inside the 4 KiB write, on a device that does not
    /// write it atomically): only its epoch (bytes 48..56, first sector)
    /// and its check (bytes 4092..4096, last sector) change between two
    /// stampings, so a torn header holds one stamping's epoch and the
    /// other's check. Such a header is taken with whichever of `epochs`
    /// (the record's and the pending one) its check was computed for. A
    /// header damaged in any other way is refused as `decode` refuses it.
    pub fn decode_torn(b: &[u8], epochs: &[u64]) -> Result<TierHeader, FormatError> {
        match TierHeader::decode(b) {
            Err(FormatError::BadChecksum) => {
                let mut fixed = b[..BLOCK_SIZE as usize].to_vec();
                for &e in epochs {
                    put_u64(&mut fixed, 48, e);
                    if let Ok(h) = TierHeader::decode(&fixed) {
                        return Ok(h);
                    }
                }
                Err(FormatError::BadChecksum)
            }
            r => r,
        }
    }

    /// Decodes and checks a header.
    pub fn decode(b: &[u8]) -> Result<TierHeader, FormatError> {
        if b.len() < BLOCK_SIZE as usize {
            return Err(FormatError::Invalid("tier header shorter than a block"));
        }
        if b[..8] != TIER_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc(&b[..4092]) != u32_at(b, 4092) {
            return Err(FormatError::BadChecksum);
        }
        Ok(TierHeader {
            pool_uuid: b[8..24].try_into().expect("16 bytes"),
            id: u8_at(b, 24),
            kind: TierKind::from_u8(u8_at(b, 25)).ok_or(FormatError::Invalid("tier kind"))?,
            size: u64_at(b, 32),
            extent_size: u32_at(b, 40),
            epoch: u64_at(b, 48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_torn_between_two_stampings_is_taken_with_the_epoch_of_its_check() {
        let old = TierHeader {
            pool_uuid: [3; 16],
            id: 1,
            kind: TierKind::Ssd,
            size: 1 << 30,
            extent_size: 512 << 10,
            epoch: 7,
        };
        let new = TierHeader {
            epoch: 9,
            ..old.clone()
        };
        let (o, n) = (old.encode(), new.encode());
        // First sector new, last sector old; and the other way round.
        let mut torn = o.clone();
        torn[..512].copy_from_slice(&n[..512]);
        assert_eq!(TierHeader::decode(&torn), Err(FormatError::BadChecksum));
        assert_eq!(TierHeader::decode_torn(&torn, &[9, 7]), Ok(old.clone()));
        let mut torn = n.clone();
        torn[..512].copy_from_slice(&o[..512]);
        assert_eq!(TierHeader::decode_torn(&torn, &[7, 9]), Ok(new));
        // Neither epoch the pool knows, or other damage: refused.
        assert_eq!(
            TierHeader::decode_torn(&torn, &[5]),
            Err(FormatError::BadChecksum)
        );
        let mut bad = o.clone();
        bad[33] ^= 1;
        assert_eq!(
            TierHeader::decode_torn(&bad, &[7, 9]),
            Err(FormatError::BadChecksum)
        );
        assert_eq!(TierHeader::decode_torn(&o, &[]), Ok(old));
    }

    #[test]
    fn tier_header_round_trips_and_detects_corruption() {
        let h = TierHeader {
            pool_uuid: [3; 16],
            id: 1,
            kind: TierKind::Ssd,
            size: 1 << 34,
            extent_size: DEFAULT_EXTENT_SIZE,
            epoch: 0x1234_5678_9abc_def0,
        };
        let mut b = h.encode();
        assert_eq!(TierHeader::decode(&b).unwrap(), h);
        b[33] ^= 2;
        assert_eq!(TierHeader::decode(&b), Err(FormatError::BadChecksum));
        assert_eq!(TierHeader::decode(&[0; 4096]), Err(FormatError::BadMagic));
    }
}
