//! The superblock: pool geometry, the tier list and the clean-unmount flag.
//!
//! Two copies live in blocks 0 and 1. An update writes copy A, persists it, then
//! writes copy B, so a crash leaves at least one intact copy. The reader takes the
//! valid copy with the larger `generation`.
//!
//! The inode table is the base table at [`crate::INODE_TABLE_BLOCK`] (sized
//! at mkfs, `inode_count` slots) followed, since version 10, by *groups* of
//! 32 slots, one page-pool block each, that the mounted pool adds when its
//! slots run out. The superblock names up to [`MAX_INODE_MAP_BLOCKS`]
//! *inode map blocks*; each holds [`INODE_MAP_ENTRIES`] u64 entries, the PM
//! block of group `m × 512 + k` in entry `k` of map block `m`, filled in
//! order (0: no group; every entry after a 0 is 0). Numbering in
//! [`crate::InodeMap`]. A superblock write naming a new map block commits
//! that (empty) map block; an entry's 8-byte store commits its group.

use crate::le::*;
use crate::{crc, FormatError, BLOCK_SIZE, FORMAT_VERSION};

/// Magic number at byte 0 of a PM-tier superblock.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"TERRACE1";
/// Most tiers a pool may have (one PM tier plus block tiers).
pub const MAX_TIERS: usize = 8;
/// Longest path recorded for a tier.
pub const TIER_PATH_MAX: usize = 224;

// Byte offsets inside the superblock.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_BLOCK_SIZE: usize = 12;
const OFF_UUID: usize = 16;
const OFF_GENERATION: usize = 32;
const OFF_PM_SIZE: usize = 40;
const OFF_INODE_COUNT: usize = 48;
const OFF_POOL_START: usize = 56;
const OFF_POOL_BLOCKS: usize = 64;
const OFF_CLEAN: usize = 72;
const OFF_TIER_COUNT: usize = 76;
const OFF_CREATED: usize = 80;
const OFF_MOUNT_COUNT: usize = 88;
const OFF_LAST_MOUNT: usize = 96;
const OFF_MAP_BLOCK_COUNT: usize = 104;
/// A tier epoch being stamped (0: none): see [`Superblock::next_tier_epoch`].
const OFF_NEXT_TIER_EPOCH: usize = 112;
const OFF_TIERS: usize = 128;
const TIER_RECORD_SIZE: usize = 256;
// Within a tier record.
const TR_ID: usize = 0;
const TR_KIND: usize = 1;
const TR_SIZE: usize = 8;
const TR_EXTENT: usize = 16;
const TR_PATH_LEN: usize = 20;
const TR_EPOCH: usize = 24;
const TR_PATH: usize = 32;
/// Inode map blocks: PM block numbers, u64 each (version 10), up to byte 3072.
const OFF_MAP_BLOCKS: usize = 2304;
/// Most inode map blocks a superblock names.
pub const MAX_INODE_MAP_BLOCKS: usize = 96;
/// Entries (groups of 32 inode slots) of one inode map block.
pub const INODE_MAP_ENTRIES: u64 = crate::BLOCK_SIZE / 8;
/// Most groups the inode table may grow by (1,572,864 slots).
pub const MAX_INODE_GROUPS: u64 = MAX_INODE_MAP_BLOCKS as u64 * INODE_MAP_ENTRIES;
/// First format version whose inode table may grow (inode map blocks).
pub const INODE_GROWTH_VERSION: u32 = 10;
/// Offset of the crc32c over bytes `[0, OFF_CRC)`.
const OFF_CRC: usize = BLOCK_SIZE as usize - 4;

/// Kind of media a tier sits on. The numeric value is stored on media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TierKind {
    /// Byte-addressable persistent memory (a DAX file, or a file on /dev/shm in tests).
    Pm = 0,
    /// A fast block device.
    Ssd = 1,
    /// A slow block device.
    Hdd = 2,
    /// An S3-compatible object store (the coldest tier, design.md §5n): a
    /// block tier whose record's path is the URL.
    S3 = 3,
}

impl TierKind {
    /// Decodes the stored value.
    pub fn from_u8(v: u8) -> Option<TierKind> {
        match v {
            0 => Some(TierKind::Pm),
            1 => Some(TierKind::Ssd),
            2 => Some(TierKind::Hdd),
            3 => Some(TierKind::S3),
            _ => None,
        }
    }
    /// Name used on the command line (`pm`, `ssd`, `hdd`, `s3`).
    pub fn name(self) -> &'static str {
        match self {
            TierKind::Pm => "pm",
            TierKind::Ssd => "ssd",
            TierKind::Hdd => "hdd",
            TierKind::S3 => "s3",
        }
    }
    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<TierKind> {
        match s {
            "pm" => Some(TierKind::Pm),
            "ssd" => Some(TierKind::Ssd),
            "hdd" => Some(TierKind::Hdd),
            "s3" => Some(TierKind::S3),
            _ => None,
        }
    }
}

/// One tier of the pool as recorded in the superblock. Tier 0 is always the
/// PM tier. Records are in id order; ids ascend and stay below
/// [`MAX_TIERS`], but since version 8 they may skip: a tier removed before
/// the last leaves its id unused (the tiers after it keep theirs, since
/// extents name them), so an id is not a position in the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierRecord {
    /// Tier id: the value stored in write entries.
    pub id: u8,
    /// Media kind.
    pub kind: TierKind,
    /// Usable size in bytes.
    pub size: u64,
    /// Extent size in bytes for block tiers (NVMFS: 512 KiB); 0 for PM.
    pub extent_size: u32,
    /// Path of the file or device at format time; an object tier's URL.
    pub path: String,
    /// The stamp this pool last wrote into the tier's header (0: none, as
    /// in pools formatted before 2026-11-30, for PM and for object tiers).
    pub epoch: u64,
}

/// The decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Format version the pool was written with.
    pub version: u32,
    /// Identity of the pool; block-tier headers repeat it.
    pub uuid: [u8; 16],
    /// Incremented on every superblock write; the larger valid copy wins.
    pub generation: u64,
    /// Size of the PM tier in bytes (a multiple of [`BLOCK_SIZE`]).
    pub pm_size: u64,
    /// Number of slots of the base inode table (slot 0 unused); groups
    /// added while mounted follow (see the module doc).
    pub inode_count: u64,
    /// First block of the page pool.
    pub pool_start: u64,
    /// Number of blocks in the page pool.
    pub pool_blocks: u64,
    /// True when the pool was cleanly unmounted and not mounted since.
    pub clean: bool,
    /// Format time, seconds since the epoch.
    pub created_unix: u64,
    /// Number of mounts so far.
    pub mount_count: u64,
    /// Time of the last mount, seconds since the epoch.
    pub last_mount_unix: u64,
    /// Tiers, tier 0 first, ids ascending (not necessarily consecutive).
    pub tiers: Vec<TierRecord>,
    /// The inode map blocks, in group order (version 10).
    pub inode_map_blocks: Vec<u64>,
    /// A new tier epoch being written into the block tiers' headers (0:
    /// none). Stored before the first header is written and cleared in the
    /// write that stores it in the tier records, so after a crash between
    /// the two a header may hold either value.
    pub next_tier_epoch: u64,
}

impl Superblock {
    /// PM byte offsets of the page pool, where every log page lies.
    pub fn page_pool_bytes(&self) -> std::ops::Range<u64> {
        self.pool_start * BLOCK_SIZE..self.pm_size
    }

    /// Encodes into one block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        b[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, OFF_VERSION, self.version);
        put_u32(&mut b, OFF_BLOCK_SIZE, BLOCK_SIZE as u32);
        b[OFF_UUID..OFF_UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, OFF_GENERATION, self.generation);
        put_u64(&mut b, OFF_PM_SIZE, self.pm_size);
        put_u64(&mut b, OFF_INODE_COUNT, self.inode_count);
        put_u64(&mut b, OFF_POOL_START, self.pool_start);
        put_u64(&mut b, OFF_POOL_BLOCKS, self.pool_blocks);
        put_u32(&mut b, OFF_CLEAN, self.clean as u32);
        put_u32(&mut b, OFF_TIER_COUNT, self.tiers.len() as u32);
        put_u64(&mut b, OFF_CREATED, self.created_unix);
        put_u64(&mut b, OFF_MOUNT_COUNT, self.mount_count);
        put_u64(&mut b, OFF_LAST_MOUNT, self.last_mount_unix);
        put_u64(&mut b, OFF_NEXT_TIER_EPOCH, self.next_tier_epoch);
        for (i, t) in self.tiers.iter().take(MAX_TIERS).enumerate() {
            let r = OFF_TIERS + i * TIER_RECORD_SIZE;
            put_u8(&mut b, r + TR_ID, t.id);
            put_u8(&mut b, r + TR_KIND, t.kind as u8);
            put_u64(&mut b, r + TR_SIZE, t.size);
            put_u32(&mut b, r + TR_EXTENT, t.extent_size);
            put_u64(&mut b, r + TR_EPOCH, t.epoch);
            let path = t.path.as_bytes();
            let n = path.len().min(TIER_PATH_MAX);
            put_u16(&mut b, r + TR_PATH_LEN, n as u16);
            b[r + TR_PATH..r + TR_PATH + n].copy_from_slice(&path[..n]);
        }
        let maps = &self.inode_map_blocks[..self.inode_map_blocks.len().min(MAX_INODE_MAP_BLOCKS)];
        put_u32(&mut b, OFF_MAP_BLOCK_COUNT, maps.len() as u32);
        for (i, &m) in maps.iter().enumerate() {
            put_u64(&mut b, OFF_MAP_BLOCKS + i * 8, m);
        }
        let c = crc(&b[..OFF_CRC]);
        put_u32(&mut b, OFF_CRC, c);
        b
    }

    /// Decodes one copy, checking magic, checksum and version.
    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        if b.len() < BLOCK_SIZE as usize {
            return Err(FormatError::Invalid("superblock shorter than a block"));
        }
        if b[OFF_MAGIC..OFF_MAGIC + 8] != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc(&b[..OFF_CRC]) != u32_at(b, OFF_CRC) {
            return Err(FormatError::BadChecksum);
        }
        let version = u32_at(b, OFF_VERSION);
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        if u32_at(b, OFF_BLOCK_SIZE) as u64 != BLOCK_SIZE {
            return Err(FormatError::Invalid("block size"));
        }
        let tier_count = u32_at(b, OFF_TIER_COUNT) as usize;
        if tier_count == 0 || tier_count > MAX_TIERS {
            return Err(FormatError::Invalid("tier count"));
        }
        let mut tiers = Vec::with_capacity(tier_count);
        for i in 0..tier_count {
            let r = OFF_TIERS + i * TIER_RECORD_SIZE;
            let kind = TierKind::from_u8(u8_at(b, r + TR_KIND))
                .ok_or(FormatError::Invalid("tier kind"))?;
            let n = (u16_at(b, r + TR_PATH_LEN) as usize).min(TIER_PATH_MAX);
            tiers.push(TierRecord {
                id: u8_at(b, r + TR_ID),
                kind,
                size: u64_at(b, r + TR_SIZE),
                extent_size: u32_at(b, r + TR_EXTENT),
                path: String::from_utf8_lossy(&b[r + TR_PATH..r + TR_PATH + n]).into_owned(),
                epoch: u64_at(b, r + TR_EPOCH),
            });
        }
        if tiers[0].kind != TierKind::Pm || tiers[0].id != 0 {
            return Err(FormatError::Invalid("tier 0 is not the pm tier"));
        }
        // Ids ascend but may skip (version 8: a tier removed before the
        // last leaves its id unused); every id fits the per-tier arrays.
        if tiers.windows(2).any(|w| w[1].id <= w[0].id)
            || tiers.iter().any(|t| usize::from(t.id) >= MAX_TIERS)
        {
            return Err(FormatError::Invalid("tier ids"));
        }
        let mut inode_map_blocks = Vec::new();
        if version >= INODE_GROWTH_VERSION {
            let n = u32_at(b, OFF_MAP_BLOCK_COUNT) as usize;
            if n > MAX_INODE_MAP_BLOCKS {
                return Err(FormatError::Invalid("inode map block count"));
            }
            inode_map_blocks.extend((0..n).map(|i| u64_at(b, OFF_MAP_BLOCKS + i * 8)));
        }
        let sb = Superblock {
            version,
            uuid: b[OFF_UUID..OFF_UUID + 16].try_into().expect("16 bytes"),
            generation: u64_at(b, OFF_GENERATION),
            pm_size: u64_at(b, OFF_PM_SIZE),
            inode_count: u64_at(b, OFF_INODE_COUNT),
            pool_start: u64_at(b, OFF_POOL_START),
            pool_blocks: u64_at(b, OFF_POOL_BLOCKS),
            clean: u32_at(b, OFF_CLEAN) != 0,
            created_unix: u64_at(b, OFF_CREATED),
            mount_count: u64_at(b, OFF_MOUNT_COUNT),
            last_mount_unix: u64_at(b, OFF_LAST_MOUNT),
            tiers,
            inode_map_blocks,
            next_tier_epoch: u64_at(b, OFF_NEXT_TIER_EPOCH),
        };
        sb.check_geometry()?;
        Ok(sb)
    }

    /// Whether a block tier whose header holds `header_epoch` was last used
    /// by this copy of the pool as the tier of record `rec` (the pool's, or
    /// one being added): the header and the record agree, or the header holds the epoch being stamped when a
    /// crash came (`next_tier_epoch`). A zero on either side was never
    /// stamped (a pool or header from before epochs, an object tier) and
    /// agrees with anything. A PM tier that disagrees is older than the
    /// tier's contents: restored from a backup, or a copy of it was mounted
    /// since.
    pub fn accepts_tier_epoch(&self, rec: &TierRecord, header_epoch: u64) -> bool {
        header_epoch == 0
            || rec.epoch == 0
            || header_epoch == rec.epoch
            || (self.next_tier_epoch != 0 && header_epoch == self.next_tier_epoch)
    }

    /// Checks that the geometry fields agree with each other.
    pub fn check_geometry(&self) -> Result<(), FormatError> {
        if self.pm_size % BLOCK_SIZE != 0 {
            return Err(FormatError::Invalid(
                "pm size not a multiple of the block size",
            ));
        }
        let total = self.pm_size / BLOCK_SIZE;
        if self.inode_count < 2 {
            return Err(FormatError::Invalid("inode count"));
        }
        if self.pool_start != crate::pool_start_block(self.inode_count) {
            return Err(FormatError::Invalid("pool start"));
        }
        if self.pool_start.checked_add(self.pool_blocks) != Some(total) {
            return Err(FormatError::Invalid("pool size"));
        }
        // Map blocks lie in the page pool, each named once.
        let pool = self.pool_start..total;
        let mut maps = self.inode_map_blocks.clone();
        maps.sort_unstable();
        if maps.iter().any(|m| !pool.contains(m)) || maps.windows(2).any(|w| w[0] == w[1]) {
            return Err(FormatError::Invalid("inode map block"));
        }
        Ok(())
    }

    /// Picks the superblock to use from the two stored copies.
    ///
    /// Returns the newest valid copy. When neither is valid, returns the error of
    /// copy A (it says best why the file is not a usable pool).
    pub fn choose(a: &[u8], b: &[u8]) -> Result<Superblock, FormatError> {
        match (Superblock::decode(a), Superblock::decode(b)) {
            (Ok(x), Ok(y)) => Ok(if y.generation > x.generation { y } else { x }),
            (Ok(x), Err(_)) => Ok(x),
            (Err(_), Ok(y)) => Ok(y),
            // Report the more telling error: a bad checksum or version of one copy
            // says more than a missing magic in the other.
            (Err(FormatError::BadMagic), Err(e)) | (Err(e), Err(_)) => Err(e),
        }
    }

    /// Byte offset in the PM tier of the first inode slot.
    pub fn inode_table_offset(&self) -> u64 {
        crate::INODE_TABLE_BLOCK * BLOCK_SIZE
    }
}

/// Number of blocks the inode table needs for `inode_count` slots.
pub fn inode_table_blocks(inode_count: u64) -> u64 {
    (inode_count * crate::INODE_SIZE as u64).div_ceil(BLOCK_SIZE)
}

/// First block of the page pool for a given inode count.
pub fn pool_start_block(inode_count: u64) -> u64 {
    crate::INODE_TABLE_BLOCK + inode_table_blocks(inode_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            uuid: [7; 16],
            generation: 3,
            pm_size: 1024 * BLOCK_SIZE,
            inode_count: 64,
            pool_start: pool_start_block(64),
            pool_blocks: 1024 - pool_start_block(64),
            clean: true,
            created_unix: 1,
            mount_count: 2,
            last_mount_unix: 3,
            inode_map_blocks: vec![900],
            next_tier_epoch: 0x77,
            tiers: vec![
                TierRecord {
                    id: 0,
                    kind: TierKind::Pm,
                    size: 1024 * BLOCK_SIZE,
                    extent_size: 0,
                    path: "/dev/shm/x".into(),
                    epoch: 0,
                },
                TierRecord {
                    id: 1,
                    kind: TierKind::Ssd,
                    size: 1 << 30,
                    extent_size: 512 << 10,
                    path: "/tmp/ssd".into(),
                    epoch: 0x5eed,
                },
            ],
        }
    }

    #[test]
    fn a_tier_header_is_accepted_when_its_epoch_is_the_records_or_the_one_being_stamped() {
        let mut sb = sample();
        let mut rec = sb.tiers[1].clone();
        assert!(sb.accepts_tier_epoch(&rec, 0x5eed), "the record's");
        assert!(sb.accepts_tier_epoch(&rec, 0x77), "the one being stamped");
        assert!(sb.accepts_tier_epoch(&rec, 0), "a header never stamped");
        assert!(!sb.accepts_tier_epoch(&rec, 0x1234), "another copy's");
        sb.next_tier_epoch = 0;
        assert!(!sb.accepts_tier_epoch(&rec, 0x77));
        rec.epoch = 0;
        assert!(
            sb.accepts_tier_epoch(&rec, 0x1234),
            "a record never stamped"
        );
    }

    #[test]
    fn superblock_round_trips() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
    }

    #[test]
    fn an_object_tier_round_trips_with_its_url() {
        let mut sb = sample();
        sb.tiers.push(TierRecord {
            id: 2,
            kind: TierKind::S3,
            size: 1 << 40,
            extent_size: 16 << 20,
            path: "http://127.0.0.1:9000/bucket/pool-a".into(),
            epoch: 0,
        });
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        for k in [TierKind::Pm, TierKind::Ssd, TierKind::Hdd, TierKind::S3] {
            assert_eq!(TierKind::from_u8(k as u8), Some(k));
            assert_eq!(TierKind::parse(k.name()), Some(k));
        }
        assert_eq!(TierKind::S3 as u8, 3);
    }

    #[test]
    fn ids_may_skip_a_removed_tier_but_must_ascend() {
        let mut sb = sample();
        sb.tiers.push(TierRecord {
            id: 3,
            kind: TierKind::Hdd,
            size: 1 << 30,
            extent_size: 512 << 10,
            path: "/tmp/hdd".into(),
            epoch: 0,
        });
        sb.tiers.remove(1);
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        for bad in [0u8, 8, 200] {
            let mut b = sb.clone();
            b.tiers[1].id = bad;
            assert_eq!(
                Superblock::decode(&b.encode()),
                Err(FormatError::Invalid("tier ids")),
                "id {bad}"
            );
        }
    }

    #[test]
    fn inode_map_blocks_must_lie_in_the_pool_each_once() {
        let mut sb = sample();
        sb.inode_map_blocks.push(1000);
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        for bad in [0, 900, 1024, u64::MAX] {
            let mut b = sb.clone();
            b.inode_map_blocks.push(bad);
            assert_eq!(
                Superblock::decode(&b.encode()),
                Err(FormatError::Invalid("inode map block")),
                "block {bad}"
            );
        }
        // A version-9 superblock has none, whatever its spare bytes hold.
        let mut old = sb.clone();
        old.version = INODE_GROWTH_VERSION - 1;
        assert!(Superblock::decode(&old.encode())
            .unwrap()
            .inode_map_blocks
            .is_empty());
    }

    #[test]
    fn any_flipped_byte_is_rejected() {
        let enc = sample().encode();
        for i in (0..enc.len()).step_by(97) {
            let mut b = enc.clone();
            b[i] ^= 0x40;
            assert!(Superblock::decode(&b).is_err(), "byte {i} flip accepted");
        }
    }

    #[test]
    fn newer_version_is_refused() {
        let mut sb = sample();
        sb.version = FORMAT_VERSION + 1;
        assert_eq!(
            Superblock::decode(&sb.encode()),
            Err(FormatError::UnsupportedVersion(FORMAT_VERSION + 1))
        );
    }

    #[test]
    fn newest_valid_copy_wins() {
        let a = sample();
        let mut b = sample();
        b.generation = 4;
        b.clean = false;
        assert_eq!(Superblock::choose(&a.encode(), &b.encode()).unwrap(), b);
        let mut bad = b.encode();
        bad[100] ^= 1;
        assert_eq!(Superblock::choose(&a.encode(), &bad).unwrap(), a);
        assert_eq!(
            Superblock::choose(&[0; 4096], &[0; 4096]),
            Err(FormatError::BadMagic)
        );
    }
}
