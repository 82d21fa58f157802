//! The Terrace on-media format: every byte offset of the persistent-memory (PM)
//! tier and of the block-tier headers, in one place.
//!
//! `docs/design.md` describes the same layout in prose; the two must agree. The
//! core, `mkfs` and `fsck` all encode and decode through this module, and no other
//! module computes an offset into the media by itself.
//!
//! # Layout of the PM tier (all integers little-endian)
//!
//! | blocks                       | content                                   |
//! |------------------------------|-------------------------------------------|
//! | 0                            | superblock, copy A                        |
//! | 1                            | superblock, copy B                        |
//! | 2                            | journal area: [`JOURNAL_SLOTS`] undo slots |
//! | 3 .. 3 + inode_blocks        | inode table, [`INODE_SIZE`] bytes a slot  |
//! | pool_start .. end            | page pool: log pages and data pages       |
//!
//! # Invariants
//! - A log's committed content is exactly the entries between `log_head` and
//!   `log_tail` of its inode slot; bytes beyond the tail are garbage.
//! - `log_tail` is the commit word of every single-inode operation: one aligned
//!   8-byte store, flushed and fenced after everything it makes visible.
//! - Every entry carries a crc32c over its own bytes (crc field taken as zero).
//! - A block of the page pool is in use iff it is a page of a live inode's log or
//!   is mapped by a live write entry; allocation state is never stored, it is
//!   rebuilt at mount.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod entry;
pub mod inode;
pub mod journal;
pub mod log_blob;
pub mod superblock;
pub mod tier;
pub mod units;

pub use entry::*;
pub use inode::*;
pub use journal::*;
pub use log_blob::*;
pub use superblock::*;
pub use tier::*;
pub use units::{FileBlock, PhysBlock, TierId};

/// Size of a block: the unit of allocation on every tier, of data pages and log pages.
pub const BLOCK_SIZE: u64 = 4096;
/// Current on-media format version. Bump it, and add a line to the version log in
/// docs/design.md, on any change of layout or meaning.
pub const FORMAT_VERSION: u32 = 12;
/// Longest file name, in bytes (as ext4).
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes (PATH_MAX - 1).
pub const SYMLINK_MAX: usize = 4095;
/// Longest xattr name, in bytes.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest xattr value, in bytes: the VFS limit (`XATTR_SIZE_MAX`). Values
/// longer than [`XATTR_CHUNK`] are logged as an XattrSet entry followed by
/// XattrAppend entries in the same commit (format 5).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Most value bytes one XattrSet or XattrAppend entry carries (with the
/// longest name it still fits in a log page).
pub const XATTR_CHUNK: usize = 3584;
/// Inode number of the root directory. Slot 0 is never used.
pub const ROOT_INO: u64 = 1;

/// Block index of superblock copy A.
pub const SUPERBLOCK_A_BLOCK: u64 = 0;
/// Block index of superblock copy B.
pub const SUPERBLOCK_B_BLOCK: u64 = 1;
/// Block index of the journal area.
pub const JOURNAL_BLOCK: u64 = 2;
/// Block index of the first inode-table block.
pub const INODE_TABLE_BLOCK: u64 = 3;

/// crc32c of `bytes`.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Errors found while decoding media bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The magic number does not match: not a Terrace structure.
    BadMagic,
    /// The checksum does not match the content.
    BadChecksum,
    /// The structure was written by a newer format version.
    UnsupportedVersion(u32),
    /// A field holds a value that cannot be right.
    Invalid(&'static str),
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::BadMagic => write!(f, "bad magic number"),
            FormatError::BadChecksum => write!(f, "checksum mismatch"),
            FormatError::UnsupportedVersion(v) => write!(
                f,
                "format version {v} is newer than this build supports ({FORMAT_VERSION})"
            ),
            FormatError::Invalid(what) => write!(f, "invalid field: {what}"),
        }
    }
}

impl std::error::Error for FormatError {}

/// Little-endian field access on a byte slice. Offsets are the `const`s of each
/// structure's module, so a layout change is one edit.
pub mod le {
    /// Reads a u8.
    pub fn u8_at(b: &[u8], off: usize) -> u8 {
        b[off]
    }
    /// Reads a little-endian u16.
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_le_bytes([b[off], b[off + 1]])
    }
    /// Reads a little-endian u32.
    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
    }
    /// Reads a little-endian u64.
    pub fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
    }
    /// Reads a little-endian i64.
    pub fn i64_at(b: &[u8], off: usize) -> i64 {
        u64_at(b, off) as i64
    }
    /// Writes a u8.
    pub fn put_u8(b: &mut [u8], off: usize, v: u8) {
        b[off] = v;
    }
    /// Writes a little-endian u16.
    pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian u32.
    pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian u64.
    pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian i64.
    pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
        put_u64(b, off, v as u64);
    }
}
