//! Checksums of block-tier data (format 5; design.md §5h): the per-tier
//! table of block checksums ([`BlockSums`]) and the Sums log entries that
//! carry them. The file system's use of them — the entries each commit
//! carries, the verification of every read — is `checksums.rs`.
//!
//! Every block of file data written to a block tier gets a crc32c, computed
//! from the buffer as it is written ([`Fs::write_data_unsynced`]) and kept in
//! the tier's [`BlockSums`] table. The commit that makes a Write or Copy entry
//! point at those blocks carries Sums entries with the same checksums
//! ([`sums_entries_in`]), so the checksums are as durable as the mapping and
//! are themselves protected by the entries' own crc. Every read of file data
//! from a block tier is verified against the table ([`Fs::verify_read`]): a
//! mismatch is EIO to the reader, never wrong bytes.
//!
//! Invariants:
//! - A block that a committed entry references has its checksum in the table
//!   (pools written before format 5 excepted: their blocks are unknown and
//!   read unverified).
//! - Blocks are never rewritten while referenced (5a), so a block's checksum
//!   changes only when the block is freed and allocated again; the new
//!   checksum is stored when the new data is written, before any entry
//!   references it.
//! - At mount, an inode's log may still hold Sums entries for blocks it no
//!   longer references (another file may own them now): recovery keeps only
//!   the checksums of blocks the replayed inode maps (`recovery.rs`).
//!
//! The table costs 4 bytes of DRAM per block in use (plus a bit), allocated
//! per chunk of 1,024 blocks on first use: about 1 MiB per GiB of block-tier
//! data.
//!
//! [`Fs::write_data_unsynced`]: crate::Fs::write_data_unsynced
//! [`Fs::verify_read`]: crate::Fs::verify_read

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use terrace_format::{Entry, PhysBlock, TierId, BLOCK_SIZE, SUMS_PER_ENTRY};

/// Blocks per lazily allocated chunk of the table.
const CHUNK: u64 = 1024;

/// crc32c of one block of data.
pub fn block_crc(data: &[u8]) -> u32 {
    terrace_format::crc(data)
}

/// crc32c of a block of zeros (the checksum of blocks a Write entry flagged
/// `WRITE_FLAG_ZEROED` maps).
pub fn zero_block_crc() -> u32 {
    static CRC: OnceLock<u32> = OnceLock::new();
    *CRC.get_or_init(|| block_crc(&[0u8; BLOCK_SIZE as usize]))
}

struct Chunk {
    crc: Box<[AtomicU32]>,
    /// One bit per block: its checksum is known.
    known: Box<[AtomicU64]>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            crc: (0..CHUNK).map(|_| AtomicU32::new(0)).collect(),
            known: (0..CHUNK / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The checksum of every block of one block tier whose checksum is known.
pub struct BlockSums {
    blocks: u64,
    chunks: Box<[OnceLock<Chunk>]>,
}

impl std::fmt::Debug for BlockSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.chunks.iter().filter(|c| c.get().is_some()).count();
        write!(f, "BlockSums({used} of {} chunks)", self.chunks.len())
    }
}

impl BlockSums {
    /// An empty table for a tier of `blocks` blocks.
    pub fn new(blocks: u64) -> BlockSums {
        BlockSums {
            blocks,
            chunks: (0..blocks.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// Records the checksum of `block` (ignored beyond the tier's end).
    pub fn set(&self, block: PhysBlock, crc: u32) {
        let block = block.get();
        if block >= self.blocks {
            return;
        }
        let Some(c) = self.chunks.get((block / CHUNK) as usize) else {
            return;
        };
        let c = c.get_or_init(Chunk::new);
        let i = (block % CHUNK) as usize;
        c.crc[i].store(crc, Ordering::Relaxed);
        c.known[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
    }

    /// The checksum of `block`, when known.
    pub fn get(&self, block: PhysBlock) -> Option<u32> {
        let block = block.get();
        let c = self.chunks.get((block / CHUNK) as usize)?.get()?;
        let i = (block % CHUNK) as usize;
        if c.known[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) == 0 {
            return None;
        }
        Some(c.crc[i].load(Ordering::Relaxed))
    }

    /// Whether `data`, read from `block`, matches its checksum (`None`: the
    /// block has none). The one place data is checked against the table.
    pub fn check(&self, block: PhysBlock, data: &[u8]) -> Option<bool> {
        self.get(block).map(|want| block_crc(data) == want)
    }

    /// Forgets the checksums of `[block, block + n)`.
    pub fn forget(&self, block: PhysBlock, n: u64) {
        for b in block.get()..block.get().saturating_add(n) {
            if let Some(c) = self.chunks.get((b / CHUNK) as usize).and_then(|c| c.get()) {
                let i = (b % CHUNK) as usize;
                c.known[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
            }
        }
    }

    /// Records the checksum of every block of `data`, stored from `block` on.
    pub fn record(&self, block: PhysBlock, data: &[u8]) {
        for (i, b) in data.chunks(BLOCK_SIZE as usize).enumerate() {
            self.set(block + i as u64, block_crc(b));
        }
    }
}

/// Sums entries for `[block, block + n)` of `tier`, from `sums`: one entry per
/// run of at most [`SUMS_PER_ENTRY`] consecutive blocks with known checksums.
pub fn sums_entries(sums: &BlockSums, tier: TierId, block: PhysBlock, n: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut run: Option<(PhysBlock, Vec<u32>)> = None;
    for b in (block.get()..block.get() + n).map(PhysBlock) {
        match sums.get(b) {
            Some(c) => {
                let full = run.as_ref().is_some_and(|(_, v)| v.len() == SUMS_PER_ENTRY);
                if full || run.is_none() {
                    if let Some((s, crcs)) = run.take() {
                        out.push(Entry::Sums {
                            tier,
                            block: s,
                            crcs,
                        });
                    }
                    run = Some((b, Vec::with_capacity(SUMS_PER_ENTRY.min(n as usize))));
                }
                run.as_mut().expect("just set").1.push(c);
            }
            None => {
                if let Some((s, crcs)) = run.take() {
                    out.push(Entry::Sums {
                        tier,
                        block: s,
                        crcs,
                    });
                }
            }
        }
    }
    if let Some((s, crcs)) = run {
        out.push(Entry::Sums {
            tier,
            block: s,
            crcs,
        });
    }
    out
}

/// The checksum tables of a pool's block tiers, by tier id.
pub type SumsTables<'a> = Vec<(TierId, &'a BlockSums)>;

/// The Sums entries that must commit with `entries`: the checksums of every
/// block-tier block a Write entry or a Copy "add" entry points at. Physically
/// adjacent runs share entries (a write-back of scattered pages writes them
/// to consecutive blocks: a few entries, not one per page).
pub fn sums_entries_in(tables: &SumsTables<'_>, entries: &[Entry]) -> Vec<Entry> {
    let mut runs: Vec<(TierId, PhysBlock, u64)> = Vec::new();
    for e in entries {
        let (tier, block, n) = match e {
            // Zero-filled blocks (fallocate) need no Sums entry: their
            // checksum is known (`zero_block_crc`).
            Entry::Write(w)
                if !w.tier.is_pm()
                    && w.wflags
                        & (terrace_format::WRITE_FLAG_ZERO | terrace_format::WRITE_FLAG_ZEROED)
                        == 0 =>
            {
                (w.tier, w.block, w.blocks as u64)
            }
            Entry::Copy(c) if !c.tier.is_pm() && c.op == terrace_format::CopyOp::Add => {
                (c.tier, c.block, c.blocks as u64)
            }
            _ => continue,
        };
        if n > 0 {
            runs.push((tier, block, n));
        }
    }
    runs.sort_unstable();
    let mut merged: Vec<(TierId, PhysBlock, u64)> = Vec::with_capacity(runs.len());
    for (t, b, n) in runs {
        match merged.last_mut() {
            Some((lt, lb, ln)) if *lt == t && b <= *lb + *ln => {
                *ln = (*ln).max(b + n - *lb);
            }
            _ => merged.push((t, b, n)),
        }
    }
    let mut out = Vec::new();
    for (tier, block, n) in merged {
        if let Some((_, s)) = tables.iter().find(|(id, _)| *id == tier) {
            out.extend(sums_entries(s, tier, block, n));
        }
    }
    out
}

/// `entries` followed by their Sums entries ([`sums_entries_in`]).
pub fn with_sums(mut entries: Vec<Entry>, tables: &SumsTables<'_>) -> Vec<Entry> {
    let sums = sums_entries_in(tables, &entries);
    entries.extend(sums);
    entries
}

/// Log bytes the Sums entries for `blocks` blocks of one extent take (at most).
pub fn sums_log_bytes(blocks: u64) -> u64 {
    4 * blocks + 32 * blocks.div_ceil(SUMS_PER_ENTRY as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_keeps_what_was_set_until_forgotten() {
        let s = BlockSums::new(5000);
        assert_eq!(s.get(PhysBlock(10)), None);
        s.set(PhysBlock(10), 0);
        s.set(PhysBlock(4999), 7);
        s.set(PhysBlock(5000), 9); // beyond the end: ignored
        assert_eq!(s.get(PhysBlock(10)), Some(0));
        assert_eq!(s.get(PhysBlock(4999)), Some(7));
        assert_eq!(s.get(PhysBlock(5000)), None);
        s.forget(PhysBlock(9), 3);
        assert_eq!(s.get(PhysBlock(10)), None);
        assert_eq!(s.get(PhysBlock(4999)), Some(7));
    }

    #[test]
    fn entries_cover_known_runs_in_pieces_of_at_most_the_entry_limit() {
        let s = BlockSums::new(4096);
        for b in 100..100 + 300 {
            s.set(PhysBlock(b), b as u32);
        }
        s.forget(PhysBlock(250), 1);
        let e = sums_entries(&s, TierId(1), PhysBlock(90), 320);
        let runs: Vec<(u64, usize)> = e
            .iter()
            .map(|e| match e {
                Entry::Sums { block, crcs, .. } => (block.get(), crcs.len()),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(runs, vec![(100, 128), (228, 22), (251, 128), (379, 21)]);
        for e in &e {
            if let Entry::Sums { block, crcs, .. } = e {
                for (i, c) in crcs.iter().enumerate() {
                    assert_eq!(*c, (block.get() + i as u64) as u32);
                }
            }
        }
    }

    #[test]
    fn adjacent_runs_of_several_entries_share_sums_entries() {
        let s = BlockSums::new(4096);
        for b in 0..4096 {
            s.set(PhysBlock(b), b as u32 * 3);
        }
        let w = |fb: u64, block: u64| {
            Entry::Write(terrace_format::WriteEntry {
                file_block: terrace_format::FileBlock(fb),
                blocks: 1,
                tier: TierId(1),
                block: PhysBlock(block),
                ..Default::default()
            })
        };
        // Scattered file pages written back to consecutive blocks.
        let entries: Vec<Entry> = (0..200).map(|i| w(i * 37 % 1000, 500 + i)).collect();
        let tables: SumsTables<'_> = vec![(TierId(1), &s)];
        let sums = sums_entries_in(&tables, &entries);
        assert_eq!(sums.len(), 2, "200 adjacent blocks: entries of 128 and 72");
        let covered: Vec<u64> = sums
            .iter()
            .flat_map(|e| match e {
                Entry::Sums { block, crcs, .. } => block.get()..block.get() + crcs.len() as u64,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(covered, (500..700).collect::<Vec<u64>>());
    }

    #[test]
    fn recorded_checksums_are_the_crc32c_of_each_block() {
        let s = BlockSums::new(64);
        let mut data = vec![0u8; 3 * BLOCK_SIZE as usize];
        data[5000] = 1;
        s.record(PhysBlock(7), &data);
        assert_eq!(s.get(PhysBlock(7)), Some(block_crc(&data[..4096])));
        assert_eq!(s.get(PhysBlock(8)), Some(block_crc(&data[4096..8192])));
        assert_ne!(s.get(PhysBlock(7)), s.get(PhysBlock(8)));
    }
}
