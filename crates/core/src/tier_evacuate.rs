//! Moving the data off a tier being removed (`terrace tier remove`, step 2
//! of `tier_detach.rs`; design.md §3 "Removing a tier from a mounted
//! pool"), as `btrfs device remove` does: the user names the tier, the
//! removal moves what is on it and then detaches it.
//!
//! It runs after the tier is *retired* (step 1): no allocation lands there
//! any more, so background migration, write-backs and writes can no longer
//! refill it while its data moves off (with `terrace migrate --to` run
//! before the removal they did, a race the user could not win). It runs
//! under the tier-change lock (rank `TierChange`, the first of design.md
//! §4a): the mover takes only locks ranked after it (write-back, inode,
//! room, leaves) and nothing it calls takes the tier-change lock, so the
//! move needs no release and re-take (which would let a `tier add` in).
//!
//! - **Where to**: the next tier below that is not retiring (an object
//!   tier too), else the nearest block tier above, else PM
//!   ([`Fs::evacuation_target`]).
//! - **Refusal before anything moves** (a rule naming the tier is refused
//!   by the caller before this runs): the room. What is needed is the
//!   blocks to copy, counted as the union of the physical block ranges the
//!   files map there — a block that clones (`copy_file_range`) share, in
//!   extents cut alike or not, counts once, as it moves once
//!   (`reshare.rs`); data with a clean copy on the target costs nothing,
//!   the copy is promoted. It is set against the target's room (for a
//!   block tier its free blocks less the extents held back for recycling)
//!   and against the pool's room less what the DRAM cache's dirty pages
//!   were promised. PM, the target only when no other block tier is left
//!   (the pool is PM-only afterwards, and its metadata — new inodes, log
//!   pages — has nowhere else to go), must keep twice its metadata reserve
//!   free ([`Fs::pm_pin_floor_blocks`], the floor data pinned to PM keeps
//!   too) beyond the data moved and the dirty pages written back to it:
//!   filling it to the bare reserve left a pool where the next file's
//!   first write failed with ENOSPC. The messages say how much is needed
//!   and how much there is. A file unlinked while still open keeps its
//!   data until its release: it moves like any other (inode logs of
//!   deleted files, which the removal does not move, refuse it later).
//! - **The move**: each file's pieces on the tier, in groups of
//!   `group_migration_bytes`, with the migration mechanism
//!   ([`crate::migrate::MoveBatch`], `migrate/mover.rs`: crash-safe, a piece
//!   written meanwhile is dropped rather than committed stale). Blocks
//!   shared by clones move once: the commit of one owner's move points the
//!   other owners at the new blocks (`reshare.rs`), so a file with shared
//!   blocks there is not captured while another one's moves wait in the
//!   batch's window — the window commits first (else each owner got a
//!   copy of its own in the window, dropped at its commit, and the target
//!   needed the room of every copy at once, more than the check counted). Rounds
//!   repeat while data is left (a file being written may need another),
//!   up to [`EVACUATE_ROUNDS`] rounds that move nothing. Progress goes to
//!   the daemon's log ([`Fs::notice`], every [`PROGRESS_EVERY`]).
//! - **Failure midway** (a device error, the target full after all, an
//!   unmount): the caller takes the retirement back; what moved stays
//!   moved, nothing is lost (every move commits or leaves the old mapping).
//! - **A freeze or an unmount meanwhile** (`freeze.rs`, `unmount.rs`): they
//!   mark the image clean, and nothing joins this control thread first, so
//!   the evacuation stops by itself. Its [`MoveBatch`] stops with the pool
//!   ([`MoveBatch::stop_with_the_pool`], [`Fs::pool_stopping`]): from the
//!   moment the unmount's or freeze's persisting stops the background
//!   threads, no move of it commits — each is looked at just before its
//!   commit, its blocks and those of every move after it are released —
//!   and the evacuation fails, saying why, so the caller takes the
//!   retirement back. (The look and the commit are not atomic with the
//!   clean mark: a commit that passed the look just before the threads
//!   stopped lands before the clean mark unless its thread stalls through
//!   the whole rest of the persisting, a sync of every tier included.)

use crate::fs::Fs;
use crate::migrate::{Mode, MoveBatch, MOVE_SYNC_WINDOW_BYTES};
use crate::tier::BlockTier;
use crate::tier_detach::bytes_text;
use crate::types::Ino;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::{FileBlock, PhysBlock, TierId, TierKind, TierRecord, BLOCK_SIZE};

/// Rounds in a row that move nothing before the evacuation gives up (what
/// is left is then refused by the removal's own check).
pub const EVACUATE_ROUNDS: usize = 8;

/// How often the daemon's log hears how far the evacuation is.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Files whose data is on one tier: per inode, its file-block ranges there,
/// and whether some of those blocks are shared (clones).
type OnTier = Vec<(Ino, Vec<(FileBlock, u64)>, bool)>;

/// What the evacuation looks at before it moves anything.
#[derive(Debug, Default)]
struct Survey {
    /// The files with data there (deleted ones still open aside).
    files: OnTier,
    /// Blocks of data there (each block once, however many extents of
    /// however many files map it).
    blocks: u64,
    /// Of them, blocks the move must copy (mapped by an extent without a
    /// clean copy on the target).
    to_copy: u64,
}

impl Fs {
    /// Where the data of tier `id` goes when it is removed: the next tier
    /// below that takes data (not retiring), else the nearest block tier
    /// above, else PM.
    pub fn evacuation_target(&self, id: TierId) -> TierId {
        let open = |t: &&BlockTier| t.id != id && !t.space.is_retiring();
        if let Some(t) = self.tiers.iter().filter(open).find(|t| t.id > id) {
            return t.id;
        }
        self.tiers
            .iter()
            .filter(open)
            .filter(|t| t.id < id && t.kind != TierKind::S3)
            .last()
            .map_or(TierId::PM, |t| t.id)
    }

    /// Moves every file's data on the retiring `tier` to
    /// [`Fs::evacuation_target`] (see the module docs). `Ok` when no file's
    /// data is left there, or when what is left stayed put for
    /// [`EVACUATE_ROUNDS`] rounds (the caller's check refuses it then);
    /// `Err` with the refusal, before anything moved when it can tell.
    pub(crate) fn evacuate_tier(&self, tier: &BlockTier, rec: &TierRecord) -> Result<(), String> {
        let to = self.evacuation_target(tier.id);
        let name = format!("tier {} ({} {})", rec.id, rec.kind.name(), rec.path);
        let to_name = self.tier_label(to);
        let first = self.survey(tier.id, to);
        if first.files.is_empty() {
            return Ok(());
        }
        self.check_evacuation_room(&name, to, &to_name, first.to_copy)?;
        let total = first.blocks * BLOCK_SIZE;
        self.notice(format!(
            "removing {name}: moving its data ({} in {} file{}) to {to_name}",
            bytes_text(total),
            first.files.len(),
            plural(first.files.len())
        ));
        let started = Instant::now();
        let mut progress = Progress {
            fs: self,
            name: &name,
            total,
            moved: 0,
            last: Instant::now(),
        };
        let mut files = first.files;
        let mut idle = 0;
        while !files.is_empty() && idle < EVACUATE_ROUNDS {
            let moved = self.evacuate_round(&files, tier.id, to, &name, &to_name, &mut progress)?;
            idle = if moved == 0 { idle + 1 } else { 0 };
            let next = self.survey(tier.id, to);
            files = next.files;
            if moved == 0 && !files.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.notice(format!(
            "removing {name}: moved {} to {to_name} in {:.1} s",
            bytes_text(progress.moved),
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// One pass over `files`: moves their pieces still on tier `from` to
    /// `to`. Returns the bytes moved.
    fn evacuate_round(
        &self,
        files: &OnTier,
        from: TierId,
        to: TierId,
        name: &str,
        to_name: &str,
        progress: &mut Progress<'_>,
    ) -> Result<u64, String> {
        let gb = self.settings.read().migration_params().group_blocks();
        let window = MOVE_SYNC_WINDOW_BYTES.max(gb * BLOCK_SIZE);
        let mut batch = MoveBatch::new(self, window).stop_with_the_pool();
        let mut failed = None;
        // Moves of shared blocks wait in the window (see the module docs).
        let mut sharing = false;
        for (ino, ranges, shares) in files {
            if let Some(why) = self.stopping_reason() {
                failed = Some(why.to_string());
                break;
            }
            let before = batch.moved();
            let r = if *shares && sharing {
                batch.commit_all()
            } else {
                Ok(())
            };
            sharing |= *shares;
            let r = r.and_then(|()| {
                groups(ranges, gb)
                    .iter()
                    .try_for_each(|g| batch.add(*ino, from, to, g, Mode::Move))
            });
            match r {
                Ok(()) => {}
                // Deleted meanwhile: its data went with it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                // Halted: said below.
                Err(e) if e.raw_os_error() == Some(MoveBatch::HALTED_ERRNO) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    failed = Some(format!(
                        "{to_name} ran out of room while the data moved ({}): free some space \
                         or add a tier, then try again",
                        self.room_text(to)
                    ));
                    break;
                }
                Err(e) => {
                    failed = Some(format!("moving the data of inode {ino} to {to_name}: {e}"));
                    break;
                }
            }
            progress.add(batch.moved() - before);
        }
        let before = batch.moved();
        let (moved, synced) = batch.finish();
        progress.add(moved - before);
        // A pool stopping meanwhile is the reason, whatever else failed
        // (a halted batch committed nothing since).
        let halted = synced
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(MoveBatch::HALTED_ERRNO));
        let stopping = self
            .stopping_reason()
            .or(halted.then_some(STOPPING))
            .map(str::to_string);
        let why = stopping.or(failed).or_else(|| {
            synced
                .err()
                .map(|e| format!("syncing the data moved to {to_name}: {e}"))
        });
        match why {
            Some(why) => Err(format!(
                "cannot move the data off {name}: {why} ({} moved so far stays moved; the \
                 tier takes data again)",
                bytes_text(progress.moved)
            )),
            None => Ok(moved),
        }
    }

    /// The files with data on tier `id` and what moving it to `to` costs
    /// (each inode looked at under its lock, one at a time). Blocks are
    /// counted as the union of the ranges mapped there: clones share
    /// blocks in extents that need not start or end alike (a write into
    /// one clone splits its extent), so no per-extent key finds them all.
    fn survey(&self, id: TierId, to: TierId) -> Survey {
        let mut s = Survey::default();
        let mut mapped = Vec::new();
        let mut uncopied = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            // A zombie's space is released: it maps nothing.
            let Some(i) = g.as_ref().filter(|i| !i.zombie) else {
                continue;
            };
            let mut ranges = Vec::new();
            let mut shares = false;
            for (fb, e) in i.extents.iter() {
                if e.tier != id {
                    continue;
                }
                ranges.push((fb, e.blocks));
                mapped.push((e.block, e.blocks));
                shares = shares || !self.shared.shared_parts(id, e.block, e.blocks).is_empty();
                if e.copy.map_or(true, |(t, _)| t != to) {
                    uncopied.push((e.block, e.blocks));
                }
            }
            if ranges.is_empty() {
                continue;
            }
            s.files.push((i.ino, ranges, shares));
        }
        s.blocks = union_blocks(mapped);
        s.to_copy = union_blocks(uncopied);
        s
    }

    /// Why the evacuation must stop now, if it must: the pool is being
    /// frozen or unmounted, or can no longer be written
    /// ([`Fs::pool_stopping`]).
    fn stopping_reason(&self) -> Option<&'static str> {
        if self.unmounted.load(Ordering::SeqCst) {
            Some("the pool is being unmounted")
        } else if self.is_frozen() {
            Some(
                "the pool was remounted read-only (`mount -o remount,rw` it, then run the \
                 removal again)",
            )
        } else if self.is_read_only() {
            Some("the pool is read-only")
        } else if self.pool_stopping() {
            Some(STOPPING)
        } else {
            None
        }
    }

    /// Refuses, before anything moves, when `to` (or the pool, less what
    /// the DRAM cache's dirty pages were promised) has no room for
    /// `blocks` more blocks of data.
    fn check_evacuation_room(
        &self,
        name: &str,
        to: TierId,
        to_name: &str,
        blocks: u64,
    ) -> Result<(), String> {
        let need = blocks * BLOCK_SIZE;
        if to.is_pm() {
            self.check_pm_room(name, blocks)?;
        } else if let Some(room) = self.target_room(to) {
            if need > room {
                return Err(format!(
                    "moving the data on {name} needs {} on {to_name}, which has room for {}: \
                     free some space there or add a tier, then try again",
                    bytes_text(need),
                    bytes_text(room)
                ));
            }
        }
        // The tier is retiring: this is the room of the rest of the pool.
        let (room, dirty) = self.room_and_dirty_blocks();
        let left = room.saturating_sub(dirty);
        if blocks > left {
            return Err(format!(
                "moving the data on {name} needs {}, and the rest of the pool has room for {} \
                 (beyond the {} waiting in the DRAM cache): free some space, then try again",
                bytes_text(need),
                bytes_text(left * BLOCK_SIZE),
                bytes_text(dirty * BLOCK_SIZE)
            ));
        }
        Ok(())
    }

    /// Refuses an evacuation into PM (the pool's last block tier going)
    /// that would leave PM less than [`Fs::pm_pin_floor_blocks`] free: the
    /// `blocks` moved and the cache's dirty pages (written back to PM
    /// before the tier goes) must fit beyond it. The message says how much
    /// room is needed, how much there is, and how much to free.
    fn check_pm_room(&self, name: &str, blocks: u64) -> Result<(), String> {
        let dirty = self.cache.dirty_blocks();
        let floor = self.pm_pin_floor_blocks();
        let room = self.pm_free_unpromised().saturating_sub(floor);
        let need = blocks + dirty;
        if need <= room {
            return Ok(());
        }
        let cached = if dirty > 0 {
            format!(
                " (with the {} waiting in the DRAM cache)",
                bytes_text(dirty * BLOCK_SIZE)
            )
        } else {
            String::new()
        };
        Err(format!(
            "moving the data on {name} to pm, the pool's last tier once it goes, needs {}{cached} \
             there, and pm has room for {} beyond the {} it keeps free for new files' metadata: \
             free {} there or add a tier, then try again",
            bytes_text(need * BLOCK_SIZE),
            bytes_text(room * BLOCK_SIZE),
            bytes_text(floor * BLOCK_SIZE),
            bytes_text((need - room) * BLOCK_SIZE)
        ))
    }

    /// Bytes of data tier `to` can take (`None`: an object tier, whose room
    /// is the store's). PM: its free blocks beyond twice the metadata
    /// reserve ([`Fs::check_pm_room`]); a block tier: its free blocks less
    /// the extents kept for recycling.
    fn target_room(&self, to: TierId) -> Option<u64> {
        if to.is_pm() {
            let floor = self.pm_pin_floor_blocks();
            return Some(self.pm_free_unpromised().saturating_sub(floor) * BLOCK_SIZE);
        }
        let t = self.tiers.iter().find(|t| t.id == to)?;
        if t.kind == TierKind::S3 {
            return None;
        }
        let reserve = t.space.recycling_reserve_extents() * t.space.extent_blocks() * BLOCK_SIZE;
        Some(self.room_below(to, 100).saturating_sub(reserve))
    }

    /// "room for 1.2 MiB" (or "an object tier").
    fn room_text(&self, to: TierId) -> String {
        match self.target_room(to) {
            Some(r) => format!("room for {} now", bytes_text(r)),
            None => "an object tier".into(),
        }
    }

    /// "tier 2 (hdd)", "pm".
    fn tier_label(&self, id: TierId) -> String {
        match self.tiers.iter().find(|t| t.id == id) {
            Some(t) => format!("tier {} ({})", id.get(), t.kind.name()),
            None => "pm".into(),
        }
    }

    /// "7 (/dir/file), 9 (/x)": inodes with their paths, for a refusal.
    pub(crate) fn inos_with_paths(&self, inos: &[Ino]) -> String {
        let names = self.live_names();
        inos.iter()
            .map(|&ino| match crate::problem_paths::path_of(ino, &names) {
                Some(p) => format!("{ino} ({p})"),
                None => ino.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The evacuation's progress, logged every [`PROGRESS_EVERY`].
struct Progress<'a> {
    fs: &'a Fs,
    name: &'a str,
    total: u64,
    moved: u64,
    last: Instant,
}

impl Progress<'_> {
    fn add(&mut self, bytes: u64) {
        self.moved += bytes;
        if self.last.elapsed() >= PROGRESS_EVERY {
            self.last = Instant::now();
            self.fs.notice(format!(
                "removing {}: {} of {} moved",
                self.name,
                bytes_text(self.moved),
                bytes_text(self.total)
            ));
        }
    }
}

/// Why an evacuation stopped when the pool stopped before the unmount or
/// freeze marked itself (the persisting that comes first stopped the
/// background threads).
const STOPPING: &str = "the pool is being unmounted or remounted read-only";

/// Blocks in the union of `runs` (first block, blocks): each block once,
/// however many runs hold it.
fn union_blocks(mut runs: Vec<(PhysBlock, u64)>) -> u64 {
    runs.sort_unstable();
    let mut total = 0;
    let mut end: Option<PhysBlock> = None;
    for (start, n) in runs {
        let stop = start + n;
        match end {
            Some(e) if start < e => {
                if stop > e {
                    total += stop - e;
                    end = Some(stop);
                }
            }
            _ => {
                total += n;
                end = Some(stop);
            }
        }
    }
    total
}

/// `ranges` cut into groups of at most `gb` blocks, each a list of ranges
/// (one copy per group).
fn groups(ranges: &[(FileBlock, u64)], gb: u64) -> Vec<Vec<(FileBlock, u64)>> {
    let mut out = Vec::new();
    let mut cur: Vec<(FileBlock, u64)> = Vec::new();
    let mut n = 0;
    for &(mut s, mut len) in ranges {
        while len > 0 {
            let take = len.min(gb - n);
            cur.push((s, take));
            n += take;
            s += take;
            len -= take;
            if n == gb {
                out.push(std::mem::take(&mut cur));
                n = 0;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
