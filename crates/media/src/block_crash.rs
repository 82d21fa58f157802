//! [`CrashBlock`]: block media with a volatile write cache, for
//! crash-consistency tests of the block tiers.
//!
//! # Model
//! The media keeps two images: `live` (what reads see) and `durable` (what
//! survives power loss for certain), plus the set of blocks written since the
//! last sync. `write_blocks` changes `live` only; `sync` copies every unsynced
//! block into `durable` and empties the set. Invariants:
//! - `durable` changes only at a sync;
//! - a block outside the unsynced set has the same live and durable content;
//! - every event (write, sync) is recorded, in order, under one lock.
//!
//! # Crash images
//! A crash image is `durable` plus, for every unsynced block, either its
//! durable content (the write was lost) or its live content (it reached the
//! media). [`BlockLoss`] chooses: `AllUnsynced` loses them all;
//! `RandomBlocks(seed)` decides per block, independently, with an RNG seeded
//! by `seed` — so a multi-block write can be torn at any 4096-byte boundary
//! and later writes can survive while earlier ones are lost. Each block is
//! kept or lost *whole*: 4096-byte atomicity is the most any disk promises
//! (many promise only 512-byte sectors, some nothing without atomic-write
//! support), so an on-disk format that needs atomicity must get it from its
//! own commit protocol (e.g. a PM commit after a sync), not from the device.
//! Intermediate contents a block held between two writes without a sync are
//! not modelled (as [`CrashMedia`](crate::CrashMedia) does not model
//! intermediate cache-line contents).
//!
//! # Crashing in the middle of an operation
//! As with [`CrashMedia`](crate::CrashMedia): trace it, then build the image
//! after any prefix of its events.
//! ```
//! use terrace_media::{BlockLoss, BlockMedia, CrashBlock};
//! let m = CrashBlock::new(8 * 4096);
//! let ((), trace) = m.trace(|| {
//!     m.write_blocks(1, &[7; 4096]).unwrap(); // event 0
//!     m.sync().unwrap();                       // event 1
//! });
//! assert_eq!(trace.len(), 2);
//! trace.for_each_state(|k, state| {
//!     let img = state.image(BlockLoss::AllUnsynced);
//!     assert_eq!(img[4096], if k == 2 { 7 } else { 0 });
//! });
//! ```
//! Remount a crash image with [`CrashBlock::from_image`].

use std::collections::BTreeSet;
use std::io;

use parking_lot::Mutex;
use std::sync::Arc;

use crate::replay::{EventClock, Recorder, Replay, Trace};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::block::{
    check_block_range, BlockMedia, BlockStats, BlockStatsCounter, BLOCK_SIZE, DISCARDED_BYTE,
};

const BLOCK: usize = BLOCK_SIZE as usize;

/// One recorded block-media operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEvent {
    /// `write_blocks` of `len` bytes at `block`.
    Write { block: u64, len: u64 },
    /// `sync`.
    Sync,
    /// `discard` of `blocks` blocks at `block`.
    Discard { block: u64, blocks: u64 },
}

/// Which unsynced writes a crash image keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockLoss {
    /// Nothing written since the last sync survives.
    AllUnsynced,
    /// Each block written since the last sync independently survives or is
    /// lost (whole), chosen by an RNG seeded with the value.
    RandomBlocks(u64),
}

/// Live and durable images plus the unsynced blocks: everything needed to
/// build crash images. Cloning copies both images.
#[derive(Clone, Debug)]
pub struct BlockCrashState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Blocks written since the last sync.
    unsynced: BTreeSet<u64>,
}

impl BlockCrashState {
    fn new(image: Vec<u8>) -> BlockCrashState {
        assert!(
            image.len() % BLOCK == 0,
            "block media length {} is not a multiple of {BLOCK_SIZE}",
            image.len()
        );
        BlockCrashState {
            durable: image.clone(),
            live: image,
            unsynced: BTreeSet::new(),
        }
    }

    /// What reads see.
    pub fn live(&self) -> &[u8] {
        &self.live
    }

    /// What is durable for certain (the `AllUnsynced` image).
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Number of blocks written since the last sync.
    pub fn unsynced_blocks(&self) -> usize {
        self.unsynced.len()
    }

    fn block_range(b: u64) -> std::ops::Range<usize> {
        b as usize * BLOCK..(b as usize + 1) * BLOCK
    }

    /// Applies a write already checked against the media size.
    fn write(&mut self, block: u64, data: &[u8]) {
        let start = block as usize * BLOCK;
        self.live[start..start + data.len()].copy_from_slice(data);
        let n = (data.len() / BLOCK) as u64;
        self.unsynced.extend(block..block + n);
    }

    fn sync(&mut self) {
        for b in std::mem::take(&mut self.unsynced) {
            let r = Self::block_range(b);
            self.durable[r.clone()].copy_from_slice(&self.live[r]);
        }
    }

    /// Applies a discard already checked against the media size: the
    /// blocks hold [`DISCARDED_BYTE`] at once, live *and* durable (the
    /// harshest model: a device may drop discarded data at any moment, so a
    /// crash image must not find in them anything the pool still needs).
    fn discard(&mut self, block: u64, blocks: u64) {
        let r = block as usize * BLOCK..(block + blocks) as usize * BLOCK;
        self.live[r.clone()].fill(DISCARDED_BYTE);
        self.durable[r].fill(DISCARDED_BYTE);
        for b in block..block + blocks {
            self.unsynced.remove(&b);
        }
    }

    fn apply(&mut self, op: &BlockOp) {
        match op {
            BlockOp::Write { block, data } => self.write(*block, data),
            BlockOp::Sync => self.sync(),
            BlockOp::Discard { block, blocks } => self.discard(*block, *blocks),
        }
    }

    /// The media as it would be found after a crash now.
    pub fn image(&self, mode: BlockLoss) -> Vec<u8> {
        let mut img = self.durable.clone();
        if let BlockLoss::RandomBlocks(seed) = mode {
            let mut rng = StdRng::seed_from_u64(seed);
            for &b in &self.unsynced {
                if rng.gen_bool(0.5) {
                    let r = Self::block_range(b);
                    img[r.clone()].copy_from_slice(&self.live[r]);
                }
            }
        }
        img
    }
}

/// A recorded block operation with its data, for replay ([`BlockTrace`]).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub enum BlockOp {
    Write { block: u64, data: Box<[u8]> },
    Sync,
    Discard { block: u64, blocks: u64 },
}

impl Replay for BlockCrashState {
    type Op = BlockOp;
    type Event = BlockEvent;
    type Loss = BlockLoss;
    fn apply(&mut self, op: &BlockOp) {
        BlockCrashState::apply(self, op)
    }
    fn event(op: &BlockOp) -> BlockEvent {
        match op {
            BlockOp::Write { block, data } => BlockEvent::Write {
                block: *block,
                len: data.len() as u64,
            },
            BlockOp::Sync => BlockEvent::Sync,
            BlockOp::Discard { block, blocks } => BlockEvent::Discard {
                block: *block,
                blocks: *blocks,
            },
        }
    }
    fn image(&self, loss: BlockLoss) -> Vec<u8> {
        BlockCrashState::image(self, loss)
    }
}

/// The events of a traced operation and the state before it: replays any
/// prefix (or, with a clock shared with the PM media, the moment of a PM
/// crash point) to build the state of a crash then (see [`Trace`]).
pub type BlockTrace = Trace<BlockCrashState>;

/// What the media records behind its lock.
type Inner = Recorder<BlockCrashState>;

/// Simulated block media with a volatile write cache; see the module docs.
#[derive(Debug)]
pub struct CrashBlock {
    inner: Mutex<Inner>,
    stats: BlockStatsCounter,
}

impl CrashBlock {
    /// Zero-filled media of `len` bytes, all durable. Panics unless `len` is a
    /// multiple of [`BLOCK_SIZE`] that fits in memory.
    pub fn new(len: u64) -> CrashBlock {
        let len = usize::try_from(len).expect("CrashBlock length exceeds the address space");
        CrashBlock::from_image(vec![0; len])
    }

    /// Media whose live and durable contents are `image` (e.g. a crash image,
    /// to "reboot" after a simulated crash). Panics unless its length is a
    /// multiple of [`BLOCK_SIZE`].
    pub fn from_image(image: Vec<u8>) -> CrashBlock {
        CrashBlock {
            inner: Mutex::new(Recorder::new(BlockCrashState::new(image))),
            stats: BlockStatsCounter::new(),
        }
    }

    /// Stamps this media's events with `clock` from now on: share the PM
    /// media's clock ([`crate::CrashMedia::clock`]) to build the device image
    /// of the moment of any PM crash point ([`Trace::state_at_time`]).
    pub fn set_clock(&self, clock: Arc<EventClock>) {
        self.inner.lock().clock = clock;
    }

    /// A zero-filled device of `len` bytes on `clock`, already tracing (for
    /// crash tests paired with a traced PM media).
    pub fn timed(len: u64, clock: Arc<EventClock>) -> CrashBlock {
        let b = CrashBlock::new(len);
        b.set_clock(clock);
        b.start_trace();
        b
    }

    /// Events (non-empty writes and syncs) recorded since creation.
    pub fn events_len(&self) -> u64 {
        self.inner.lock().count
    }

    /// Events recorded since creation or the last [`clear_events`](Self::clear_events).
    pub fn events(&self) -> Vec<BlockEvent> {
        self.inner.lock().events.clone()
    }

    /// Forgets the event list (to bound memory); [`events_len`](Self::events_len)
    /// keeps counting.
    pub fn clear_events(&self) {
        self.inner.lock().events = Vec::new();
    }

    /// A copy of the current live contents.
    pub fn image(&self) -> Vec<u8> {
        self.inner.lock().state.live.clone()
    }

    /// The image a crash now would leave.
    pub fn crash_image(&self, mode: BlockLoss) -> Vec<u8> {
        self.inner.lock().state.image(mode)
    }

    /// A failed write-back of a buffered file, as Linux handles it: every
    /// block written since the last sync keeps what reads see but is never
    /// made durable by a later sync — the kernel marks the failed pages
    /// clean and reports the error to one `fsync` only (errseq), so a
    /// caller that syncs after another caller saw the error gets success.
    /// Crash images show those blocks' durable (older) contents unless
    /// they are written again. Returns how many blocks were lost. Not
    /// recorded as an event: panics while a trace is open.
    pub fn lose_unsynced(&self) -> usize {
        let mut g = self.inner.lock();
        assert!(g.trace.is_none(), "lose_unsynced during a trace");
        let n = g.state.unsynced.len();
        g.state.unsynced.clear();
        n
    }

    /// A copy of the whole state (both images and the unsynced blocks).
    pub fn snapshot(&self) -> BlockCrashState {
        self.inner.lock().state.clone()
    }

    /// Starts recording events with their data (replacing an open trace).
    pub fn start_trace(&self) {
        self.inner.lock().start_trace();
    }

    /// Ends the trace begun by [`start_trace`](Self::start_trace). Panics if none is open.
    pub fn finish_trace(&self) -> BlockTrace {
        self.inner.lock().finish_trace()
    }

    /// The crash image at clock time `t` of the open trace (a [`timed`]
    /// device traces from its creation). Panics when no trace is open.
    ///
    /// [`timed`]: CrashBlock::timed
    pub fn image_at_time(&self, t: u64, loss: BlockLoss) -> Vec<u8> {
        self.inner
            .lock()
            .trace
            .as_ref()
            .expect("image_at_time needs an open trace")
            .image_at_time(t, loss)
    }

    /// Runs `f` between `start_trace` and `finish_trace`.
    pub fn trace<R>(&self, f: impl FnOnce() -> R) -> (R, BlockTrace) {
        self.start_trace();
        let r = f();
        (r, self.finish_trace())
    }
}

impl BlockMedia for CrashBlock {
    fn len(&self) -> u64 {
        self.inner.lock().state.live.len() as u64
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let g = self.inner.lock();
        let live = &g.state.live;
        let (s, e) = check_block_range(live.len() as u64, block, buf.len())?;
        buf.copy_from_slice(&live[s as usize..e as usize]);
        self.stats.record_read(buf.len() as u64);
        Ok(())
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        let mut g = self.inner.lock();
        check_block_range(g.state.live.len() as u64, block, data.len())?;
        if !data.is_empty() {
            g.record(BlockOp::Write {
                block,
                data: data.into(),
            });
            self.stats.record_write(data.len() as u64);
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.lock().record(BlockOp::Sync);
        self.stats.record_sync();
        Ok(())
    }

    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        let mut g = self.inner.lock();
        let len = usize::try_from(blocks.saturating_mul(BLOCK_SIZE))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "discard range too long"))?;
        check_block_range(g.state.live.len() as u64, block, len)?;
        if blocks > 0 {
            g.record(BlockOp::Discard { block, blocks });
            self.stats.record_discard(len as u64);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("crash-simulating block media ({} bytes)", self.len())
    }

    fn stats(&self) -> BlockStats {
        self.stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEDS: u64 = 64;

    fn all_modes() -> impl Iterator<Item = BlockLoss> {
        std::iter::once(BlockLoss::AllUnsynced).chain((0..SEEDS).map(BlockLoss::RandomBlocks))
    }

    #[test]
    fn lost_unsynced_writes_stay_readable_but_never_become_durable() {
        let m = CrashBlock::new(4 * BLOCK_SIZE);
        m.write_blocks(0, &[1; BLOCK]).unwrap();
        m.sync().unwrap();
        m.write_blocks(0, &[2; BLOCK]).unwrap();
        m.write_blocks(1, &[3; BLOCK]).unwrap();
        assert_eq!(m.lose_unsynced(), 2);
        let mut b = [0u8; BLOCK];
        m.read_blocks(0, &mut b).unwrap();
        assert_eq!(b, [2; BLOCK], "reads still see the lost write");
        m.sync().unwrap();
        for mode in all_modes() {
            let img = m.crash_image(mode);
            assert_eq!(&img[..BLOCK], &[1; BLOCK][..], "{mode:?}");
            assert_eq!(&img[BLOCK..2 * BLOCK], &[0; BLOCK][..], "{mode:?}");
        }
        // Written again, a block becomes durable at the next sync.
        m.write_blocks(1, &[4; BLOCK]).unwrap();
        m.sync().unwrap();
        assert_eq!(
            &m.crash_image(BlockLoss::AllUnsynced)[BLOCK..2 * BLOCK],
            &[4; BLOCK][..]
        );
    }

    #[test]
    fn unsynced_writes_are_lost_in_all_unsynced_image() {
        let m = CrashBlock::new(8 * BLOCK_SIZE);
        m.write_blocks(0, &[1; 2 * BLOCK]).unwrap();
        m.write_blocks(5, &[2; BLOCK]).unwrap();
        assert_eq!(m.crash_image(BlockLoss::AllUnsynced), vec![0; 8 * BLOCK]);
        // Reads still see the writes.
        let mut b = [0u8; BLOCK];
        m.read_blocks(5, &mut b).unwrap();
        assert_eq!(b, [2; BLOCK]);
        assert_eq!(m.snapshot().unsynced_blocks(), 3);
        assert_eq!(m.snapshot().durable(), &vec![0; 8 * BLOCK][..]);
    }

    #[test]
    fn synced_blocks_survive_every_crash_image() {
        let m = CrashBlock::new(8 * BLOCK_SIZE);
        m.write_blocks(1, &[9; 3 * BLOCK]).unwrap();
        m.sync().unwrap();
        m.write_blocks(6, &[3; BLOCK]).unwrap(); // unrelated unsynced block
        for mode in all_modes() {
            let img = m.crash_image(mode);
            assert_eq!(&img[BLOCK..4 * BLOCK], &[9u8; 3 * BLOCK][..], "{mode:?}");
        }
        assert_eq!(m.snapshot().unsynced_blocks(), 1);
        // Overwriting a synced block without a sync: old or new, never lost to zero.
        m.write_blocks(2, &[4; BLOCK]).unwrap();
        for mode in all_modes() {
            let b = m.crash_image(mode)[2 * BLOCK];
            assert!(b == 9 || b == 4, "{mode:?}: {b}");
        }
        m.sync().unwrap();
        assert_eq!(m.crash_image(BlockLoss::AllUnsynced), m.image());
    }

    #[test]
    fn random_blocks_tear_writes_at_block_granularity_only() {
        let m = CrashBlock::new(16 * BLOCK_SIZE);
        m.write_blocks(0, &[0xAA; 16 * BLOCK]).unwrap();
        m.sync().unwrap();
        m.write_blocks(0, &[0xBB; 16 * BLOCK]).unwrap();
        let mut torn = false;
        for s in 0..SEEDS {
            let img = m.crash_image(BlockLoss::RandomBlocks(s));
            for blk in img.chunks(BLOCK) {
                assert!(blk.iter().all(|&b| b == blk[0]), "torn block, seed {s}");
            }
            torn |= img.contains(&0xAA) && img.contains(&0xBB);
        }
        assert!(torn, "a 16-block write is torn by some seed");
        assert_eq!(
            m.crash_image(BlockLoss::RandomBlocks(3)),
            m.crash_image(BlockLoss::RandomBlocks(3))
        );
    }

    #[test]
    fn later_write_can_survive_while_earlier_is_lost() {
        let m = CrashBlock::new(4 * BLOCK_SIZE);
        m.write_blocks(0, &[1; BLOCK]).unwrap();
        m.write_blocks(3, &[2; BLOCK]).unwrap();
        let reordered = (0..SEEDS).any(|s| {
            let img = m.crash_image(BlockLoss::RandomBlocks(s));
            img[0] == 0 && img[3 * BLOCK] == 2
        });
        assert!(reordered);
    }

    #[test]
    fn trace_replays_every_crash_point() {
        let m = CrashBlock::new(8 * BLOCK_SIZE);
        m.write_blocks(0, &[b'o'; BLOCK]).unwrap();
        m.sync().unwrap();
        let ((), trace) = m.trace(|| {
            m.write_blocks(4, &[b'l'; 2 * BLOCK]).unwrap(); // 0: log
            m.sync().unwrap(); // 1
            m.write_blocks(0, &[b'n'; BLOCK]).unwrap(); // 2: in place
            m.sync().unwrap(); // 3
        });
        assert_eq!(trace.len(), 4);
        assert_eq!(
            trace.events()[0],
            BlockEvent::Write {
                block: 4,
                len: 2 * BLOCK_SIZE
            }
        );
        let mut seen = 0;
        trace.for_each_state(|k, s| {
            seen += 1;
            let img = s.image(BlockLoss::AllUnsynced);
            assert_eq!(img[0], if k >= 4 { b'n' } else { b'o' }, "k={k}");
            assert_eq!(img[4 * BLOCK], if k >= 2 { b'l' } else { 0 }, "k={k}");
            assert_eq!(img, trace.image_at(k, BlockLoss::AllUnsynced));
        });
        assert_eq!(seen, 5);
        assert_eq!(trace.state_at(4).live(), &m.image()[..]);
        assert_eq!(m.events_len(), 2 + 4);
        assert_eq!(m.events().len(), 6);
        m.clear_events();
        assert!(m.events().is_empty());
        assert_eq!(m.events_len(), 6);
    }

    #[test]
    fn from_image_is_fully_durable_and_invalid_io_is_not_recorded() {
        let m = CrashBlock::from_image(vec![7; 2 * BLOCK]);
        assert_eq!(m.len(), 2 * BLOCK_SIZE);
        assert_eq!(
            m.crash_image(BlockLoss::RandomBlocks(1)),
            vec![7; 2 * BLOCK]
        );
        let e = m.write_blocks(2, &[0; BLOCK]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = m.write_blocks(0, &[0; 10]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        m.write_blocks(1, &[]).unwrap();
        assert_eq!(m.events_len(), 0);
        assert_eq!(m.stats(), BlockStats::default());
    }
}
