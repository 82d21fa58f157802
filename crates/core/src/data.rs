//! Where file data goes and how it is read back, across tiers.
//!
//! Placement: `write` asks the placement policy named in the settings
//! (`terrace-policy`, Ziggurat's by default) with the file's synchronicity
//! prediction and the write-size counter; the chosen tier is used when it has
//! room, else PM (beyond a reserve kept for logs), else the first block tier
//! with room. Data on a block tier is written and synced before the write entry
//! that references it commits. Until the DRAM page cache lands, "asynchronous,
//! via the cache" writes are written through like synchronous ones.

use crate::alloc::Run;
use crate::fs::Fs;
use crate::types::{errno, FsResult};
use terrace_format::BLOCK_SIZE;

const BS: u64 = BLOCK_SIZE;

/// Blocks allocated for new data on one tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRuns {
    /// Tier id (0 = PM).
    pub tier: u8,
    /// Runs of blocks on that tier.
    pub runs: Vec<Run>,
}

impl Fs {
    /// PM blocks kept free for log pages: data stops going to PM below this.
    pub(crate) fn pm_reserve_blocks(&self) -> u64 {
        (self.alloc.total() / 64).max(32)
    }

    /// Allocates `n` blocks on the tier `want` if it has room, else wherever
    /// there is room (PM first). ENOSPC only when no tier has room.
    pub(crate) fn alloc_data_on(&self, want: u8, n: u64) -> FsResult<DataRuns> {
        if want != 0 {
            if let Some(t) = self.tiers.iter().find(|t| t.id == want) {
                if let Some(runs) = t.space.alloc(n) {
                    return Ok(DataRuns { tier: want, runs });
                }
            }
        }
        let d = self.alloc_data(n)?;
        if d.tier != want {
            self.counters
                .placement_overflows
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(d)
    }

    /// Free PM bytes available to data (the log reserve excluded).
    pub(crate) fn pm_data_free_bytes(&self) -> u64 {
        self.alloc.free().saturating_sub(self.pm_reserve_blocks()) * BS
    }

    /// Allocates `n` blocks for file data (all on one tier), PM first. ENOSPC
    /// only when no tier has room.
    pub(crate) fn alloc_data(&self, n: u64) -> FsResult<DataRuns> {
        if self.alloc.free() >= n + self.pm_reserve_blocks() || self.tiers.is_empty() {
            if let Some(runs) = self.alloc.alloc(n) {
                return Ok(DataRuns { tier: 0, runs });
            }
        }
        for t in &self.tiers {
            if let Some(runs) = t.space.alloc(n) {
                return Ok(DataRuns { tier: t.id, runs });
            }
        }
        Err(errno(libc::ENOSPC))
    }

    /// Writes `buf` (whole blocks, in run order) and makes it durable before
    /// anything may reference it: flushed on PM (the commit's fence orders it),
    /// written and synced on a block tier.
    pub(crate) fn store_data(&self, d: &DataRuns, buf: &[u8]) -> FsResult<()> {
        self.write_data_unsynced(d, buf)?;
        if d.tier != 0 {
            self.tier(d.tier)?.media.sync()?;
        }
        Ok(())
    }

    /// [`Fs::store_data`] without the final sync of a block tier: the data is
    /// written but not yet durable there (the caller syncs the tier before it
    /// commits an entry that points at it). PM data is flushed as usual.
    pub(crate) fn write_data_unsynced(&self, d: &DataRuns, buf: &[u8]) -> FsResult<()> {
        let mut at = 0usize;
        if d.tier == 0 {
            for &(b, n) in &d.runs {
                let len = (n * BS) as usize;
                self.media.write(b * BS, &buf[at..at + len]);
                self.media.flush(b * BS, n * BS);
                self.pm_io.record_write(len as u64);
                at += len;
            }
            return Ok(());
        }
        let t = self.tier(d.tier)?;
        for &(b, n) in &d.runs {
            let len = (n * BS) as usize;
            t.media.write_blocks(b, &buf[at..at + len])?;
            at += len;
        }
        Ok(())
    }

    /// Returns allocated but unused blocks.
    pub(crate) fn release_data(&self, d: DataRuns) {
        self.free_runs(d.runs.into_iter().map(|(b, n)| (d.tier, b, n)).collect());
    }

    /// The mounted block tier `id`.
    pub(crate) fn tier(&self, id: u8) -> FsResult<&crate::tier::BlockTier> {
        self.tiers
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| errno(libc::EIO))
    }

    /// Reads `dst.len()` bytes starting `off_in_block` bytes into block `block`
    /// of tier `tier`.
    pub(crate) fn read_data(
        &self,
        tier: u8,
        block: u64,
        off_in_block: u64,
        dst: &mut [u8],
    ) -> FsResult<()> {
        if tier == 0 {
            self.media.read(block * BS + off_in_block, dst);
            self.pm_io.record_read(dst.len() as u64);
            return Ok(());
        }
        let t = self.tier(tier)?;
        let first = block + off_in_block / BS;
        let skip = (off_in_block % BS) as usize;
        let nblocks = (skip + dst.len()).div_ceil(BS as usize);
        let mut buf = vec![0u8; nblocks * BS as usize];
        t.media.read_blocks(first, &mut buf)?;
        dst.copy_from_slice(&buf[skip..skip + dst.len()]);
        Ok(())
    }

    /// Reads `dst.len()` bytes starting `off_in_block` bytes into `block` of
    /// block tier `tier`, through the DRAM cache. `left` is how many blocks of
    /// the write entry remain from `block` on: a miss reads up to
    /// `max_read_unit_bytes` of them (at least what `dst` needs) — only what
    /// `dst` needs when `read_ahead` is off — and caches them.
    pub(crate) fn read_block_tier(
        &self,
        tier: u8,
        block: u64,
        left: u64,
        off_in_block: u64,
        dst: &mut [u8],
        read_ahead: bool,
    ) -> FsResult<()> {
        let unit = if read_ahead {
            (self.settings.read().max_read_unit_bytes / BS).max(1)
        } else {
            1
        };
        let mut blk = block + off_in_block / BS;
        let mut left = left - off_in_block / BS;
        let mut skip = (off_in_block % BS) as usize;
        let mut at = 0usize;
        while at < dst.len() {
            let want = (dst.len() - at).min(BS as usize - skip);
            if let Some(p) = self.cache.get_clean(tier, blk) {
                dst[at..at + want].copy_from_slice(&p[skip..skip + want]);
                at += want;
                skip = 0;
                blk += 1;
                left = left.saturating_sub(1);
                continue;
            }
            let need = (skip + dst.len() - at).div_ceil(BS as usize) as u64;
            let n = left.min(unit.max(need)).max(1);
            let t = self.tier(tier)?;
            let mut buf = vec![0u8; (n * BS) as usize];
            t.media.read_blocks(blk, &mut buf)?;
            self.cache.note_misses(n);
            let take = (dst.len() - at).min((n * BS) as usize - skip);
            dst[at..at + take].copy_from_slice(&buf[skip..skip + take]);
            at += take;
            let pages: Vec<std::sync::Arc<[u8]>> =
                buf.chunks(BS as usize).map(std::sync::Arc::from).collect();
            self.cache.put_clean(tier, blk, pages);
            blk += n;
            left = left.saturating_sub(n);
            skip = 0;
        }
        Ok(())
    }
}
