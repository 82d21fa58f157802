//! The file system's use of block checksums (design.md §5h; the table and
//! the Sums entries are `sums.rs`): the Sums entries that commit with the
//! entries that point at block-tier data ([`Fs::sums_entries_for`]), and the
//! check of every block read from a block tier against its recorded
//! checksum ([`Fs::verify_read`], [`Fs::verified_prefix`],
//! [`Fs::blocks_intact`]). A mismatch is counted, logged once per read and
//! returned as EIO: damaged data is never served. The log line names the
//! inode whose data it is (every reader knows it, so naming it costs
//! nothing); not its path, which only a walk of every directory finds
//! (`terrace scrub` and `terrace fsck --data` name it).

use crate::fs::Fs;
use crate::sums::{block_crc, sums_entries_in, BlockSums, SumsTables};
use crate::types::{errno, FsResult, Ino};
use std::sync::atomic::Ordering;
use terrace_format::{Entry, PhysBlock, TierId, BLOCK_SIZE};

impl Fs {
    /// The checksum table of block tier `tier` (None for PM or an unknown tier).
    pub(crate) fn sums_of(&self, tier: TierId) -> Option<&BlockSums> {
        self.tiers.iter().find(|t| t.id == tier).map(|t| &t.sums)
    }

    /// Every block tier's checksum table.
    pub(crate) fn sums_tables(&self) -> SumsTables<'_> {
        self.tiers.iter().map(|t| (t.id, &t.sums)).collect()
    }

    /// The Sums entries that must commit with `entries` ([`sums_entries_in`]).
    pub(crate) fn sums_entries_for(&self, entries: &[Entry]) -> Vec<Entry> {
        if self.tiers.is_empty() {
            return Vec::new();
        }
        sums_entries_in(&self.sums_tables(), entries)
    }

    /// Checks `buf`, data of inode `ino` read from block `first` of tier
    /// `tier` on, against the recorded checksums. A mismatch is counted,
    /// logged and returned as EIO.
    pub(crate) fn verify_read(
        &self,
        ino: Ino,
        tier: TierId,
        first: PhysBlock,
        buf: &[u8],
    ) -> FsResult<()> {
        if self.verified_prefix(ino, tier, first, buf) * BLOCK_SIZE as usize == buf.len() {
            Ok(())
        } else {
            Err(errno(libc::EIO))
        }
    }

    /// Whether the `blocks` blocks from `first` on of tier `tier` read back
    /// and match their checksums (PM has none, nor do blocks written before
    /// format 5: they count as intact). With `report`, the inode whose data
    /// they are, a mismatch is counted and logged naming it
    /// (`verified_prefix`); scrub, which counts what it finds itself, asks
    /// without.
    pub(crate) fn blocks_intact(
        &self,
        tier: TierId,
        first: PhysBlock,
        blocks: u64,
        report: Option<Ino>,
    ) -> bool {
        if tier.is_pm() {
            return true;
        }
        let Ok(t) = self.tier(tier) else {
            return false;
        };
        let mut buf = vec![0u8; (blocks.min(256) * BLOCK_SIZE) as usize];
        let mut at = 0;
        while at < blocks {
            let n = (blocks - at).min(256);
            let chunk = &mut buf[..(n * BLOCK_SIZE) as usize];
            if t.media.read_blocks((first + at).get(), chunk).is_err() {
                return false;
            }
            let intact = if let Some(ino) = report {
                self.verified_prefix(ino, tier, first + at, chunk) as u64 == n
            } else {
                chunk
                    .chunks(BLOCK_SIZE as usize)
                    .enumerate()
                    .all(|(k, b)| t.sums.check(first + at + k as u64, b) != Some(false))
            };
            if !intact {
                return false;
            }
            at += n;
        }
        true
    }

    /// Whether every block of `buf` (read from block `first` of `tier` on)
    /// matches its checksum, or has none; nothing is counted or logged.
    pub(crate) fn blocks_match(&self, tier: TierId, first: PhysBlock, buf: &[u8]) -> bool {
        let Some(sums) = self.sums_of(tier) else {
            return true;
        };
        buf.chunks(BLOCK_SIZE as usize)
            .enumerate()
            .all(|(i, b)| sums.check(first + i as u64, b) != Some(false))
    }

    /// Whether file blocks `[fb, fb + blocks)` of `ino` are still mapped,
    /// all of them, by the extent with data sequence number `seq` (what an
    /// unlocked reader captured; the parts an extent is split into keep its
    /// number, a new mapping has a new one).
    pub(crate) fn still_mapped(
        &self,
        ino: Ino,
        (fb, blocks): (terrace_format::FileBlock, u64),
        seq: u64,
    ) -> bool {
        let Ok(g) = self.lock(ino) else {
            return false;
        };
        g.as_ref()
            .and_then(|i| i.extents.find(fb))
            .is_some_and(|(s, e)| e.seq == seq && s + e.blocks >= fb + blocks)
    }

    /// How many leading blocks of `buf` (data of inode `ino`, read from
    /// block `first` of `tier` on) match their checksums (blocks without one
    /// count as matching). The first mismatch is counted and logged, naming
    /// the inode.
    pub(crate) fn verified_prefix(
        &self,
        ino: Ino,
        tier: TierId,
        first: PhysBlock,
        buf: &[u8],
    ) -> usize {
        let blocks = buf.len().div_ceil(BLOCK_SIZE as usize);
        let Some(sums) = self.sums_of(tier) else {
            return blocks;
        };
        let mut checked = 0u64;
        for (i, b) in buf.chunks(BLOCK_SIZE as usize).enumerate() {
            let blk = first + i as u64;
            match sums.check(blk, b) {
                None => {}
                Some(true) => checked += 1,
                Some(false) => {
                    self.counters
                        .checksummed_reads
                        .fetch_add(checked, Ordering::Relaxed);
                    let n = 1 + self
                        .counters
                        .checksum_errors
                        .fetch_add(1, Ordering::Relaxed);
                    // The 1st, 2nd, 4th, 8th… (a damaged file read in a
                    // loop would fill the log); status counts them all.
                    if n.is_power_of_two() {
                        let (got, want) = (block_crc(b), sums.get(blk).unwrap_or_default());
                        self.notice(format!(
                            "checksum mismatch on tier {tier}, block {blk}, data of inode {ino} (crc32c {got:08x}, recorded {want:08x}; mismatch {n} since mount, logged at each power of two, all counted by `terrace status`): the data read there is damaged and is never served: a read reads it once more, and fails with EIO if it is still damaged (`terrace scrub` names the file's path)"
                        ));
                    }
                    return i;
                }
            }
        }
        self.counters
            .checksummed_reads
            .fetch_add(checked, Ordering::Relaxed);
        blocks
    }
}
