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
use crate::types::{errno, FsResult, Ino};
use terrace_format::{PhysBlock, TierId, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

/// Blocks allocated for new data on one tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRuns {
    /// Tier id (0 = PM).
    pub tier: TierId,
    /// Runs of blocks on that tier.
    pub runs: Vec<Run>,
}

/// What a sequential reader's cache miss on an object tier fetches at least
/// (the rest of the write entry, up to this much): four ranged GETs of 2 MiB
/// in flight together (design.md §5n, reads).
const OBJECT_READ_AHEAD_BYTES: u64 = 8 << 20;

/// How many read-ahead windows past the one a sequential reader fetches
/// are fetched in the background meanwhile (`BlockMedia::read_ahead`;
/// design.md §5n, reads): their GETs overlap the serving of the window
/// read now, instead of starting when the reader gets there. Each is a
/// window of [`OBJECT_READ_AHEAD_BYTES`], fetched as one GET (per part it
/// spans); the object tier holds at most four (`AHEAD_BYTES` in
/// `media/src/object/ahead.rs`).
const OBJECT_READ_AHEAD_WINDOWS: u64 = 3;

/// Blocks of a tiered pool's room that new data never takes (1 MiB): the
/// margin for log pages background work adds on PM without asking, so the
/// write-back of accepted pages always finds its blocks
/// ([`Fs::data_room_blocks`]; xfstests generic/449).
pub const ROOM_SLACK_BLOCKS: u64 = 256;

impl Fs {
    /// PM blocks kept free for log pages (the metadata reserve): data stops
    /// going to PM below this, beyond the blocks promised to write-back
    /// (`space.rs`). PM-only pools keep it too (since 2026-11-25), so a
    /// pool that data filled can still commit a hole punch, an unlink or a
    /// truncate (xfstests generic/256), as ext4's reserved blocks allow.
    pub(crate) fn pm_reserve_blocks(&self) -> u64 {
        (self.alloc.total() / 64).max(32)
    }

    /// The part of the metadata reserve only removals may take (unlink,
    /// rmdir, removexattr, log compaction; `space.rs` rule 4), and that the
    /// inode table's growth leaves too.
    pub(crate) fn pm_removal_reserve_blocks(&self) -> u64 {
        self.pm_reserve_blocks() / 4
    }

    /// Allocates `n` blocks on the tier `want` if it has room, else wherever
    /// there is room (PM first). ENOSPC only when no tier has room.
    pub(crate) fn alloc_data_on(&self, want: TierId, n: u64) -> FsResult<DataRuns> {
        if !want.is_pm() {
            if let Some(t) = self.tiers.iter().find(|t| t.id == want) {
                if let Some(runs) = t.alloc_data(n) {
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

    /// Blocks the pool can still give to new data: free PM blocks beyond the
    /// log reserve plus allocatable blocks of every block tier, less one block
    /// for every dirty page of the DRAM cache (each needs a new block when it
    /// is written back; blocks a write-back already holds for its pages are
    /// not counted twice).
    ///
    /// Invariant kept by [`Fs::check_room`]: a write accepted into the cache
    /// always finds a block at write-back, so an application that got a
    /// successful `write()` never loses it to ENOSPC later (as ext4's delayed
    /// allocation reserves space at `write()`).
    ///
    /// PM data that also has a copy on a block tier, and data being moved,
    /// take room on two tiers here though one side is (or can be made) free:
    /// a write refused for room waits for the moves and drops those PM
    /// copies, then tries again ([`Fs::retry_freeing_room`]).
    ///
    /// [`ROOM_SLACK_BLOCKS`] are left out as well: background work (the
    /// commits of moves and extent recycling) adds log pages on PM without
    /// asking for room, and the write-back of accepted pages, which may take
    /// every free block, must still find theirs afterwards.
    pub(crate) fn data_room_blocks(&self) -> u64 {
        let (room, dirty) = self.room_and_dirty_blocks();
        room.saturating_sub(dirty).saturating_sub(ROOM_SLACK_BLOCKS)
    }

    /// The two sides of [`Fs::data_room_blocks`] (less its slack): blocks for data before
    /// the dirty pages are counted (free PM beyond the log reserve,
    /// allocatable blocks of the block tiers, blocks write-backs hold), and
    /// the blocks the dirty pages of the DRAM cache need.
    pub(crate) fn room_and_dirty_blocks(&self) -> (u64, u64) {
        let pm = self.pm_data_room_blocks();
        let tiers: u64 = self.tiers.iter().map(|t| t.room_blocks()).sum();
        let inflight = self
            .wb_inflight_blocks
            .load(std::sync::atomic::Ordering::Relaxed);
        (pm + tiers + inflight, self.cache.dirty_blocks())
    }

    /// ENOSPC when `n` new blocks of data would eat into the room dirty
    /// cached pages need (pools with block tiers; a PM-only pool has no cache
    /// and its allocator says ENOSPC by itself).
    pub(crate) fn check_room(&self, n: u64) -> FsResult<()> {
        if !self.tiers.is_empty() && n > self.data_room_blocks() {
            return Err(errno(libc::ENOSPC));
        }
        Ok(())
    }

    /// Allocates `n` blocks for new foreground data (a write, a zeroed block,
    /// fallocate) on `want` or wherever there is room, keeping the room dirty
    /// cached pages need.
    /// `want` = PM means "PM first" without counting an overflow.
    pub(crate) fn alloc_new_data(&self, want: TierId, n: u64) -> FsResult<DataRuns> {
        if self.tiers.is_empty() {
            return self.alloc_data(n);
        }
        let _room = self.room_lock.lock();
        self.check_room(n)?;
        if want.is_pm() {
            self.alloc_data(n)
        } else {
            self.alloc_data_on(want, n)
        }
    }

    /// One block that replaces a block a file maps, for a change that frees
    /// more than it takes or as much: the partial block a truncate or a
    /// hole punch keeps, rewritten with its cut part zeroed
    /// ([`Fs::zeroed_block`]). Taken as new data when there is room; when
    /// there is none, beyond the room check, from PM down to half of its
    /// removal reserve (`space.rs` rule 4: what only removals may take, as
    /// this change is one), else from any block tier: a full pool must
    /// still shrink its files (ext4 cuts the block in place), and the block
    /// the change frees pays it back. ENOSPC only when PM is down to half
    /// its removal reserve and every tier is full.
    pub(crate) fn alloc_replacement_block(&self) -> FsResult<DataRuns> {
        match self.alloc_new_data(TierId::PM, 1) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
            r => return r,
        }
        let _room = self.room_lock.lock();
        let mut pieces =
            self.alloc_data_spread(TierId::PM, 1, self.pm_removal_reserve_blocks() / 2)?;
        // One block asked for: one piece of one block.
        pieces.pop().ok_or_else(|| errno(libc::ENOSPC))
    }

    /// [`Fs::alloc_new_data`] that may spread the blocks over several tiers
    /// ([`Fs::alloc_data_spread`]) when no single tier has room for all.
    pub(crate) fn alloc_new_pieces(&self, want: TierId, n: u64) -> FsResult<Vec<DataRuns>> {
        if self.tiers.is_empty() {
            return Ok(vec![self.alloc_data(n)?]);
        }
        let _room = self.room_lock.lock();
        self.check_room(n)?;
        if want.is_pm() {
            if let Ok(d) = self.alloc_data(n) {
                return Ok(vec![d]);
            }
        }
        self.alloc_data_spread(want, n, self.pm_reserve_blocks())
    }

    /// Allocates `n` blocks on `want` if it has room, else spread over the
    /// tiers with room: as much as fits on `want`, then PM (beyond the log
    /// reserve), then the other block tiers. Pieces are in that order and
    /// together hold exactly `n` blocks. ENOSPC (nothing kept) when all tiers
    /// together lack room. Used by write-back, whose pages were promised a
    /// block each ([`Fs::data_room_blocks`]) but not all on one tier.
    ///
    /// PM gives blocks down to `pm_floor` free (beyond those promised to
    /// write-back commits): the metadata reserve for new data; write-back
    /// short of room may go below it ([`Fs::alloc_write_back`]).
    ///
    /// Nothing is taken unless the tiers' room, counted first, covers `n`:
    /// blocks taken and given back are not always room again — on a
    /// non-overwrite tier, those given back where an extent's given mark
    /// has moved past them since (another allocation took more of it) stay
    /// dead until the extent is recycled (`ExtentSpace::release`). A try
    /// that found PM short after taking the SSD's room used to lose them,
    /// and the write-back's next try, for which they were counted, failed
    /// (xfstests generic/449).
    pub(crate) fn alloc_data_spread(
        &self,
        want: TierId,
        n: u64,
        pm_floor: u64,
    ) -> FsResult<Vec<DataRuns>> {
        if let Ok(d) = self.alloc_data_on(want, n) {
            return Ok(vec![d]);
        }
        let pm_room = self.pm_free_unpromised().saturating_sub(pm_floor);
        let tiers_room: u64 = self.tiers.iter().map(|t| t.room_blocks()).sum();
        if pm_room.saturating_add(tiers_room) < n {
            return Err(errno(libc::ENOSPC));
        }
        let mut pieces: Vec<DataRuns> = Vec::new();
        let mut need = n;
        let mut order: Vec<TierId> = Vec::with_capacity(self.tiers.len() + 1);
        if !want.is_pm() {
            order.push(want);
        }
        order.push(TierId::PM);
        order.extend(self.tiers.iter().map(|t| t.id).filter(|&id| id != want));
        for id in order {
            if need == 0 {
                break;
            }
            let runs = if id.is_pm() {
                let room = self.pm_free_unpromised().saturating_sub(pm_floor);
                let take = room.min(need);
                if take == 0 {
                    continue;
                }
                self.alloc.alloc(take).map(|r| (take, r))
            } else {
                let Some(t) = self.tiers.iter().find(|t| t.id == id) else {
                    continue;
                };
                let take = t.room_blocks().min(need);
                if take == 0 {
                    continue;
                }
                t.alloc_data(take).map(|r| (take, r))
            };
            if let Some((take, runs)) = runs {
                pieces.push(DataRuns { tier: id, runs });
                need -= take;
            }
        }
        if need > 0 {
            for d in pieces {
                self.release_data(d);
            }
            return Err(errno(libc::ENOSPC));
        }
        self.counters
            .placement_overflows
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(pieces)
    }

    /// Blocks [`Fs::alloc_data_spread`] can find on PM (beyond the log
    /// reserve) and the block tiers, object tiers not counted.
    pub(crate) fn block_room_blocks(&self) -> u64 {
        let pm = self.pm_data_room_blocks();
        self.tiers
            .iter()
            .filter(|t| t.kind != terrace_format::TierKind::S3)
            .map(|t| t.room_blocks())
            .fold(pm, u64::saturating_add)
    }

    /// [`Fs::pm_data_room_blocks`] in bytes.
    pub(crate) fn pm_data_free_bytes(&self) -> u64 {
        self.pm_data_room_blocks() * BS
    }

    /// Allocates `n` blocks for file data (all on one tier), PM first. ENOSPC
    /// only when no tier has room.
    pub(crate) fn alloc_data(&self, n: u64) -> FsResult<DataRuns> {
        if self.pm_free_unpromised() >= n + self.pm_reserve_blocks() {
            if let Some(runs) = self.alloc.alloc(n) {
                return Ok(DataRuns {
                    tier: TierId::PM,
                    runs,
                });
            }
        }
        for t in &self.tiers {
            if let Some(runs) = t.alloc_data(n) {
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
        if !d.tier.is_pm() {
            self.sync_tier(d.tier)?;
        }
        Ok(())
    }

    /// [`Fs::store_data`] without the final sync of a block tier: the data is
    /// written but not yet durable there (the caller syncs the tier before it
    /// commits an entry that points at it). PM data is flushed as usual.
    pub(crate) fn write_data_unsynced(&self, d: &DataRuns, buf: &[u8]) -> FsResult<()> {
        let mut at = 0usize;
        if d.tier.is_pm() {
            for &(b, n) in &d.runs {
                let len = (n * BS) as usize;
                self.media.write(b.byte_offset(), &buf[at..at + len]);
                self.media.flush(b.byte_offset(), n * BS);
                self.pm_io.record_write(len as u64);
                at += len;
            }
            return Ok(());
        }
        let t = self.tier(d.tier)?;
        for &(b, n) in &d.runs {
            let len = (n * BS) as usize;
            // The blocks are fresh (never rewritten while referenced): their
            // checksums can be recorded before the entry that will use them.
            t.sums.record(b, &buf[at..at + len]);
            t.media
                .write_blocks(b.get(), &buf[at..at + len])
                .map_err(|e| self.device_error(t.id, e))?;
            self.device_took_write(t);
            at += len;
        }
        Ok(())
    }

    /// Syncs block tier `id`, noting a device that is full.
    pub(crate) fn sync_tier(&self, id: TierId) -> FsResult<()> {
        self.tier(id)?
            .media
            .sync()
            .map_err(|e| self.device_error(id, e))
    }

    /// Notes an error of block tier `id`'s device: ENOSPC there means the
    /// device (or the file system holding its image) is full — counted, the
    /// tier marked full (`device_full.rs`) and logged at the 1st, 2nd, 4th …
    /// episode — which no migration can help. Any other error
    /// (EIO …) is counted and logged at the 1st, 2nd, 4th, 8th … occurrence.
    pub(crate) fn device_error(&self, id: TierId, e: std::io::Error) -> std::io::Error {
        if e.raw_os_error() != Some(libc::ENOSPC) {
            let n = 1 + self
                .counters
                .device_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() {
                self.notice(format!(
                    "tier {id}: device error: {e} ({n} device error{} since mount); the operation failed with it",
                    if n == 1 { "" } else { "s" }
                ));
            }
            return e;
        }
        self.counters
            .device_full_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Ok(t) = self.tier(id) else {
            return e;
        };
        let change = t
            .full
            .note_full(std::time::Instant::now(), t.media.host_free_bytes());
        if let crate::device_full::Change::Began(n) = change {
            if n.is_power_of_two() {
                self.notice(format!(
                    "tier {id}: its device, or the file system holding its image, is full (ENOSPC on a write to allocated blocks): its free space no longer counts as room for new data, and writes to it are tried again after waits of 1 s, 2 s, 4 s … up to a minute, or as soon as its file system has {} MiB more room{}",
                    crate::device_full::HOST_GROWTH >> 20,
                    if n == 1 { String::new() } else { format!(" ({n} times since mount)") }
                ));
            }
        }
        e
    }

    /// Looks at every block tier whose device is full
    /// (`device_full.rs`): one whose host file system has grown is room
    /// again; a device without such a host gets one zeroed free block
    /// written when its back-off wait is over, which ends the episode if
    /// it succeeds. Called by the write-back thread every pass.
    pub(crate) fn recheck_full_devices(&self) {
        for t in self.tiers.iter().filter(|t| t.full.is_full()) {
            let now = std::time::Instant::now();
            if t.full.knows_host() {
                let change = t.full.end_if_host_grew(now, t.media.host_free_bytes());
                self.say_device_change(t, change);
                continue;
            }
            if t.kind == terrace_format::TierKind::S3 || t.refuses_allocation() {
                continue;
            }
            let Some(runs) = t.space.alloc(1) else {
                continue;
            };
            let (b, _) = runs[0];
            match t.media.write_blocks(b.get(), &[0u8; BS as usize]) {
                Ok(()) => self.device_took_write(t),
                Err(e) => {
                    let _ = self.device_error(t.id, e);
                }
            }
            // Never referenced: no commit to wait for.
            for (b, n) in runs {
                t.free(b, n);
            }
        }
    }

    /// Block tiers that begin full (`device_full.rs`), looked at when the
    /// pool is mounted and when a tier is attached: an image file with
    /// unallocated blocks on a file system with less than
    /// [`crate::device_full::HOST_GROWTH`] free would take new data into
    /// room it cannot have, and fail its write-back with ENOSPC after the
    /// writes were accepted. Its episode begins now instead (its free space
    /// is no room; one try per wait, or the host growing, ends it). A fully
    /// allocated image needs nothing from its host and is left alone.
    pub(crate) fn note_full_hosts(&self) {
        for t in self.tiers.iter() {
            if t.kind == terrace_format::TierKind::S3 || t.full.is_full() {
                continue;
            }
            let (Some(unbacked), Some(free)) =
                (t.media.unbacked_bytes(), t.media.host_free_bytes())
            else {
                continue;
            };
            if unbacked == 0 || free >= crate::device_full::HOST_GROWTH {
                continue;
            }
            let change = t.full.note_full(std::time::Instant::now(), Some(free));
            if let crate::device_full::Change::Began(_) = change {
                self.notice(format!(
                    "tier {}: the file system holding its image is full ({} KiB free, {} MiB of the image not allocated yet): its free space counts as no room for new data until that file system has {} MiB more room, or a write to the tier succeeds (tried after 1 s, 2 s, 4 s … up to a minute)",
                    t.id,
                    free >> 10,
                    unbacked >> 20,
                    crate::device_full::HOST_GROWTH >> 20
                ));
            }
        }
    }

    /// Notes a write to block tier `t` that succeeded: an episode of its
    /// device being full ends (`device_full.rs`), said in the log when its
    /// beginning was.
    pub(crate) fn device_took_write(&self, t: &crate::tier::BlockTier) {
        let change = t.full.note_write_ok(std::time::Instant::now());
        self.say_device_change(t, change);
    }

    /// Logs the end of an episode of `t`'s device being full when its
    /// beginning was logged.
    fn say_device_change(&self, t: &crate::tier::BlockTier, change: crate::device_full::Change) {
        if let crate::device_full::Change::Ended(d) = change {
            if t.full.episodes().is_power_of_two() {
                self.notice(format!(
                    "tier {}: its device has room again (it was full for {:.1} s)",
                    t.id,
                    d.as_secs_f64()
                ));
            }
        }
    }

    /// Returns allocated but unused blocks.
    pub(crate) fn release_data(&self, d: DataRuns) {
        self.free_runs(d.runs.into_iter().map(|(b, n)| (d.tier, b, n)).collect());
    }

    /// The mounted block tier `id`.
    pub(crate) fn tier(&self, id: TierId) -> FsResult<&crate::tier::BlockTier> {
        self.tiers
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| errno(libc::EIO))
    }

    /// Whether `id` is a block tier being removed (retiring: nothing may
    /// be allocated or promoted there).
    pub(crate) fn retiring(&self, id: TierId) -> bool {
        !id.is_pm() && self.tier(id).is_ok_and(|t| t.space.is_retiring())
    }

    /// Reads `dst.len()` bytes of inode `ino`'s data starting `off_in_block`
    /// bytes into block `block` of tier `tier`.
    pub(crate) fn read_data(
        &self,
        ino: Ino,
        tier: TierId,
        block: PhysBlock,
        off_in_block: u64,
        dst: &mut [u8],
    ) -> FsResult<()> {
        if tier.is_pm() {
            self.media.read(block.byte_offset() + off_in_block, dst);
            self.pm_io.record_read(dst.len() as u64);
            return Ok(());
        }
        let t = self.tier(tier)?;
        let first = block + off_in_block / BS;
        let skip = (off_in_block % BS) as usize;
        let nblocks = (skip + dst.len()).div_ceil(BS as usize);
        let len = nblocks * BS as usize;
        let mut buf = self.read_buf(len);
        t.media.read_blocks(first.get(), &mut buf[..len])?;
        self.verify_read(ino, tier, first, &buf[..len])?;
        dst.copy_from_slice(&buf[skip..skip + dst.len()]);
        self.give_read_buf(buf);
        Ok(())
    }

    /// A buffer for a block-tier read of `len` bytes. Reads longer than 512
    /// KiB — what a loop device takes in one request from scattered 4 KiB
    /// pages — use the migrator's pooled, huge-page-backed buffers, so they
    /// reach the device in requests of up to its limit and need no O_DIRECT
    /// bounce copy ([`terrace_media::AlignedBuf`]); shorter ones a plain
    /// heap buffer.
    fn read_buf(&self, len: usize) -> ReadBuf {
        if len > 512 << 10 {
            ReadBuf::Pooled(self.migrator.take_buf(len))
        } else {
            ReadBuf::Heap(vec![0u8; len])
        }
    }

    /// Returns a buffer from [`Fs::read_buf`].
    fn give_read_buf(&self, buf: ReadBuf) {
        if let ReadBuf::Pooled(b) = buf {
            self.migrator.give_buf(b);
        }
    }

    /// Reads `dst.len()` bytes of inode `ino`'s data starting `off_in_block`
    /// bytes into `block` of block tier `tier`, through the DRAM cache. `left`
    /// is how many blocks of the write entry remain from `block` on: a miss
    /// reads up to `max_read_unit_bytes` of them (at least what `dst`
    /// needs) — only what `dst` needs when `read_ahead` is off — and caches
    /// them. Returns whether it fetched from an object tier (a miss there).
    pub(crate) fn read_block_tier(
        &self,
        ino: Ino,
        tier: TierId,
        (block, left): (PhysBlock, u64),
        off_in_block: u64,
        dst: &mut [u8],
        read_ahead: bool,
    ) -> FsResult<bool> {
        // An object tier's requests cost a round trip each: a sequential
        // reader's miss fetches more at once, as parallel ranged GETs, never
        // past the end of its read-ahead window, and one fetch at a time per
        // window, so that readers of the same data (the kernel's concurrent
        // read-ahead requests) find it cached instead of fetching it again,
        // while readers of other data do not wait for it.
        // Every read of an object tier takes its window's fetch lock, also
        // one the access tracer calls random (the kernel's concurrent
        // read-ahead requests can look so): it then finds blocks another
        // reader was fetching instead of fetching them again.
        let object = self.tier(tier)?.kind == terrace_format::TierKind::S3;
        let object_read_ahead = read_ahead && object;
        let unit = if read_ahead {
            let unit = (self.settings.read().max_read_unit_bytes / BS).max(1);
            if object_read_ahead {
                unit.max(OBJECT_READ_AHEAD_BYTES / BS)
            } else {
                unit
            }
        } else {
            1
        };
        let mut blk = block + off_in_block / BS;
        let mut left = left - off_in_block / BS;
        let mut skip = (off_in_block % BS) as usize;
        let mut at = 0usize;
        let mut fetched = false;
        while at < dst.len() {
            // The cached blocks from here on, under one cache lock.
            let need = (skip + dst.len() - at).div_ceil(BS as usize) as u64;
            for p in self.cache.get_clean_run(tier, blk, need) {
                let want = (dst.len() - at).min(BS as usize - skip);
                dst[at..at + want].copy_from_slice(&p[skip..skip + want]);
                at += want;
                skip = 0;
                blk += 1;
                left = left.saturating_sub(1);
            }
            if at == dst.len() {
                break;
            }
            let window = OBJECT_READ_AHEAD_BYTES / BS;
            let mut fetch = if object {
                let asked = std::time::Instant::now();
                let g = self.cache.object_fetch_lock(tier, blk.get() / window);
                if g.is_some_and(|f| {
                    f.tier == tier && f.window == blk.get() / window && f.at >= asked
                }) {
                    // The fetch this reader waited for failed: so does it.
                    return Err(crate::types::errno(libc::EIO));
                }
                if self.cache.has_clean(tier, blk) {
                    // Fetched by another reader while this one waited.
                    continue;
                }
                Some(g)
            } else {
                None
            };
            let mut failed = |e: std::io::Error| {
                if let Some(g) = fetch.as_mut() {
                    **g = Some(crate::cache::FailedFetch {
                        tier,
                        window: blk.get() / window,
                        at: std::time::Instant::now(),
                    });
                }
                self.device_error(tier, e)
            };
            let need = (skip + dst.len() - at).div_ceil(BS as usize) as u64;
            let mut n = left.min(unit.max(need)).max(1);
            if object {
                // Within this window: the next one has a lock of its own.
                n = n.min(window - blk.get() % window);
                // And only up to what is cached already: the kernel's
                // read-ahead requests arrive out of order, so a later part
                // of the window may have been fetched first.
                n = n.min(self.cache.uncached_run(tier, blk, n).max(1));
            }
            let t = self.tier(tier)?;
            let len = (n * BS) as usize;
            let mut read = self.read_buf(len);
            let buf = &mut read[..len];
            t.media.read_blocks(blk.get(), buf).map_err(&mut failed)?;
            // The blocks this read needs must match their checksums; of the
            // read-ahead, only the blocks before a mismatch are kept. A
            // mismatch is read once more first: data damaged on its way (an
            // object tier's network, a flaky link) then reads back right,
            // damage at rest fails again.
            let mut good = self.verified_prefix(ino, tier, blk, buf) as u64;
            if good < need.min(n) {
                t.media.read_blocks(blk.get(), buf).map_err(&mut failed)?;
                good = self.verified_prefix(ino, tier, blk, buf) as u64;
            }
            if good < need.min(n) {
                self.give_read_buf(read);
                return Err(crate::types::errno(libc::EIO));
            }
            self.cache.note_misses(n);
            let take = (dst.len() - at).min((n * BS) as usize - skip);
            dst[at..at + take].copy_from_slice(&buf[skip..skip + take]);
            at += take;
            let pages: Vec<std::sync::Arc<[u8]>> = buf[..(good * BS) as usize]
                .chunks(BS as usize)
                .map(std::sync::Arc::from)
                .collect();
            self.give_read_buf(read);
            self.cache.put_clean(tier, blk, pages);
            fetched |= object;
            blk += n;
            left = left.saturating_sub(n);
            skip = 0;
        }
        Ok(fetched)
    }
}

impl Fs {
    /// The object-tier runs of a sequential file's next windows, captured
    /// under its inode lock by a read that ends at byte `end` of a file of
    /// `fsize` bytes: what [`Fs::object_read_ahead`] may fetch ahead. Each
    /// run is (tier, first block, blocks, byte of the file it holds), the
    /// file's own blocks up to its end, from `end` to the read-ahead
    /// distance and one window more (windows are fetched whole).
    pub(crate) fn object_ahead_runs(&self, i: &crate::inode::Inode, end: u64) -> Vec<AheadRun> {
        let fsize = i.size();
        if end >= fsize || !self.has_object_tier() {
            return Vec::new();
        }
        let first = terrace_format::FileBlock(end / BS);
        let blocks = (OBJECT_READ_AHEAD_WINDOWS + 1) * OBJECT_READ_AHEAD_BYTES / BS;
        let last = fsize.div_ceil(BS);
        i.extents
            .overlaps(first, blocks.min(last - first.get()))
            .into_iter()
            .filter(|(_, e)| self.is_object_tier(e.tier))
            .map(|(s, e)| AheadRun {
                tier: e.tier,
                block: e.block,
                blocks: e.blocks,
                file_byte: s.byte_offset(),
            })
            .collect()
    }

    /// After a sequential reader's miss on an object tier, by a read that
    /// ended at byte `end`: starts the fetch of the windows of `runs`
    /// ([`Fs::object_ahead_runs`]) that begin within
    /// [`OBJECT_READ_AHEAD_WINDOWS`] windows of `end`, in the background
    /// (`BlockMedia::read_ahead`), each whole (within its run) from its
    /// start up to the first block cached. Nothing when the DRAM cache
    /// could not hold them beside the window being read (they reach the
    /// cache through the reads that take them).
    pub(crate) fn object_read_ahead(&self, runs: &[AheadRun], end: u64) {
        let window = OBJECT_READ_AHEAD_BYTES / BS;
        let ahead = OBJECT_READ_AHEAD_WINDOWS * OBJECT_READ_AHEAD_BYTES;
        if self.cache.bound() < 2 * (ahead + OBJECT_READ_AHEAD_BYTES) {
            return;
        }
        for r in runs {
            let Ok(t) = self.tier(r.tier) else { continue };
            let run_end = r.block.get() + r.blocks;
            let mut b = r.block.get();
            while b < run_end && r.file_byte + (b - r.block.get()) * BS < end + ahead {
                let part_end = run_end.min((b / window + 1) * window);
                let n = self.cache.uncached_run(r.tier, PhysBlock(b), part_end - b);
                if n > 0 {
                    t.media.read_ahead(b, n);
                }
                b = part_end;
            }
        }
    }
}

/// An object-tier run a sequential reader may fetch ahead (see
/// [`Fs::object_ahead_runs`]).
pub(crate) struct AheadRun {
    tier: TierId,
    block: PhysBlock,
    blocks: u64,
    file_byte: u64,
}

/// A read buffer of [`Fs::read_buf`] (at least the length asked for).
enum ReadBuf {
    Heap(Vec<u8>),
    Pooled(terrace_media::AlignedBuf),
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Heap(v) => v,
            ReadBuf::Pooled(b) => b,
        }
    }
}

impl std::ops::DerefMut for ReadBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            ReadBuf::Heap(v) => v,
            ReadBuf::Pooled(b) => b,
        }
    }
}
