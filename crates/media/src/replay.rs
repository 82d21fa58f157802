//! One trace replayer for every crash-simulating media, and one clock for
//! crash tests that span several media.
//!
//! A [`Trace`] holds the state of a media when tracing began and each
//! operation since, with the time it happened; replaying a prefix gives the
//! state of a crash after that many operations. [`CrashMedia`](crate::CrashMedia)
//! (PM) and [`CrashBlock`](crate::CrashBlock) (block tiers) record into the
//! same type through [`Replay`].
//!
//! Time: every recorded operation takes the next tick of the media's
//! [`EventClock`]. Media that share one clock (`with_clock`) stamp their
//! operations in one global order, so a crash at a moment of one media's
//! trace is a crash at that moment for all of them: [`Trace::time_after`]
//! gives the moment after the first `k` operations of a trace, and
//! [`Trace::state_at_time`] the state of another media's trace at that
//! moment — including block writes issued but not yet synced, which the
//! loss mode then keeps or drops. A test that pairs each PM crash point with
//! the block image of the *same* moment can catch a commit that is ordered
//! before the device sync it depends on; pairing it with the block image
//! taken after the operation cannot.
//!
//! Recording: both media keep a [`Recorder`] behind their lock — the state,
//! the events since creation, the open trace and the clock — so an
//! operation is applied, counted, listed and traced the same way in both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A monotonic event counter shared by the media of one crash test.
#[derive(Debug, Default)]
pub struct EventClock(AtomicU64);

impl EventClock {
    /// A clock at time 0.
    pub fn new() -> EventClock {
        EventClock::default()
    }

    /// The time of the next event (each call returns a larger value).
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The time of the last event.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A media state that a trace can replay.
pub trait Replay: Clone {
    /// One recorded operation, with its data.
    type Op: Clone + std::fmt::Debug;
    /// The operation without its data, as tests inspect it.
    type Event;
    /// What a crash image keeps of the volatile state.
    type Loss: Copy;
    /// Applies one operation.
    fn apply(&mut self, op: &Self::Op);
    /// The event of an operation.
    fn event(op: &Self::Op) -> Self::Event;
    /// The image a crash in this state leaves.
    fn image(&self, loss: Self::Loss) -> Vec<u8>;
}

/// What a crash-simulating media records: its state, the events since
/// creation (counted, and listed until cleared), the open trace, and the
/// clock that stamps every event (shared with the other media of a test).
#[derive(Debug)]
pub(crate) struct Recorder<S: Replay> {
    pub(crate) state: S,
    /// Events recorded since creation.
    pub(crate) count: u64,
    /// Event list since creation or `clear_events`.
    pub(crate) events: Vec<S::Event>,
    /// Open trace: base state and ops since `start_trace`.
    pub(crate) trace: Option<Trace<S>>,
    /// Stamps every event.
    pub(crate) clock: Arc<EventClock>,
}

impl<S: Replay + std::fmt::Debug> Recorder<S> {
    /// A recorder of media in `state`, with nothing recorded, on a clock of
    /// its own.
    pub(crate) fn new(state: S) -> Recorder<S> {
        Recorder {
            state,
            count: 0,
            events: Vec::new(),
            trace: None,
            clock: Arc::new(EventClock::new()),
        }
    }

    /// Applies `op` to the state, counts and lists its event, and adds it
    /// with its time to the open trace.
    pub(crate) fn record(&mut self, op: S::Op) {
        self.state.apply(&op);
        self.count += 1;
        let time = self.clock.tick();
        self.events.push(S::event(&op));
        if let Some(t) = &mut self.trace {
            t.push(time, op);
        }
    }

    /// Starts a trace from the current state (replacing an open one).
    pub(crate) fn start_trace(&mut self) {
        self.trace = Some(Trace::new(self.state.clone(), self.clock.now()));
    }

    /// Ends the open trace. Panics if none is open.
    pub(crate) fn finish_trace(&mut self) -> Trace<S> {
        self.trace.take().expect("finish_trace without start_trace")
    }
}

/// The state when tracing began and every operation since, with its time.
#[derive(Clone, Debug)]
pub struct Trace<S: Replay> {
    pub(crate) base: S,
    /// Clock time when tracing began.
    pub(crate) start: u64,
    pub(crate) ops: Vec<(u64, S::Op)>,
}

impl<S: Replay + std::fmt::Debug> Trace<S> {
    pub(crate) fn new(base: S, start: u64) -> Trace<S> {
        Trace {
            base,
            start,
            ops: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, time: u64, op: S::Op) {
        self.ops.push((time, op));
    }

    /// Number of operations; crash points are `0..=len()`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The recorded events, in order.
    pub fn events(&self) -> Vec<S::Event> {
        self.ops.iter().map(|(_, op)| S::event(op)).collect()
    }

    /// The state after the first `k` operations (`k <= len()`).
    pub fn state_at(&self, k: usize) -> S {
        assert!(
            k <= self.ops.len(),
            "crash point {k} beyond {} events",
            self.ops.len()
        );
        let mut s = self.base.clone();
        for (_, op) in &self.ops[..k] {
            s.apply(op);
        }
        s
    }

    /// Crash image after the first `k` operations.
    pub fn image_at(&self, k: usize, loss: S::Loss) -> Vec<u8> {
        self.state_at(k).image(loss)
    }

    /// Calls `f(k, state)` for every crash point `k` in `0..=len()`, in
    /// order, replaying the trace once.
    pub fn for_each_state(&self, mut f: impl FnMut(usize, &S)) {
        let mut s = self.base.clone();
        f(0, &s);
        for (i, (_, op)) in self.ops.iter().enumerate() {
            s.apply(op);
            f(i + 1, &s);
        }
    }

    /// The clock time right after the first `k` operations (the start of
    /// the trace for `k = 0`): the earliest moment of crash point `k`, when
    /// other media have done only what they did before this media's `k`-th
    /// operation returned — so a PM commit that another media's sync should
    /// have preceded shows up without it.
    pub fn time_after(&self, k: usize) -> u64 {
        if k == 0 {
            self.start
        } else {
            self.ops[k - 1].0
        }
    }

    /// The state at clock time `t`: every operation stamped up to `t`
    /// applied (all of them when `t` is past the trace).
    pub fn state_at_time(&self, t: u64) -> S {
        let k = self.ops.partition_point(|(time, _)| *time <= t);
        self.state_at(k)
    }

    /// Crash image at clock time `t`.
    pub fn image_at_time(&self, t: u64, loss: S::Loss) -> Vec<u8> {
        self.state_at_time(t).image(loss)
    }
}

#[cfg(test)]
mod tests {
    use crate::{BlockLoss, BlockMedia, CrashBlock, CrashMedia, LossMode, PmMedia};

    #[test]
    fn one_clock_gives_the_device_image_of_the_moment_of_each_pm_crash_point() {
        let pm = CrashMedia::new(4096);
        let ssd = CrashBlock::timed(8 * 4096, pm.clock());
        let ((), trace) = pm.trace(|| {
            ssd.write_blocks(1, &[7; 4096]).unwrap(); // device write, unsynced
            pm.write(0, b"a"); // PM event 0
            ssd.sync().unwrap(); // the device write is durable
            pm.persist(0, 1); // PM events 1, 2: the "commit"
            ssd.write_blocks(2, &[9; 4096]).unwrap(); // issued after the commit
        });
        let dev = ssd.finish_trace();
        let at = |k: usize, loss| dev.image_at_time(trace.time_after(k), loss);
        // At the start of the trace nothing had reached the device.
        assert!((0..16).all(|s| at(0, BlockLoss::RandomBlocks(s))[4096] == 0));
        // Right after PM event 0: the device write was issued, not synced —
        // a crash may or may not have kept it.
        assert_eq!(at(1, BlockLoss::AllUnsynced)[4096], 0);
        assert!((0..16).any(|s| at(1, BlockLoss::RandomBlocks(s))[4096] == 7));
        // Right after the flush (event 1): the sync came before it.
        assert_eq!(at(2, BlockLoss::AllUnsynced)[4096], 7);
        // After the commit's fence: synced; the later write is not there.
        let img = at(3, BlockLoss::AllUnsynced);
        assert_eq!((img[4096], img[2 * 4096]), (7, 0));
        assert_eq!(trace.image_at(3, LossMode::AllUnflushed)[0], b'a');
        // Past the end of the PM trace: everything the device recorded.
        let end = dev.image_at_time(u64::MAX, BlockLoss::RandomBlocks(1));
        assert_eq!(end.len(), 8 * 4096);
    }
}
