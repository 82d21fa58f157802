//! Removing a tier of the mounted pool (`terrace tier remove MOUNTPOINT
//! [TIER]`, design.md §3 "Removing a tier from a mounted pool"; the
//! offline command runs the same code on a pool it mounts itself).
//!
//! Extents name tiers by id, so the tiers that stay keep theirs: any tier
//! but PM may go, the superblock then lists ids that skip it (format 8),
//! and a tier attached later takes the id after the last one. A tier goes
//! only once nothing but clean copies is stored on it: the removal moves
//! the files' data off it first. [`Fs::detach_tier`]
//! does it under the tier-change lock (rank `TierChange`, the first of
//! docs/design.md §4a, nothing else held), in this order:
//!
//! 1. **Retire** the tier ([`crate::tier::ExtentSpace::set_retiring`]),
//!    under the room lock: from then on no allocation lands on it — writes,
//!    write-back, migration, log migration and cleaning all allocate
//!    through its extent space, which refuses — no clean copy there is
//!    promoted to primary data (`migrate/mover.rs` checks the mark at the
//!    capture and again under the inode's lock at the commit), and it
//!    counts no free blocks. The rest of the pool must still hold the
//!    blocks the DRAM cache's dirty pages were promised (design §5f):
//!    checked in the same step, refused otherwise.
//! 2. **Refuse** when a placement rule names the tier (the rule would no
//!    longer hold; `rules.rs`; the message names the files). Then
//!    **evacuate** it (`tier_evacuate.rs`, [`Fs::evacuate_tier`]): every
//!    file's data there moves to the next tier below (or, for the last
//!    tier, the nearest block tier above, else PM) with the migration
//!    mechanism, under this lock (the mover takes only locks ranked after
//!    it) — refused before anything moves for a deleted file still open
//!    with data there, or when the target or the rest of the pool lacks
//!    the room (the message says how much is needed and how much there
//!    is). Data it could not move (a file written all along) refuses the
//!    removal. Then **move the inode logs** there (`Fs::relocate_logs`: to
//!    the first other block tier, else back to PM), and refuse when one is
//!    left (a deleted file still open keeps its log).
//! 3. When it is the pool's only block tier, the cache takes no new pages
//!    from step 1 on ([`Fs::cache_takes_writes`]) and what it holds is
//!    written back now (to PM): the pool is PM-only afterwards, where
//!    nothing reserves room for cached pages and `fsync` may be answered
//!    by the kernel.
//! 4. **Settle**: the clean copies on the tier are dropped, one commit of
//!    `Copy` drop entries per file (as extent recycling drops them,
//!    [`crate::migrate::Mode::DropCopy`]; the data's primary stays where it
//!    is), their blocks freed after the readers. Blocks allocated on the
//!    tier before step 1 are counted valid until their commit or release:
//!    while the tier counts valid blocks that no committed state maps —
//!    moves, write-backs or uploads in flight, frees waiting for readers
//!    (`read_pins`) — wait for them, up to [`SETTLE_LIMIT`]. The tier is
//!    **empty** when it counts no valid block and no inode maps anything
//!    there. Data that a move in flight committed there meanwhile refuses
//!    the removal as in step 2.
//! 5. **Commit**: both superblock copies without the tier (the others keep
//!    their records and ids), generation + 1, PM synced. Before it, a crash
//!    leaves the pool naming the tier (empty but for copies, some perhaps
//!    dropped); after it, a pool without it. Either mounts.
//! 6. **Unpublish** the tier ([`crate::tier_list::Appending::remove`]):
//!    lookups no longer find it, references already taken stay valid. Then
//!    close its media ([`crate::tier::BlockTier::close_media`], after the
//!    requests in flight) and forget per-tier state a tier attached later
//!    with the same id must not inherit.
//!
//! A freeze or an unmount (`freeze.rs`, `unmount.rs`) marks the image
//! clean without waiting for this control thread: so from the moment its
//! persisting stops the background threads ([`Fs::pool_stopping`]) the
//! removal writes nothing more — the evacuation's moves stop before their
//! commit (`tier_evacuate.rs`), and the steps after it (logs moved, copies
//! dropped, the superblock committed) look before each write — and it is
//! refused, the retiring mark taken back.
//!
//! A refusal at steps 1–4 takes the retiring mark back and changes nothing
//! but what the evacuation moved (each move crash-safe, committed or not
//! at all: data moved stays moved, nothing is lost) and clean copies
//! already dropped, which are disposable. What stays of
//! a removed tier until unmount is its DRAM bookkeeping (the extent counts
//! and the checksum table, in its slot of the tier list).

use crate::fs::Fs;
use crate::service_state::RULE_XATTR;
use crate::tier::BlockTier;
use crate::types::Ino;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::{FileBlock, PhysBlock, TierId, TierKind, TierRecord, BLOCK_SIZE};

/// How long a removal waits for allocations on the tier made before it
/// (moves, write-backs, uploads in flight) to commit or be released.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Inode logs moved off a retiring tier per device write and sync.
const LOG_BATCH: usize = 1024;

/// A tier removed from the mounted pool: what the superblock said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedTier {
    /// Its record as the superblock had it (id, kind, size, path).
    pub record: TierRecord,
    /// Whether the pool had it mounted (a tier mounted without its device
    /// holds nothing and is only dropped from the superblock).
    pub was_mounted: bool,
    /// Best-effort steps after the commit that did not work (the removal
    /// stands): e.g. an object tier's dead parts left undeleted.
    pub notes: Vec<String>,
}

/// The clean copies on a tier: per inode, its file-block ranges there.
type CopiesOn = Vec<(Ino, Vec<(FileBlock, u64)>)>;

/// What committed state maps on one tier.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Holdings {
    /// Extents of files whose data is there, and their blocks.
    extents: u64,
    data_blocks: u64,
    /// Clean copies there (of data whose primary copy is elsewhere): they
    /// do not hold the removal up, they are dropped.
    copies: u64,
    copy_blocks: u64,
    /// Inode logs moved there (log blobs).
    logs: u64,
    log_bytes: u64,
    /// Files unlinked but still open among those holding data or a log.
    open_deleted: u64,
}

impl Holdings {
    /// Nothing that refuses the removal: clean copies do not (they are
    /// dropped).
    fn is_empty(&self) -> bool {
        self.extents == 0 && self.logs == 0
    }

    fn bytes(&self) -> u64 {
        self.data_blocks * BLOCK_SIZE + self.log_bytes
    }

    /// What it holds, in words: "3 extents of files, 1 clean copy".
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        if self.extents > 0 {
            parts.push(plural(self.extents, "extent of files", "extents of files"));
        }
        if self.logs > 0 {
            parts.push(plural(self.logs, "inode log", "inode logs"));
        }
        if self.open_deleted > 0 {
            parts.push(plural(
                self.open_deleted,
                "deleted file still open",
                "deleted files still open",
            ));
        }
        parts.join(", ")
    }
}

/// `n` bytes for a message (binary units, one decimal).
pub(crate) fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The tier a user names for removal among `tiers` (the superblock's
/// list): an id, or a kind name (`ssd`, `hdd`, `s3`, `pm`) that one tier of
/// the pool has. `pm` and `0` resolve (to the PM tier, whose removal is then
/// refused with its own message).
pub fn resolve_tier(tiers: &[TierRecord], name: &str) -> Result<TierId, String> {
    let listed = || {
        tiers
            .iter()
            .map(|t| format!("{} {}", t.id, t.kind.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Ok(id) = name.parse::<u8>() {
        return match tiers.iter().find(|t| t.id == id) {
            Some(t) => Ok(TierId(t.id)),
            None => Err(format!(
                "the pool has no tier {id} (its tiers: {})",
                listed()
            )),
        };
    }
    let Some(kind) = TierKind::parse(name) else {
        return Err(format!(
            "unknown tier {name:?}: name it by its id or its kind (its tiers: {})",
            listed()
        ));
    };
    let of_kind: Vec<&TierRecord> = tiers.iter().filter(|t| t.kind == kind).collect();
    match of_kind.as_slice() {
        [t] => Ok(TierId(t.id)),
        [] => Err(format!(
            "the pool has no {} tier (its tiers: {})",
            kind.name(),
            listed()
        )),
        _ => Err(format!(
            "the pool has {} {} tiers: name one by its id (its tiers: {})",
            of_kind.len(),
            kind.name(),
            listed()
        )),
    }
}

/// Why a tier that holds `held` (and counts `valid` blocks) cannot go.
fn held_message(rec: &TierRecord, held: &Holdings, valid: u64) -> String {
    format!(
        "{} still holds {} ({}) that the removal could not move off: try again \
         (data written all along may keep coming back; a deleted file still open \
         must be closed first)",
        tier_name(rec),
        bytes_text(
            held.bytes()
                .max(valid.saturating_sub(held.copy_blocks) * BLOCK_SIZE)
        ),
        held.describe()
    )
}

/// "tier 2 (hdd /data/hdd.img)".
fn tier_name(rec: &TierRecord) -> String {
    format!("tier {} ({} {})", rec.id, rec.kind.name(), rec.path)
}

/// The retiring mark of a tier, taken back when dropped unless the removal
/// committed.
struct Retiring<'a> {
    tier: &'a BlockTier,
    committed: bool,
}

impl Drop for Retiring<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.tier.space.set_retiring(false);
        }
    }
}

impl Fs {
    /// Removes the pool's last tier while mounted ([`Fs::detach_tier`]
    /// with no tier named).
    pub fn detach_last_tier(&self) -> Result<DetachedTier, String> {
        self.detach_tier(None)
    }

    /// Removes tier `which` (the last tier when `None`) while mounted; see
    /// the module docs for the steps. The other tiers keep their ids.
    /// Refused, with nothing changed, on a read-only or frozen pool, for
    /// the PM tier or a tier the pool does not have, when a placement rule
    /// names the tier, when the rest of the pool could not hold the data
    /// waiting in the DRAM cache, and while data, an inode log or a deleted
    /// file still open is stored on the tier (the message says what, and
    /// how to move it). Clean copies on the tier are dropped.
    pub fn detach_tier(&self, which: Option<TierId>) -> Result<DetachedTier, String> {
        self.refuse_tier_change()?;
        let changing = self.tiers.begin_append();
        let rec = {
            let sb = self.sb.lock();
            match which {
                None => sb.tiers.last().cloned(),
                Some(id) => sb.tiers.iter().find(|t| t.id == id.get()).cloned(),
            }
        };
        let Some(rec) = rec else {
            let id = which.map_or(0, |t| t.get());
            return Err(format!("the pool has no tier {id}"));
        };
        if rec.id == 0 {
            return Err(if which.is_none() {
                "the pool has only its pm tier, which cannot be removed".into()
            } else {
                "tier 0 is the pool's pm tier, which cannot be removed".into()
            });
        }
        let id = TierId(rec.id);
        // A tier mounted without its device holds nothing (mount refuses a
        // missing tier that holds data): only the superblock names it.
        let Some(tier) = self.tiers.iter().find(|t| t.id == id) else {
            self.commit_without_tier(&rec)?;
            return Ok(DetachedTier {
                record: rec,
                was_mounted: false,
                notes: Vec::new(),
            });
        };
        let mut retiring = self.retire_tier(tier, &rec)?;
        // Rules first, before anything changes; then the files' data there,
        // which the removal moves itself (nothing lands there meanwhile),
        // refusing what it could not move; then the inode logs; then
        // anything left (clean copies are dropped in step 4).
        self.refuse_ruled(&rec)?;
        self.evacuate_tier(tier, &rec)?;
        self.refuse_held_data(tier, &rec)?;
        self.relocate_logs(tier, &rec)?;
        self.refuse_held(tier, &rec)?;
        if self.tiers.iter().all(|t| t.id == id) {
            // The only block tier: the pool is PM-only after this, so
            // nothing may stay cached (the cache takes no pages now).
            self.refuse_tier_change()?;
            self.persist_cached().map_err(|e| {
                format!(
                    "cannot write back the data cached for the block tiers before {} goes: {e}",
                    tier_name(&rec)
                )
            })?;
        }
        self.settle_retiring(tier, &rec)?;
        let mut notes = Vec::new();
        if tier.kind == TierKind::S3
            && tier
                .media
                .object_tier_stats()
                .is_some_and(|s| s.dead_parts > 0 && s.failing.is_none())
        {
            // Parts of freed data not yet deleted: delete them now, so the
            // prefix keeps only the tier's marker and header (best effort).
            if let Err(e) = tier.media.sync() {
                notes.push(format!(
                    "the object store kept parts of freed data ({e}); they may be deleted with the prefix"
                ));
            }
        }
        self.refuse_tier_change()?;
        let committed = self.commit_without_tier(&rec);
        // From the superblock's write on, the tier is gone for the next
        // mount whether or not the sync worked: it stays retiring for good.
        retiring.committed = true;
        let removed = changing.remove(id);
        debug_assert!(removed.is_some_and(|t| t.id == id));
        tier.close_media();
        self.forget_tier_state(id);
        committed?;
        Ok(DetachedTier {
            record: rec,
            was_mounted: true,
            notes,
        })
    }

    /// A read-only or frozen pool, or one being unmounted or frozen (its
    /// background threads stopped for the clean mark, [`Fs::pool_stopping`]),
    /// changes no tier.
    fn refuse_tier_change(&self) -> Result<(), String> {
        self.refuse_tier_change_read_only()?;
        if self.unmounted.load(Ordering::SeqCst) {
            return Err("the pool is being unmounted".into());
        }
        if self.pool_stopping() {
            return Err("the pool is being unmounted or remounted read-only".into());
        }
        Ok(())
    }

    /// Step 1: marks `tier` retiring under the room lock, and takes the
    /// mark back (refusing) when the rest of the pool lacks the blocks the
    /// dirty pages of the DRAM cache were promised.
    fn retire_tier<'a>(
        &self,
        tier: &'a BlockTier,
        rec: &TierRecord,
    ) -> Result<Retiring<'a>, String> {
        let _room = self.room_lock.lock();
        tier.space.set_retiring(true);
        let retiring = Retiring {
            tier,
            committed: false,
        };
        // The tier counts no free blocks now: this is the room without it.
        let (room, dirty) = self.room_and_dirty_blocks();
        if room < dirty {
            return Err(format!(
                "without {} the pool has no room for the {} written and waiting in the DRAM \
                 cache ({} free elsewhere): free some space and try again",
                tier_name(rec),
                bytes_text(dirty * BLOCK_SIZE),
                bytes_text(room * BLOCK_SIZE)
            ));
        }
        Ok(retiring)
    }

    /// Step 2: refuses when a placement rule names the tier (a file or a
    /// directory's future files pinned to it).
    fn refuse_ruled(&self, rec: &TierRecord) -> Result<(), String> {
        let inos: Vec<u64> = self.ruled.lock().inos.iter().copied().collect();
        let mut pinned = Vec::new();
        for ino in inos {
            let Ok(g) = self.lock(ino) else { continue };
            let names_it = g.as_ref().is_some_and(|i| {
                i.xattrs
                    .get(RULE_XATTR)
                    .and_then(|v| crate::rules::rule_tier(v, self.tiers.iter()))
                    == Some(TierId(rec.id))
            });
            if names_it {
                pinned.push(ino);
            }
        }
        if pinned.is_empty() {
            return Ok(());
        }
        let more = if pinned.len() > 5 { ", …" } else { "" };
        let shown = self.inos_with_paths(&pinned[..pinned.len().min(5)]);
        Err(format!(
            "{} is named by the placement rule of {} file{} or director{} (inode{} {}{more}): \
             give them another tier or `auto` first (`terrace rule MOUNTPOINT --list` lists \
             the rules), then remove it",
            tier_name(rec),
            pinned.len(),
            if pinned.len() == 1 { "" } else { "s" },
            if pinned.len() == 1 { "y" } else { "ies" },
            if pinned.len() == 1 { "" } else { "s" },
            shown
        ))
    }

    /// Step 2, after the evacuation: refuses when committed state still
    /// maps files' data on the tier (what the evacuation could not move).
    /// Inode logs there do not count here.
    fn refuse_held_data(&self, tier: &BlockTier, rec: &TierRecord) -> Result<(), String> {
        let (mut held, _) = self.tier_holdings(tier.id);
        if held.extents == 0 {
            return Ok(());
        }
        let logs = held.logs;
        held.logs = 0;
        held.log_bytes = 0;
        let mut msg = held_message(rec, &held, held.data_blocks);
        if logs > 0 {
            msg.push_str(&format!(
                " (the {logs} inode log{} there move by themselves when it goes)",
                if logs == 1 { "" } else { "s" }
            ));
        }
        Err(msg)
    }

    /// Step 2b: moves the inode logs that log migration put on the
    /// retiring tier (design.md §3) to the first other block tier that
    /// takes writes — its device not full, not an object tier, which holds
    /// no logs — or, with none, back to PM (a recall, as a file's next change makes). Logs of
    /// deleted files still open stay (the refusal after this names them).
    /// Each log moves crash-safely, as log migration moves it; a log that
    /// moved stays moved when a later step refuses.
    fn relocate_logs(&self, tier: &BlockTier, rec: &TierRecord) -> Result<(), String> {
        let mut inos = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            if let Some(i) = g.as_ref() {
                if !i.zombie && i.log.on_tier.is_some_and(|l| l.tier == tier.id) {
                    inos.push(i.ino);
                }
            }
        }
        if inos.is_empty() {
            return Ok(());
        }
        let to = self
            .tiers
            .iter()
            .find(|t| t.id != tier.id && t.stands_in_for_a_full_tier());
        let cannot = |to: &str, e: &dyn std::fmt::Display| {
            format!(
                "cannot move the {} inode log{} on {} to {to}: {e}",
                inos.len(),
                if inos.len() == 1 { "" } else { "s" },
                tier_name(rec)
            )
        };
        match to {
            Some(to) => {
                let name = format!("tier {} ({})", to.id.get(), to.kind.name());
                for batch in inos.chunks(LOG_BATCH) {
                    self.refuse_tier_change()?;
                    self.move_logs_to(batch, to.id)
                        .map_err(|e| cannot(&name, &e))?;
                }
            }
            None => {
                for &ino in &inos {
                    self.refuse_tier_change()?;
                    let Ok(mut g) = self.lock(ino) else { continue };
                    if let Some(i) = g.as_mut() {
                        self.recall_log(i, false).map_err(|e| cannot("PM", &e))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Refuses at once when committed state maps data, a log or an open
    /// deleted file on the tier.
    fn refuse_held(&self, tier: &BlockTier, rec: &TierRecord) -> Result<(), String> {
        let valid = tier.space.stats().valid_blocks;
        let (held, _) = self.tier_holdings(tier.id);
        if held.is_empty() {
            Ok(())
        } else {
            Err(held_message(rec, &held, valid))
        }
    }

    /// Step 4: drops the clean copies on the retiring tier and waits until
    /// it holds nothing, or refuses — at once when committed state maps
    /// data, a log or an open deleted file there, after [`SETTLE_LIMIT`]
    /// when allocations made before the retiring mark neither commit nor
    /// go (or copies keep coming back, which nothing should make them do).
    fn settle_retiring(&self, tier: &BlockTier, rec: &TierRecord) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE_LIMIT;
        loop {
            // Valid blocks first: once none is counted, none can come back
            // (nothing allocates on a retiring tier).
            let valid = tier.space.stats().valid_blocks;
            let (held, copies) = self.tier_holdings(tier.id);
            if !held.is_empty() {
                return Err(held_message(rec, &held, valid));
            }
            let timed_out = Instant::now() >= deadline;
            if !copies.is_empty() {
                if timed_out {
                    return Err(format!(
                        "{} still holds {} clean cop{} after {} s of dropping them: try again",
                        tier_name(rec),
                        held.copies,
                        if held.copies == 1 { "y" } else { "ies" },
                        SETTLE_LIMIT.as_secs()
                    ));
                }
                self.drop_copies_on(tier.id, copies).map_err(|e| {
                    format!("cannot drop the clean copies on {}: {e}", tier_name(rec))
                })?;
                continue;
            }
            if valid == 0 {
                return Ok(());
            }
            if timed_out {
                return Err(format!(
                    "{} still has {} being written or freed by moves or write-backs that began \
                     before the removal and did not finish within {} s: try again",
                    tier_name(rec),
                    bytes_text(valid * BLOCK_SIZE),
                    SETTLE_LIMIT.as_secs()
                ));
            }
            // Frees waiting for readers end within a device read each.
            self.read_pins.wait_deferred(Duration::from_millis(50));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Forgets the clean copies `copies` (per inode, file-block ranges)
    /// keep on tier `id`: one commit of `Copy` drop entries per file, the
    /// way extent recycling drops them ([`crate::migrate::Mode::DropCopy`];
    /// the data's primary copy stays where it is). The copies' blocks are
    /// freed after the commit. A copy whose mapping changed meanwhile is
    /// left alone (the caller looks again).
    fn drop_copies_on(&self, id: TierId, copies: CopiesOn) -> Result<(), String> {
        for (ino, ranges) in copies {
            self.refuse_tier_change()?;
            match self.move_ranges(ino, id, TierId::PM, &ranges, crate::migrate::Mode::DropCopy) {
                Ok(_) => {}
                // Deleted meanwhile: its copies went with it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(format!("inode {ino}: {e}")),
            }
        }
        Ok(())
    }

    /// What the committed state of every inode maps on tier `id` (each
    /// inode looked at under its lock, one at a time), and the clean copies
    /// there by inode (file-block ranges).
    fn tier_holdings(&self, id: TierId) -> (Holdings, CopiesOn) {
        let mut h = Holdings::default();
        let mut copies = Vec::new();
        // Blocks packed log blobs share count once, as `terrace status`
        // and the tier's valid blocks count them.
        let mut packed_blocks = std::collections::BTreeSet::new();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            let before = (h.extents, h.logs);
            let mut ranges = Vec::new();
            for (fb, e) in i.extents.iter() {
                if e.tier == id {
                    h.extents += 1;
                    h.data_blocks += e.blocks;
                }
                if e.copy.is_some_and(|(t, _)| t == id) {
                    h.copies += 1;
                    h.copy_blocks += e.blocks;
                    ranges.push((fb, e.blocks));
                }
            }
            if let Some(l) = i.log.on_tier.filter(|l| l.tier == id) {
                h.logs += 1;
                if l.shares_its_block() {
                    packed_blocks.insert(l.block);
                } else {
                    h.log_bytes += l.blocks * BLOCK_SIZE;
                }
            }
            if i.zombie && (h.extents, h.logs) != before {
                h.open_deleted += 1;
            }
            if !ranges.is_empty() {
                copies.push((i.ino, ranges));
            }
        }
        h.log_bytes += packed_blocks.len() as u64 * BLOCK_SIZE;
        (h, copies)
    }

    /// Step 5: both superblock copies without the tier `rec` (the others
    /// keep their records, ids included), a higher generation, PM synced:
    /// the commit point. An error means the sync failed after the write
    /// (the removal stands for this mount).
    fn commit_without_tier(&self, rec: &TierRecord) -> Result<(), String> {
        {
            let mut live = self.sb.lock();
            // Only attach and detach change the tiers, both under the
            // tier-change lock the caller holds.
            debug_assert!(live.tiers.contains(rec));
            let mut next = live.clone();
            next.tiers.retain(|t| t.id != rec.id);
            // A pool whose ids skip one is read by version-8 builds only.
            next.version = next.version.max(terrace_format::FORMAT_VERSION);
            next.generation += 1;
            crate::mkfs::write_superblock(&*self.media, &next);
            *live = next;
        }
        self.media.sync_all().map_err(|e| {
            format!(
                "{} is removed from the mounted pool, but the superblock without it could not be \
                 synced ({e}): a crash before the next sync may leave the pool naming it, so its \
                 file was left as it is",
                tier_name(rec)
            )
        })
    }

    /// Step 6's forgetting: state kept by tier id outside the tier itself.
    /// The tier was empty, so nothing there describes data: no clean page
    /// of the DRAM cache (each free dropped its blocks' pages, after the
    /// readers that could put them back), no shared-block counts (they go
    /// with the last reference), no cold-list entry that matters (a file is
    /// listed under a tier only while it has data there; a stale entry
    /// would only make a drain look at a file with nothing to move). The
    /// checksum table lives in the tier itself, and a tier attached later
    /// gets a new one. What is cleared here are the counters, so that a
    /// tier attached later with this id starts from zero; the cache is
    /// swept once more to make the first point hold by construction.
    fn forget_tier_state(&self, id: TierId) {
        self.cache.invalidate(id, PhysBlock(0), u64::MAX);
        debug_assert!(self.shared.of_tier(id).is_empty());
        debug_assert!(self.packed_logs.of_tier(id).is_empty());
        self.forget_tier_migration(id);
        self.object_cleaning.tiers.lock().remove(&id);
    }
}
