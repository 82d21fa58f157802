//! What a scan of a pool can find wrong (`recovery.rs`): why a pool cannot
//! be opened at all ([`OpenError`]), and the inconsistencies a scan lists
//! for mount to refuse and `fsck` to report and repair ([`Problem`]); the
//! paths of the inodes they concern are found in `problem_paths.rs`.

use crate::types::Ino;

/// Why a pool cannot be opened at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// No Terrace superblock.
    NotAPool(String),
    /// Written by a newer version.
    NewerVersion(u32),
    /// Damaged beyond what mount may fix by itself.
    Corrupt(String),
    /// Both superblock copies are unusable (fsck cannot rebuild them).
    BadSuperblock(String),
    /// A block tier that holds data was not given to mount.
    MissingTier(u8),
    /// A block tier was last used by another copy of the PM tier
    /// (`tier_epoch.rs`); the message names it.
    StaleTier(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotAPool(why) => write!(f, "not a Terrace pool: {why}"),
            OpenError::NewerVersion(v) => write!(
                f,
                "pool format version {v} is newer than this terrace supports ({}); upgrade terrace",
                terrace_format::FORMAT_VERSION
            ),
            OpenError::Corrupt(why) => {
                write!(f, "pool is corrupt: {why}; run `terrace fsck --repair`")
            }
            OpenError::BadSuperblock(why) => write!(f, "pool is corrupt: {why}"),
            OpenError::MissingTier(t) => {
                write!(f, "block tier {t} holds data but its device is missing")
            }
            OpenError::StaleTier(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// One inconsistency found by a scan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Problem {
    /// An in-use slot with a bad checksum or type; treated as free.
    BadSlot {
        /// Inode.
        ino: Ino,
        /// Detail.
        what: String,
    },
    /// An in-use slot that failed its check by one flipped bit, which the
    /// check corrects (`format::correct_one_flipped_bit`): the inode is read
    /// with it corrected, and `fsck --repair` writes the corrected slot.
    SlotBitFlip {
        /// Inode.
        ino: Ino,
        /// Byte of the slot the bit was in.
        byte: usize,
    },
    /// A log that cannot be read to its tail; replayed up to `safe_tail`.
    BadLog {
        /// Inode.
        ino: Ino,
        /// Detail.
        what: String,
        /// End of the last readable entry (0 = none).
        safe_tail: u64,
    },
    /// A word that links a PM log whose check failed: the slot's head or
    /// tail word (the inode is left out, as a bad slot), or the `next` word
    /// of one of its pages (the log is replayed up to `safe_tail`). `fsck
    /// --repair` corrects the word when one a few bits away lets the log
    /// walk to its tail (`pointer_repair.rs`), else frees the slot (head or
    /// tail) or truncates the log (`next`).
    BadLogPointer {
        /// Inode.
        ino: Ino,
        /// Which word.
        word: LogWord,
        /// End of the last readable entry (0 = none).
        safe_tail: u64,
    },
    /// A directory entry naming a free or broken inode.
    DanglingEntry {
        /// Directory.
        dir: Ino,
        /// Name.
        name: String,
        /// Target.
        target: Ino,
    },
    /// A directory reached from two places.
    DirectoryLinkedTwice {
        /// Directory.
        ino: Ino,
    },
    /// Stored link count differs from the number of names.
    LinkCount {
        /// Inode.
        ino: Ino,
        /// Stored.
        stored: u32,
        /// Counted.
        counted: u32,
    },
    /// A data extent outside the pool, or a block owned twice.
    BlockOwnership {
        /// Inode.
        ino: Ino,
        /// Detail.
        what: String,
    },
    /// The root directory is missing or not a directory.
    BadRoot,
    /// A log that migration moved to a block tier whose device was not given.
    LogOnMissingTier {
        /// Inode.
        ino: Ino,
        /// Tier.
        tier: u8,
    },
    /// A journal slot with unreadable records.
    BadJournal {
        /// Slot index.
        slot: usize,
        /// Detail.
        what: String,
    },
}

/// A word that links a PM log (format version 12 gives each a check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LogWord {
    /// The slot's head word.
    Head,
    /// The slot's tail word.
    Tail,
    /// The `next` word at this PM offset, in one of the log's pages.
    Next(u64),
}

impl std::fmt::Display for LogWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogWord::Head => write!(f, "head word"),
            LogWord::Tail => write!(f, "tail word"),
            LogWord::Next(at) => write!(f, "next pointer at {at:#x}"),
        }
    }
}

impl Problem {
    /// True when mount must refuse the pool.
    pub fn blocks_mount(&self) -> bool {
        !matches!(self, Problem::LinkCount { .. })
    }

    /// True when even a read-only mount must refuse the pool. One that
    /// writes nothing can serve a pool whose damage is confined to some
    /// inodes: their logs could not be read whole (it serves what was
    /// read and refuses their data, [`Problem::quarantined`]), or their
    /// slots were left out (their names lead nowhere: EIO). Damage to the
    /// tree, the journal or block ownership is refused: what the mount
    /// would show cannot be trusted.
    pub fn blocks_read_only_mount(&self) -> bool {
        !matches!(
            self,
            Problem::LinkCount { .. }
                | Problem::BadLog { .. }
                | Problem::BadLogPointer { .. }
                | Problem::LogOnMissingTier { .. }
                | Problem::BadSlot { .. }
                | Problem::SlotBitFlip { .. }
                | Problem::DanglingEntry { .. }
        )
    }

    /// The inode a read-only mount keeps whose data it refuses (EIO): its
    /// log could not be read whole, so what it holds may be incomplete.
    pub fn quarantined(&self) -> Option<Ino> {
        match self {
            Problem::BadLog { ino, .. }
            | Problem::LogOnMissingTier { ino, .. }
            | Problem::BadLogPointer {
                ino,
                word: LogWord::Next(_),
                ..
            } => Some(*ino),
            _ => None,
        }
    }

    /// The inode the problem is about, if one (for naming its path).
    pub fn ino(&self) -> Option<Ino> {
        match self {
            Problem::BadSlot { ino, .. }
            | Problem::SlotBitFlip { ino, .. }
            | Problem::BadLog { ino, .. }
            | Problem::BadLogPointer { ino, .. }
            | Problem::DirectoryLinkedTwice { ino }
            | Problem::LinkCount { ino, .. }
            | Problem::BlockOwnership { ino, .. }
            | Problem::LogOnMissingTier { ino, .. } => Some(*ino),
            Problem::DanglingEntry { dir, .. } => Some(*dir),
            Problem::BadRoot | Problem::BadJournal { .. } => None,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::BadSlot { ino, what } => write!(f, "inode {ino}: {what}"),
            Problem::SlotBitFlip { ino, byte } => write!(
                f,
                "inode {ino}: one bit of its slot (byte {byte}) flipped; the slot's check corrects it"
            ),
            Problem::BadLog { ino, what, .. } => write!(f, "inode {ino}: log unreadable: {what}"),
            Problem::BadLogPointer { ino, word, .. } => {
                write!(
                    f,
                    "inode {ino}: the log {word} is damaged (its check fails)"
                )
            }
            Problem::DanglingEntry { dir, name, target } => {
                write!(
                    f,
                    "directory {dir}: entry {name:?} points to missing inode {target}"
                )
            }
            Problem::DirectoryLinkedTwice { ino } => {
                write!(f, "directory {ino} has more than one parent")
            }
            Problem::LinkCount {
                ino,
                stored,
                counted,
            } => {
                write!(f, "inode {ino}: link count {stored}, but {counted} names")
            }
            Problem::BlockOwnership { ino, what } => write!(f, "inode {ino}: {what}"),
            Problem::BadRoot => write!(f, "the root directory is missing"),
            Problem::BadJournal { slot, what } => write!(f, "journal slot {slot}: {what}"),
            Problem::LogOnMissingTier { ino, tier } => write!(
                f,
                "inode {ino}: its log is on block tier {tier}, which was not opened (missing, or refused)"
            ),
        }
    }
}
