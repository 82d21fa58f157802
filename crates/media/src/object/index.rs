//! Which part holds which block, and which parts hold nothing any more.
//!
//! Pure bookkeeping, no I/O: `ObjectMedia` feeds it the parts it uploads (and
//! at open the parts a LIST finds, oldest first), the blocks the file system
//! trims, and asks it where to read each block and what to delete.
//!
//! Invariants (checked by [`Index::check`] in tests):
//! - *Newest wins.* Parts are inserted in increasing upload number; a block
//!   maps to the newest inserted part that covers it and was not trimmed
//!   since. The map is kept as non-overlapping runs (`runs`), so its size is
//!   the number of runs, not the number of blocks.
//! - *Live counts are exact.* A part's `live` is the number of blocks that map
//!   to it: its blocks minus those superseded by newer parts or trimmed.
//! - *Dead means deletable.* A part is dead exactly when `live` is 0: no
//!   block maps to it, so no read will ever ask for it and deleting its object
//!   loses nothing. Dead parts stay known (and counted as stored) until
//!   [`Index::forget`] says their object is gone.

use std::collections::{BTreeMap, BTreeSet};

use super::keys::PartKey;

/// One part as the index knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its key (segment, upload number, blocks).
    pub key: PartKey,
    /// First block, as an address in the whole tier.
    pub start: u64,
    /// Blocks that still map to this part.
    pub live: u64,
}

impl Part {
    /// Blocks in the object.
    pub fn count(&self) -> u64 {
        u64::from(self.key.count)
    }
}

/// A run of blocks mapped to one part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// One past the last block.
    end: u64,
    /// The part's upload number.
    seq: u64,
}

/// Where a run of requested blocks is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// First block (tier address).
    pub start: u64,
    /// Number of blocks.
    pub blocks: u64,
    /// The part holding them and the block offset inside it; `None` for blocks
    /// no part holds (never written, or trimmed): they read as zeros.
    pub at: Option<(u64, u64)>,
}

/// The block map of an object tier; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// Start block → run; runs never overlap.
    runs: BTreeMap<u64, Run>,
    /// Upload number → part, dead ones included until forgotten.
    parts: BTreeMap<u64, Part>,
    /// Upload numbers of the parts whose `live` is 0.
    dead: BTreeSet<u64>,
    /// Sum of `live` over all parts.
    live_blocks: u64,
    /// Sum of block counts over all parts.
    stored_blocks: u64,
}

impl Index {
    /// No parts.
    pub fn new() -> Index {
        Index::default()
    }

    /// Highest upload number inserted so far (forgotten parts included).
    pub fn max_seq(&self) -> Option<u64> {
        self.parts.keys().next_back().copied()
    }

    /// Adds a part whose first block is `start`; it supersedes every older
    /// part on its blocks. Fails (changing nothing) when the part is not newer
    /// than every part inserted before: keys and open both keep to that.
    pub fn insert(&mut self, key: PartKey, start: u64) -> Result<(), String> {
        if let Some(max) = self.max_seq() {
            if key.seq <= max {
                return Err(format!(
                    "upload {:#x} is not newer than upload {max:#x}",
                    key.seq
                ));
            }
        }
        let count = u64::from(key.count);
        let end = start
            .checked_add(count)
            .ok_or_else(|| "part ends beyond block 2^64".to_string())?;
        if count == 0 {
            return Err("part of 0 blocks".to_string());
        }
        self.cut(start, end);
        self.runs.insert(start, Run { end, seq: key.seq });
        self.parts.insert(
            key.seq,
            Part {
                key,
                start,
                live: count,
            },
        );
        self.live_blocks += count;
        self.stored_blocks += count;
        Ok(())
    }

    /// Blocks `[start, start + blocks)` hold no data any more: whatever part
    /// held them loses them.
    pub fn trim(&mut self, start: u64, blocks: u64) {
        self.cut(start, start.saturating_add(blocks));
    }

    /// Unmaps `[start, end)`, keeping the parts of runs outside it.
    fn cut(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut hit: Vec<(u64, Run)> = Vec::new();
        if let Some((&s, &r)) = self.runs.range(..start).next_back() {
            if r.end > start {
                hit.push((s, r));
            }
        }
        hit.extend(self.runs.range(start..end).map(|(&s, &r)| (s, r)));
        for (s, r) in hit {
            self.runs.remove(&s);
            if s < start {
                self.runs.insert(
                    s,
                    Run {
                        end: start,
                        seq: r.seq,
                    },
                );
            }
            if r.end > end {
                self.runs.insert(end, r);
            }
            let lost = r.end.min(end) - s.max(start);
            self.lose(r.seq, lost);
        }
    }

    /// `blocks` blocks of part `seq` no longer map to it.
    fn lose(&mut self, seq: u64, blocks: u64) {
        if let Some(p) = self.parts.get_mut(&seq) {
            p.live -= blocks;
            self.live_blocks -= blocks;
            if p.live == 0 {
                self.dead.insert(seq);
            }
        }
    }

    /// Where each of the blocks `[start, start + blocks)` is, in order.
    pub fn lookup(&self, start: u64, blocks: u64) -> Vec<Piece> {
        let end = start.saturating_add(blocks);
        let mut out = Vec::new();
        let mut at = start;
        let first = self
            .runs
            .range(..=start)
            .next_back()
            .filter(|(_, r)| r.end > start)
            .map(|(&s, &r)| (s, r));
        let rest = self.runs.range(start.saturating_add(1)..end);
        for (s, r) in first.into_iter().chain(rest.map(|(&s, &r)| (s, r))) {
            if s > at {
                out.push(Piece {
                    start: at,
                    blocks: s - at,
                    at: None,
                });
                at = s;
            }
            let stop = r.end.min(end);
            let offset = self
                .parts
                .get(&r.seq)
                .map(|p| at - p.start)
                .unwrap_or_default();
            out.push(Piece {
                start: at,
                blocks: stop - at,
                at: Some((r.seq, offset)),
            });
            at = stop;
        }
        if at < end {
            out.push(Piece {
                start: at,
                blocks: end - at,
                at: None,
            });
        }
        out
    }

    /// Every part, dead ones not yet forgotten included, oldest first.
    pub fn all_parts(&self) -> impl Iterator<Item = &Part> {
        self.parts.values()
    }

    /// The part with upload number `seq`.
    pub fn part(&self, seq: u64) -> Option<&Part> {
        self.parts.get(&seq)
    }

    /// Every part whose blocks are all superseded or trimmed, oldest first:
    /// their objects can be deleted.
    pub fn dead_parts(&self) -> Vec<Part> {
        self.dead
            .iter()
            .filter_map(|s| self.parts.get(s).copied())
            .collect()
    }

    /// Part `seq`'s object is deleted: drop it. Only dead parts are dropped
    /// (a live one is kept and `false` returned).
    pub fn forget(&mut self, seq: u64) -> bool {
        if !self.dead.remove(&seq) {
            return false;
        }
        if let Some(p) = self.parts.remove(&seq) {
            self.stored_blocks -= p.count();
        }
        true
    }

    /// Trims every block outside `used` (runs of `(start, blocks)`, in any
    /// order, overlaps allowed): afterwards exactly the parts holding no used
    /// block are dead. Returns the parts that died now (not the ones that
    /// were dead already), oldest first.
    pub fn retain(&mut self, used: &[(u64, u64)]) -> Vec<Part> {
        let before = self.dead.clone();
        let mut at = 0u64;
        for (s, e) in merge(used) {
            if s > at {
                self.cut(at, s);
            }
            at = at.max(e);
        }
        self.cut(at, u64::MAX);
        self.dead
            .difference(&before)
            .filter_map(|s| self.parts.get(s).copied())
            .collect()
    }

    /// The parts [`retain`](Self::retain) would kill, without changing
    /// anything.
    pub fn orphans(&self, used: &[(u64, u64)]) -> Vec<Part> {
        self.clone().retain(used)
    }

    /// Parts known (dead ones not yet forgotten included).
    pub fn parts(&self) -> u64 {
        self.parts.len() as u64
    }

    /// Blocks in all known parts' objects.
    pub fn stored_blocks(&self) -> u64 {
        self.stored_blocks
    }

    /// Blocks that map to a part.
    pub fn live_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Checks the invariants of the module docs; the first broken one.
    pub fn check(&self) -> Result<(), String> {
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        let mut prev_end = 0u64;
        for (&s, r) in &self.runs {
            if s < prev_end || r.end <= s {
                return Err(format!("run [{s}, {}) overlaps or is empty", r.end));
            }
            prev_end = r.end;
            let p = self
                .parts
                .get(&r.seq)
                .ok_or_else(|| format!("run at {s} maps to unknown part {}", r.seq))?;
            if s < p.start || r.end > p.start + p.count() {
                return Err(format!("run [{s}, {}) outside its part {p:?}", r.end));
            }
            *live.entry(r.seq).or_default() += r.end - s;
        }
        for (&seq, p) in &self.parts {
            let n = live.get(&seq).copied().unwrap_or(0);
            if p.live != n {
                return Err(format!(
                    "part {seq}: live {} but {n} blocks map to it",
                    p.live
                ));
            }
            if (n == 0) != self.dead.contains(&seq) {
                return Err(format!("part {seq}: live {n}, dead mark wrong"));
            }
        }
        let l: u64 = self.parts.values().map(|p| p.live).sum();
        let st: u64 = self.parts.values().map(|p| p.count()).sum();
        if l != self.live_blocks || st != self.stored_blocks {
            return Err("block totals wrong".to_string());
        }
        Ok(())
    }
}

/// `runs` of `(start, blocks)` as sorted, merged `[start, end)` ranges.
fn merge(runs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = runs
        .iter()
        .filter(|&&(_, n)| n > 0)
        .map(|&(s, n)| (s, s.saturating_add(n)))
        .collect();
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(r.len());
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(seq: u64, first: u32, count: u32) -> PartKey {
        PartKey {
            seq,
            segment: 0,
            first,
            count,
        }
    }

    #[test]
    fn newer_parts_supersede_older_ones_block_by_block() {
        let mut ix = Index::new();
        ix.insert(key(1, 0, 10), 0).unwrap();
        ix.insert(key(2, 3, 4), 3).unwrap();
        assert_eq!(
            ix.lookup(0, 12),
            vec![
                Piece {
                    start: 0,
                    blocks: 3,
                    at: Some((1, 0))
                },
                Piece {
                    start: 3,
                    blocks: 4,
                    at: Some((2, 0))
                },
                Piece {
                    start: 7,
                    blocks: 3,
                    at: Some((1, 7))
                },
                Piece {
                    start: 10,
                    blocks: 2,
                    at: None
                },
            ]
        );
        assert_eq!(ix.part(1).unwrap().live, 6);
        assert_eq!(ix.live_blocks(), 10);
        assert_eq!(ix.stored_blocks(), 14);
        ix.check().unwrap();
        // A lookup starting inside a run.
        assert_eq!(
            ix.lookup(5, 3),
            vec![
                Piece {
                    start: 5,
                    blocks: 2,
                    at: Some((2, 2))
                },
                Piece {
                    start: 7,
                    blocks: 1,
                    at: Some((1, 7))
                },
            ]
        );
    }

    #[test]
    fn an_old_or_repeated_upload_number_is_refused() {
        let mut ix = Index::new();
        ix.insert(key(5, 0, 1), 0).unwrap();
        assert!(ix.insert(key(5, 1, 1), 1).is_err());
        assert!(ix.insert(key(4, 1, 1), 1).is_err());
        assert!(ix.insert(key(6, 0, 2), u64::MAX - 1).is_err());
        ix.check().unwrap();
        assert_eq!(ix.parts(), 1);
    }

    #[test]
    fn a_part_dies_when_its_last_block_is_superseded_or_trimmed() {
        let mut ix = Index::new();
        ix.insert(key(1, 0, 4), 0).unwrap();
        ix.insert(key(2, 4, 4), 4).unwrap();
        ix.insert(key(3, 0, 2), 0).unwrap();
        assert!(ix.dead_parts().is_empty());
        ix.trim(2, 3);
        assert_eq!(
            ix.dead_parts()
                .iter()
                .map(|p| p.key.seq)
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(ix.part(2).unwrap().live, 3);
        ix.check().unwrap();
        // Forgetting only drops dead parts.
        assert!(!ix.forget(2));
        assert!(ix.forget(1));
        assert!(!ix.forget(1));
        assert_eq!(ix.parts(), 2);
        assert_eq!(ix.stored_blocks(), 6);
        ix.check().unwrap();
    }

    #[test]
    fn retain_kills_exactly_the_parts_without_a_used_block() {
        let mut ix = Index::new();
        ix.insert(key(1, 0, 4), 0).unwrap(); // used at block 1
        ix.insert(key(2, 4, 4), 4).unwrap(); // unused: orphan
        ix.insert(key(3, 8, 4), 8).unwrap(); // used at its last block
        let used = [(1, 1), (11, 1), (100, 5)];
        let orphans = ix.orphans(&used);
        assert_eq!(
            orphans.iter().map(|p| p.key.seq).collect::<Vec<_>>(),
            vec![2]
        );
        assert!(ix.dead_parts().is_empty(), "orphans() changed nothing");
        let died = ix.retain(&used);
        assert_eq!(
            died,
            orphans
                .iter()
                .map(|p| Part { live: 0, ..*p })
                .collect::<Vec<_>>()
        );
        assert_eq!(ix.live_blocks(), 2);
        ix.check().unwrap();
        // A second retain finds nothing new.
        assert!(ix.retain(&used).is_empty());
    }

    /// The model: for each block, the upload number of the part it maps to.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        Trim(u64, u64),
        Retain(Vec<(u64, u64)>),
        ForgetDead,
    }

    const BLOCKS: u64 = 64;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..BLOCKS, 1..16u64).prop_map(|(s, n)| Op::Insert(s, n.min(BLOCKS - s))),
            2 => (0..BLOCKS, 1..16u64).prop_map(|(s, n)| Op::Trim(s, n)),
            1 => prop::collection::vec((0..BLOCKS, 1..8u64), 0..4).prop_map(Op::Retain),
            1 => Just(Op::ForgetDead),
        ]
    }

    proptest! {
        #[test]
        fn the_index_matches_a_per_block_model(ops in prop::collection::vec(op(), 1..60)) {
            let mut ix = Index::new();
            let mut model: Vec<Option<u64>> = vec![None; BLOCKS as usize];
            let mut seq = 0u64;
            for op in ops {
                match op {
                    Op::Insert(s, n) => {
                        seq += 1;
                        ix.insert(key(seq, s as u32, n as u32), s).unwrap();
                        for b in s..s + n {
                            model[b as usize] = Some(seq);
                        }
                    }
                    Op::Trim(s, n) => {
                        ix.trim(s, n);
                        for b in s..(s + n).min(BLOCKS) {
                            model[b as usize] = None;
                        }
                    }
                    Op::Retain(used) => {
                        ix.retain(&used);
                        for (b, m) in model.iter_mut().enumerate() {
                            let b = b as u64;
                            if !used.iter().any(|&(s, n)| b >= s && b < s + n) {
                                *m = None;
                            }
                        }
                    }
                    Op::ForgetDead => {
                        for p in ix.dead_parts() {
                            prop_assert!(ix.forget(p.key.seq));
                        }
                    }
                }
                prop_assert_eq!(ix.check(), Ok(()));
                // Reads see exactly the model.
                let mut seen = Vec::new();
                for p in ix.lookup(0, BLOCKS) {
                    for i in 0..p.blocks {
                        seen.push(p.at.map(|(seq, _)| seq));
                        if let Some((seq, off)) = p.at {
                            let part = ix.part(seq).unwrap();
                            prop_assert_eq!(part.start + off + i, p.start + i);
                        }
                    }
                }
                prop_assert_eq!(&seen, &model);
                // Dead parts are exactly the known parts no block maps to.
                for p in ix.dead_parts() {
                    prop_assert!(!model.contains(&Some(p.key.seq)));
                }
                for seq in model.iter().flatten() {
                    prop_assert!(ix.part(*seq).is_some_and(|p| p.live > 0));
                }
            }
        }
    }
}
