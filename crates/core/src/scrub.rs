//! Online scrub (`terrace scrub MOUNTPOINT`, like `zpool scrub`): reads every
//! block of file data on the block tiers — primary locations and NVMFS clean
//! copies — checks it against its checksum (`sums.rs`) and repairs what a
//! good second location allows, while the pool stays in use.
//!
//! Repairs, each one commit of one Copy entry, made only if the file's
//! mapping of the block is still the one that was read:
//! - a damaged clean copy is dropped (its blocks are freed; the primary is
//!   intact, and NVMFS makes a new copy when it flushes again);
//! - a damaged primary block whose clean copy is good is replaced by it
//!   (the copy is promoted, the damaged block freed).
//!
//! A damaged block with no good copy cannot be repaired: it is reported
//! (inode, path and offset), and reads of it keep failing with EIO until the
//! file range is rewritten or deleted. A read-only mount scrubs without
//! repairing. The paths come from one map of every directory's names
//! ([`Fs::live_names`]), made at the first such block a scrub reports and
//! kept for the rest of it: a scrub that finds none walks no directory, and
//! one that finds many walks them once.
//!
//! One scrub runs at a time, in its own thread, at a bounded rate (bytes per
//! second of reads, 0 = unbounded); [`Fs::scrub_status`] shows it running and
//! then the last one's result. Unmount stops it between chunks.

use crate::fs::Fs;
use crate::service_state::ScrubReport;
use crate::types::{errno, FsResult, Ino};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_format::{CopyEntry, CopyOp, Entry, FileBlock, PhysBlock, TierId, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;
/// Blocks read per request.
const CHUNK_BLOCKS: u64 = 256;

/// Where each live inode is named: child → (directory, name).
type Names = HashMap<Ino, (Ino, Vec<u8>)>;

/// One location of mapped data to read: a primary run or a copy.
#[derive(Debug, Clone, Copy)]
struct Piece {
    file_block: FileBlock,
    blocks: u64,
    /// Location read: the primary (`copy == false`) or the clean copy.
    tier: TierId,
    block: PhysBlock,
    copy: bool,
    /// The mapping when captured, to check before a repair.
    seq: u64,
    primary: (TierId, PhysBlock),
    second: Option<(TierId, PhysBlock)>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Fs {
    /// Starts a scrub in its own thread; EBUSY when one is running.
    /// `rate` bounds the bytes read per second (0 = unbounded).
    pub fn start_scrub(self: &Arc<Self>, rate: u64, repair: bool) -> FsResult<()> {
        {
            let mut st = self.scrub_state.lock();
            if st.as_ref().is_some_and(|r| r.running) {
                return Err(errno(libc::EBUSY));
            }
            *st = Some(ScrubReport {
                running: true,
                started_unix: unix_now(),
                repair: repair && !self.is_read_only() && !self.is_frozen(),
                ..Default::default()
            });
        }
        let fs = Arc::clone(self);
        std::thread::Builder::new()
            .name("scrub".into())
            .spawn(move || {
                fs.scrub(rate, repair);
            })
            .map(|_| ())
            .inspect_err(|_| {
                *self.scrub_state.lock() = None;
            })
    }

    /// The running scrub's progress, or the last scrub's result.
    pub fn scrub_status(&self) -> Option<ScrubReport> {
        self.scrub_state.lock().clone()
    }

    /// Runs a scrub in the calling thread and returns its report (also kept
    /// for [`Fs::scrub_status`]).
    pub fn scrub(&self, rate: u64, repair: bool) -> ScrubReport {
        let repair = repair && !self.is_read_only() && !self.is_frozen();
        let started = Instant::now();
        let inos = self.inodes_with_block_data();
        let total: u64 = inos.iter().map(|(_, n)| *n).sum();
        *self.scrub_state.lock() = Some(ScrubReport {
            running: true,
            started_unix: unix_now(),
            repair,
            total_blocks: total,
            ..Default::default()
        });
        // At a low rate, chunks of about a second's reading, so the rate
        // holds over any stretch of a few seconds, not only on average.
        let chunk_blocks = match rate {
            0 => CHUNK_BLOCKS,
            r => (r / BS).clamp(1, CHUNK_BLOCKS),
        };
        let mut buf = vec![0u8; (chunk_blocks * BS) as usize];
        let mut read_bytes = 0u64;
        // Mapped at the first block the scrub cannot repair, if any.
        let mut names: Option<Names> = None;
        'files: for (ino, _) in inos {
            for p in self.scrub_pieces(ino) {
                let mut off = 0;
                while off < p.blocks {
                    if self.unmounted.load(Ordering::Relaxed) {
                        self.update_scrub(|r| r.stopped = true);
                        break 'files;
                    }
                    let n = (p.blocks - off).min(chunk_blocks);
                    let chunk = &mut buf[..(n * BS) as usize];
                    self.scrub_chunk(ino, &p, off, chunk, repair, &mut names);
                    off += n;
                    read_bytes += n * BS;
                    if rate > 0 {
                        // Wait until the bytes read are due, a second at a
                        // time (an unmount stops the scrub meanwhile).
                        let due = Duration::from_secs_f64(read_bytes as f64 / rate as f64);
                        while let Some(wait) = due.checked_sub(started.elapsed()) {
                            if wait.is_zero() || self.unmounted.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::sleep(wait.min(Duration::from_secs(1)));
                        }
                    }
                }
            }
        }
        self.update_scrub(|r| {
            r.running = false;
            r.finished_unix = unix_now();
        });
        let r = self.scrub_status().unwrap_or_default();
        self.notice(format!(
            "scrub {}: {} blocks verified, {} damaged, {} repaired, {} unrepairable",
            if r.stopped { "stopped" } else { "finished" },
            r.checked_blocks,
            r.bad_blocks,
            r.repaired_blocks,
            r.unrepairable.len()
        ));
        r
    }

    fn update_scrub(&self, f: impl FnOnce(&mut ScrubReport)) {
        let mut st = self.scrub_state.lock();
        f(st.get_or_insert_with(ScrubReport::default));
    }

    /// Inodes with data on block tiers, with their number of such blocks.
    fn inodes_with_block_data(&self) -> Vec<(Ino, u64)> {
        let mut out = Vec::new();
        for (ino, slot) in self.table.iter().enumerate() {
            let g = slot.lock();
            let Some(i) = g.as_ref().filter(|i| !i.zombie) else {
                continue;
            };
            let n: u64 = i
                .extents
                .iter()
                .flat_map(|(_, e)| e.block_tier_runs())
                .map(|(_, _, n, _)| n)
                .sum();
            if n > 0 {
                out.push((ino as Ino, n));
            }
        }
        out
    }

    /// The block-tier locations of one inode's data, captured under its lock.
    fn scrub_pieces(&self, ino: Ino) -> Vec<Piece> {
        let Ok(g) = self.lock(ino) else {
            return Vec::new();
        };
        let Some(i) = g.as_ref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (fb, e) in i.extents.iter() {
            out.extend(
                e.block_tier_runs()
                    .map(|(tier, block, blocks, copy)| Piece {
                        file_block: fb,
                        blocks,
                        tier,
                        block,
                        copy,
                        seq: e.seq,
                        primary: (e.tier, e.block),
                        second: e.copy,
                    }),
            );
        }
        out
    }

    /// Where each live inode is named: child → (directory, name), the first
    /// name found. One walk of every directory, each locked alone (no lock
    /// held meanwhile): made only for a report that names paths (scrub's,
    /// a tier removal's refusal).
    pub(crate) fn live_names(&self) -> Names {
        let mut names = Names::new();
        for (d, slot) in self.table.iter().enumerate() {
            let g = slot.lock();
            let Some(dir) = g
                .as_ref()
                .filter(|i| !i.zombie)
                .and_then(|i| i.dir.as_ref())
            else {
                continue;
            };
            let d = d as Ino;
            for (_, name, child, _) in dir.iter() {
                if child != d {
                    names.entry(child).or_insert_with(|| (d, name.to_vec()));
                }
            }
        }
        names
    }

    /// Reads and checks `chunk.len()` blocks of piece `p` from block `off`
    /// of it on, repairing what can be. What cannot be repaired is reported
    /// with the file's path, by `names` (mapped here at the first such block).
    fn scrub_chunk(
        &self,
        ino: Ino,
        p: &Piece,
        off: u64,
        chunk: &mut [u8],
        repair: bool,
        names: &mut Option<Names>,
    ) {
        let n = chunk.len() as u64 / BS;
        let first = p.block + off;
        let read = self
            .tier(p.tier)
            .and_then(|t| t.media.read_blocks(first.get(), chunk));
        let sums = self.sums_of(p.tier);
        let mut bad: Vec<u64> = Vec::new(); // block offsets in the piece
        let (mut checked, mut unverified) = (0, 0);
        match read {
            Ok(()) => {
                for (k, data) in chunk.chunks(BS as usize).enumerate() {
                    match sums.and_then(|s| s.check(first + k as u64, data)) {
                        None => unverified += 1,
                        Some(true) => checked += 1,
                        Some(false) => bad.push(off + k as u64),
                    }
                }
            }
            Err(_) => bad.extend(off..off + n),
        }
        // Blocks the file gave up meanwhile are not its damage: a write
        // into preallocated blocks rewrites them in place once unmapped
        // (`ops_prealloc_write.rs`); the next scrub reads the new mapping.
        if !bad.is_empty() && !self.still_mapped(ino, (p.file_block + off, n), p.seq) {
            unverified += bad.len() as u64;
            bad.clear();
        }
        self.update_scrub(|r| {
            r.read_blocks += n;
            r.checked_blocks += checked;
            r.unverified_blocks += unverified;
            r.bad_blocks += bad.len() as u64;
        });
        for k in bad {
            self.counters
                .checksum_errors
                .fetch_add(1, Ordering::Relaxed);
            let repaired = repair && matches!(self.repair_block(ino, p, k), Ok(true));
            match repaired {
                true => self.update_scrub(|r| r.repaired_blocks += 1),
                false => {
                    let at = (p.file_block + k).byte_offset();
                    let names = names.get_or_insert_with(|| self.live_names());
                    let path = crate::problem_paths::path_of(ino, names)
                        .map(|path| format!(" of {path}"))
                        .unwrap_or_default();
                    let what = format!(
                        "inode {ino}, bytes {at}..{}{path} ({} on tier {} block {}): damaged, {}",
                        at + BS,
                        if p.copy { "clean copy" } else { "data" },
                        p.tier,
                        p.block + k,
                        if repair {
                            "no good copy to repair it from"
                        } else {
                            "not repaired (read-only)"
                        }
                    );
                    self.notice(format!("scrub: {what}"));
                    self.update_scrub(|r| r.unrepairable.push(what));
                }
            }
        }
    }

    /// Repairs block `k` of piece `p` if the mapping is unchanged and a good
    /// second location exists; true when repaired.
    fn repair_block(&self, ino: Ino, p: &Piece, k: u64) -> FsResult<bool> {
        let fb = p.file_block + k;
        let entry = if p.copy {
            // The primary is intact: forget the damaged copy.
            let (t, b) = p.second.expect("a copy piece has a copy");
            Entry::Copy(CopyEntry {
                file_block: fb,
                blocks: 1,
                tier: t,
                op: CopyOp::Drop,
                block: b + k,
            })
        } else {
            let Some((t, b)) = p.second else {
                return Ok(false);
            };
            if !self.blocks_intact(t, b + k, 1, None) {
                return Ok(false);
            }
            Entry::Copy(CopyEntry {
                file_block: fb,
                blocks: 1,
                tier: t,
                op: CopyOp::Promote,
                block: b + k,
            })
        };
        let mut g = self.lock(ino)?;
        let i = g.as_mut().ok_or_else(|| errno(libc::ENOENT))?;
        let unchanged = i.extents.find(fb).is_some_and(|(s, e)| {
            e.seq == p.seq
                && (e.tier, e.block + (fb - s)) == (p.primary.0, p.primary.1 + k)
                && e.copy.map(|(t, b)| (t, b + (fb - s))) == p.second.map(|(t, b)| (t, b + k))
        });
        if !unchanged {
            return Ok(false);
        }
        self.commit_one_in(i, vec![entry], true)?;
        Ok(true)
    }
}
