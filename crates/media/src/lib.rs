//! Media behind a trait (redb's `StorageBackend` in spirit).
//!
//! [`PmMedia`] is byte-addressable persistent memory: stores become durable only
//! after they are flushed ([`PmMedia::flush`]) and a fence ([`PmMedia::fence`])
//! orders them. The file system core reaches the PM tier only through this trait;
//! it never assumes that a store is durable before `flush` + `fence`.
//!
//! Implementations:
//! - `pm::PmFile`: a file mapped with `mmap(MAP_SHARED)` (`MAP_SYNC` on DAX),
//!   persisted with clwb/clflushopt/clflush + sfence (chosen at run time), plus
//!   `msync` when the file is on an ordinary (non-DAX, non-tmpfs) file system.
//! - `mem::MemMedia`: a plain in-memory buffer (unit tests).
//! - `crash::CrashMedia`: records stores, flushes and fences and builds crash
//!   images in which unflushed cache lines are lost (all, or a random subset).
//! - block tiers ([`BlockMedia`], 4 KiB blocks, fallible I/O): `BlockFile`
//!   (a file or block device, O_DIRECT when the file system honours it),
//!   `MemBlock`, `CrashBlock` (unsynced blocks lost at a crash) and `FaultBlock`
//!   (EIO after a countdown), and `PerWriterSync`, which the file system
//!   puts around every tier so that a failed sync reaches every writer whose
//!   unsynced data it may have lost (Linux reports it to one `fsync` only),
//!   and `Closable`, which closes a tier's media (removed from a mounted
//!   pool) while references to it are still shared.
//! - [`ObjectMedia`]: a block tier in an S3-compatible object store (parts
//!   uploaded at `sync`, an index rebuilt from their keys; `object/`).
//! - `fault::FaultMedia`: wraps another media and poisons ranges, so reads of
//!   them return a recognisable pattern (PM stores cannot fail; media errors
//!   show up as bad loads).
//!
//! Lock order (docs/design.md §4a, "Locks of the media crate"): a media never
//! calls back into the file system, so its locks sit below every lock of
//! core. Inside this crate only these nest, each one way: an
//! `ObjectMedia`'s `sync_lock` → `state`; a `Bucket`'s `network` → `store`;
//! a `PmFile`'s `unsynced` → `sync_error`; a `Closable`'s `inner` (read
//! across every request) → every lock of the media it wraps. Of these
//! `sync_lock` is held across requests to an object store (one upload at a
//! time), and `inner`'s read side across every request.

pub mod block;
pub mod block_close;
pub mod block_crash;
pub mod block_fault;
pub mod block_file;
pub mod block_sync;
mod countdown;
pub mod crash;
pub mod fault;
mod media_file;
pub mod mem;
pub mod object;
pub mod persist;
pub mod pm;
pub mod replay;

pub use block::{
    check_block_range, AlignedBuf, BlockMedia, BlockStats, BlockStatsCounter, MemBlock, BLOCK_SIZE,
    DISCARDED_BYTE, HUGE_BUF_BYTES,
};
pub use block_close::Closable;
pub use block_crash::{BlockCrashState, BlockEvent, BlockLoss, BlockTrace, CrashBlock};
pub use block_fault::{FaultBlock, InjectedFaults};
pub use block_file::{BlockFile, DirectIo};
pub use block_sync::PerWriterSync;
pub use crash::{CrashEvent, CrashMedia, CrashState, CrashTrace, LossMode};
pub use fault::{FaultMedia, POISON_BYTE};
pub use mem::MemMedia;
pub use object::{NetworkParams, ObjectConfig, ObjectMedia, ObjectStats, PartInfo, SweepReport};
pub use pm::{PmFile, PmKind};
pub use replay::{EventClock, Replay, Trace};

/// Size of a CPU cache line: the unit in which stores reach persistence.
pub const CACHE_LINE: u64 = 64;

/// Byte-addressable persistent memory.
///
/// Contract:
/// - `read`/`write` access `[off, off + len)`, which must lie inside `len()`;
///   out-of-range access is a bug in the caller and panics.
/// - `write` is a store: visible to later reads at once, durable only after a
///   `flush` covering it followed by a `fence`.
/// - `store_u64` on an 8-aligned offset is atomic with respect to crashes: after a
///   crash the word holds either its old or its new value, never a mix.
/// - Concurrent calls on disjoint ranges are allowed; callers serialise
///   overlapping access.
pub trait PmMedia: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True when the media has zero length.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `buf.len()` bytes at `off` into `buf`.
    fn read(&self, off: u64, buf: &mut [u8]);
    /// Stores `data` at `off` (not yet durable).
    fn write(&self, off: u64, data: &[u8]);
    /// Atomically stores an aligned 8-byte little-endian word (not yet durable).
    fn store_u64(&self, off: u64, value: u64);
    /// Writes back the cache lines covering `[off, off + len)`.
    fn flush(&self, off: u64, len: u64);
    /// Orders: every line flushed before the fence is durable before any store after it.
    fn fence(&self);
    /// `flush` then `fence`.
    fn persist(&self, off: u64, len: u64) {
        self.flush(off, len);
        self.fence();
    }
    /// Reads an 8-byte little-endian word.
    fn load_u64(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    /// Makes everything written so far durable on media where `fence` alone is not
    /// enough (an mmap of an ordinary disk file needs msync). Called by fsync and
    /// unmount; a no-op on DAX, tmpfs and test media.
    fn sync_all(&self) -> std::io::Result<()> {
        Ok(())
    }
    /// Err once a `fence` failed to make flushed stores durable (an `msync`
    /// of a page-cache mapping failed): from then on every call, and every
    /// `sync_all`, fails until the media is opened again — which of the
    /// stores since was lost is unknown, so nothing after may be called
    /// durable. Always Ok where `fence_is_durable` (nothing can fail).
    fn fence_error(&self) -> std::io::Result<()> {
        Ok(())
    }
    /// True when `fence` alone makes flushed stores durable and `sync_all`
    /// has nothing to add (no msync to issue, no deferred error to report):
    /// DAX, tmpfs and test media. False for a page-cache mapping of an
    /// ordinary file or block device. Lets the file system tell the kernel
    /// that `fsync` needs no request (see `Fs::fsync_is_noop`).
    fn fence_is_durable(&self) -> bool {
        true
    }
    /// One-line description for status output (path, kind, flush instruction).
    fn describe(&self) -> String;
}
