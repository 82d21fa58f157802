//! Log entries: the records of an inode's log.
//!
//! Every entry starts with an 8-byte header: kind (u8), flags (u8), total length
//! in bytes (u16, a multiple of 8, header included) and a crc32c (u32) of the whole
//! entry computed with the crc field zero. An entry never crosses a log page; when
//! the rest of a page is too short, the writer puts a [`EntryKind::PageEnd`] marker
//! there (or nothing, when fewer than 8 bytes remain) and continues on the next
//! page.
//!
//! Entry payloads (offsets from the start of the entry):
//!
//! | kind        | payload |
//! |-------------|---------|
//! | PageEnd (1) | none |
//! | Attr (2)    | 8 mode u32, 12 uid u32, 16 gid u32, 20 nlink u32, 24 size u64, 32 atime i64, 40 mtime i64, 48 ctime i64, 56 flags u32 — 64 bytes |
//! | Write (3)   | 8 file_block u64, 16 blocks u32, 20 tier u8, 21 size_counter u8, 22 wflags u16, 24 block u64, 32 size_after u64, 40 mtime i64 — 48 bytes |
//! | Punch (4)   | 8 file_block u64, 16 blocks u64 — 24 bytes |
//! | DentryAdd (5) | 8 ino u64, 16 file_type u8, 17 name_len u8, 24 name — padded to 8 |
//! | DentryDel (6) | 8 name_len u8, 16 name — padded to 8 |
//! | XattrSet (7)  | 8 name_len u8, 10 value_len u16, 16 name, value — padded to 8 |
//! | XattrDel (8)  | 8 name_len u8, 16 name — padded to 8 |
//! | Copy (9)      | 8 file_block u64, 16 blocks u32, 20 tier u8, 21 op u8, 24 block u64 — 32 bytes |
//! | XattrAppend (11) | as XattrSet: 8 name_len u8, 10 value_len u16, 16 name, value — padded to 8 |
//! | Sums (10)     | 8 block u64, 16 tier u8, 17 reserved u8, 18 count u16, 20 reserved u32, 24 count × crc32c u32 — padded to 8 |
//! | Shift (12)    | 8 file_block u64, 16 blocks u64, 24 op u8 (0 collapse, 1 insert), 25..32 reserved (0) — 32 bytes |
//!
//! A Sums entry gives the crc32c of each of `count` (1..=[`SUMS_PER_ENTRY`])
//! blocks of block-tier data starting at `block` on `tier`: the checksums of
//! the data a Write or Copy entry of the same commit points at (format
//! version 5).
//!
//! `Attr.flags` (format version 9) holds the inode's `chattr` flags, the
//! `ATTR_FLAG_*` bits (Linux's `FS_*_FL` values); older pools have 0 there.
//!
//! A Shift entry (format version 6) moves file blocks without touching their
//! data (`fallocate` COLLAPSE_RANGE / INSERT_RANGE): see [`ShiftOp`].
//! Times are nanoseconds since the epoch. `Write.size_after` and `Write.mtime` make
//! a write one entry: file size, mtime and ctime change with the data.

use crate::le::*;
use crate::{crc, FileBlock, FormatError, PhysBlock, TierId};

/// Size of the common entry header.
pub const ENTRY_HEADER: usize = 8;

/// Kinds of log entries; the numeric value is stored on media.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Rest of this log page is unused; continue on the next page.
    PageEnd = 1,
    /// All mutable attributes after a change.
    Attr = 2,
    /// File data written copy-on-write to `blocks` blocks at `block` on `tier`.
    Write = 3,
    /// File blocks unmapped (truncate, hole punch).
    Punch = 4,
    /// Directory entry added or replaced.
    DentryAdd = 5,
    /// Directory entry removed.
    DentryDel = 6,
    /// Extended attribute set.
    XattrSet = 7,
    /// Extended attribute removed.
    XattrDel = 8,
    /// A second, clean copy of file data added, promoted or dropped (NVMFS).
    Copy = 9,
    /// Checksums of blocks of block-tier data.
    Sums = 10,
    /// More bytes of the value of an xattr set earlier in the same commit.
    XattrAppend = 11,
    /// File blocks shifted down (collapse) or up (insert) (format 6).
    Shift = 12,
}

/// What a Shift entry does to the file blocks from `file_block` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftOp {
    /// `[file_block, file_block + blocks)` is unmapped (its blocks freed) and
    /// every extent after it moves down by `blocks` (COLLAPSE_RANGE).
    Collapse = 0,
    /// Every extent at or after `file_block` (split there) moves up by
    /// `blocks`, leaving a hole of `blocks` at `file_block` (INSERT_RANGE).
    Insert = 1,
}

/// Most block checksums one Sums entry carries (the entry is then 536 bytes,
/// so a log page wastes little at its end).
pub const SUMS_PER_ENTRY: usize = 128;

/// Bytes of a Sums entry with `n` checksums.
pub const fn sums_entry_len(n: usize) -> usize {
    (24 + 4 * n).div_ceil(8) * 8
}

/// What a [`CopyEntry`] does to the file blocks it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOp {
    /// The data now also has a clean copy at `tier`/`block` (written and
    /// synced before this entry commits). Any older copy of the range is freed.
    Add = 0,
    /// The copy at `tier`/`block` becomes the only location; the primary
    /// blocks are freed (evicting a clean PM page costs no data copy).
    Promote = 1,
    /// The copy is forgotten and its blocks freed.
    Drop = 2,
}

/// A copy entry: file blocks `[file_block, file_block + blocks)`, all mapped,
/// and their copy at `[block, block + blocks)` of tier `tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyEntry {
    /// First file block.
    pub file_block: FileBlock,
    /// Number of blocks.
    pub blocks: u32,
    /// Tier of the copy.
    pub tier: TierId,
    /// What happens.
    pub op: CopyOp,
    /// First block of the copy on `tier`.
    pub block: PhysBlock,
}

/// Mutable attributes of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrEntry {
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// Access time, ns.
    pub atime: i64,
    /// Modification time, ns.
    pub mtime: i64,
    /// Change time, ns.
    pub ctime: i64,
    /// Inode flags (`chattr`; format 9): a set of the `ATTR_FLAG_*` bits,
    /// 0 in older pools.
    pub flags: u32,
}

/// `FS_SYNC_FL` (`chattr +S`): writes to the file are synchronous.
pub const ATTR_FLAG_SYNC: u32 = 0x8;
/// `FS_IMMUTABLE_FL` (`chattr +i`): the file, its attributes, xattrs and
/// names cannot change; a directory's entries cannot change.
pub const ATTR_FLAG_IMMUTABLE: u32 = 0x10;
/// `FS_APPEND_FL` (`chattr +a`): the file can only grow by appends and
/// cannot be renamed, linked or removed; a directory's entries can only be
/// added.
pub const ATTR_FLAG_APPEND: u32 = 0x20;
/// `FS_NODUMP_FL` (`chattr +d`): kept for backup tools; no effect here.
pub const ATTR_FLAG_NODUMP: u32 = 0x40;
/// `FS_NOATIME_FL` (`chattr +A`): reads do not update the access time.
pub const ATTR_FLAG_NOATIME: u32 = 0x80;
/// `FS_DIRSYNC_FL` (`chattr +D`): directory changes are synchronous (every
/// directory change is committed on PM before it returns anyway).
pub const ATTR_FLAG_DIRSYNC: u32 = 0x1_0000;
/// Every inode flag a pool stores; the bits are Linux's `FS_*_FL` values.
pub const ATTR_FLAGS_KNOWN: u32 = ATTR_FLAG_SYNC
    | ATTR_FLAG_IMMUTABLE
    | ATTR_FLAG_APPEND
    | ATTR_FLAG_NODUMP
    | ATTR_FLAG_NOATIME
    | ATTR_FLAG_DIRSYNC;

/// A write entry: file blocks `[file_block, file_block + blocks)` are stored at
/// `[block, block + blocks)` of tier `tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteEntry {
    /// First file block (file offset / BLOCK_SIZE).
    pub file_block: FileBlock,
    /// Number of blocks.
    pub blocks: u32,
    /// Tier id holding the data (0 = PM).
    pub tier: TierId,
    /// Write-size predictor counter (Ziggurat §4.2).
    pub size_counter: u8,
    /// Flags; [`WRITE_FLAG_ZERO`] means the range reads as zeros and `block` is unused.
    pub wflags: u16,
    /// First block address on the tier.
    pub block: PhysBlock,
    /// File size after this write.
    pub size_after: u64,
    /// mtime (and ctime) after this write, ns.
    pub mtime: i64,
}

/// Write flag: an allocated range that reads as zeros (fallocate mode 0).
pub const WRITE_FLAG_ZERO: u16 = 1;
/// Write flag: the entry moves existing data (migration, log compaction): the
/// file's size, mtime and ctime are left alone, and `mtime` is the time the
/// data was last modified (kept for the migration profiler).
pub const WRITE_FLAG_MOVED: u16 = 2;
/// Write flag (format 5): the blocks were written full of zeros (fallocate);
/// their checksum is the crc32c of a zero block, so no Sums entry follows.
pub const WRITE_FLAG_ZEROED: u16 = 4;
/// Write flag (format 7): the blocks may also be mapped by other files, or by
/// other blocks of this one (a `copy_file_range` clone shares the source's
/// blocks instead of copying them). A block mapped by several entries is
/// valid only when at most one of them lacks this flag; the block is freed
/// when the last of them goes (reference counts are rebuilt at mount).
pub const WRITE_FLAG_SHARED: u16 = 8;

/// A decoded log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// See [`EntryKind::PageEnd`].
    PageEnd,
    /// See [`AttrEntry`].
    Attr(AttrEntry),
    /// See [`WriteEntry`].
    Write(WriteEntry),
    /// Unmap `blocks` file blocks starting at `file_block`.
    Punch {
        /// First file block.
        file_block: FileBlock,
        /// Number of blocks.
        blocks: u64,
    },
    /// Add or replace a directory entry.
    DentryAdd {
        /// Child inode number.
        ino: u64,
        /// File type (`DT_*` value).
        file_type: u8,
        /// Name bytes (1..=255, no '/' or NUL).
        name: Vec<u8>,
    },
    /// Remove a directory entry.
    DentryDel {
        /// Name bytes.
        name: Vec<u8>,
    },
    /// Set an extended attribute.
    XattrSet {
        /// Full name, namespace prefix included.
        name: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Remove an extended attribute.
    XattrDel {
        /// Full name.
        name: Vec<u8>,
    },
    /// See [`CopyEntry`].
    Copy(CopyEntry),
    /// Append `value` to the xattr `name` (set by an XattrSet entry earlier
    /// in the same commit): values longer than [`crate::XATTR_CHUNK`].
    XattrAppend {
        /// Full name.
        name: Vec<u8>,
        /// The next bytes of the value.
        value: Vec<u8>,
    },
    /// crc32c of each block of `[block, block + crcs.len())` on `tier`.
    Sums {
        /// Block tier id (never 0: PM data has no checksums).
        tier: TierId,
        /// First block on the tier.
        block: PhysBlock,
        /// One checksum per block (1..=[`SUMS_PER_ENTRY`]).
        crcs: Vec<u32>,
    },
    /// Shift file blocks from `file_block` on by `blocks` (see [`ShiftOp`]).
    Shift {
        /// First file block of the collapsed range / of the insertion.
        file_block: FileBlock,
        /// Number of blocks removed or inserted.
        blocks: u64,
        /// Direction.
        op: ShiftOp,
    },
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl Entry {
    /// Encoded length in bytes (a multiple of 8).
    pub fn encoded_len(&self) -> usize {
        match self {
            Entry::PageEnd => 8,
            Entry::Attr(_) => 64,
            Entry::Write(_) => 48,
            Entry::Punch { .. } => 24,
            Entry::DentryAdd { name, .. } => pad8(24 + name.len()),
            Entry::DentryDel { name } | Entry::XattrDel { name } => pad8(16 + name.len()),
            Entry::XattrSet { name, value } | Entry::XattrAppend { name, value } => {
                pad8(16 + name.len() + value.len())
            }
            Entry::Copy(_) => 32,
            Entry::Sums { crcs, .. } => sums_entry_len(crcs.len()),
            Entry::Shift { .. } => 32,
        }
    }

    fn kind(&self) -> EntryKind {
        match self {
            Entry::PageEnd => EntryKind::PageEnd,
            Entry::Attr(_) => EntryKind::Attr,
            Entry::Write(_) => EntryKind::Write,
            Entry::Punch { .. } => EntryKind::Punch,
            Entry::DentryAdd { .. } => EntryKind::DentryAdd,
            Entry::DentryDel { .. } => EntryKind::DentryDel,
            Entry::XattrSet { .. } => EntryKind::XattrSet,
            Entry::XattrDel { .. } => EntryKind::XattrDel,
            Entry::Copy(_) => EntryKind::Copy,
            Entry::Sums { .. } => EntryKind::Sums,
            Entry::XattrAppend { .. } => EntryKind::XattrAppend,
            Entry::Shift { .. } => EntryKind::Shift,
        }
    }

    /// Encodes the entry with its header and checksum.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.encoded_len();
        let mut b = vec![0u8; len];
        put_u8(&mut b, 0, self.kind() as u8);
        put_u16(&mut b, 2, len as u16);
        match self {
            Entry::PageEnd => {}
            Entry::Attr(a) => {
                put_u32(&mut b, 8, a.mode);
                put_u32(&mut b, 12, a.uid);
                put_u32(&mut b, 16, a.gid);
                put_u32(&mut b, 20, a.nlink);
                put_u64(&mut b, 24, a.size);
                put_i64(&mut b, 32, a.atime);
                put_i64(&mut b, 40, a.mtime);
                put_i64(&mut b, 48, a.ctime);
                put_u32(&mut b, 56, a.flags);
            }
            Entry::Write(w) => {
                put_u64(&mut b, 8, w.file_block.get());
                put_u32(&mut b, 16, w.blocks);
                put_u8(&mut b, 20, w.tier.get());
                put_u8(&mut b, 21, w.size_counter);
                put_u16(&mut b, 22, w.wflags);
                put_u64(&mut b, 24, w.block.get());
                put_u64(&mut b, 32, w.size_after);
                put_i64(&mut b, 40, w.mtime);
            }
            Entry::Punch { file_block, blocks } => {
                put_u64(&mut b, 8, file_block.get());
                put_u64(&mut b, 16, *blocks);
            }
            Entry::DentryAdd {
                ino,
                file_type,
                name,
            } => {
                put_u64(&mut b, 8, *ino);
                put_u8(&mut b, 16, *file_type);
                put_u8(&mut b, 17, name.len() as u8);
                b[24..24 + name.len()].copy_from_slice(name);
            }
            Entry::DentryDel { name } | Entry::XattrDel { name } => {
                put_u8(&mut b, 8, name.len() as u8);
                b[16..16 + name.len()].copy_from_slice(name);
            }
            Entry::XattrSet { name, value } | Entry::XattrAppend { name, value } => {
                put_u8(&mut b, 8, name.len() as u8);
                put_u16(&mut b, 10, value.len() as u16);
                b[16..16 + name.len()].copy_from_slice(name);
                b[16 + name.len()..16 + name.len() + value.len()].copy_from_slice(value);
            }
            Entry::Copy(c) => {
                put_u64(&mut b, 8, c.file_block.get());
                put_u32(&mut b, 16, c.blocks);
                put_u8(&mut b, 20, c.tier.get());
                put_u8(&mut b, 21, c.op as u8);
                put_u64(&mut b, 24, c.block.get());
            }
            Entry::Sums { tier, block, crcs } => {
                put_u64(&mut b, 8, block.get());
                put_u8(&mut b, 16, tier.get());
                put_u16(&mut b, 18, crcs.len() as u16);
                for (i, c) in crcs.iter().enumerate() {
                    put_u32(&mut b, 24 + 4 * i, *c);
                }
            }
            Entry::Shift {
                file_block,
                blocks,
                op,
            } => {
                put_u64(&mut b, 8, file_block.get());
                put_u64(&mut b, 16, *blocks);
                put_u8(&mut b, 24, *op as u8);
            }
        }
        let c = crc(&b);
        put_u32(&mut b, 4, c);
        b
    }

    /// Reads the length field of the entry starting at `b[0]` without checking it.
    pub fn peek_len(b: &[u8]) -> usize {
        if b.len() < ENTRY_HEADER {
            return 0;
        }
        u16_at(b, 2) as usize
    }

    /// Decodes the entry at the start of `b`; returns it and its length.
    pub fn decode(b: &[u8]) -> Result<(Entry, usize), FormatError> {
        if b.len() < ENTRY_HEADER {
            return Err(FormatError::Invalid("entry header truncated"));
        }
        let len = u16_at(b, 2) as usize;
        if len < ENTRY_HEADER || len % 8 != 0 || len > b.len() {
            return Err(FormatError::Invalid("entry length"));
        }
        let mut copy = b[..len].to_vec();
        put_u32(&mut copy, 4, 0);
        if crc(&copy) != u32_at(b, 4) {
            return Err(FormatError::BadChecksum);
        }
        let b = &b[..len];
        let need = |n: usize| {
            if len >= n {
                Ok(())
            } else {
                Err(FormatError::Invalid("entry too short for its kind"))
            }
        };
        let name_at = |off: usize, n: usize| -> Result<Vec<u8>, FormatError> {
            if off + n > len || n == 0 {
                return Err(FormatError::Invalid("name length"));
            }
            Ok(b[off..off + n].to_vec())
        };
        // Name and value of an XattrSet or XattrAppend entry.
        let xattr = || -> Result<(Vec<u8>, Vec<u8>), FormatError> {
            need(16)?;
            let n = u8_at(b, 8) as usize;
            let v = u16_at(b, 10) as usize;
            if 16 + n + v > len {
                return Err(FormatError::Invalid("xattr length"));
            }
            Ok((name_at(16, n)?, b[16 + n..16 + n + v].to_vec()))
        };
        let e = match u8_at(b, 0) {
            1 => Entry::PageEnd,
            2 => {
                need(64)?;
                Entry::Attr(AttrEntry {
                    mode: u32_at(b, 8),
                    uid: u32_at(b, 12),
                    gid: u32_at(b, 16),
                    nlink: u32_at(b, 20),
                    size: u64_at(b, 24),
                    atime: i64_at(b, 32),
                    mtime: i64_at(b, 40),
                    ctime: i64_at(b, 48),
                    flags: u32_at(b, 56),
                })
            }
            3 => {
                need(48)?;
                Entry::Write(WriteEntry {
                    file_block: FileBlock(u64_at(b, 8)),
                    blocks: u32_at(b, 16),
                    tier: TierId(u8_at(b, 20)),
                    size_counter: u8_at(b, 21),
                    wflags: u16_at(b, 22),
                    block: PhysBlock(u64_at(b, 24)),
                    size_after: u64_at(b, 32),
                    mtime: i64_at(b, 40),
                })
            }
            4 => {
                need(24)?;
                Entry::Punch {
                    file_block: FileBlock(u64_at(b, 8)),
                    blocks: u64_at(b, 16),
                }
            }
            5 => {
                need(24)?;
                Entry::DentryAdd {
                    ino: u64_at(b, 8),
                    file_type: u8_at(b, 16),
                    name: name_at(24, u8_at(b, 17) as usize)?,
                }
            }
            6 => {
                need(16)?;
                Entry::DentryDel {
                    name: name_at(16, u8_at(b, 8) as usize)?,
                }
            }
            7 => {
                let (name, value) = xattr()?;
                Entry::XattrSet { name, value }
            }
            8 => {
                need(16)?;
                Entry::XattrDel {
                    name: name_at(16, u8_at(b, 8) as usize)?,
                }
            }
            9 => {
                need(32)?;
                Entry::Copy(CopyEntry {
                    file_block: FileBlock(u64_at(b, 8)),
                    blocks: u32_at(b, 16),
                    tier: TierId(u8_at(b, 20)),
                    op: match u8_at(b, 21) {
                        0 => CopyOp::Add,
                        1 => CopyOp::Promote,
                        2 => CopyOp::Drop,
                        _ => return Err(FormatError::Invalid("copy operation")),
                    },
                    block: PhysBlock(u64_at(b, 24)),
                })
            }
            11 => {
                let (name, value) = xattr()?;
                Entry::XattrAppend { name, value }
            }
            10 => {
                need(24)?;
                let n = u16_at(b, 18) as usize;
                if n == 0 || n > SUMS_PER_ENTRY || 24 + 4 * n > len {
                    return Err(FormatError::Invalid("checksum count"));
                }
                Entry::Sums {
                    tier: TierId(u8_at(b, 16)),
                    block: PhysBlock(u64_at(b, 8)),
                    crcs: (0..n).map(|i| u32_at(b, 24 + 4 * i)).collect(),
                }
            }
            12 => {
                need(32)?;
                Entry::Shift {
                    file_block: FileBlock(u64_at(b, 8)),
                    blocks: u64_at(b, 16),
                    op: match u8_at(b, 24) {
                        0 => ShiftOp::Collapse,
                        1 => ShiftOp::Insert,
                        _ => return Err(FormatError::Invalid("shift operation")),
                    },
                }
            }
            _ => return Err(FormatError::Invalid("entry kind")),
        };
        Ok((e, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Entry> {
        vec![
            Entry::PageEnd,
            Entry::Attr(AttrEntry {
                mode: 0o100644,
                uid: 1,
                gid: 2,
                nlink: 3,
                size: 1 << 40,
                atime: -5,
                mtime: 6,
                ctime: 7,
                flags: 0,
            }),
            Entry::Write(WriteEntry {
                file_block: FileBlock(1 << 33),
                blocks: 256,
                tier: TierId(1),
                size_counter: 4,
                wflags: 0,
                block: PhysBlock(99),
                size_after: 12345,
                mtime: 8,
            }),
            Entry::Punch {
                file_block: FileBlock(3),
                blocks: u64::MAX / 4096,
            },
            Entry::DentryAdd {
                ino: 42,
                file_type: 8,
                name: b"hello.txt".to_vec(),
            },
            Entry::DentryAdd {
                ino: 43,
                file_type: 4,
                name: vec![b'x'; 255],
            },
            Entry::DentryDel {
                name: b"a".to_vec(),
            },
            Entry::XattrSet {
                name: b"user.k".to_vec(),
                value: vec![9; 3584],
            },
            Entry::XattrSet {
                name: b"user.empty".to_vec(),
                value: vec![],
            },
            Entry::XattrDel {
                name: b"trusted.x".to_vec(),
            },
            Entry::XattrAppend {
                name: b"user.big".to_vec(),
                value: vec![7; 3584],
            },
            Entry::Copy(CopyEntry {
                file_block: FileBlock(7),
                blocks: 128,
                tier: TierId(1),
                op: CopyOp::Promote,
                block: PhysBlock(1 << 30),
            }),
            Entry::Shift {
                file_block: FileBlock(5),
                blocks: 1 << 30,
                op: ShiftOp::Collapse,
            },
            Entry::Shift {
                file_block: FileBlock(0),
                blocks: 1,
                op: ShiftOp::Insert,
            },
            Entry::Sums {
                tier: TierId(2),
                block: PhysBlock(1 << 35),
                crcs: vec![0xdead_beef],
            },
            Entry::Sums {
                tier: TierId(1),
                block: PhysBlock(77),
                crcs: (0..SUMS_PER_ENTRY as u32)
                    .map(|i| i.wrapping_mul(0x9e37_79b9))
                    .collect(),
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_with_aligned_length() {
        for e in samples() {
            let b = e.encode();
            assert_eq!(b.len() % 8, 0);
            assert_eq!(b.len(), e.encoded_len());
            let (d, n) = Entry::decode(&b).unwrap();
            assert_eq!(d, e);
            assert_eq!(n, b.len());
        }
    }

    #[test]
    fn typed_fields_keep_their_byte_offsets() {
        let w = Entry::Write(WriteEntry {
            file_block: FileBlock(0x0102_0304_0506_0708),
            blocks: 5,
            tier: TierId(3),
            size_counter: 2,
            wflags: WRITE_FLAG_MOVED,
            block: PhysBlock(0x1112_1314_1516_1718),
            size_after: 9,
            mtime: 10,
        })
        .encode();
        assert_eq!(u64_at(&w, 8), 0x0102_0304_0506_0708);
        assert_eq!(u32_at(&w, 16), 5);
        assert_eq!(u8_at(&w, 20), 3);
        assert_eq!(u64_at(&w, 24), 0x1112_1314_1516_1718);
        let c = Entry::Copy(CopyEntry {
            file_block: FileBlock(11),
            blocks: 4,
            tier: TierId(2),
            op: CopyOp::Drop,
            block: PhysBlock(12),
        })
        .encode();
        assert_eq!((u64_at(&c, 8), u8_at(&c, 20), u64_at(&c, 24)), (11, 2, 12));
        let s = Entry::Sums {
            tier: TierId(4),
            block: PhysBlock(13),
            crcs: vec![1],
        }
        .encode();
        assert_eq!((u64_at(&s, 8), u8_at(&s, 16)), (13, 4));
        let p = Entry::Punch {
            file_block: FileBlock(14),
            blocks: 15,
        }
        .encode();
        assert_eq!((u64_at(&p, 8), u64_at(&p, 16)), (14, 15));
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        for e in samples() {
            let b = e.encode();
            for i in 0..b.len().min(64) {
                let mut c = b.clone();
                c[i] ^= 0x10;
                assert!(Entry::decode(&c).is_err(), "{e:?} byte {i}");
            }
        }
    }

    #[test]
    fn a_sums_entry_with_a_bad_count_is_refused() {
        let e = Entry::Sums {
            tier: TierId(1),
            block: PhysBlock(9),
            crcs: vec![1, 2, 3],
        };
        for bad in [0u16, 5, SUMS_PER_ENTRY as u16 + 1] {
            let mut b = e.encode();
            put_u16(&mut b, 18, bad);
            put_u32(&mut b, 4, 0);
            let c = crc(&b);
            put_u32(&mut b, 4, c);
            assert!(Entry::decode(&b).is_err(), "count {bad}");
        }
        assert_eq!(e.encoded_len(), 40);
    }

    #[test]
    fn largest_entries_fit_in_a_log_page() {
        let page = crate::BLOCK_SIZE as usize - crate::LOG_PAGE_HEADER as usize;
        let x = Entry::XattrSet {
            name: vec![b'n'; crate::XATTR_NAME_MAX],
            value: vec![0; crate::XATTR_CHUNK],
        };
        assert!(x.encoded_len() <= page);
        assert!(sums_entry_len(SUMS_PER_ENTRY) <= page);
    }
}
