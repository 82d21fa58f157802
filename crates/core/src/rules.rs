//! Per-file placement rules (HetFS): a user pins a file, or a directory's
//! future contents, to one tier, overriding the automatic decisions.
//!
//! # The rule
//! A rule is the stored xattr `user.terrace.rule` whose value names a tier of
//! the pool (`pm`, `ssd`, `hdd`, or a tier id). It lives in the inode's log
//! like any xattr, so it is crash-consistent and survives remounts; it is the
//! one writable name under Terrace's `user.terrace.` prefix. Setting a value
//! that names no tier of this pool fails with EINVAL; removing the xattr
//! returns the file to automatic placement.
//!
//! # What it does
//! - **Placement**: every write of a pinned file goes to its tier (the
//!   placement policies' `TierRule::Pin`): a pin to PM holds while PM has
//!   room and is below its forced mark, and leaves twice the metadata
//!   reserve free ([`Fs::pm_pin_room_bytes`]; then the write spills to the
//!   first block tier rather than fail: pinned data is not moved away for
//!   data, so it never takes the last of PM, which metadata — inode slots
//!   and logs of every file — needs), a pin to a block tier goes through
//!   the DRAM cache, written back to that tier.
//! - **Metadata first**: metadata can only live on PM, and it grows after
//!   the pinned data is in place. When it has taken PM below its metadata
//!   reserve and nothing else frees PM, migration moves pinned data down
//!   too ([`Fs::yield_pm_pins_to_metadata`]): the rule is then unmet for
//!   that data, and comes back as room allows. Before (2026-12-07), creates
//!   on a PM that pinned data filled to its forced mark got ENOSPC while
//!   the SSD had room. Each file whose data gave way is noted
//!   ([`Fs::note_pin_yielded`]; the removal's rescue notes the files it
//!   moves too), so `user.terrace.moves` — and `terrace where` — say
//!   why its rule is unmet, not "no room when written".
//! - **Migration**: background migration never moves a pinned file off its
//!   tier (neither down nor, by reverse migration, up), and each pass moves
//!   pinned files' data that sits elsewhere to their tier (up to
//!   [`RULE_BUDGET_BYTES`] a pass, while the tier is below its forced mark;
//!   PM takes only what fits below it) — so a rule set on a file that
//!   already has data takes effect without `terrace migrate`. Passes that
//!   find nothing to move back off, up to 2 s apart.
//! - **Inheritance**: a file or directory created in a directory that has a
//!   rule gets the same rule, in the same crash-atomic creation (HetFS's rules
//!   by location).
//!
//! # Tiers removed while mounted
//! A tier that a rule names cannot be removed from the mounted pool
//! (`tier_detach.rs` refuses, naming the rules), and while a removal runs
//! no new rule may name the tier. A rule whose tier is gone all the same
//! (checked just before the removal began, stored just after its look at
//! the rules; or a pool whose tier was removed offline) names no tier and
//! is ignored ([`Fs::rule_of`] finds none) until a tier it names is added
//! again.
//!
//! # Invariant
//! [`Fs::ruled`] holds every inode that has a rule (it may also hold inodes
//! that lost theirs; passes drop those, and keep those whose rule names no
//! tier now). It is rebuilt at mount from the inodes' xattrs. Its
//! `yielded` notes are a subset of it, keyed by slot generation (a reused
//! slot is not noted); a pass drops a file's note once its rule is met or
//! gone. They are kept in DRAM only: after a remount an unmet rule is
//! explained by room, as before.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::service_state::RULE_XATTR;
use crate::types::{errno, FileType, FsResult, Ino};
use std::sync::atomic::Ordering;
use std::time::Instant;
use terrace_format::{TierId, BLOCK_SIZE};

/// Bytes a migration pass moves to enforce rules, at most.
pub const RULE_BUDGET_BYTES: u64 = 64 << 20;

/// The tier a rule value names among `tiers` (the pool's block tiers in id
/// order): `pm`, a block tier's kind (the first of that kind), or a tier id.
pub(crate) fn rule_tier<'a>(
    value: &[u8],
    mut tiers: impl Iterator<Item = &'a crate::tier::BlockTier>,
) -> Option<TierId> {
    let v = std::str::from_utf8(value).ok()?.trim();
    if v == "pm" || v == "0" {
        return Some(TierId::PM);
    }
    if let Ok(id) = v.parse::<u8>() {
        return tiers.find(|t| t.id.get() == id).map(|t| t.id);
    }
    tiers.find(|t| t.kind.name() == v).map(|t| t.id)
}

impl Fs {
    /// The tier id a rule value names, if it names a tier of this pool:
    /// `pm`, a block tier's kind (`ssd`, `hdd`; the first of that kind), or a
    /// tier id.
    ///
    /// A tier being removed (retiring, `tier_detach.rs`) is not named: its
    /// pinned files are placed as if unpinned meanwhile, and no new rule
    /// may name it.
    pub(crate) fn tier_by_name(&self, value: &[u8]) -> Option<TierId> {
        rule_tier(value, self.tiers.iter().filter(|t| !t.space.is_retiring()))
    }

    /// The tier a file is pinned to, if it has a rule (naming a tier that
    /// exists).
    pub(crate) fn rule_of(&self, i: &Inode) -> Option<TierId> {
        i.xattrs.get(RULE_XATTR).and_then(|v| self.tier_by_name(v))
    }

    /// Why `terrace migrate` leaves `ino` alone when moving it to `to`: a
    /// rule pins it to another tier (the error names that tier and how to
    /// clear the rule); `None` when it may move.
    pub(crate) fn pinned_elsewhere(&self, ino: Ino, to: TierId) -> Option<std::io::Error> {
        let g = self.lock(ino).ok()?;
        let tier = self.rule_of(g.as_ref()?)?;
        if tier == to {
            return None;
        }
        let name = match self.tiers.iter().find(|t| t.id == tier) {
            Some(t) => t.kind.name(),
            None => "pm",
        };
        Some(std::io::Error::other(PinnedElsewhere { tier: name }))
    }

    /// Checks a rule value before it is stored.
    pub(crate) fn check_rule(&self, i: &Inode, value: &[u8]) -> FsResult<()> {
        if !matches!(i.kind, FileType::Regular | FileType::Directory) {
            return Err(errno(libc::EPERM));
        }
        if self.tier_by_name(value).is_none() {
            return Err(errno(libc::EINVAL));
        }
        Ok(())
    }

    /// Notes that `ino` has (or may have) a rule.
    pub(crate) fn note_ruled(&self, ino: Ino) {
        let mut r = self.ruled.lock();
        r.inos.insert(ino);
        // A new rule may have data to move: look at once.
        r.idle.reset();
    }

    /// Moves `bytes` of unpinned PM data down to the first block tier, so
    /// that data pinned to PM finds room. Returns the bytes moved.
    fn make_pm_room_for_pins(&self, bytes: u64) -> u64 {
        let Some(to) = self.tiers.first().map(|t| t.id) else {
            return 0;
        };
        let params = self.settings.read().migration_params();
        let policy = terrace_policy::migration::migration_policy("ziggurat")
            .expect("the ziggurat policy exists");
        self.drain(
            TierId::PM,
            to,
            bytes,
            &params,
            &*policy,
            crate::migrate::Mode::Move,
        )
    }

    /// Moves pinned files' data that is not on their tier there, up to
    /// [`RULE_BUDGET_BYTES`]. Returns the bytes moved.
    ///
    /// A tier takes pinned data only below its forced mark, and PM only what
    /// fits below it: data pinned to PM is data migration may not move, so
    /// it never takes the room above the mark that metadata needs (the
    /// placement policies spill pinned writes there too). A pass that moved
    /// nothing makes the next ones wait until the pool's room changes or
    /// the back-off ends ([`IdleBackoff`](crate::worker::IdleBackoff)): a PM full of
    /// pinned data (or a pinned file larger than its tier's room) would
    /// otherwise be looked at file by file every 100 ms, for ever.
    pub(crate) fn enforce_rules(&self) -> u64 {
        let key = self.room_key();
        let inos: Vec<Ino> = {
            let mut r = self.ruled.lock();
            if !r.idle.due(Instant::now(), key) {
                return 0;
            }
            r.walks += 1;
            r.inos.iter().copied().collect()
        };
        let forced = self.settings.read().migration_params().forced_percent;
        let room_below_forced = |tier: TierId| self.room_below(tier, forced);
        // What PM can take for pins: below the mark, beyond twice the
        // reserve (what a yield to metadata frees: it is not undone here).
        let pm_room = || self.pm_pin_room_bytes(forced);
        // Unpinned PM data is drained for pins until a drain moves nothing
        // (the rest of PM's data is pinned, or cached only): once a pass.
        let mut pm_drained_dry = false;
        let mut moved = 0u64;
        for ino in inos {
            if moved >= RULE_BUDGET_BYTES || self.migrator.worker.stopping() {
                break;
            }
            let want = {
                let Ok(g) = self.lock(ino) else {
                    let mut r = self.ruled.lock();
                    r.inos.remove(&ino);
                    r.yielded.remove(&ino);
                    continue;
                };
                let i = g.as_ref().expect("live");
                let Some(tier) = self.rule_of(i) else {
                    // A rule naming no tier now (its tier is retiring, or
                    // gone) stays listed: it holds again if the removal is
                    // refused or a tier it names is added.
                    if !i.xattrs.contains_key(RULE_XATTR) {
                        let mut r = self.ruled.lock();
                        r.inos.remove(&ino);
                        r.yielded.remove(&ino);
                    }
                    continue;
                };
                let elsewhere: u64 = if i.kind == FileType::Regular {
                    i.extents
                        .iter()
                        .filter(|(_, e)| e.tier != tier)
                        .map(|(_, e)| e.blocks * BLOCK_SIZE)
                        .sum()
                } else {
                    0
                };
                if elsewhere == 0 || !tier.is_pm() {
                    // Its rule is met (or is no PM pin): nothing gave way.
                    self.ruled.lock().yielded.remove(&ino);
                }
                if tier.is_pm() && elsewhere > 0 {
                    // A PM pin on a PM without room for it: unpinned data
                    // moves down to make the room (drains skip files pinned
                    // to PM), whatever the threshold says.
                    let short = elsewhere.min(RULE_BUDGET_BYTES).saturating_sub(pm_room());
                    drop(g);
                    if short > 0 && !pm_drained_dry {
                        let here = self.make_pm_room_for_pins(short);
                        pm_drained_dry = here == 0;
                        moved += here;
                    }
                    (elsewhere <= pm_room()).then_some(TierId::PM)
                } else {
                    (elsewhere > 0 && room_below_forced(tier) > 0).then_some(tier)
                }
            };
            if let Some(tier) = want {
                // A full target is not an error here: the rule is retried
                // next pass, and writes still honour it as room allows.
                moved += self.move_file_as_room_allows(ino, tier).unwrap_or(0);
            }
        }
        let key = self.room_key();
        self.ruled.lock().idle.turn(Instant::now(), moved > 0, key);
        moved
    }
}

impl Fs {
    /// PM blocks data pinned to PM leaves free beyond the blocks promised
    /// to write-back: twice the metadata reserve. Pinned writes and the
    /// rule enforcement stop there ([`Fs::pm_pin_room_bytes`]), and a yield
    /// to metadata ([`Fs::yield_pm_pins_to_metadata`]) frees PM up to it,
    /// so the two never undo each other's moves: between the reserve and
    /// twice the reserve free, pinned data stays where it is.
    pub(crate) fn pm_pin_floor_blocks(&self) -> u64 {
        2 * self.pm_reserve_blocks()
    }

    /// Bytes of data pinned to PM that PM takes now: below the forced mark
    /// (`forced`, percent) and beyond [`Fs::pm_pin_floor_blocks`].
    pub(crate) fn pm_pin_room_bytes(&self, forced: u8) -> u64 {
        let free = self
            .pm_free_unpromised()
            .saturating_sub(self.pm_pin_floor_blocks());
        self.room_below(TierId::PM, forced).min(free * BLOCK_SIZE)
    }

    /// Gives PM back to metadata when it has less than its metadata reserve
    /// free beyond the promised blocks (after the data drains and log
    /// migration of the pass): moves PM data to the first block tier until
    /// [`Fs::pm_pin_floor_blocks`] are free — unpinned data first, then
    /// data rules pin to PM, coldest first. Returns the bytes moved.
    ///
    /// Why: inode slots and log pages live on PM only, and they grow after
    /// the pinned data is in place (the forced mark leaves them a few
    /// percent of PM). Migration may not move pinned data for data, so on a
    /// PM full of it every create waited for a migration with nothing to
    /// move and then failed with ENOSPC while the SSD had room (2026-12-07:
    /// 9,130 of 90,000 small files refused with 854 MiB free, until the
    /// rule was cleared). A rule is a placement preference; the room for
    /// every file's metadata is a promise of the pool. Moved pinned data
    /// is unmet, and comes back as room allows (`enforce_rules`, beyond
    /// the same floor); the files it came from are noted
    /// ([`Fs::note_pin_yielded`]: those with less data on PM after the
    /// drain of pinned data than before it) so that `terrace where` says
    /// why.
    ///
    /// Only on pools with rules (the thresholds and log migration keep PM's
    /// room otherwise); a yield that moved nothing (no block tier room,
    /// pinned data only in the cache) backs off until the pool's room
    /// changes ([`IdleBackoff`](crate::worker::IdleBackoff)).
    pub(crate) fn yield_pm_pins_to_metadata(&self) -> u64 {
        let Some(to) = self.tiers.first().map(|t| t.id) else {
            return 0;
        };
        let free = self.pm_free_unpromised();
        if free >= self.pm_reserve_blocks() {
            return 0;
        }
        let key = self.room_key();
        {
            let r = self.ruled.lock();
            if r.inos.is_empty() || !r.yield_idle.due(Instant::now(), key) {
                return 0;
            }
        }
        let goal = (self.pm_pin_floor_blocks() - free) * BLOCK_SIZE;
        let params = self.settings.read().migration_params();
        let policy = terrace_policy::migration::migration_policy("ziggurat")
            .expect("the ziggurat policy exists");
        let (pm, mode) = (TierId::PM, crate::migrate::Mode::Move);
        let mut moved = self.drain(pm, to, goal, &params, &*policy, mode);
        if moved < goal {
            let before = self.pm_pinned_files();
            let pinned = self.drain_with(pm, to, goal - moved, &params, &*policy, mode, true);
            if pinned > 0 {
                self.note_yields_since(&before);
            }
            let stats = &self.space_stats;
            if pinned > 0
                && stats
                    .pins_yielded_bytes
                    .fetch_add(pinned, Ordering::Relaxed)
                    == 0
            {
                self.notice(format!(
                    "PM is full of data pinned to it by rules: {} KiB of it moved to tier {to} \
                     to make room for metadata (those files' rule is unmet until PM has room; \
                     pin less to PM, or clear rules with `terrace rule -r DIR auto`)",
                    pinned / 1024
                ));
            }
            moved += pinned;
        }
        let key = self.room_key();
        self.ruled
            .lock()
            .yield_idle
            .turn(Instant::now(), moved > 0, key);
        moved
    }

    /// Bytes of PM data that rules pin to PM (a walk over the ruled
    /// inodes: for `terrace status`).
    pub(crate) fn pm_pinned_bytes(&self) -> u64 {
        self.pm_pinned_files().iter().map(|f| f.2).sum()
    }

    /// The files a rule pins to PM: (inode, slot generation, bytes of its
    /// data on PM). A walk over the ruled inodes.
    fn pm_pinned_files(&self) -> Vec<(Ino, u32, u64)> {
        let inos: Vec<Ino> = self.ruled.lock().inos.iter().copied().collect();
        inos.into_iter()
            .filter_map(|ino| {
                let g = self.lock(ino).ok()?;
                let i = g.as_ref()?;
                (self.rule_of(i) == Some(TierId::PM)).then(|| (ino, i.generation, pm_bytes(i)))
            })
            .collect()
    }

    /// Notes each of `before` (from [`Fs::pm_pinned_files`]) that has less
    /// data on PM now, still pinned to PM, as having given way to metadata.
    fn note_yields_since(&self, before: &[(Ino, u32, u64)]) {
        for &(ino, generation, was) in before {
            let Ok(g) = self.lock(ino) else { continue };
            let Some(i) = g.as_ref() else { continue };
            if i.generation == generation
                && self.rule_of(i) == Some(TierId::PM)
                && pm_bytes(i) < was
            {
                self.note_pin_yielded(ino, generation);
            }
        }
    }

    /// Notes that data of `ino` (slot generation `generation`), pinned to
    /// PM by its rule, left PM to keep room for metadata: its rule is unmet
    /// for that reason until a pass finds it met (module doc).
    pub(crate) fn note_pin_yielded(&self, ino: Ino, generation: u32) {
        self.ruled.lock().yielded.insert(ino, generation);
    }

    /// Whether `i`'s data pinned to PM gave way to metadata and is not
    /// back (noted by [`Fs::note_pin_yielded`], its rule still pins it to
    /// PM, and some of its data is elsewhere): what `user.terrace.moves`
    /// says.
    pub(crate) fn pin_yielded(&self, i: &Inode) -> bool {
        self.rule_of(i) == Some(TierId::PM)
            && i.extents.iter().any(|(_, e)| !e.tier.is_pm())
            && self.ruled.lock().yielded.get(&i.ino) == Some(&i.generation)
    }
}

/// Bytes of `i`'s data on PM.
fn pm_bytes(i: &Inode) -> u64 {
    i.extents
        .iter()
        .filter(|(_, e)| e.tier.is_pm())
        .map(|(_, e)| e.blocks * BLOCK_SIZE)
        .sum()
}

/// Why `terrace migrate` left a file where it was: a rule pins it to
/// `tier` ([`Fs::migrate_files`] reports it among the files that did not
/// move; find it with `get_ref()?.downcast_ref()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedElsewhere {
    /// The tier's kind name (`pm`, `ssd`, `hdd`, `s3`).
    pub tier: &'static str,
}

impl std::fmt::Display for PinnedElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pinned to {} by a rule, left there (`terrace rule PATH auto` clears the rule)",
            self.tier
        )
    }
}

impl std::error::Error for PinnedElsewhere {}
