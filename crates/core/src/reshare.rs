//! Sharing kept across moves: when migration, an eviction or extent
//! recycling moves one file's blocks that other files map too (blocks a
//! `copy_file_range` clone shares, `shared.rs`), the other files are
//! pointed at the moved copy instead of each getting a copy of its own.
//!
//! A move works on one file's mapping ([`Fs::commit_move`]
//! (crate::migrate)): file A's blocks `old` are copied to `new` and A's log
//! commits the new location. The files that still map `old` are found by
//! walking the extent maps of A's clone family (`clone_families.rs`; the
//! pool has no reverse map), and each
//! one's log commits a `Write` entry with the `SHARED` and `MOVED` flags
//! that maps the same file blocks to `new` — no data is read or written,
//! since blocks are never written in place and `new` holds what `old`
//! holds. The old blocks are freed with their last mapping, as for any
//! shared block.
//!
//! Invariants:
//! - `new` holds one extra reference (a *pin*) from A's commit, taken under
//!   A's inode lock, until every other owner was handled: a rewrite of A
//!   meanwhile cannot free `new` under a file about to map it;
//! - `old` holds one too, from before A's commit: it still counts as shared,
//!   so the mover of another owner takes `Fs::reshare_lock` (which A's
//!   commit and remaps hold) and finds that owner remapped, rather than
//!   copying the blocks a second time;
//! - an owner is remapped only if, under its inode lock, its extent still
//!   maps exactly those `old` blocks with the sequence number seen in the
//!   walk (a rewrite in between keeps its own blocks);
//! - each remap is one commit to the owner's log (the commit point is its
//!   tail store): after a crash an owner maps `old` or `new`, both of which
//!   stay allocated while mapped, and recovery rebuilds the counts from the
//!   logs. A crash between A's commit and the remaps leaves the data
//!   unshared — the old behaviour — and nothing lost.
//!
//! Object tiers take part like the others: a part's live bytes change
//! only when the last mapping of a block goes (`shared.rs` decides what a
//! free really frees), so a remap onto uploaded blocks costs the store
//! nothing.
//!
//! Lock order: called with no lock held; takes one inode lock at a time.

use crate::extent_map::Released;
use crate::fs::Fs;
use crate::types::Ino;
use std::sync::atomic::Ordering;
use terrace_format::{
    Entry, FileBlock, PhysBlock, TierId, WriteEntry, WRITE_FLAG_MOVED, WRITE_FLAG_SHARED,
};

/// A run of blocks one file's move took from `old` (tier `from`) to `new`
/// (tier `to`) while other extents mapped `old` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharedMove {
    pub(crate) from: TierId,
    pub(crate) old: PhysBlock,
    pub(crate) to: TierId,
    pub(crate) new: PhysBlock,
    pub(crate) blocks: u64,
}

impl SharedMove {
    /// The new block of old block `b`, if this run holds it.
    fn new_of(&self, b: PhysBlock) -> Option<PhysBlock> {
        (b >= self.old && b < self.old + self.blocks).then(|| self.new + (b - self.old))
    }
}

/// A piece of another file that maps old blocks of a [`SharedMove`].
struct Owner {
    ino: Ino,
    generation: u32,
    file_block: FileBlock,
    old: PhysBlock,
    blocks: u64,
    seq: u64,
    moved: SharedMove,
}

impl Fs {
    /// The parts of a move of `n` blocks from `old` (tier `from`) to
    /// `to` that other extents map too: `new_of(i)` is the new block of the
    /// `i`-th old block.
    pub(crate) fn shared_moves(
        &self,
        from: TierId,
        old: PhysBlock,
        n: u64,
        to: TierId,
        new_of: impl Fn(u64) -> PhysBlock,
    ) -> Vec<SharedMove> {
        let mut out: Vec<SharedMove> = Vec::new();
        for (start, k) in self.shared.shared_parts(from, old, n) {
            for b in 0..k {
                let at = start + b;
                let new = new_of(at - old);
                match out.last_mut() {
                    Some(m) if m.old + m.blocks == at && m.new + m.blocks == new => m.blocks += 1,
                    _ => out.push(SharedMove {
                        from,
                        old: at,
                        to,
                        new,
                        blocks: 1,
                    }),
                }
            }
        }
        out
    }

    /// Pins the old blocks of `moved` (one extra reference each) — called
    /// under the inode lock of the moving file before its commit, so the
    /// old blocks still count as shared until [`Fs::reshare`] is done: a
    /// mover of another owner then waits for `reshare_lock` instead of
    /// copying them once more.
    pub(crate) fn pin_old_blocks(&self, moved: &[SharedMove]) {
        let runs: Vec<Released> = moved.iter().map(|m| (m.from, m.old, m.blocks)).collect();
        self.shared.add(&runs);
    }

    /// Drops the pins of [`Fs::pin_old_blocks`] (a commit that failed).
    pub(crate) fn unpin_old_blocks(&self, moved: &[SharedMove]) {
        self.free_runs(moved.iter().map(|m| (m.from, m.old, m.blocks)).collect());
    }

    /// Pins the new blocks of `moved` — called under the inode lock of the
    /// file whose commit mapped them.
    pub(crate) fn pin_new_blocks(&self, moved: &[SharedMove]) {
        let runs: Vec<Released> = moved.iter().map(|m| (m.to, m.new, m.blocks)).collect();
        self.shared.add(&runs);
    }

    /// Points every other file that maps old blocks of `moved` at their new
    /// blocks, then drops the pins of [`Fs::pin_old_blocks`] and
    /// [`Fs::pin_new_blocks`] (old blocks no file maps any more are freed
    /// then). Returns the blocks remapped. Called with no inode lock held.
    pub(crate) fn reshare(&self, mover: Ino, moved: Vec<SharedMove>) -> u64 {
        if moved.is_empty() {
            return 0;
        }
        let mut remapped = 0;
        for o in self.owners_of(mover, &moved) {
            remapped += self.remap_owner(&o);
        }
        self.migrator
            .reshared_blocks
            .fetch_add(remapped, Ordering::Relaxed);
        self.free_runs(moved.iter().map(|m| (m.to, m.new, m.blocks)).collect());
        self.unpin_old_blocks(&moved);
        remapped
    }

    /// The pieces of files whose data (not a clean copy) lies in the old
    /// blocks of `moved`, split per run of `moved`: among the other members
    /// of `mover`'s clone family (`clone_families.rs`), or every inode when
    /// it has none (which the families' invariant rules out; a fallback).
    fn owners_of(&self, mover: Ino, moved: &[SharedMove]) -> Vec<Owner> {
        let mut out = Vec::new();
        let family = self.clone_families.others(mover);
        let mut look = |i: &crate::inode::Inode| {
            for (fb, e) in i.extents.iter() {
                for m in moved.iter().filter(|m| m.from == e.tier) {
                    let s = e.block.max(m.old);
                    let end = (e.block + e.blocks).min(m.old + m.blocks);
                    if s < end {
                        out.push(Owner {
                            ino: i.ino,
                            generation: i.generation,
                            file_block: fb + (s - e.block),
                            old: s,
                            blocks: end - s,
                            seq: e.seq,
                            moved: *m,
                        });
                    }
                }
            }
        };
        if family.is_empty() {
            for slot in &self.table {
                if let Some(i) = slot.lock().as_ref() {
                    look(i);
                }
            }
        } else {
            for ino in family {
                if let Ok(g) = self.lock(ino) {
                    if let Some(i) = g.as_ref() {
                        look(i);
                    }
                }
            }
        }
        out
    }

    /// Rebuilds the clone families at mount: files whose extents map one
    /// shared run are joined.
    pub(crate) fn rebuild_clone_families(&self) {
        let refs = self.shared.all_tiers();
        if refs.iter().all(|(_, r)| r.is_empty()) {
            return;
        }
        let mut first: std::collections::HashMap<(TierId, PhysBlock), Ino> = Default::default();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            for (_, e) in i.extents.iter() {
                let Some(r) = refs.get(&e.tier) else { continue };
                for run in r.run_starts_overlapping(e.block, e.blocks) {
                    match first.entry((e.tier, run)) {
                        std::collections::hash_map::Entry::Occupied(o) => {
                            self.clone_families.join(*o.get(), i.ino)
                        }
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(i.ino);
                        }
                    }
                }
            }
        }
    }

    /// Maps `o`'s file blocks to the moved copy if they still map the old
    /// blocks; the blocks remapped.
    fn remap_owner(&self, o: &Owner) -> u64 {
        let Ok(mut g) = self.lock(o.ino) else {
            return 0;
        };
        let Some(i) = g.as_mut() else { return 0 };
        if i.generation != o.generation {
            return 0;
        }
        let still = i
            .extents
            .still_maps(o.file_block, o.blocks, o.moved.from, o.old, o.seq);
        let fits = u32::try_from(o.blocks).is_ok();
        let (Some(e), Some(new), true) = (still, o.moved.new_of(o.old), fits) else {
            return 0;
        };
        let run = (o.moved.to, new, o.blocks);
        let entry = Entry::Write(WriteEntry {
            file_block: o.file_block,
            blocks: o.blocks as u32,
            tier: o.moved.to,
            size_counter: e.counter,
            wflags: WRITE_FLAG_SHARED | WRITE_FLAG_MOVED,
            block: new,
            size_after: i.attr.size,
            mtime: e.mtime,
        });
        // The pin keeps `new` mapped: this reference is the owner's.
        self.shared.add(&[run]);
        if self
            .commit_one_in(i, vec![entry], !o.moved.to.is_pm())
            .is_err()
        {
            drop(g);
            self.free_runs(vec![run]);
            return 0;
        }
        o.blocks
    }
}
