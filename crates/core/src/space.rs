//! PM room for metadata: what is promised to write-back, what foreground
//! operations may take, and waiting for migration when PM is full.
//!
//! PM holds everything that makes a commit (inode slots, the journal, log
//! pages) and, beside it, file data. Data can live on any tier; logs are
//! written on PM (log migration moves cold ones to a block tier, and any
//! commit brings one back first). So PM must never be so full of data that a commit cannot find a
//! log page — above all the commit of cached data that was already
//! acknowledged to an application. The rules (docs/design.md §5f):
//!
//! 1. *Promise.* A write accepted into the DRAM cache promises its file's
//!    write-back commit the log bytes it will need
//!    ([`writeback_log_bytes`]: one 48-byte write entry per run of dirty
//!    pages, per 512 KiB extent boundary and per extra tier, in pages that
//!    double from the file's current last page). The write
//!    fails with ENOSPC at `write()` when PM does not have that many free
//!    blocks beyond what is already promised ([`Fs::check_log_promise`]).
//!    The promise is dropped when the file has no dirty page left.
//! 2. *Floor.* Foreground log pages and PM data never take the promised
//!    blocks ([`Fs::log_room`] with `background = false`, `Fs::alloc_data`);
//!    write-back commits and moves down to a block tier may (they free more
//!    PM than they take, or they are what the promise is for).
//! 3. *Throttle.* A modifying operation that finds PM's free blocks under
//!    half the metadata reserve ([`Fs::pm_reserve_blocks`]) beyond the
//!    promise first wakes migration and waits for it to free PM
//!    ([`Fs::wait_for_pm_room`]), as long as migration keeps freeing blocks —
//!    instead of failing with ENOSPC while the block tiers have room.
//!
//! 4. *Removals last, names last of all.* Operations that add metadata
//!    leave PM's last blocks — the removal reserve, a quarter of the
//!    metadata reserve — to the ones that remove ([`LogUse`]), and
//!    removexattr, shrinking truncates and hole punches leave its last half
//!    to unlink and rmdir: an unlink needs a log entry in its directory,
//!    and a pool whose PM creates, renames or xattrs had taken to its last
//!    block refused every `rm` with ENOSPC and could never be emptied
//!    (xfstests generic/027 under `-o writeback_cache`).
//! 5. *Moves last of all.* On a pool with block tiers, no foreground
//!    commit takes PM's last [`MOVE_LOG_BLOCKS`]: a move down (the rescue's,
//!    `migrate/rescue.rs`, or migration's) may need a log page for its
//!    commit, and it is what frees PM once removals have used the rest.
//!
//! Lock order: the room lock (`Fs::room_lock`) is taken under an inode lock
//! and before the cache's state lock; waiting happens with no lock held.
//!
//! The rules' counters (`SpaceStats`) are in `service_state.rs`, which
//! `Fs` holds.

use crate::fs::Fs;
use crate::log::{next_page_size, Log};
use crate::log_space::LogRoom;
use crate::types::{errno, FsResult};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::{BLOCK_SIZE, LOG_PAGE_HEADER, SUMS_PER_ENTRY};

/// What a commit's new log pages are for, which decides how much of PM's
/// free room it must leave (rule 4 of the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogUse {
    /// Write-back of cached data and moves down: any free block (they free
    /// more PM than they take, or they are what the promise is for).
    Background,
    /// Unlink and rmdir, and log compaction (it frees more than it
    /// takes): all but the blocks promised to write-back and, with block
    /// tiers, the last blocks left for a move's commit (rule 5).
    Name,
    /// Other operations that remove — removexattr, a truncate that
    /// shrinks, a hole punch or collapse: also leave the last half of the
    /// removal reserve to [`LogUse::Name`], so what they leave of PM still
    /// lets `rm` empty the pool (a truncate or punch of a file whose log is
    /// on a block tier brings its whole log back to PM first).
    Removal,
    /// Every other operation: also leaves the removal reserve
    /// ([`Fs::pm_removal_reserve_blocks`]).
    Foreground,
}

impl LogUse {
    /// The room a log compaction set off by a commit of this kind may take
    /// (`Fs::maybe_compact`): an unlink's or rmdir's all but the promised
    /// blocks, so a directory that removals grew can shrink again; a
    /// background commit's no more than that (it is write-back's promise
    /// the background may take, not compaction's); the others' their own.
    pub(crate) fn compaction(self) -> LogUse {
        match self {
            LogUse::Background | LogUse::Name => LogUse::Name,
            other => other,
        }
    }

    /// [`LogUse::Background`] or [`LogUse::Foreground`].
    pub(crate) fn of(background: bool) -> LogUse {
        if background {
            LogUse::Background
        } else {
            LogUse::Foreground
        }
    }
}

/// PM blocks every foreground commit leaves free on a pool with block
/// tiers ([`Fs::log_room`]): the log pages of one move's commit (its write
/// and checksum entries fit in two 4 KiB pages). Without them, unlinks of
/// empty files took PM's last block and the rescue's move of 128 KiB
/// down failed with ENOSPC for want of one log page, whenever the moved
/// file's last log page happened to be full.
const MOVE_LOG_BLOCKS: u64 = 2;

/// Bytes of one write entry (what a write-back commits per run of pages).
const WRITE_ENTRY_BYTES: u64 = 48;

/// How many times [`Fs::retry_freeing_room`] tries an operation again.
const ROOM_RETRIES: u32 = 8;

/// How long [`Fs::wait_for_pm_room`] waits without PM getting any freer.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// How long [`Fs::wait_for_removal_room`] waits without PM getting freer.
const REMOVAL_STALL: Duration = Duration::from_secs(5);

/// Log bytes the write-back of a file's dirty pages can take in one commit
/// (`Fs::flush_inode_part` of the whole file): one write entry per run of
/// consecutive dirty pages (at most `runs`, never more than `pages`), plus
/// one per 512 KiB extent the target may split a run at, plus four for a
/// write-back spread over several tiers.
///
/// The commit also holds the checksums of the blocks written (`sums.rs`):
/// 4 bytes per page in Sums entries of up to 128 blocks of physically
/// consecutive blocks — a write-back allocates its blocks in runs broken only
/// at extent boundaries (one per 128 pages, as above) and between tiers.
pub fn writeback_log_bytes(log: &Log, runs: u64, pages: u64) -> u64 {
    if pages == 0 {
        return 0;
    }
    let entries = runs.min(pages) + pages / 128 + 4;
    let sums_entries = 2 * (pages / 128) + 8;
    let bytes = entries * WRITE_ENTRY_BYTES + sums_entries * 32 + 4 * pages;
    log_bytes_needed_for(
        log,
        bytes,
        terrace_format::sums_entry_len(SUMS_PER_ENTRY) as u64,
    )
}

/// Log bytes `bytes` of entries, none longer than `max_entry`, appended to
/// `log` can take on PM, at most: nothing when they fit in the last page;
/// else new pages (each double the previous, up to 4 KiB, and large enough
/// for `max_entry`), each counted as holding only its size less the header
/// and less what a page end may waste (an entry never crosses a page).
pub fn log_bytes_needed_for(log: &Log, bytes: u64, max_entry: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    let last = log.pages.last().copied();
    let room = match last {
        Some(p) if log.tail != 0 => p.end() - log.tail,
        _ => 0,
    };
    if bytes <= room {
        return 0;
    }
    // The first entry may not fit the rest of the last page: count it all anew.
    let mut left = bytes;
    let mut total = 0;
    let mut prev = last.map(|p| p.size);
    while left > 0 {
        let size = next_page_size(prev, max_entry);
        total += size;
        let holds = (size - LOG_PAGE_HEADER).saturating_sub(max_entry - 8);
        left = left.saturating_sub(holds.max(8));
        prev = Some(size);
    }
    total
}

/// PM blocks that hold `bytes` of log pages, with room for one partly used
/// slab block per small page size.
pub fn promise_blocks(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        bytes.div_ceil(BLOCK_SIZE) + 4
    }
}

impl Fs {
    /// PM blocks promised to the write-back commits of cached data.
    pub(crate) fn promised_blocks(&self) -> u64 {
        promise_blocks(self.cache.log_promise_total())
    }

    /// PM blocks no foreground commit takes on a pool with block tiers:
    /// room for the log commit of a move down ([`MOVE_LOG_BLOCKS`]), so
    /// that removals which took PM to its end still leave the rescue
    /// (`migrate/rescue.rs`) and migration the page their commit needs.
    fn move_log_blocks(&self) -> u64 {
        if self.tiers.is_empty() {
            0
        } else {
            MOVE_LOG_BLOCKS
        }
    }

    /// Where a log's new pages come from, and how much of PM's free room
    /// the taker must leave ([`LogUse`]).
    pub(crate) fn log_room(&self, use_: LogUse) -> LogRoom<'_> {
        LogRoom {
            space: &self.log_space,
            alloc: &self.alloc,
            keep_free: self.log_keep_free(use_),
        }
    }

    /// PM blocks a commit's new log pages must leave free (rules 2, 4 and
    /// 5 of the module doc): none for the background; for every foreground
    /// commit the promised blocks and a move's log room, and beyond those
    /// half the removal reserve for [`LogUse::Removal`] and all of it for
    /// [`LogUse::Foreground`].
    fn log_keep_free(&self, use_: LogUse) -> u64 {
        let reserve_part = match use_ {
            LogUse::Background => return 0,
            LogUse::Name => 0,
            LogUse::Removal => self.pm_removal_reserve_blocks() / 2,
            LogUse::Foreground => self.pm_removal_reserve_blocks(),
        };
        self.promised_blocks() + self.move_log_blocks() + reserve_part
    }

    /// ENOSPC when PM cannot hold the log bytes `ino`'s write-back will need
    /// (`bytes`, replacing what the file was promised before) on top of
    /// everything promised to other files. Called under the room lock.
    pub(crate) fn check_log_promise(&self, ino: u64, bytes: u64) -> FsResult<()> {
        let (total, mine) = self.cache.log_promise(ino);
        let after = promise_blocks(total - mine + bytes);
        if after > self.alloc.free() {
            self.space_stats
                .promise_refusals
                .fetch_add(1, Ordering::Relaxed);
            return Err(errno(libc::ENOSPC));
        }
        Ok(())
    }

    /// Free PM blocks beyond what is promised to write-back.
    pub(crate) fn pm_free_unpromised(&self) -> u64 {
        self.alloc.free().saturating_sub(self.promised_blocks())
    }

    /// Free PM blocks new data may take: beyond the blocks promised to
    /// write-back and the metadata reserve ([`Fs::pm_reserve_blocks`]). The
    /// PM part of every count of room for data.
    pub(crate) fn pm_data_room_blocks(&self) -> u64 {
        self.pm_free_unpromised()
            .saturating_sub(self.pm_reserve_blocks())
    }

    /// How PM's room stands now.
    pub fn space_status(&self) -> SpaceStatus {
        let sb = self.superblock();
        let log_blocks = self.log_space.blocks();
        let table_growth = sb.inode_map_blocks.len() as u64 + self.table.groups();
        let free = self.alloc.free();
        let reserve = self.pm_reserve_blocks();
        let promised = self.promised_blocks();
        let st = &self.space_stats;
        let state = if self.tiers.is_empty() {
            if free == 0 {
                "PM full".to_string()
            } else {
                String::new()
            }
        } else if self.pm_free_unpromised() < reserve {
            self.pm_full_state()
        } else {
            String::new()
        };
        SpaceStatus {
            pm_metadata_bytes: (sb.pool_start + table_growth + log_blocks) * BLOCK_SIZE,
            pm_log_bytes: log_blocks * BLOCK_SIZE,
            pm_free_bytes: free * BLOCK_SIZE,
            pm_reserve_bytes: reserve * BLOCK_SIZE,
            promised_bytes: promised * BLOCK_SIZE,
            waits: st.waits.load(Ordering::Relaxed),
            wait_ms: st.wait_ns.load(Ordering::Relaxed) / 1_000_000,
            stalls: st.stalls.load(Ordering::Relaxed),
            promise_refusals: st.promise_refusals.load(Ordering::Relaxed),
            copies_dropped_for_room_bytes: st.copies_dropped_for_room.load(Ordering::Relaxed),
            room_retries: st.room_retries.load(Ordering::Relaxed),
            metadata_refused: st.metadata_refused.load(Ordering::Relaxed),
            rescued_bytes: st.rescued_bytes.load(Ordering::Relaxed),
            pins_yielded_bytes: st.pins_yielded_bytes.load(Ordering::Relaxed),
            state,
        }
    }

    /// Why PM is short of room for metadata, in words (`terrace status`):
    /// when data rules pin to PM holds most of PM's data, the rules are
    /// what fills it, and migration makes room by moving some of that data
    /// down (`Fs::yield_pm_pins_to_metadata`); say so, and what to do.
    fn pm_full_state(&self) -> String {
        let pinned = self.pm_pinned_bytes();
        let data = self.tier_use(terrace_format::TierId::PM).0;
        if pinned > 0 && pinned * 2 >= data {
            format!(
                "PM full of data pinned to it by rules ({} MiB): new data goes to the block \
                 tiers, and pinned data moves there as metadata needs room, leaving those \
                 rules unmet; pin less to PM, or clear rules with `terrace rule -r DIR auto`",
                pinned >> 20
            )
        } else {
            "PM full: new data goes to the block tiers, new metadata waits for migration".into()
        }
    }

    /// ENOSPC when an operation that adds metadata — about `blocks` blocks
    /// of log pages on PM — would take blocks the dirty cached pages need.
    /// Their write-back may take every free block of PM (down to none,
    /// `alloc_write_back`) and of the block tiers, so metadata may grow only
    /// while those cover the dirty pages and it. Foreground log pages take
    /// PM blocks without asking for room (an unlink on a full pool must
    /// commit), so the operations that only add — create, mkdir, symlink,
    /// link, setxattr — ask here first; unlink, rmdir and truncate, which
    /// free room, do not. Without dirty pages nothing acknowledged is at
    /// stake and nothing is refused here. (xfstests generic/449: xattrs
    /// filling a full pool took the PM its accepted pages were counting on.)
    pub(crate) fn check_metadata_room(&self, blocks: u64) -> FsResult<()> {
        if self.tiers.is_empty() {
            return Ok(());
        }
        let (free, dirty) = self.metadata_room_and_dirty_blocks();
        if dirty == 0 {
            return Ok(());
        }
        if free < dirty.saturating_add(blocks) {
            self.space_stats
                .metadata_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(crate::types::errno(libc::ENOSPC));
        }
        Ok(())
    }

    /// The room metadata and the dirty cached pages share, and the blocks
    /// those pages need: [`Fs::room_and_dirty_blocks`] with PM's free part
    /// of the metadata reserve added to the room, as their write-back may
    /// take the reserve too (`alloc_write_back`). Metadata may grow into
    /// what the pages do not need.
    pub(crate) fn metadata_room_and_dirty_blocks(&self) -> (u64, u64) {
        let (room, dirty) = self.room_and_dirty_blocks();
        let reserve_free = self.pm_free_unpromised().min(self.pm_reserve_blocks());
        (room + reserve_free, dirty)
    }

    /// Waits, with no lock held, until PM has room for metadata: at least
    /// half the metadata reserve free beyond the promised blocks. While it is
    /// short, migration is woken (it moves data down and frees PM); the wait
    /// ends when the room is back, or when PM has not become freer for
    /// [`STALL_LIMIT`] or at once when nothing can free it
    /// ([`Fs::nothing_frees_pm`]) (the operation then goes on and fails with ENOSPC if
    /// it really finds no room; later operations do not wait again until PM
    /// is freer than it was then). Pools without block tiers, or without a
    /// migration thread, never wait.
    pub(crate) fn wait_for_pm_room(&self) {
        if self.tiers.is_empty() || self.pm_free_unpromised() >= self.pm_reserve_blocks() / 2 {
            return;
        }
        if self.unmounted.load(Ordering::Relaxed) || !self.migration_thread_running() {
            return;
        }
        // After a wait that gave up, later operations do not wait again
        // until PM is freer than it was then: a PM that holds little but
        // metadata would otherwise cost every operation the whole limit.
        let stalled_at = self.space_stats.stalled_at_free.load(Ordering::Relaxed);
        if stalled_at != 0 && self.alloc.free() < stalled_at {
            return;
        }
        let start = Instant::now();
        let mut best = self.alloc.free();
        let mut progress_at = start;
        self.space_stats.waits.fetch_add(1, Ordering::Relaxed);
        // One look at the dead blocks (a walk over the extents).
        let dead = self.block_tier_dead_blocks() > 0;
        loop {
            self.wake_what_frees_pm();
            if self.pm_free_unpromised() >= self.pm_reserve_blocks() {
                self.space_stats.stalled_at_free.store(0, Ordering::Relaxed);
                break;
            }
            let free = self.alloc.free();
            if free > best {
                best = free;
                progress_at = Instant::now();
                continue;
            }
            let hopeless = self.nothing_frees_pm(dead);
            if hopeless
                || progress_at.elapsed() > STALL_LIMIT
                || self.unmounted.load(Ordering::Relaxed)
            {
                self.space_stats
                    .stalled_at_free
                    .store(free + 1, Ordering::Relaxed);
                if self.space_stats.stalls.fetch_add(1, Ordering::Relaxed) == 0 {
                    let why = if hopeless {
                        "every block tier is full, so nothing can leave PM".to_string()
                    } else {
                        format!("migration freed none for {} s", STALL_LIMIT.as_secs())
                    };
                    self.notice(format!(
                        "PM has no room for metadata and {why}: operations go on and may fail \
                         with ENOSPC ({})",
                        self.migration_status().waiting
                    ));
                }
                break;
            }
        }
        self.space_stats
            .wait_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Whether no background work can free PM now, so a wait for PM room
    /// would wait in vain: the block tiers have no room for data to leave
    /// PM into, no move is in flight, they hold no dead blocks the cleaner
    /// could recycle (`dead`, looked at once by the caller), PM holds no
    /// clean data (its PM side can be dropped for free), and no cached
    /// page is dirty or being written back (write-back gives back the
    /// blocks promised to it). A create on a pool full on every tier then
    /// fails at once, as on ext4, instead of after [`STALL_LIMIT`].
    fn nothing_frees_pm(&self, dead: bool) -> bool {
        self.nowhere_to_move_pm_data(dead)
            && self.pm_clean_dirty().0 == 0
            && self.cache.dirty_blocks() == 0
            && self.wb_inflight_blocks.load(Ordering::Relaxed) == 0
    }

    /// Whether no data can leave PM now: the block tiers have no room for
    /// data, no move is in flight, and they hold no dead blocks the
    /// cleaner could recycle into room (`dead`, looked at once by the
    /// caller: a walk over the extents).
    fn nowhere_to_move_pm_data(&self, dead: bool) -> bool {
        !dead
            && self.data_room_blocks() == 0
            && self.migrator.move_blocks_pending.load(Ordering::Relaxed) == 0
    }

    /// One turn of a wait for PM room: wakes migration (it moves data down)
    /// and write-back (dirty cached pages hold promised blocks; writing
    /// them back gives those back), then sleeps 2 ms.
    fn wake_what_frees_pm(&self) {
        self.kick_migration();
        self.cache.wake_writeback();
        std::thread::sleep(Duration::from_millis(2));
    }

    /// Waits, with no lock held, for PM to get freer after a removal
    /// (unlink, rmdir) was refused log room: its directory's log needs an
    /// entry, or its whole state when the log is on a block tier (a recall),
    /// and the removal reserve (rule 6) was used up. Removals free room, but
    /// often on a block tier only (a file whose data and log left PM), so
    /// `rm -rf` of a pool full on every tier failed on thousands of names
    /// while the names before had freed SSD room that migration could move
    /// PM's data into. Wakes migration and write-back and drops PM sides of
    /// clean data until PM has more free blocks than at the call — true:
    /// worth another try — or until PM has got no freer for
    /// [`REMOVAL_STALL`], or at once when the block tiers have neither room
    /// for data to leave PM into nor dead blocks the cleaner could turn into
    /// some — after a rescue of a little PM data into a block tier's
    /// recycling reserve, if one may run (`migrate/rescue.rs`), which is
    /// true when it freed PM. After a wait that gave up, removals do not wait
    /// again until the pool's space looks different ([`Fs::space_look`]):
    /// on a pool that nothing can free, each would wait the whole limit.
    /// Pools without block tiers or a migration thread never wait.
    pub(crate) fn wait_for_removal_room(&self) -> bool {
        if self.tiers.is_empty()
            || self.unmounted.load(Ordering::Relaxed)
            || !self.migration_thread_running()
            || self.is_frozen()
        {
            return false;
        }
        let stalled = &self.space_stats.removal_stalled_look;
        if stalled.load(Ordering::Relaxed) == self.space_look() {
            return false;
        }
        let before = self.alloc.free();
        let start = Instant::now();
        self.space_stats.waits.fetch_add(1, Ordering::Relaxed);
        // Data leaves PM only into room for data on a block tier, or room
        // the cleaner makes of dead blocks there (a pass of the migration
        // thread recycles them). One look at the dead blocks (a walk over
        // the extents), not one per turn.
        let dead = self.block_tier_dead_blocks() > 0;
        let freer = loop {
            if self.pm_clean_dirty().0 > 0 {
                self.evict_clean(self.pm_reserve_blocks() * BLOCK_SIZE);
            }
            if self.alloc.free() > before {
                break true;
            }
            if self.nowhere_to_move_pm_data(dead) || start.elapsed() > REMOVAL_STALL {
                // Nothing else frees PM: the rescue, if it may.
                break self.rescue_pm_for_removal();
            }
            if self.unmounted.load(Ordering::Relaxed) {
                break false;
            }
            self.wake_what_frees_pm();
        };
        stalled.store(if freer { 0 } else { self.space_look() }, Ordering::Relaxed);
        self.space_stats
            .wait_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        freer
    }

    /// Blocks new data can still take, as [`Fs::say_room`] says it: the
    /// room rule's with block tiers, PM's free blocks beyond the metadata
    /// reserve without (where the room rule does not apply).
    fn room_to_say(&self) -> u64 {
        if self.tiers.is_empty() {
            self.pm_data_room_blocks()
        } else {
            self.data_room_blocks()
        }
    }

    /// Dead blocks of the SSD and HDD tiers (released inside extents that
    /// still hold data, until recycled).
    fn block_tier_dead_blocks(&self) -> u64 {
        self.tiers
            .iter()
            .filter(|t| t.kind != terrace_format::TierKind::S3)
            .map(|t| t.space.stats().dead_blocks)
            .sum()
    }

    /// One number for how the pool's space stands: free PM blocks, and
    /// each block tier's free blocks and count of allocations and releases
    /// (a removal changes it even when what it frees stays dead until
    /// recycled). Cheap: no walk over extents. Never 0.
    fn space_look(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.alloc.free().hash(&mut h);
        for t in self.tiers.iter() {
            (t.space.free_blocks(), t.space.changes()).hash(&mut h);
        }
        h.finish().max(1)
    }

    /// Runs `op`, a foreground operation that takes about `blocks` blocks of
    /// new data room and does all or nothing, once more each time it fails
    /// with ENOSPC and room may have come back since: a window of moves in
    /// flight ended, or dropping PM copies of clean data freed PM (at most
    /// [`ROOM_RETRIES`] more times).
    ///
    /// Why: the data of a move or copy in flight takes room on two tiers
    /// until its commit, and so does PM data with a clean copy on a block
    /// tier (a policy that keeps copies, NVMFS), though one side is free
    /// after the commit or can be dropped for free. Near a full pool, the
    /// room rule (`Fs::check_room`) would otherwise refuse writes while a
    /// migration window of such data (several MiB) is still reclaimable.
    pub(crate) fn retry_freeing_room<T>(
        &self,
        blocks: u64,
        mut op: impl FnMut() -> FsResult<T>,
    ) -> FsResult<T> {
        let mut tries = 0;
        loop {
            // Moves committed while `op` ran may have freed its room already.
            let moves_before = self.migrator.move_windows_done.load(Ordering::Relaxed);
            let r = op();
            match &r {
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOSPC)
                        && tries < ROOM_RETRIES
                        && (self.migrator.move_windows_done.load(Ordering::Relaxed)
                            != moves_before
                            || self.reclaim_room(blocks)) =>
                {
                    tries += 1
                }
                _ => return r,
            }
        }
    }

    /// Says in the daemon's log when new data starts being refused for room
    /// (`r` is ENOSPC) and when it is accepted again — each change once, not
    /// once per write. For foreground writes and fallocate; `blocks` is what
    /// the request asked for. "Again" means room for the request whose
    /// refusal was said, not a smaller write that fits: on a full pool that
    /// frees and takes a few blocks by turns, each small write used to end
    /// the full state and the next large one to start it, two lines each
    /// time (422 of them in six minutes of fsstress on a full pool).
    ///
    /// The line says which room was short ([`Fs::full_line`]): data blocks,
    /// or PM room for the request's log (metadata) while data had room.
    pub(crate) fn say_room<T>(&self, r: &FsResult<T>, blocks: u64) {
        let full = &self.space_stats.full;
        match r {
            Err(e)
                if e.raw_os_error() == Some(libc::ENOSPC)
                    && !full.swap(true, Ordering::Relaxed) =>
            {
                self.space_stats
                    .full_request_blocks
                    .store(blocks, Ordering::Relaxed);
                self.notice(self.full_line(blocks));
            }
            Ok(_)
                if full.load(Ordering::Relaxed)
                    && self.room_to_say()
                        >= self.space_stats.full_request_blocks.load(Ordering::Relaxed)
                    && full.swap(false, Ordering::Relaxed) =>
            {
                self.notice("the pool has room again: writes are accepted".into());
            }
            _ => {}
        }
    }

    /// The daemon's line for a write of `blocks` blocks refused with
    /// ENOSPC, naming the room that was short. When the room for data
    /// ([`Fs::room_to_say`]) holds the request, what refused it was PM's
    /// room for its log — the log promise of cached data
    /// ([`Fs::check_log_promise`]) or a log page (`Fs::log_room`): PM full
    /// of metadata while the block tiers have room for data. The line then
    /// gives PM's free, promised and reserved room, and the data room as
    /// not short; else the data room the request did not fit in. It gave
    /// the data numbers only, and a PM full of metadata read as "a request
    /// for 65540 KiB; 259584 KiB of room left".
    fn full_line(&self, blocks: u64) -> String {
        let kib = |b: u64| b * BLOCK_SIZE / 1024;
        let room = self.room_to_say();
        if room >= blocks {
            format!(
                "the pool is full: writes are refused with ENOSPC (no PM room for metadata: \
                 the log of a request for {} KiB did not fit in PM's {} KiB free ({} KiB of \
                 it promised to write-back; metadata reserve {} KiB); data blocks are not \
                 short: {} KiB of room left for data)",
                kib(blocks),
                kib(self.alloc.free()),
                kib(self.promised_blocks()),
                kib(self.pm_reserve_blocks()),
                kib(room)
            )
        } else {
            format!(
                "the pool is full: writes are refused with ENOSPC (no room for data blocks: \
                 a request for {} KiB; {} KiB of room left for data)",
                kib(blocks),
                kib(room)
            )
        }
    }

    /// Waits for the window of moves in flight, if any, to end, then drops
    /// the PM side of clean data, coldest first, until `blocks` blocks plus
    /// the metadata reserve are freed; again while either did something and
    /// the room is still short (at most four rounds). Whether room may have
    /// come back (also when the pool has `blocks` of room by now). Called
    /// with no lock held.
    fn reclaim_room(&self, blocks: u64) -> bool {
        if self.tiers.is_empty() {
            return false;
        }
        let mut progressed = false;
        // A window of moves may start between the refusal and this look
        // (its blocks then count on both tiers until it commits): look again
        // after each wait, a few times.
        for _ in 0..4 {
            // Frees wait for readers of block-tier data (`read_pins`): at
            // most one device read each.
            let deferred = self.read_pins.wait_deferred(STALL_LIMIT);
            let waited = self.wait_for_moves_in_flight() || deferred;
            let mut freed = 0;
            if self.pm_clean_dirty().0 > 0 {
                let goal = blocks.saturating_add(self.pm_reserve_blocks()) * BLOCK_SIZE;
                freed = self.evict_clean(goal);
                self.space_stats
                    .copies_dropped_for_room
                    .fetch_add(freed, Ordering::Relaxed);
            }
            // Migration may also have freed room meanwhile (e.g. promoted
            // clean copies, which is never "in flight").
            if self.data_room_blocks() >= blocks {
                progressed = true;
                break;
            }
            let moving = self.migrator.move_blocks_pending.load(Ordering::Relaxed) > 0;
            if !waited && freed == 0 && !moving {
                break;
            }
            progressed = true;
        }
        // Still short, with dead blocks in partly valid extents of the block
        // tiers: recycle them now rather than fail (`clean.rs`). Or the
        // room came back by itself since the refusal (a write-back or a
        // move ended): worth another try too.
        if self.data_room_blocks() >= blocks || self.recycle_for_room(blocks) {
            progressed = true;
        }
        if progressed {
            self.space_stats
                .room_retries
                .fetch_add(1, Ordering::Relaxed);
        }
        progressed
    }

    /// Waits (at most [`STALL_LIMIT`]) for the window of moves in flight, if
    /// any, to end; whether there was one.
    fn wait_for_moves_in_flight(&self) -> bool {
        let m = &self.migrator;
        if m.move_blocks_pending.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let windows = m.move_windows_done.load(Ordering::Relaxed);
        let start = Instant::now();
        while m.move_blocks_pending.load(Ordering::Relaxed) > 0
            && m.move_windows_done.load(Ordering::Relaxed) == windows
            && start.elapsed() < STALL_LIMIT
            && !self.unmounted.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// How PM's room stands, for `terrace status`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SpaceStatus {
    /// PM bytes that hold metadata: superblocks, journal, inode table and
    /// the blocks holding log pages.
    pub pm_metadata_bytes: u64,
    /// Of those, the blocks holding log pages.
    pub pm_log_bytes: u64,
    /// Free PM bytes.
    pub pm_free_bytes: u64,
    /// PM bytes kept for log pages: data stops going to PM below this.
    pub pm_reserve_bytes: u64,
    /// PM bytes promised to the write-back commits of cached data.
    pub promised_bytes: u64,
    /// Operations that waited for migration to free PM, and for how long.
    pub waits: u64,
    /// Total wait, milliseconds.
    pub wait_ms: u64,
    /// Waits that ended because PM stopped getting freer.
    pub stalls: u64,
    /// Cached writes refused because PM could not hold their log entries.
    pub promise_refusals: u64,
    /// Bytes of PM copies of clean data dropped because a write found no room.
    pub copies_dropped_for_room_bytes: u64,
    /// Operations refused for room that were tried again after moves in
    /// flight ended or clean copies were dropped.
    pub room_retries: u64,
    /// Operations adding metadata refused with ENOSPC: the PM they would
    /// take was what dirty cached pages need.
    #[serde(default)]
    pub metadata_refused: u64,
    /// Bytes of PM data the rescue moved into a block tier's recycling
    /// reserve so that removals on a pool full on every tier could go on
    /// (`migrate/rescue.rs`).
    #[serde(default)]
    pub rescued_bytes: u64,
    /// Bytes of data pinned to PM by rules that migration moved to a block
    /// tier because metadata needed PM (`rules.rs`).
    #[serde(default)]
    pub pins_yielded_bytes: u64,
    /// PM's state in words ("" when there is room).
    pub state: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_space::LogPage;

    /// Log bytes `entries` write entries can take (entries of 48 bytes).
    fn needed(log: &Log, entries: u64) -> u64 {
        log_bytes_needed_for(log, entries * WRITE_ENTRY_BYTES, WRITE_ENTRY_BYTES)
    }

    #[test]
    fn a_new_file_needs_one_small_page_for_a_few_entries() {
        let log = Log::default();
        assert_eq!(needed(&log, 0), 0);
        assert_eq!(needed(&log, 1), 256);
        assert_eq!(needed(&log, 4), 256);
        // A page is counted as holding its size less the header and less
        // what its end may waste (one entry but 8 bytes): 200 of 256 bytes.
        assert_eq!(needed(&log, 5), 256 + 512);
    }

    #[test]
    fn entries_that_fit_after_the_tail_need_nothing_and_pages_double() {
        let log = Log {
            head: 4096,
            tail: 4096 + 16 + 48,
            pages: vec![LogPage {
                off: 4096,
                size: 256,
            }],
            entries: 1,
            ..Log::default()
        };
        assert_eq!(needed(&log, 4), 0);
        assert_eq!(needed(&log, 5), 512);
        let big = needed(&log, 1000);
        assert!((1000 * 48..=2 * 1000 * 48 + 4096).contains(&big), "{big}");
    }
}
