//! Reading blocks: where each block comes from (the pending or in-flight
//! buffer, the newest part holding it, or zeros), ranged GETs of the parts
//! (long runs cut into pieces fetched together), and planning again when a
//! part was deleted under a read.

use std::io;

use super::ahead::Take;
use super::{ObjectMedia, State, BLOCK};
use crate::block::BLOCK_SIZE;

/// How many times a read plans again when a part it meant to read was
/// deleted under it (it died: a newer part or a trim took its blocks).
const READ_ATTEMPTS: usize = 3;

/// Where a block to read comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Zero,
    Buffered,
    Part { seq: u64, offset: u64 },
}

impl ObjectMedia {
    /// Reads `buf` from `block` on, planning again (up to [`READ_ATTEMPTS`]
    /// tries) when a part was deleted under the read.
    pub(super) fn read_planned(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_read(block, buf) {
                Ok(()) => return Ok(()),
                // A part deleted under the read: its blocks moved on; plan again.
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < READ_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Where each block of `[block, block + n)` comes from.
    fn sources(&self, st: &State, block: u64, n: u64) -> Vec<Source> {
        let mut src = vec![Source::Zero; n as usize];
        for piece in st.index.lookup(block, n) {
            for i in 0..piece.blocks {
                let at = (piece.start - block + i) as usize;
                src[at] = match piece.at {
                    Some((seq, off)) => Source::Part {
                        seq,
                        offset: off + i,
                    },
                    None => Source::Zero,
                };
            }
        }
        for (b, data) in Self::buffered(st, block, n) {
            let at = (b - block) as usize;
            src[at..at + data.len() / BLOCK].fill(Source::Buffered);
        }
        src
    }

    /// Buffered blocks overlapping `[block, block + n)`: in-flight first,
    /// then sealed, then pending, each oldest first (each is newer than
    /// what comes before it).
    fn buffered<'a>(
        st: &'a State,
        block: u64,
        n: u64,
    ) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
        st.inflight
            .iter()
            .flat_map(move |f| f.batch.overlapping(block, n))
            .chain(
                st.sealed
                    .iter()
                    .flat_map(move |(_, b)| b.overlapping(block, n)),
            )
            .chain(st.pending.overlapping(block, n))
    }

    /// Where each block of `[block, block + n)` comes from; copies buffered
    /// blocks into `buf` and zero-fills holes on the way.
    fn plan_read(&self, st: &State, block: u64, buf: &mut [u8]) -> Vec<Source> {
        let n = (buf.len() / BLOCK) as u64;
        let src = self.sources(st, block, n);
        for (b, data) in Self::buffered(st, block, n) {
            let at = (b - block) as usize;
            buf[at * BLOCK..at * BLOCK + data.len()].copy_from_slice(data);
        }
        for (i, s) in src.iter().enumerate() {
            if *s == Source::Zero {
                buf[i * BLOCK..(i + 1) * BLOCK].fill(0);
            }
        }
        src
    }

    /// The ranged GETs (buffer offset in blocks, key, object byte range)
    /// of the part blocks of `src` (the plan from `block` on), each of at
    /// most [`GET_PIECE_BLOCKS`].
    fn part_gets(
        &self,
        st: &State,
        block: u64,
        src: &[Source],
        piece: u64,
    ) -> io::Result<Vec<Get>> {
        let mut gets: Vec<Get> = Vec::new();
        let mut i = 0;
        while i < src.len() {
            let Source::Part { seq, offset } = src[i] else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < src.len()
                && src[j]
                    == (Source::Part {
                        seq,
                        offset: offset + (j - i) as u64,
                    })
            {
                j += 1;
            }
            let key = match st.index.part(seq) {
                Some(p) => self.key(&p.key),
                None => {
                    return Err(io::Error::other(format!(
                        "s3 {}: block {} maps to unknown upload {seq:#x} (bug)",
                        self.bucket.url(),
                        block + i as u64
                    )))
                }
            };
            let range = offset * BLOCK_SIZE..(offset + (j - i) as u64) * BLOCK_SIZE;
            gets.push((i, key, range));
            i = j;
        }
        Ok(split_long_gets(gets, piece))
    }

    /// One try at reading: plan under the lock, fetch without it. Ranges a
    /// read-ahead holds are taken from it (`ahead.rs`); the rest is fetched.
    fn try_read(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let gets = {
            let st = self.state.lock();
            let src = self.plan_read(&st, block, buf);
            self.part_gets(&st, block, &src, GET_PIECE_BLOCKS)?
        };
        if gets.is_empty() {
            return Ok(());
        }
        let mut fetch = Vec::with_capacity(gets.len());
        for (at, key, range) in gets {
            match self.ahead.take(&key, &range) {
                Take::Bytes(pieces, upto) => {
                    let mut o = at * BLOCK;
                    for b in pieces {
                        buf[o..o + b.len()].copy_from_slice(&b);
                        o += b.len();
                    }
                    if upto < range.end {
                        let at = at + ((upto - range.start) / BLOCK_SIZE) as usize;
                        fetch.push((at, key, upto..range.end));
                    }
                }
                Take::Failed(e) => return Err(self.bucket.get_error(&key, &e)),
                Take::Miss => fetch.push((at, key, range)),
            }
        }
        if fetch.is_empty() {
            return Ok(());
        }
        let reqs = fetch
            .iter()
            .map(|(_, k, r)| (k.clone(), r.clone()))
            .collect();
        let data = self.bucket.get_ranges(reqs)?;
        for ((at, _, _), bytes) in fetch.iter().zip(data) {
            buf[at * BLOCK..at * BLOCK + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Starts GETs of the part blocks of `[block, block + n)` that no
    /// read-ahead holds yet, without waiting for them (`ahead.rs`).
    pub(super) fn start_read_ahead(&self, block: u64, n: u64) {
        let n = n.min((self.len / BLOCK_SIZE).saturating_sub(block));
        if n == 0 {
            return;
        }
        let gets = {
            let st = self.state.lock();
            let src = self.sources(&st, block, n);
            match self.part_gets(&st, block, &src, AHEAD_PIECE_BLOCKS) {
                Ok(g) => g,
                Err(_) => return,
            }
        };
        let pieces = gets.into_iter().map(|(_, k, r)| (k, r)).collect();
        for (key, range, slot) in self.ahead.plan(pieces) {
            self.bucket.spawn_get(&key, range, slot);
        }
    }
}

/// One ranged GET of a read: buffer offset in blocks, key, object byte range.
type Get = (usize, String, std::ops::Range<u64>);

/// Blocks one ranged GET fetches at most: a longer run is fetched as several
/// GETs of this size, in flight together (up to the bucket's concurrency), so
/// a large read of one part is not one stream at a time.
const GET_PIECE_BLOCKS: u64 = 512; // 2 MiB

/// Blocks one read-ahead GET fetches at most (8 MiB: a core read-ahead
/// window, one GET). Its concurrency comes from the windows in flight
/// together. Against MinIO on the benchmark machine (2 CPUs, boto3, same
/// session) ranged GETs of 2 MiB peaked at ~800 MB/s whatever the number
/// in flight (4, 8 or 16: the store's cost per request), 8 MiB ones at
/// 1,450–1,750 MB/s with 2–4 in flight.
const AHEAD_PIECE_BLOCKS: u64 = 2048;

/// `gets` (buffer offset in blocks, key, byte range) with every range longer
/// than `piece` blocks cut into ranges of at most `piece` blocks.
fn split_long_gets(
    gets: Vec<(usize, String, std::ops::Range<u64>)>,
    piece: u64,
) -> Vec<(usize, String, std::ops::Range<u64>)> {
    let piece_bytes = piece * BLOCK_SIZE;
    let mut out = Vec::with_capacity(gets.len());
    for (at, key, range) in gets {
        let mut start = range.start;
        while start < range.end {
            let end = range.end.min(start + piece_bytes);
            let at_here = at + ((start - range.start) / BLOCK_SIZE) as usize;
            out.push((at_here, key.clone(), start..end));
            start = end;
        }
    }
    out
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn long_gets_are_cut_into_pieces_that_cover_the_range_once_and_land_at_their_offset() {
        let gets = vec![
            (0, "a".to_string(), 0..4096 * 5),
            (5, "b".to_string(), 4096 * 10..4096 * 12),
        ];
        let out = split_long_gets(gets, 2);
        let got: Vec<(usize, &str, std::ops::Range<u64>)> = out
            .iter()
            .map(|(at, k, r)| (*at, k.as_str(), r.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "a", 0..8192),
                (2, "a", 8192..16384),
                (4, "a", 16384..20480),
                (5, "b", 40960..49152),
            ]
        );
    }
}
