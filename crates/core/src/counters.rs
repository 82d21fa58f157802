//! The statistics `terrace status` shows: plain atomic counters bumped by the
//! operations (relaxed: they are read for display only, never to decide).

use std::sync::atomic::AtomicU64;

/// Counters shown by `terrace status`.
#[derive(Default)]
pub struct Counters {
    /// write() calls.
    pub writes: AtomicU64,
    /// Bytes written by applications.
    pub bytes_written: AtomicU64,
    /// read() calls.
    pub reads: AtomicU64,
    /// Bytes read by applications.
    pub bytes_read: AtomicU64,
    /// Bytes copied into a page cache kept outside the pool (the kernel's,
    /// filled after a writer closed a file: [`crate::Fs::note_cache_fill`]).
    pub cache_fill_bytes: AtomicU64,
    /// Fills of such a cache that stored their whole file.
    pub cache_fills: AtomicU64,
    /// fsync/fdatasync calls.
    pub fsyncs: AtomicU64,
    /// Log commits.
    pub commits: AtomicU64,
    /// Commits that went through the journal.
    pub journaled_commits: AtomicU64,
    /// Logs compacted.
    pub compactions: AtomicU64,
    /// Writes the placement policy sent to PM.
    pub placed_pm: AtomicU64,
    /// Writes the placement policy sent to a block tier.
    pub placed_block: AtomicU64,
    /// Writes that went to another tier than the policy chose (it was full).
    pub placement_overflows: AtomicU64,
    /// Where writes went, per class of write.
    pub placement: crate::placement_stats::PlacementStats,
    /// Writes that had no room for a copy and went into the preallocated
    /// (zero-filled) blocks they cover instead (`ops_prealloc_write.rs`).
    pub prealloc_in_place_writes: AtomicU64,
    /// Blocks read from block tiers whose checksum matched.
    pub checksummed_reads: AtomicU64,
    /// Blocks read from block tiers whose checksum did not match (EIO).
    pub checksum_errors: AtomicU64,
    /// Writes or syncs of data to a block tier that failed with ENOSPC from
    /// the device itself (the file system holding a sparse image is full),
    /// not from Terrace's own allocator.
    pub device_full_errors: AtomicU64,
    /// Reads, writes or syncs of a block tier's device that failed with
    /// another error (EIO …).
    pub device_errors: AtomicU64,
}
