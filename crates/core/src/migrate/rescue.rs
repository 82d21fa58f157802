//! The rescue: a little of PM's data moved into a block tier's recycling
//! reserve so that a removal finds a PM block when every tier is full
//! (design.md §5f, rule 6, "The rescue").
//!
//! Removals need PM: an unlink adds an entry to its directory's log. What
//! they may take of PM, the removal reserve, is refilled by migration
//! moving PM's data down into block-tier room — the room removals free.
//! But removals that free nothing (empty files, names whose files are
//! still linked elsewhere) or that free only later (after the names before
//! them) can use the reserve up while the block tiers are full, and then
//! nothing frees PM: `rm -rf` of such a pool failed with ENOSPC on
//! thousands of names in its first pass. A removal that finds no other
//! way ([`Fs::wait_for_removal_room`]) then moves up to [`RESCUE_BLOCKS`]
//! of PM's coldest data into the recycling reserve of the first block
//! tier ([`ExtentSpace::alloc_rescue`](crate::extent_space::ExtentSpace::alloc_rescue)).
//!
//! Invariants:
//! - Only while no cached page is dirty and no write-back is in flight:
//!   the room those need is not touched, so no acknowledged write can
//!   find its block gone.
//! - Half the reserve (at least one extent) always stays: it is what
//!   recycling needs to turn dead blocks into room (it moves an extent's
//!   valid blocks into it). A tier with dead blocks is rescued into only
//!   after the removal wait gave recycling and migration
//!   `REMOVAL_STALL` to free PM and they freed none: a few dead blocks
//!   in otherwise full extents are not worth recycling (the cleaner's
//!   thresholds leave them), and refusing the rescue for them left every
//!   later `rm` of a full pool refused (`scripts/stress_full_pool.sh`:
//!   4 KiB dead, 2,500 names refused).
//! - Data a rule pins to PM moves only when no other of PM's coldest
//!   files has data to move: a second round takes pinned data, as the
//!   yield to metadata does (`rules.rs`) — a rule is a placement
//!   preference, while room for removals is what lets a full pool be
//!   emptied at all. On a PM holding only pinned data, the rescue skipped
//!   everything and every `rm` after the removal reserve was used up
//!   failed with ENOSPC. Each file whose pinned data moved is noted
//!   (`Fs::note_pin_yielded`): its rule is unmet, `terrace where` says
//!   why, and the rule's enforcement brings the data back once PM has room.
//! - The move is an ordinary one (`move_ranges`): crash-safe at every
//!   step, committed by the log tail.

use super::*;
use std::cell::Cell;

/// PM blocks one rescue moves at most (128 KiB: about 1,400 unlink
/// entries in a directory's log).
pub(crate) const RESCUE_BLOCKS: u64 = 32;

/// Cold PM files one rescue looks at, coldest first.
const RESCUE_FILES: usize = 16;

thread_local! {
    /// Set while this thread moves data for a rescue: the mover then takes
    /// its blocks from the recycling reserve (`prepare_move`).
    static RESCUING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is moving data for a rescue.
pub(super) fn rescuing() -> bool {
    RESCUING.with(Cell::get)
}

/// Marks this thread as rescuing until dropped.
struct Rescuing;

impl Rescuing {
    fn start() -> Rescuing {
        RESCUING.with(|r| r.set(true));
        Rescuing
    }
}

impl Drop for Rescuing {
    fn drop(&mut self) {
        RESCUING.with(|r| r.set(false));
    }
}

impl Fs {
    /// Moves up to [`RESCUE_BLOCKS`] of PM's coldest data into the first
    /// block tier's recycling reserve, under the invariants of the module
    /// doc: unpinned data first, data a rule pins to PM only when that
    /// freed nothing. Whether PM has more free blocks afterwards. Called
    /// with no lock held.
    pub(crate) fn rescue_pm_for_removal(&self) -> bool {
        if self.cache.dirty_blocks() > 0 || self.wb_inflight_blocks.load(Ordering::Relaxed) > 0 {
            return false;
        }
        let Some(t) = self.tiers.iter().find(|t| {
            t.kind != terrace_format::TierKind::S3 && !t.full.is_full() && !t.refuses_allocation()
        }) else {
            return false;
        };
        let before = self.alloc.free();
        let _rescuing = Rescuing::start();
        let files = self.coldest_files(TierId::PM, Mode::Move, RESCUE_FILES);
        for pinned_round in [false, true] {
            for &(_, ino) in &files {
                if self.is_commanded(ino) {
                    continue;
                }
                let (ranges, generation) = {
                    let Ok(g) = self.lock(ino) else { continue };
                    let Some(i) = g.as_ref() else { continue };
                    if (self.rule_of(i) == Some(TierId::PM)) != pinned_round {
                        continue;
                    }
                    let (_, _, ranges) = super::defrag::runs_on(i, TierId::PM);
                    (first_blocks(ranges, RESCUE_BLOCKS), i.generation)
                };
                if ranges.is_empty() {
                    continue;
                }
                if let Ok(n @ 1..) = self.move_ranges(ino, TierId::PM, t.id, &ranges, Mode::Move) {
                    self.say_rescued(n, t.id, pinned_round);
                    if pinned_round {
                        self.note_pin_yielded(ino, generation);
                    }
                }
                if self.alloc.free() > before {
                    return true;
                }
            }
        }
        // PM may have got freer meanwhile by other means.
        self.alloc.free() > before
    }

    /// Counts `n` bytes a rescue moved into tier `to` (`pinned`: data a
    /// rule pins to PM), and says so in the daemon's log the first time.
    fn say_rescued(&self, n: u64, to: TierId, pinned: bool) {
        let st = &self.space_stats;
        if st.rescued_bytes.fetch_add(n, Ordering::Relaxed) == 0 {
            self.notice(format!(
                "every tier is full and removals found no PM room: {} KiB of PM data \
                 moved into the recycling reserve of tier {to} so that they go on",
                n / 1024,
            ));
        }
        if pinned && st.pins_yielded_bytes.fetch_add(n, Ordering::Relaxed) == 0 {
            self.notice(format!(
                "PM is full of data pinned to it by rules: {} KiB of it moved into the \
                 recycling reserve of tier {to} so that removals go on (those files' rule \
                 is unmet until PM has room; pin less to PM, or clear rules with \
                 `terrace rule -r DIR auto`)",
                n / 1024,
            ));
        }
    }
}

/// The first `limit` blocks of `ranges` (file ranges in file order).
fn first_blocks(mut ranges: Vec<(FileBlock, u64)>, limit: u64) -> Vec<(FileBlock, u64)> {
    let mut left = limit;
    ranges.retain_mut(|(_, n)| {
        *n = (*n).min(left);
        left -= *n;
        *n > 0
    });
    ranges
}
