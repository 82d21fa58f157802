//! Migration between tiers (Ziggurat §5): the profiler's cold lists, the
//! migration pass, and the mechanism that moves data. Their state
//! ([`Migrator`], held by `Fs`) is `state.rs`; the rest is `impl Fs`.
//!
//! # Profiler
//! Every regular file with data is in the cold lists, keyed by its average
//! modification time (amtime, kept incrementally in [`Inode::amtime`] as write
//! entries apply). The lists are sharded by inode number
//! (`terrace_policy::cold_list`), one mutex per shard, so writers to different
//! files rarely meet on a lock. There is one list per tier, as in Ziggurat: a
//! file is in the list of each block tier its data is on, and in PM's two
//! (PM data without and with a clean copy), so a drain of a tier only ever
//! looks at files it can move (one list over all tiers starved the SSD's
//! drain once its 256 coldest files were all on S3: design §5n "The
//! cascade").
//!
//! # Mechanism ([`Fs::migrate_groups`]) — crash-safe at every step
//! 1. Under the inode lock, capture the pieces of the group still on the source
//!    tier (file block, physical block, mtime, counter). Release the lock.
//! 2. Copy the data to freshly allocated, contiguous blocks on the target tier
//!    (one sequential request for a block tier), and make it durable.
//! 3. Under the inode lock again, keep only the pieces whose mapping has not
//!    changed (a foreground write or truncate wins: its pieces are dropped, not
//!    waited for), and append one write entry per piece with the new location
//!    and [`WRITE_FLAG_MOVED`] (size and times unchanged, the piece's mtime
//!    kept). **Commit point: the log tail store**, as for any write.
//! 4. Apply to DRAM; the old blocks are freed after the commit, unused new
//!    blocks are released.
//!
//! A crash before step 3's tail store leaves the old mapping and the new blocks
//! unreferenced (free at the next mount, where allocators are rebuilt from the
//! logs); after it, the new mapping, with the old blocks free. Readers are
//! never blocked by the copy: the lock is held only to capture and to commit.
//!
//! # When ([`Fs::migration_pass`])
//! A pass drains each tier that passes its threshold into the next tier
//! (PM → first block tier → next block tier: cascade), coldest files first,
//! until the tier is below its threshold; a file's chosen entries are grouped
//! into `group_migration_bytes` chunks. When reads dominate and PM is below its
//! low mark, the hottest block-tier files move up to PM (reverse migration).
//! Then block tiers short of free extents are cleaned (`clean`). One
//! coordinating thread runs a pass every 100 ms (and sleeps otherwise); while
//! draining a tier it spreads the coldest files over `migration_threads`
//! workers (default one per core), one whole file per worker at a time.
//!
//! [`Inode::amtime`]: crate::inode::Inode::amtime
//! [`WRITE_FLAG_MOVED`]: terrace_format::WRITE_FLAG_MOVED

use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::lock_order::{Mutex, Rank};
use crate::types::{errno, FileType, FsResult, Ino};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{
    CopyEntry, CopyOp, Entry, FileBlock, PhysBlock, TierId, WriteEntry, BLOCK_SIZE,
    WRITE_FLAG_MOVED,
};
use terrace_policy::cold_list::{shard_index, Shard};
use terrace_policy::migration::{
    self as mig, EntrySnapshot, FileSnapshot, Group, IoCounters, MigrationNeed,
};

const BS: u64 = BLOCK_SIZE;

mod batch;
mod buffers;
mod cold;
mod defrag;
mod files;
mod mover;
mod nvmfs;
mod pass;
mod rescue;
mod reverse;
pub(crate) mod state;
mod status;
#[cfg(test)]
mod tests;
mod thread;

pub(crate) use batch::MoveBatch;
pub use batch::MOVE_SYNC_WINDOW_BYTES;
pub(crate) use buffers::PooledBuf;
pub use defrag::{Defragmented, DEFRAG_RUN_BYTES};
pub use files::NoRoomOnTier;
pub use state::Migrator;
use state::{Stall, STALL_LOG_AFTER};
use status::snapshot_entries;
pub use status::{MigrationStatus, TierMigration};

/// What [`Fs::move_range`] does with the data it captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Move to the target tier (a clean copy already there is promoted: no
    /// data is copied for it).
    Move,
    /// Write a clean copy to the target tier and keep the data where it is
    /// (NVMFS flush: the page becomes clean).
    Copy,
    /// Drop the source blocks of data whose clean copy is on the target tier
    /// (the copy becomes the only location; no data is copied).
    Evict,
    /// Forget clean copies stored on the source tier (extent recycling).
    DropCopy,
}
