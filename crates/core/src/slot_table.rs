//! The DRAM inode table's slots: one mutex per inode slot of the PM table,
//! and where each slot lies on PM. The base table's slots (sized at mkfs)
//! come first; slots of groups the table grew by while mounted
//! ([`crate::fs::Fs::grow_inode_table`], design.md §3.7) follow, 32 per
//! group, in chunks of DRAM slots made as the groups come.
//!
//! # Invariants
//! - Slot numbers are dense: slot `i` is the `i`-th of [`SlotTable::iter`].
//! - Groups are only added, never removed or moved, and a group is
//!   published (readers see its slots) only once its PM block is zeroed and
//!   the map entry naming it is durable. Readers take no lock to find a
//!   slot; additions are serialised by their caller (the room lock).

use crate::inode::Inode;
use crate::lock_order::{Mutex, Rank};
use crate::types::Ino;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use terrace_format::{InodeMap, BLOCK_SIZE, INODES_PER_BLOCK, INODE_SIZE, MAX_INODE_GROUPS};

/// One inode's DRAM slot: the live inode, or nothing.
pub(crate) type SlotLock = Mutex<Option<Box<Inode>>>;

/// DRAM slots made at once for groups added while mounted.
const CHUNK_SLOTS: u64 = 4096;

/// The DRAM slots of every inode number of the pool's table.
pub(crate) struct SlotTable {
    base: Box<[SlotLock]>,
    /// Slots of the groups, [`CHUNK_SLOTS`] a chunk, made when first needed.
    chunks: Box<[OnceLock<Box<[SlotLock]>>]>,
    /// PM block of each group (set before `groups` counts it).
    group_blocks: Box<[AtomicU64]>,
    /// Groups published.
    groups: AtomicU64,
}

impl SlotTable {
    /// Empty slots for every slot of `map`.
    pub(crate) fn new(map: &InodeMap) -> SlotTable {
        let chunks = (MAX_INODE_GROUPS * INODES_PER_BLOCK).div_ceil(CHUNK_SLOTS);
        let t = SlotTable {
            base: (0..map.base())
                .map(|ino| Mutex::new(Rank::Inode(ino), None))
                .collect(),
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            group_blocks: (0..MAX_INODE_GROUPS).map(|_| AtomicU64::new(0)).collect(),
            groups: AtomicU64::new(0),
        };
        t.add_groups(map.groups());
        t
    }

    /// Groups published so far.
    pub(crate) fn groups(&self) -> u64 {
        self.groups.load(Ordering::Acquire)
    }

    /// The PM blocks of the published groups, in group order.
    pub(crate) fn group_blocks(&self) -> Vec<u64> {
        (0..self.groups() as usize)
            .map(|g| self.group_blocks[g].load(Ordering::Relaxed))
            .collect()
    }

    /// Publishes groups at the PM blocks `blocks` after the last one; the
    /// caller serialises additions and keeps within [`MAX_INODE_GROUPS`].
    pub(crate) fn add_groups(&self, blocks: &[u64]) {
        let first = self.groups();
        let base = self.base.len() as u64;
        for (k, &b) in blocks.iter().enumerate() {
            let g = first + k as u64;
            self.group_blocks[g as usize].store(b, Ordering::Relaxed);
            let c = (g * INODES_PER_BLOCK / CHUNK_SLOTS) as usize;
            self.chunks[c].get_or_init(|| {
                let start = base + c as u64 * CHUNK_SLOTS;
                (start..start + CHUNK_SLOTS)
                    .map(|ino| Mutex::new(Rank::Inode(ino), None))
                    .collect()
            });
        }
        self.groups
            .store(first + blocks.len() as u64, Ordering::Release);
    }

    /// The slot of `ino`; `None` past the table.
    pub(crate) fn get(&self, ino: Ino) -> Option<&SlotLock> {
        if let Some(s) = self.base.get(usize::try_from(ino).ok()?) {
            return Some(s);
        }
        let i = ino - self.base.len() as u64;
        if i >= self.groups() * INODES_PER_BLOCK {
            return None;
        }
        let chunk = self.chunks[(i / CHUNK_SLOTS) as usize].get()?;
        chunk.get((i % CHUNK_SLOTS) as usize)
    }

    /// The slot of `ino`, which must be in the table.
    #[track_caller]
    pub(crate) fn slot(&self, ino: Ino) -> &SlotLock {
        self.get(ino)
            .unwrap_or_else(|| panic!("inode {ino} is past the inode table"))
    }

    /// PM byte offset of the slot of `ino`, which must be in the table.
    #[track_caller]
    pub(crate) fn pm_offset(&self, ino: Ino) -> u64 {
        let base = self.base.len() as u64;
        if ino < base {
            return terrace_format::inode_offset(ino);
        }
        let i = ino - base;
        let g = i / INODES_PER_BLOCK;
        assert!(g < self.groups(), "inode {ino} is past the inode table");
        self.group_blocks[g as usize].load(Ordering::Relaxed) * BLOCK_SIZE
            + (i % INODES_PER_BLOCK) * INODE_SIZE as u64
    }

    /// Number of slots (slot 0 included, unused).
    pub(crate) fn len(&self) -> usize {
        self.base.len() + (self.groups() * INODES_PER_BLOCK) as usize
    }

    /// Every slot in number order (the `i`-th item is slot `i`).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &SlotLock> {
        (0..self.len() as u64).filter_map(|ino| self.get(ino))
    }
}

impl<'a> IntoIterator for &'a SlotTable {
    type Item = &'a SlotLock;
    type IntoIter = Box<dyn Iterator<Item = &'a SlotLock> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_numbered_on_through_every_group_at_their_pm_places() {
        let map = InodeMap::new(64, vec![1000, 500]);
        let t = SlotTable::new(&map);
        assert_eq!(t.len(), 128);
        assert_eq!(t.iter().count(), 128);
        for ino in 0..128 {
            assert_eq!(Some(t.pm_offset(ino)), map.offset(ino), "slot {ino}");
        }
        assert!(t.get(128).is_none());
        // Growth past a chunk's end makes the next chunk.
        let more: Vec<u64> = (2000..2000 + 200).collect();
        t.add_groups(&more);
        assert_eq!(t.groups(), 202);
        assert_eq!(t.len() as u64, 64 + 202 * 32);
        let last = t.len() as u64 - 1;
        assert!(t.get(last).is_some());
        assert!(t.get(last + 1).is_none());
        assert_eq!(t.pm_offset(last), 2199 * 4096 + 31 * INODE_SIZE as u64);
        assert_eq!(t.iter().count(), t.len());
        assert_eq!(t.group_blocks()[..2], [1000, 500]);
    }
}
