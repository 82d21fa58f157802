//! [`BlockBuffer`]: written blocks held in DRAM until an upload, as runs of
//! shared byte buffers, so an upload sends the very bytes a write copied in.
//!
//! Invariants:
//! - Runs are keyed by their first block, hold whole blocks, never overlap,
//!   never cross a segment boundary and are never empty.
//! - A write copies its data once ([`BlockBuffer::write`]); everything after
//!   that — an overwrite cutting an older run, a trim, an upload body
//!   ([`BlockBuffer::segment_runs`]), putting a failed upload's data back
//!   ([`BlockBuffer::fill_gaps`]) — slices those buffers without copying.
//! - `blocks` is the number of blocks held.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::BLOCK;

/// Blocks written and not yet uploaded (or being uploaded), by block.
#[derive(Clone, Debug, Default)]
pub(super) struct BlockBuffer {
    runs: BTreeMap<u64, Bytes>,
    blocks: u64,
}

/// Blocks a run of `bytes` covers.
fn blocks_of(bytes: &Bytes) -> u64 {
    (bytes.len() / BLOCK) as u64
}

impl BlockBuffer {
    /// Whether nothing is held.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Blocks held.
    pub(super) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Copies `data` (whole blocks) in at `block`, replacing what was held
    /// there; runs are cut at multiples of `segment_blocks`.
    pub(super) fn write(&mut self, block: u64, data: &[u8], segment_blocks: u64) {
        if data.is_empty() {
            return;
        }
        let all = Bytes::copy_from_slice(data);
        let n = blocks_of(&all);
        self.remove(block, n);
        let mut at = 0u64;
        while at < n {
            let b = block + at;
            let room = segment_blocks - b % segment_blocks;
            let take = room.min(n - at);
            let piece = all.slice((at as usize) * BLOCK..((at + take) as usize) * BLOCK);
            self.runs.insert(b, piece);
            at += take;
        }
        self.blocks += n;
    }

    /// Drops every held block of `[block, block + n)`, keeping the rest of
    /// the runs it cuts.
    pub(super) fn remove(&mut self, block: u64, n: u64) {
        let end = block.saturating_add(n);
        // Runs that start before `block` and reach into it, then those that
        // start inside.
        let mut hit: Vec<u64> = Vec::new();
        if let Some((&s, r)) = self.runs.range(..block).next_back() {
            if s + blocks_of(r) > block {
                hit.push(s);
            }
        }
        hit.extend(self.runs.range(block..end).map(|(&s, _)| s));
        for s in hit {
            let Some(r) = self.runs.remove(&s) else {
                continue;
            };
            let e = s + blocks_of(&r);
            self.blocks -= e - s;
            if s < block {
                let keep = r.slice(..((block - s) as usize) * BLOCK);
                self.blocks += block - s;
                self.runs.insert(s, keep);
            }
            if e > end {
                let keep = r.slice(((end - s) as usize) * BLOCK..);
                self.blocks += e - end;
                self.runs.insert(end, keep);
            }
        }
    }

    /// The held pieces of `[block, block + n)` as `(first block, bytes)`, in
    /// block order.
    pub(super) fn overlapping(&self, block: u64, n: u64) -> Vec<(u64, &[u8])> {
        let end = block.saturating_add(n);
        let mut out = Vec::new();
        let before = self
            .runs
            .range(..block)
            .next_back()
            .filter(|(&s, r)| s + blocks_of(r) > block);
        for (&s, r) in before.into_iter().chain(self.runs.range(block..end)) {
            let from = s.max(block);
            let to = (s + blocks_of(r)).min(end);
            let bytes = &r[((from - s) as usize) * BLOCK..((to - s) as usize) * BLOCK];
            out.push((from, bytes));
        }
        out
    }

    /// The held data as upload bodies: each maximal run of consecutive
    /// blocks inside one segment, as `(first block, blocks, pieces)`.
    pub(super) fn segment_runs(&self, segment_blocks: u64) -> Vec<(u64, u64, Vec<Bytes>)> {
        let mut out: Vec<(u64, u64, Vec<Bytes>)> = Vec::new();
        for (&s, r) in &self.runs {
            let n = blocks_of(r);
            match out.last_mut() {
                Some((start, count, pieces)) if *start + *count == s && s % segment_blocks != 0 => {
                    *count += n;
                    pieces.push(r.clone());
                }
                _ => out.push((s, n, vec![r.clone()])),
            }
        }
        out
    }

    /// The block ranges held, `(first block, blocks)` per run.
    pub(super) fn ranges(&self) -> Vec<(u64, u64)> {
        self.runs.iter().map(|(&s, r)| (s, blocks_of(r))).collect()
    }

    /// Puts back the blocks of `old` that are neither held now (newer
    /// writes win) nor inside one of `trims` (`(first block, blocks)`).
    pub(super) fn fill_gaps(&mut self, old: &BlockBuffer, trims: &[(u64, u64)]) {
        let mut keep = old.clone();
        for &(b, n) in trims {
            keep.remove(b, n);
        }
        for (&s, r) in &self.runs {
            keep.remove(s, blocks_of(r));
        }
        for (s, r) in keep.runs {
            self.blocks += blocks_of(&r);
            self.runs.insert(s, r);
        }
    }

    /// Every block held, one `(block, bytes)` each (tests).
    #[cfg(test)]
    pub(super) fn per_block(&self) -> Vec<(u64, Vec<u8>)> {
        let mut v = Vec::new();
        for (&s, r) in &self.runs {
            for (i, c) in r.chunks_exact(BLOCK).enumerate() {
                v.push((s + i as u64, c.to_vec()));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The reference: one entry per block.
    type Model = BTreeMap<u64, Vec<u8>>;

    fn data(first: u64, n: u64, stamp: u8) -> Vec<u8> {
        let mut v = Vec::with_capacity(n as usize * BLOCK);
        for i in 0..n {
            let tag = ((first + i) as u8).wrapping_mul(31) ^ stamp;
            v.extend(std::iter::repeat_n(tag, BLOCK));
        }
        v
    }

    fn check(buf: &BlockBuffer, model: &Model, segment: u64) {
        let got: Model = buf.per_block().into_iter().collect();
        assert_eq!(&got, model);
        assert_eq!(buf.blocks(), model.len() as u64);
        let mut prev_end = 0;
        for (&s, r) in &buf.runs {
            let n = blocks_of(r);
            assert!(n > 0 && r.len() == n as usize * BLOCK, "whole, non-empty");
            assert!(s >= prev_end, "runs overlap");
            assert_eq!(s / segment, (s + n - 1) / segment, "run crosses a segment");
            prev_end = s + n;
        }
    }

    #[test]
    fn random_writes_trims_and_refills_match_a_block_by_block_model() {
        let segment = 8;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200u64 {
            let mut buf = BlockBuffer::default();
            let mut model = Model::new();
            for step in 0..40u64 {
                let b = next(40);
                let n = 1 + next(12);
                match next(3) {
                    0 | 1 => {
                        let d = data(b, n, (round * 40 + step) as u8);
                        buf.write(b, &d, segment);
                        for (i, c) in d.chunks_exact(BLOCK).enumerate() {
                            model.insert(b + i as u64, c.to_vec());
                        }
                    }
                    _ => {
                        buf.remove(b, n);
                        for x in b..b + n {
                            model.remove(&x);
                        }
                    }
                }
                check(&buf, &model, segment);
                let (rb, rn) = (next(40), 1 + next(16));
                let want: Vec<(u64, Vec<u8>)> = model
                    .range(rb..rb + rn)
                    .map(|(&k, v)| (k, v.clone()))
                    .collect();
                let got: Vec<(u64, Vec<u8>)> = buf
                    .overlapping(rb, rn)
                    .into_iter()
                    .flat_map(|(s, bytes)| {
                        bytes
                            .chunks_exact(BLOCK)
                            .enumerate()
                            .map(move |(i, c)| (s + i as u64, c.to_vec()))
                    })
                    .collect();
                assert_eq!(got, want, "overlapping({rb}, {rn})");
            }
            // A failed upload puts its data back under newer writes and
            // outside trims.
            let old = std::mem::take(&mut buf);
            let old_model = std::mem::take(&mut model);
            let (wb, wn) = (next(40), 1 + next(8));
            let d = data(wb, wn, 0xaa);
            buf.write(wb, &d, segment);
            let (tb, tn) = (next(40), 1 + next(8));
            buf.fill_gaps(&old, &[(tb, tn)]);
            for (k, v) in old_model {
                if !(tb..tb + tn).contains(&k) {
                    model.insert(k, v);
                }
            }
            for (i, c) in d.chunks_exact(BLOCK).enumerate() {
                model.insert(wb + i as u64, c.to_vec());
            }
            check(&buf, &model, segment);
        }
    }

    #[test]
    fn upload_bodies_are_the_runs_cut_at_segments_without_copying() {
        let segment = 4;
        let mut buf = BlockBuffer::default();
        buf.write(2, &data(2, 4, 1), segment); // blocks 2..6: cut at 4
        buf.write(6, &data(6, 1, 2), segment); // joins 4..6 in segment 1
        buf.write(9, &data(9, 1, 3), segment); // alone
        let runs = buf.segment_runs(segment);
        let shape: Vec<(u64, u64, usize)> =
            runs.iter().map(|(s, n, p)| (*s, *n, p.len())).collect();
        assert_eq!(shape, vec![(2, 2, 1), (4, 3, 2), (9, 1, 1)]);
        // The bodies point into the buffers the writes made.
        let held = buf.runs.get(&4).unwrap();
        assert_eq!(runs[1].2[0].as_ptr(), held.as_ptr());
    }
}
