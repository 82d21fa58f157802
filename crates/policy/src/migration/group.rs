//! Group migration (Ziggurat §5.3): entries adjacent in the file coalesced
//! into groups of at most the group size, and groups packed into batches
//! copied with one sequential request.
//!
//! Invariants: a group never exceeds the group size, its sources tile it
//! exactly and share one tier; batches keep the groups' order.

use super::cold::EntrySnapshot;

/// A run of file blocks migrated with one sequential write and committed as
/// one write entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    /// First file block.
    pub file_block: u64,
    /// Length in blocks (at most the group size).
    pub blocks: u64,
    /// The entries (or pieces of entries) it is made of, in file order; they
    /// tile `[file_block, file_block + blocks)` exactly and share one tier.
    pub sources: Vec<EntrySnapshot>,
}

/// Group migration (§5.3): coalesces entries adjacent in the file (and on
/// the same tier) into groups of at most `group_blocks` blocks; an entry
/// longer than that is cut into pieces. Entries may come in any order; groups
/// are returned in file order. Overlapping entries (not expected of a live
/// extent map) are never merged. Zero-length entries are dropped.
pub fn group_entries(entries: &[EntrySnapshot], group_blocks: u64) -> Vec<Group> {
    let max = group_blocks.max(1);
    let mut sorted: Vec<EntrySnapshot> = entries.iter().copied().filter(|e| e.blocks > 0).collect();
    sorted.sort_by_key(|e| (e.file_block, e.blocks));
    let mut groups: Vec<Group> = Vec::new();
    for e in sorted {
        let mut rest = e;
        while rest.blocks > 0 {
            let joins = groups.last().filter(|g| {
                g.file_block + g.blocks == rest.file_block
                    && g.blocks < max
                    && g.sources.last().is_some_and(|s| s.tier == rest.tier)
            });
            let room = match joins {
                Some(g) => max - g.blocks,
                None => max,
            };
            let take = rest.blocks.min(room);
            let piece = EntrySnapshot {
                blocks: take,
                ..rest
            };
            match (joins.is_some(), groups.last_mut()) {
                (true, Some(g)) => {
                    g.blocks += take;
                    g.sources.push(piece);
                }
                _ => groups.push(Group {
                    file_block: piece.file_block,
                    blocks: take,
                    sources: vec![piece],
                }),
            }
            rest.file_block += take;
            rest.blocks -= take;
        }
    }
    groups
}

/// Packs groups (in file order, as [`group_entries`] returns them) into
/// batches of at most `group_blocks` blocks in all, keeping their order. The
/// groups of a batch need not be adjacent in the file: the mechanism copies a
/// batch to one contiguous run of the target tier with one sequential request
/// (one write entry per group), so scattered small entries — random
/// overwrites — still reach a block tier as large writes (NVMFS's
/// random-to-sequential conversion). A group of `group_blocks` or more is a
/// batch of its own.
pub fn batch_groups(groups: &[Group], group_blocks: u64) -> Vec<Vec<Group>> {
    let max = group_blocks.max(1);
    let mut batches: Vec<Vec<Group>> = Vec::new();
    let mut size = 0u64;
    for g in groups {
        match batches.last_mut() {
            Some(b) if size + g.blocks <= max => {
                b.push(g.clone());
                size += g.blocks;
            }
            _ => {
                batches.push(vec![g.clone()]);
                size = g.blocks;
            }
        }
    }
    batches
}
