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
//! *Online discard* (`-o discard`, the setting `discard_interval_ns`) runs
//! the same discard of every block tier in the background: the migration
//! thread, after a pass, when the interval has passed since the last
//! discard and a tier's space changed since then ([`Fs::maybe_discard_free`]).
//! Like ext4's and btrfs's `discard=async`, extents are discarded in batches
//! some time after they are freed, never on the free path itself; the
//! safety argument is `fstrim`'s, unchanged. A pass stops after
//! [`ONLINE_DISCARD_SLICE`] of requests and leaves the rest to the thread's
//! next pass.
//!
//! [`ExtentSpace::discard_free`]: crate::tier::ExtentSpace::discard_free

use crate::fs::Fs;
use crate::types::{errno, FsResult};
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::BLOCK_SIZE;

/// How long one online discard pass may issue requests before it yields
/// the migration thread (the rest follows at the thread's next pass, 100
/// ms later): a first pass over a large, empty device is otherwise one
/// long series of discards with migration waiting behind it.
pub const ONLINE_DISCARD_SLICE: Duration = Duration::from_millis(100);

/// What one `fstrim` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Bytes discarded (what `fstrim -v` prints).
    pub bytes: u64,
    /// Block tiers whose device or file system cannot discard (skipped).
    pub unsupported_tiers: u32,
}

/// What online discard has done since mount (`terrace status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiscardStatus {
    /// Least time between two background discards (ns); 0: online discard
    /// is off.
    pub interval_ns: u64,
    /// Background discards run.
    pub passes: u64,
    /// Bytes they discarded.
    pub bytes: u64,
    /// Background discards a device error stopped.
    pub errors: u64,
    /// Block tiers skipped because their device cannot discard.
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
        let report = self.discard_tiers(start, end, min_len.div_ceil(BLOCK_SIZE), 0, &|| false)?;
        if report.unsupported_tiers > 0 && !report.any_supported {
            return Err(errno(libc::EOPNOTSUPP));
        }
        Ok(TrimReport {
            bytes: report.bytes,
            unsupported_tiers: report.unsupported_tiers,
        })
    }

    /// Discards the free extents of the block tiers in `[start, end)` of
    /// the pool's address space, in runs of at least `min_blocks` blocks,
    /// skipping the tiers whose id bit is set in `skip`. A device's error
    /// stops it (what was discarded before stays discarded), and so does
    /// `stop`, between two device calls (`TiersDiscarded::cut`).
    fn discard_tiers(
        &self,
        start: u64,
        end: u64,
        min_blocks: u64,
        skip: u64,
        stop: &dyn Fn() -> bool,
    ) -> FsResult<TiersDiscarded> {
        let mut report = TiersDiscarded::default();
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
            if skip & tier_bit(t.id) != 0 {
                continue;
            }
            let media = &t.media;
            let mut unsupported = false;
            let (blocks, err, cut) =
                t.space
                    .discard_free_until(first..last, min_blocks, stop, &mut |b, n| {
                        media.discard(b, n)
                    });
            report.cut |= cut;
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
                report.unsupported_bits |= tier_bit(t.id);
            } else {
                report.any_supported = true;
            }
            if report.cut {
                break;
            }
        }
        Ok(report)
    }

    /// Online discard: when `discard_interval_ns` is set, at least that
    /// long has passed since the last background discard and the block
    /// tiers' space changed since, discards every free extent not
    /// discarded since it was freed (as `fstrim` does, see the module
    /// docs). Called by the migration thread after each pass. Returns the
    /// bytes discarded. A tier whose device cannot discard is noted once
    /// and skipped from then on; a device error is noted (once) and
    /// counted, and the pass is due again after the interval, whether or
    /// not the space changes. A pass cut at [`ONLINE_DISCARD_SLICE`] is
    /// due again at once (the thread's next pass goes on with it).
    pub fn maybe_discard_free(&self) -> u64 {
        let interval = self.settings.read().discard_interval_ns;
        if interval > 0
            && self.tiers.is_empty()
            && !self
                .online_discard
                .nothing_to_discard_said
                .swap(true, Ordering::Relaxed)
        {
            self.notice(
                "online discard is on (discard_interval_ns), but this pool has no SSD or \
                 HDD tier: there is nothing to discard (PM needs no discard)"
                    .into(),
            );
        }
        if interval == 0 || self.tiers.is_empty() || self.read_only || self.is_frozen() {
            return 0;
        }
        let look = self.tier_space_changes();
        {
            let mut last = self.online_discard.last.lock();
            if last.is_some_and(|(at, seen)| {
                seen == Some(look) || at.elapsed() < Duration::from_nanos(interval)
            }) {
                return 0;
            }
            *last = Some((Instant::now(), Some(look)));
        }
        let od = &self.online_discard;
        od.passes.fetch_add(1, Ordering::Relaxed);
        // Object tiers delete dead parts on their own (design.md §5n).
        let objects = self
            .tiers
            .iter()
            .filter(|t| t.kind == terrace_format::TierKind::S3)
            .fold(0, |bits, t| bits | tier_bit(t.id));
        let skip = od.unsupported.load(Ordering::Relaxed) | objects;
        // One slice of the migration thread's time: the first pass after a
        // mount has every free extent of the tiers to discard, which on a
        // large device is a long series of requests.
        let slice_end = Instant::now() + ONLINE_DISCARD_SLICE;
        let stop = || Instant::now() >= slice_end;
        match self.discard_tiers(0, self.trim_space_bytes(), 0, skip, &stop) {
            Ok(r) => {
                od.bytes.fetch_add(r.bytes, Ordering::Relaxed);
                if r.cut {
                    // The rest at the thread's next pass, not an interval on.
                    *od.last.lock() = None;
                }
                let new = r.unsupported_bits & !skip;
                if new != 0 {
                    od.unsupported.fetch_or(new, Ordering::Relaxed);
                    self.notice(format!(
                        "online discard: {} block tier(s) cannot discard (device or file \
                         system without discard support) and are skipped from now on",
                        new.count_ones()
                    ));
                }
                r.bytes
            }
            Err(e) => {
                // Due again after the interval, even if nothing changes.
                if let Some((_, seen)) = od.last.lock().as_mut() {
                    *seen = None;
                }
                if od.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    self.notice(format!(
                        "online discard failed: {e}; it is tried again after \
                         discard_interval_ns (data is not affected)"
                    ));
                }
                0
            }
        }
    }

    /// A number that moves with every allocation from and release into a
    /// block tier (cheap: no walk over extents).
    fn tier_space_changes(&self) -> u64 {
        self.tiers.iter().fold(0u64, |sum, t| {
            sum.wrapping_mul(31).wrapping_add(t.space.changes())
        })
    }

    /// What online discard has done since mount.
    pub fn discard_status(&self) -> DiscardStatus {
        let od = &self.online_discard;
        DiscardStatus {
            interval_ns: self.settings.read().discard_interval_ns,
            passes: od.passes.load(Ordering::Relaxed),
            bytes: od.bytes.load(Ordering::Relaxed),
            errors: od.errors.load(Ordering::Relaxed),
            unsupported_tiers: od.unsupported.load(Ordering::Relaxed).count_ones(),
        }
    }
}

/// What [`Fs::discard_tiers`] did.
#[derive(Default)]
struct TiersDiscarded {
    bytes: u64,
    unsupported_tiers: u32,
    /// Tier-id bits of the tiers that cannot discard.
    unsupported_bits: u64,
    /// Whether some tier in the range could discard.
    any_supported: bool,
    /// Whether `stop` cut it short, with free extents left to look at.
    cut: bool,
}

/// The bit of tier `id` in a set of tier ids.
fn tier_bit(id: terrace_format::TierId) -> u64 {
    1u64 << (id.get() % 64)
}
