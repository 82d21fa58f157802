//! Rewriting a file's fragmented data on a block tier into consecutive
//! blocks (`terrace migrate --defragment`, design.md §5d "Defragmenting").
//!
//! Block tiers never overwrite in place (NVMFS's extents): a file written
//! randomly and migrated in pieces ends up scattered over the tier, and a
//! sequential read of it is random on the device (measured: a 1 GiB file
//! overwritten at random 4 KiB offsets and migrated lay in 72,734 runs on
//! the SSD and read at ~100 MB/s). This rewrites the file's data on one tier
//! in file order into fresh blocks, with the migration mechanism's crash
//! safety: each window is copied, synced and committed as a move within the
//! tier (the extent-recycling move), and a piece a foreground write changed
//! meanwhile is dropped from the commit, not overwritten.
//!
//! A file is rewritten only when it is fragmented: its data on the tier in
//! runs shorter than [`DEFRAG_RUN_BYTES`] on average. The tier must have
//! room for a second copy of that data (its old blocks become dead, for
//! extent recycling to reclaim); otherwise the file is left as it was.

use super::files::Commanded;
use super::*;

/// A file whose data on a tier lies in runs of at least this much on
/// average is left alone. A rewrite leaves runs of at least an extent
/// (512 KiB by default) on average: its allocations append to the open
/// extent and then take free extents, which need not be adjacent; so a
/// rewritten file is not rewritten again.
pub const DEFRAG_RUN_BYTES: u64 = 256 << 10;

/// Physically consecutive runs of `ino`'s data on `tier` in file order (an
/// entry continues the run before it when its data follows that run's on
/// the device; holes in the file do not count), its blocks there, and the
/// file ranges that data covers.
pub(super) fn runs_on(i: &Inode, tier: TierId) -> (u64, u64, Vec<(FileBlock, u64)>) {
    let mut runs = 0u64;
    let mut blocks = 0u64;
    let mut ranges: Vec<(FileBlock, u64)> = Vec::new();
    let mut device_end: Option<u64> = None;
    for (fb, e) in i.extents.iter().filter(|(_, e)| e.tier == tier) {
        let (f, d) = (fb.get(), e.block.get());
        if device_end != Some(d) {
            runs += 1;
        }
        device_end = Some(d + e.blocks);
        blocks += e.blocks;
        match ranges.last_mut() {
            Some((s, n)) if s.get() + *n == f => *n += e.blocks,
            _ => ranges.push((fb, e.blocks)),
        }
    }
    (runs, blocks, ranges)
}

/// What [`Fs::defragment_files`] did to one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defragmented {
    /// Runs of its data on the tier before.
    pub runs_before: u64,
    /// And after.
    pub runs_after: u64,
    /// Bytes rewritten (0: it was not fragmented).
    pub bytes: u64,
}

impl Fs {
    /// Runs of `ino`'s data on tier `tier` and its bytes there, as
    /// [`Fs::defragment_files`] counts them (for tests; `terrace where`
    /// counts the same from the extent rows it gets).
    pub fn runs_on_tier(&self, ino: Ino, tier: u8) -> FsResult<(u64, u64)> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        let (runs, blocks, _) = runs_on(i, TierId(tier));
        Ok((runs, blocks * BS))
    }

    /// Rewrites the fragmented data of each of `inos` on block tier `tier`
    /// (a tier id) into consecutive blocks (see the module docs). Returns
    /// what was done to each file and the files that failed; `Err` for a
    /// tier that is not a block tier of the pool.
    #[allow(clippy::type_complexity)]
    pub fn defragment_files(
        &self,
        inos: &[Ino],
        tier: u8,
    ) -> FsResult<(Vec<(Ino, Defragmented)>, Vec<(Ino, std::io::Error)>)> {
        let tier = TierId(tier);
        let Ok(t) = self.tier(tier) else {
            return Err(errno(libc::EINVAL));
        };
        if t.kind == terrace_format::TierKind::S3 {
            return Err(errno(libc::EINVAL));
        }
        if self.read_only || self.is_frozen() {
            return Err(errno(libc::EROFS));
        }
        let _claim = Commanded::claim(self, inos);
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for &ino in inos {
            if self.migrator.worker.stopping() {
                break;
            }
            match self.defragment_file(ino, tier) {
                Ok(d) => done.push((ino, d)),
                Err(e) => failed.push((ino, e)),
            }
        }
        Ok((done, failed))
    }

    fn defragment_file(&self, ino: Ino, tier: TierId) -> FsResult<Defragmented> {
        // Cached writes first: what is rewritten is the file's current data.
        if let Err(e) = self.write_back_part(ino, u64::MAX) {
            if e.raw_os_error() != Some(libc::ENOSPC) {
                return Err(e);
            }
        }
        let (runs_before, blocks, ranges) = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            if i.kind != FileType::Regular {
                return Err(errno(libc::EINVAL));
            }
            runs_on(i, tier)
        };
        let mut report = Defragmented {
            runs_before,
            runs_after: runs_before,
            bytes: 0,
        };
        if runs_before <= 1 || blocks * BS / runs_before >= DEFRAG_RUN_BYTES {
            return Ok(report);
        }
        // Room for a second copy, beyond the tier's recycling reserve (the
        // moves may take it: they are the recycling kind).
        let t = self.tier(tier)?;
        let reserve = 2 * t.space.extent_blocks();
        let room = t.room_blocks().saturating_sub(reserve);
        if room < blocks {
            return Err(std::io::Error::other(NoRoomOnTier {
                tier: t.kind.name(),
                needed: blocks * BS,
                room: room * BS,
                forced_percent: None,
            }));
        }
        let params = self.settings.read().migration_params();
        let gb = params.group_blocks();
        let window = MOVE_SYNC_WINDOW_BYTES.max(gb * BS);
        // One batch, one worker, in file order: consecutive allocations
        // append to the open extent, so the file's data lands in order.
        let mut batch = MoveBatch::new(self, window);
        let mut result = Ok(());
        'ranges: for (start, n) in ranges {
            let mut at = 0;
            while at < n {
                let k = (n - at).min(gb);
                if let Err(e) = batch.add(ino, tier, tier, &[(start + at, k)], Mode::Move) {
                    result = Err(e);
                    break 'ranges;
                }
                at += k;
            }
        }
        let (moved, r) = batch.finish();
        report.bytes = moved;
        {
            let g = self.lock(ino)?;
            if let Some(i) = g.as_ref() {
                report.runs_after = runs_on(i, tier).0;
            }
        }
        result.and(r).map(|()| report)
    }
}
