//! `fstrim` (the `FITRIM` ioctl): tell the block tiers' devices which of
//! their blocks hold nothing the pool needs, so an SSD can erase them ahead
//! of time (less write amplification, less wear) and a tier that is a file
//! gives their space back to the file system under it (design.md §5q).
//!
//! What is discarded: whole free extents of block tiers. An extent is free
//! only once no durable commit references any of its blocks
//! ([`crate::tier::BlockTier::free`] is called after the commit that freed
//! them is durable), and it is discarded under the tier's space lock, so no
//! allocation can hand it out mid-discard ([`ExtentSpace::discard_free`]).
//! Hence a discard never drops data a crash could bring back nor data written
//! after it. Partly valid extents keep their dead blocks until extent
//! recycling empties them; PM is never discarded (it is memory).
//!
//! The address space `FITRIM` ranges refer to is the pool's, as `df` counts
//! it: PM's data blocks first (`[0, PM bytes)`, never discarded), then each
//! block tier in tier-id order, each as long as its device. Ranges are
//! validated as ext4 does: a length under one block, or a start at or
//! beyond the end, is EINVAL; a length reaching beyond the end is cut there.
//! An extent counts when it lies wholly inside the range.
//!
//! A free extent discarded since it was last allocated from is skipped by
//! the next `fstrim` (and counted nowhere), so a daily `fstrim` costs
//! little; after a mount every free extent is discarded once more.
//!
//! [`ExtentSpace::discard_free`]: crate::tier::ExtentSpace::discard_free

use crate::fs::Fs;
use crate::types::{errno, FsResult};
use std::io;
use terrace_format::BLOCK_SIZE;

/// What one `fstrim` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Bytes discarded (what `fstrim -v` prints).
    pub bytes: u64,
    /// Block tiers whose device or file system cannot discard (skipped).
    pub unsupported_tiers: u32,
}

impl Fs {
    /// The end of the `FITRIM` address space: PM's blocks and every block
    /// tier's device, in bytes (see the module docs).
    pub fn trim_space_bytes(&self) -> u64 {
        let pm = self.sb.lock().pool_blocks.saturating_mul(BLOCK_SIZE);
        self.tiers
            .iter()
            .fold(pm, |end, t| end.saturating_add(t.media.len()))
    }

    /// Discards the free extents of the block tiers that lie wholly in
    /// `[start, start + len)` of the pool's address space and in runs of
    /// free extents of at least `min_len` bytes (`FITRIM`; see the module
    /// docs for the address space and what is discarded).
    ///
    /// Errors: EINVAL for `len` under one block, a `start` at or past the
    /// end, or a `min_len` longer than every tier; EROFS on a read-only or
    /// frozen pool; EOPNOTSUPP when no block tier can discard (a PM-only
    /// pool, an object tier, a device without discard); a device's own
    /// error (EIO, ...) stops the trim and is returned.
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> FsResult<TrimReport> {
        let end_of_space = self.trim_space_bytes();
        if len < BLOCK_SIZE || start >= end_of_space {
            return Err(errno(libc::EINVAL));
        }
        if self.tiers.is_empty() {
            return Err(errno(libc::EOPNOTSUPP));
        }
        if self.read_only || self.is_frozen() {
            return Err(errno(libc::EROFS));
        }
        let largest = self.tiers.iter().map(|t| t.media.len()).max().unwrap_or(0);
        if min_len > largest {
            return Err(errno(libc::EINVAL));
        }
        let end = start.saturating_add(len).min(end_of_space);
        let min_blocks = min_len.div_ceil(BLOCK_SIZE);
        let mut report = TrimReport::default();
        let mut supported = 0u32;
        let mut base = self.sb.lock().pool_blocks.saturating_mul(BLOCK_SIZE);
        for t in self.tiers.iter() {
            let tier_len = t.media.len();
            let (tier_start, tier_end) = (base, base.saturating_add(tier_len));
            base = tier_end;
            let (a, b) = (start.max(tier_start), end.min(tier_end));
            let extent_bytes = t.space.extent_blocks() * BLOCK_SIZE;
            if a >= b || extent_bytes == 0 {
                continue;
            }
            // Extents wholly inside [a, b), in tier-local numbers.
            let first = (a - tier_start).div_ceil(extent_bytes);
            let last = (b - tier_start) / extent_bytes;
            let media = &t.media;
            let mut unsupported = false;
            let (blocks, err) = t
                .space
                .discard_free(first..last, min_blocks, &mut |b, n| media.discard(b, n));
            match err {
                Some(e) if e.kind() == io::ErrorKind::Unsupported => unsupported = true,
                // What was discarded before stays discarded; the caller
                // learns the device's errno (EIO, ...), as from ext4.
                Some(e) => return Err(e.raw_os_error().map_or(errno(libc::EIO), errno)),
                None => {}
            }
            report.bytes += blocks * BLOCK_SIZE;
            if unsupported {
                report.unsupported_tiers += 1;
            } else {
                supported += 1;
            }
        }
        if supported == 0 && report.unsupported_tiers > 0 {
            return Err(errno(libc::EOPNOTSUPP));
        }
        Ok(report)
    }
}
