//! [`CrashMedia`]: persistent memory behind a simulated volatile CPU cache, for
//! crash-consistency tests.
//!
//! # Model
//! The media keeps two images: `live` (what reads see: memory as the CPU sees
//! it) and `durable` (what survives power loss for certain). Each 64-byte cache
//! line is, besides its durable content,
//! - *clean*: live equals what was last made durable;
//! - *dirty*: stored to since its last flush (may or may not have been evicted);
//! - *flushed-pending*: flushed, and the content it had **at flush time** is
//!   waiting for a fence. A line can be both pending and dirty (stored to again
//!   after the flush).
//!
//! `flush` turns the dirty lines it covers into pending lines (snapshotting
//! their live content); `fence` copies every pending snapshot into `durable`;
//! lines stored to after their flush stay dirty. Invariants:
//! - `durable` changes only at a fence, and only with flushed snapshots;
//! - a clean line has the same live and durable content;
//! - every event (store, flush, fence) is counted, in order, under one lock.
//!
//! # Crash images
//! A crash image is `durable` plus, for every line that is not clean, one of
//! the contents the hardware might have written back: its durable content
//! (lost), its pending snapshot, or its live content (evicted). [`LossMode`]
//! chooses: `AllUnflushed` loses them all; `RandomLines(seed)` picks per line;
//! `RandomWords(seed)` picks per aligned 8-byte word (the only atomicity x86
//! promises for persistent memory). Intermediate values a dirty line held
//! between two stores without a flush are not modelled.
//!
//! # Crashing in the middle of an operation
//! Trace it, then ask for the state after each prefix of its events:
//! ```
//! use terrace_media::{CrashMedia, LossMode, PmMedia};
//! let m = CrashMedia::new(4096);
//! let ((), trace) = m.trace(|| {
//!     m.write(0, b"new");      // event 0
//!     m.persist(0, 3);         // events 1 (flush) and 2 (fence)
//! });
//! assert_eq!(trace.len(), 3);
//! // Crash points are 0..=len: "after k events".
//! trace.for_each_state(|k, state| {
//!     let img = state.image(LossMode::AllUnflushed);
//!     assert_eq!(&img[..3], if k == 3 { b"new" } else { b"\0\0\0" });
//! });
//! ```
//! `trace.image_at(k, mode)` builds one image; a test that wants a random sample
//! of crash points filters `k` inside `for_each_state` (only `image` is costly).
//! Remount a crash image with [`CrashMedia::from_image`].
//!
//! For long runs without a trace, [`CrashMedia::set_crash_after`] freezes a
//! copy of the state after the `n`-th further event while the media keeps
//! running; [`CrashMedia::crash_image_at_freeze`] builds images from it.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use std::sync::Arc;

use crate::replay::{EventClock, Recorder, Replay, Trace};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::mem::range;
use crate::{PmMedia, CACHE_LINE};

const LINE: usize = CACHE_LINE as usize;
const WORD: usize = 8;

/// One recorded media operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashEvent {
    /// `write` or `store_u64` of `len` bytes at `off`.
    Store { off: u64, len: u64 },
    /// `flush` of `[off, off + len)`.
    Flush { off: u64, len: u64 },
    /// `fence`.
    Fence,
}

/// Which not-yet-durable cache contents a crash image keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossMode {
    /// Nothing that was not flushed and fenced survives.
    AllUnflushed,
    /// Each dirty or pending line independently keeps its durable, pending or
    /// live content, chosen by an RNG seeded with the value.
    RandomLines(u64),
    /// As `RandomLines`, per aligned 8-byte word (8-byte store atomicity only).
    RandomWords(u64),
}

#[derive(Clone, Debug, Default)]
struct Line {
    /// Content at the last flush, awaiting a fence.
    pending: Option<Box<[u8]>>,
    /// Stored to since the last flush.
    dirty: bool,
}

/// Everything needed to build crash images: live and durable images plus the
/// state of every line that is not clean. Cloning copies both images.
#[derive(Clone, Debug)]
pub struct CrashState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Non-clean lines by line index; a missing line is clean.
    lines: BTreeMap<usize, Line>,
    /// Indices of lines whose `pending` is `Some`, in no particular order.
    pending: Vec<usize>,
}

impl CrashState {
    fn new(image: Vec<u8>) -> CrashState {
        CrashState {
            durable: image.clone(),
            live: image,
            lines: BTreeMap::new(),
            pending: Vec::new(),
        }
    }

    /// What reads see.
    pub fn live(&self) -> &[u8] {
        &self.live
    }

    /// What is durable for certain (the `AllUnflushed` image).
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Number of cache lines that are dirty or awaiting a fence.
    pub fn unpersisted_lines(&self) -> usize {
        self.lines.len()
    }

    fn line_range(&self, idx: usize) -> std::ops::Range<usize> {
        idx * LINE..((idx + 1) * LINE).min(self.live.len())
    }

    fn lines_of(r: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        if r.is_empty() {
            0..0
        } else {
            r.start / LINE..(r.end - 1) / LINE + 1
        }
    }

    fn store(&mut self, off: u64, data: &[u8]) {
        let r = range(self.live.len(), off, data.len() as u64);
        self.live[r.clone()].copy_from_slice(data);
        for idx in Self::lines_of(&r) {
            self.lines.entry(idx).or_default().dirty = true;
        }
    }

    fn flush(&mut self, off: u64, len: u64) {
        let r = range(self.live.len(), off, len);
        for idx in Self::lines_of(&r) {
            let lr = self.line_range(idx);
            if let Some(line) = self.lines.get_mut(&idx) {
                if line.dirty {
                    line.dirty = false;
                    if line.pending.is_none() {
                        self.pending.push(idx);
                    }
                    line.pending = Some(self.live[lr].into());
                }
            }
        }
    }

    fn fence(&mut self) {
        for idx in std::mem::take(&mut self.pending) {
            let lr = self.line_range(idx);
            let line = self.lines.get_mut(&idx).expect("pending line is tracked");
            let snap = line.pending.take().expect("pending line has a snapshot");
            self.durable[lr].copy_from_slice(&snap);
            if !line.dirty {
                self.lines.remove(&idx);
            }
        }
    }

    fn apply(&mut self, op: &PmOp) {
        match op {
            PmOp::Store { off, data } => self.store(*off, data),
            PmOp::Flush { off, len } => self.flush(*off, *len),
            PmOp::Fence => self.fence(),
        }
    }

    /// The media as it would be found after a crash now.
    pub fn image(&self, mode: LossMode) -> Vec<u8> {
        let mut img = self.durable.clone();
        let (seed, unit) = match mode {
            LossMode::AllUnflushed => return img,
            LossMode::RandomLines(s) => (s, LINE),
            LossMode::RandomWords(s) => (s, WORD),
        };
        let mut rng = StdRng::seed_from_u64(seed);
        for (&idx, line) in &self.lines {
            let lr = self.line_range(idx);
            let mut choices: [&[u8]; 3] = [&[]; 3];
            let mut n = 0;
            choices[n] = &self.durable[lr.clone()];
            n += 1;
            if let Some(p) = &line.pending {
                choices[n] = p;
                n += 1;
            }
            if line.dirty {
                choices[n] = &self.live[lr.clone()];
                n += 1;
            }
            let mut at = 0;
            while at < lr.len() {
                let end = (at + unit).min(lr.len());
                let pick = choices[rng.gen_range(0..n)];
                img[lr.start + at..lr.start + end].copy_from_slice(&pick[at..end]);
                at = end;
            }
        }
        img
    }
}

/// A recorded operation with its data, for replay.
/// A recorded PM operation with its data, for replay ([`CrashTrace`]).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub enum PmOp {
    Store { off: u64, data: Box<[u8]> },
    Flush { off: u64, len: u64 },
    Fence,
}

impl Replay for CrashState {
    type Op = PmOp;
    type Event = CrashEvent;
    type Loss = LossMode;
    fn apply(&mut self, op: &PmOp) {
        CrashState::apply(self, op)
    }
    fn event(op: &PmOp) -> CrashEvent {
        match op {
            PmOp::Store { off, data } => CrashEvent::Store {
                off: *off,
                len: data.len() as u64,
            },
            PmOp::Flush { off, len } => CrashEvent::Flush {
                off: *off,
                len: *len,
            },
            PmOp::Fence => CrashEvent::Fence,
        }
    }
    fn image(&self, loss: LossMode) -> Vec<u8> {
        CrashState::image(self, loss)
    }
}

/// The events of a traced operation and the state before it: replays any
/// prefix to build the state of a crash after that many events (see
/// [`Trace`]).
pub type CrashTrace = Trace<CrashState>;

/// What the media keeps behind its lock.
#[derive(Debug)]
struct Inner {
    rec: Recorder<CrashState>,
    /// Freeze when `rec.count` reaches this.
    freeze_at: Option<u64>,
    frozen: Option<CrashState>,
}

impl Inner {
    fn record(&mut self, op: PmOp) {
        self.rec.record(op);
        if self.freeze_at == Some(self.rec.count) {
            self.freeze_at = None;
            self.frozen = Some(self.rec.state.clone());
        }
    }
}

/// Simulated persistent memory with volatile caches; see the module docs.
#[derive(Debug)]
pub struct CrashMedia {
    inner: Mutex<Inner>,
}

impl CrashMedia {
    /// Zero-filled media of `len` bytes, all durable.
    pub fn new(len: u64) -> CrashMedia {
        let len = usize::try_from(len).expect("CrashMedia length exceeds the address space");
        CrashMedia::from_image(vec![0; len])
    }

    /// Media whose live and durable contents are `image` (e.g. a crash image,
    /// to "reboot" after a simulated crash).
    pub fn from_image(image: Vec<u8>) -> CrashMedia {
        CrashMedia {
            inner: Mutex::new(Inner {
                rec: Recorder::new(CrashState::new(image)),
                freeze_at: None,
                frozen: None,
            }),
        }
    }

    /// Stamps this media's events with `clock` from now on (share it with
    /// the block media of the same test: [`crate::replay`]).
    pub fn set_clock(&self, clock: Arc<EventClock>) {
        self.inner.lock().rec.clock = clock;
    }

    /// The clock that stamps this media's events.
    pub fn clock(&self) -> Arc<EventClock> {
        self.inner.lock().rec.clock.clone()
    }

    /// Events (stores, flushes, fences) recorded since creation.
    pub fn events_len(&self) -> u64 {
        self.inner.lock().rec.count
    }

    /// Events recorded since creation or the last [`clear_events`](Self::clear_events).
    pub fn events(&self) -> Vec<CrashEvent> {
        self.inner.lock().rec.events.clone()
    }

    /// Forgets the event list (to bound memory); [`events_len`](Self::events_len)
    /// keeps counting.
    pub fn clear_events(&self) {
        self.inner.lock().rec.events = Vec::new();
    }

    /// A copy of the current live contents.
    pub fn image(&self) -> Vec<u8> {
        self.inner.lock().rec.state.live.clone()
    }

    /// The image a crash now would leave.
    pub fn crash_image(&self, mode: LossMode) -> Vec<u8> {
        self.inner.lock().rec.state.image(mode)
    }

    /// A copy of the whole state (both images and line states).
    pub fn snapshot(&self) -> CrashState {
        self.inner.lock().rec.state.clone()
    }

    /// Starts recording events with their data (replacing an open trace).
    pub fn start_trace(&self) {
        self.inner.lock().rec.start_trace();
    }

    /// Ends the trace begun by [`start_trace`](Self::start_trace). Panics if none is open.
    pub fn finish_trace(&self) -> CrashTrace {
        self.inner.lock().rec.finish_trace()
    }

    /// Runs `f` between `start_trace` and `finish_trace`.
    pub fn trace<R>(&self, f: impl FnOnce() -> R) -> (R, CrashTrace) {
        self.start_trace();
        let r = f();
        (r, self.finish_trace())
    }

    /// `Some(n)`: after `n` further events (`0` = now), freeze a copy of the
    /// state; the media keeps working normally. `None` cancels a pending freeze.
    /// Either call discards an earlier frozen state.
    pub fn set_crash_after(&self, n_events: Option<u64>) {
        let mut g = self.inner.lock();
        g.frozen = None;
        g.freeze_at = None;
        match n_events {
            Some(0) => g.frozen = Some(g.rec.state.clone()),
            Some(n) => g.freeze_at = Some(g.rec.count + n),
            None => {}
        }
    }

    /// The state frozen by [`set_crash_after`](Self::set_crash_after), if reached.
    pub fn frozen(&self) -> Option<CrashState> {
        self.inner.lock().frozen.clone()
    }

    /// Crash image from the frozen state; `None` if the freeze point was not reached.
    pub fn crash_image_at_freeze(&self, mode: LossMode) -> Option<Vec<u8>> {
        self.inner.lock().frozen.as_ref().map(|s| s.image(mode))
    }
}

impl PmMedia for CrashMedia {
    fn len(&self) -> u64 {
        self.inner.lock().rec.state.live.len() as u64
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        let g = self.inner.lock();
        let live = &g.rec.state.live;
        buf.copy_from_slice(&live[range(live.len(), off, buf.len() as u64)]);
    }

    fn write(&self, off: u64, data: &[u8]) {
        self.inner.lock().record(PmOp::Store {
            off,
            data: data.into(),
        });
    }

    fn store_u64(&self, off: u64, value: u64) {
        assert!(off % 8 == 0, "store_u64 at unaligned offset {off}");
        self.write(off, &value.to_le_bytes());
    }

    fn flush(&self, off: u64, len: u64) {
        self.inner.lock().record(PmOp::Flush { off, len });
    }

    fn fence(&self) {
        self.inner.lock().record(PmOp::Fence);
    }

    fn describe(&self) -> String {
        format!("crash-simulating memory ({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEDS: u64 = 64;

    fn all_modes() -> impl Iterator<Item = LossMode> {
        std::iter::once(LossMode::AllUnflushed)
            .chain((0..SEEDS).flat_map(|s| [LossMode::RandomLines(s), LossMode::RandomWords(s)]))
    }

    #[test]
    fn unflushed_lines_are_lost_in_all_unflushed_image() {
        let m = CrashMedia::new(4096);
        m.write(0, &[1; 64]); // dirty
        m.write(64, &[2; 64]);
        m.flush(64, 64); // flushed, never fenced
        let img = m.crash_image(LossMode::AllUnflushed);
        assert_eq!(&img[..128], &[0u8; 128][..]);
        // Reads still see the stores.
        assert_eq!(m.load_u64(0), u64::from_le_bytes([1; 8]));
        assert_eq!(m.snapshot().unpersisted_lines(), 2);
    }

    #[test]
    fn fenced_lines_survive_every_crash_image() {
        let m = CrashMedia::new(1024);
        m.write(10, &[9; 100]);
        m.persist(10, 100);
        m.write(512, &[3; 64]); // unrelated unpersisted line
        for mode in all_modes() {
            assert_eq!(&m.crash_image(mode)[10..110], &[9u8; 100][..], "{mode:?}");
        }
        assert_eq!(m.snapshot().unpersisted_lines(), 1);
    }

    #[test]
    fn fence_persists_content_at_flush_time() {
        let m = CrashMedia::new(128);
        m.write(0, &[1; 64]);
        m.flush(0, 64);
        m.write(0, &[2; 64]); // after flush, before fence
        m.fence();
        assert_eq!(&m.crash_image(LossMode::AllUnflushed)[..64], &[1u8; 64][..]);
        // The later store may still be evicted: both contents are reachable.
        let seen: std::collections::BTreeSet<u8> = (0..SEEDS)
            .map(|s| m.crash_image(LossMode::RandomLines(s))[0])
            .collect();
        assert_eq!(seen, [1, 2].into_iter().collect());
        m.persist(0, 64);
        assert_eq!(&m.crash_image(LossMode::AllUnflushed)[..64], &[2u8; 64][..]);
        assert_eq!(m.snapshot().unpersisted_lines(), 0);
    }

    #[test]
    fn flushed_but_unfenced_line_may_hold_any_reachable_content() {
        let m = CrashMedia::new(64);
        m.write(0, &[1; 64]);
        m.flush(0, 64);
        m.write(0, &[2; 64]);
        let seen: std::collections::BTreeSet<u8> = (0..SEEDS)
            .map(|s| m.crash_image(LossMode::RandomLines(s))[0])
            .collect();
        assert_eq!(seen, [0, 1, 2].into_iter().collect());
    }

    #[test]
    fn random_lines_keep_each_line_whole() {
        let m = CrashMedia::new(64 * 8);
        m.write(0, &[0xAA; 64 * 8]);
        m.persist(0, 64 * 8);
        m.write(0, &[0xBB; 64 * 8]);
        let mut kinds = std::collections::BTreeSet::new();
        for s in 0..SEEDS {
            let img = m.crash_image(LossMode::RandomLines(s));
            for line in img.chunks(64) {
                assert!(
                    line.iter().all(|&b| b == line[0]),
                    "torn line with seed {s}"
                );
                kinds.insert(line[0]);
            }
        }
        assert_eq!(kinds, [0xAA, 0xBB].into_iter().collect());
        // Same seed, same image.
        assert_eq!(
            m.crash_image(LossMode::RandomLines(7)),
            m.crash_image(LossMode::RandomLines(7))
        );
    }

    #[test]
    fn store_u64_is_atomic_in_random_words_mode() {
        let m = CrashMedia::new(64);
        let old = 0x1111_1111_1111_1111u64;
        let new = 0x2222_2222_2222_2222u64;
        m.store_u64(8, old);
        m.persist(8, 8);
        m.store_u64(8, new);
        let mut seen = std::collections::BTreeSet::new();
        for s in 0..SEEDS {
            let img = m.crash_image(LossMode::RandomWords(s));
            let w = u64::from_le_bytes(img[8..16].try_into().unwrap());
            assert!(w == old || w == new, "torn word {w:#x}");
            seen.insert(w);
        }
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn random_words_can_tear_a_multi_word_store() {
        let m = CrashMedia::new(64);
        m.write(0, &[5; 64]);
        let torn = (0..SEEDS).any(|s| {
            let img = m.crash_image(LossMode::RandomWords(s));
            img.contains(&5) && img.contains(&0)
        });
        assert!(torn);
    }

    #[test]
    fn trace_replays_every_crash_point() {
        let m = CrashMedia::new(256);
        m.write(0, b"old!");
        m.persist(0, 4);
        let ((), trace) = m.trace(|| {
            m.write(0, b"new!"); // 0
            m.write(128, b"log"); // 1
            m.flush(128, 3); // 2
            m.fence(); // 3
            m.flush(0, 4); // 4
            m.fence(); // 5
        });
        assert_eq!(trace.len(), 6);
        assert_eq!(trace.events()[2], CrashEvent::Flush { off: 128, len: 3 });
        let mut seen = 0;
        trace.for_each_state(|k, s| {
            seen += 1;
            let img = s.image(LossMode::AllUnflushed);
            assert_eq!(&img[..4], if k >= 6 { b"new!" } else { b"old!" }, "k={k}");
            assert_eq!(
                &img[128..131],
                if k >= 4 { b"log" } else { b"\0\0\0" },
                "k={k}"
            );
            assert_eq!(img, trace.image_at(k, LossMode::AllUnflushed));
        });
        assert_eq!(seen, 7);
        assert_eq!(trace.state_at(6).live(), &m.image()[..]);
        assert_eq!(m.events_len(), 3 + 6);
    }

    #[test]
    fn crash_after_freezes_state_while_media_keeps_running() {
        let m = CrashMedia::new(128);
        m.set_crash_after(Some(2));
        m.write(0, &[1; 8]);
        assert!(m.frozen().is_none());
        m.flush(0, 8); // second event: freeze here
        m.fence(); // third event: after the freeze
        m.write(64, &[2; 8]);
        let frozen = m.frozen().expect("freeze point reached");
        assert_eq!(&frozen.live()[..8], &[1u8; 8]);
        assert_eq!(&frozen.live()[64..72], &[0u8; 8]);
        assert_eq!(
            &m.crash_image_at_freeze(LossMode::AllUnflushed).unwrap()[..8],
            &[0u8; 8]
        );
        // The media itself went on: the fence made the line durable.
        assert_eq!(&m.crash_image(LossMode::AllUnflushed)[..8], &[1u8; 8]);
        assert_eq!(m.load_u64(64), u64::from_le_bytes([2; 8]));
        m.set_crash_after(None);
        assert!(m.crash_image_at_freeze(LossMode::AllUnflushed).is_none());
    }

    #[test]
    fn from_image_is_fully_durable() {
        let m = CrashMedia::from_image(vec![7; 100]);
        assert_eq!(m.len(), 100);
        assert_eq!(m.crash_image(LossMode::RandomWords(1)), vec![7; 100]);
        // A partial last line is handled.
        m.write(96, &[1; 4]);
        m.persist(96, 4);
        assert_eq!(&m.crash_image(LossMode::AllUnflushed)[96..], &[1u8; 4]);
    }
}
