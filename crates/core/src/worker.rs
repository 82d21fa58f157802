//! One background worker's lifecycle — start, wake, stop, join — shared by
//! the write-back thread and the migration thread (and what comes next).
//!
//! A worker runs `pass` in a loop: after each pass it sleeps until kicked or
//! until its tick elapses. A pass that did nothing makes the worker *idle*:
//! then kicks wait for the next tick too, so a worker whose work cannot
//! progress (a full target tier) never spins on kicks. The thread holds only
//! a weak reference to its owner (the file system) and ends when it is gone
//! or when [`Worker::stop`] is called; `stop` from the worker's own thread
//! does not wait for itself.
//!
//! The worker knows nothing of what it runs: the owner's type is a generic
//! parameter of [`Worker::start`], and the pass a closure.
//!
//! A pass that panics (a bug) does not end the thread silently, which would
//! leave a mover that does nothing: the panic is counted
//! ([`Worker::panics`], shown by `terrace status` and checked by the tests;
//! the message went to the daemon's log through the panic hook) and the
//! worker goes on as if the pass had done nothing (its next pass comes at
//! the tick). What a pass changes on the media is crash-consistent at every
//! step; what it held in memory (blocks allocated for a move in flight) may
//! stay taken until the next mount.
//!
//! Lock order: `woke` is a leaf (nothing is locked under it); `thread` is
//! taken only to store or take the handle.

use crate::lock_order::Mutex;
use parking_lot::Condvar;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Back-off for one job of a worker's pass that found nothing to do: the
/// job is skipped until its wait is over or the state it looked at has
/// changed (a key the caller derives from it, such as PM's free blocks),
/// and each idle turn doubles the wait, from [`IdleBackoff::FIRST`] to
/// [`IdleBackoff::MAX`]; a turn that did something, or a change that may
/// give it work ([`IdleBackoff::reset`]), makes it due at once. So a job that cannot progress (a PM full of data
/// pinned there, which neither drains, log migration nor rules may move)
/// costs a look every two seconds, not every tick.
///
/// A job that walks its whole input each turn (the inode table) may also be
/// *held* ([`IdleBackoff::hold_until`]): after a walk that looked at
/// everything, the next one waits until the input's next item can be
/// ready, and a change of the state key does not cut that wait short.
/// (The key changes with every write-back; without the hold, a trickle of
/// files ageing into a job's reach cost a walk per kicked pass.)
#[derive(Debug, Default)]
pub(crate) struct IdleBackoff {
    /// When the job is due again (`None`: now).
    next: Option<Instant>,
    /// The state key of the last idle turn.
    key: u64,
    /// The last wait.
    wait: Duration,
    /// No turn before this, whatever the key (`None`: no hold).
    hold: Option<Instant>,
}

impl IdleBackoff {
    /// The wait after the first idle turn.
    pub(crate) const FIRST: Duration = Duration::from_millis(200);
    /// The longest wait.
    pub(crate) const MAX: Duration = Duration::from_secs(2);

    /// Whether the job should run at `now`, the state's key being `key`.
    pub(crate) fn due(&self, now: Instant, key: u64) -> bool {
        if self.hold.is_some_and(|h| now < h) {
            return false;
        }
        self.next.map_or(true, |t| now >= t || key != self.key)
    }

    /// Holds the job until `until`: no turn before it, even if the state
    /// changes. Ended by the next idle [`IdleBackoff::turn`] or
    /// [`IdleBackoff::reset`].
    pub(crate) fn hold_until(&mut self, until: Instant) {
        self.hold = Some(until);
    }

    /// Records a turn at `now` over the state `key` that did something
    /// (`busy`) or nothing.
    pub(crate) fn turn(&mut self, now: Instant, busy: bool, key: u64) {
        if busy {
            self.reset();
        } else {
            self.wait = (self.wait * 2).clamp(Self::FIRST, Self::MAX);
            self.next = Some(now + self.wait);
            self.key = key;
            self.hold = None;
        }
    }

    /// Makes the job due now, its next idle wait the first one.
    pub(crate) fn reset(&mut self) {
        *self = IdleBackoff::default();
    }
}

/// A background thread's wake-up and stop state.
#[derive(Default)]
pub(crate) struct Worker {
    wake: Condvar,
    /// A kick not yet seen by the thread.
    woke: Mutex<bool>,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Passes that panicked since mount.
    panicked: AtomicU64,
}

impl Worker {
    /// Wakes the thread (at once, unless it is idle).
    pub(crate) fn kick(&self) {
        *self.woke.lock() = true;
        self.wake.notify_one();
    }

    /// Passes that panicked since mount (0 unless there is a bug).
    pub(crate) fn panics(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// Whether the worker was told to stop (long passes check it).
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether the thread runs and was not told to stop (so waiting for it
    /// can help).
    pub(crate) fn running(&self) -> bool {
        self.thread.lock().is_some() && !self.stopping()
    }

    /// Sleeps until kicked or `tick` elapsed; while `idle`, until the tick
    /// (or a stop). Clears the kick.
    fn wait(&self, tick: Duration, idle: bool) {
        let mut woke = self.woke.lock();
        if !*woke || idle {
            let until = Instant::now() + tick;
            loop {
                let timed_out = self
                    .wake
                    .wait_until(woke.condvar_guard(), until)
                    .timed_out();
                if timed_out || !idle || self.stopping() {
                    break;
                }
            }
        }
        *woke = false;
    }

    /// Starts the thread `name`: `pass(owner)` every `tick` or when kicked;
    /// a pass returns whether it did something. `worker` finds this worker
    /// in its owner.
    pub(crate) fn start<T: Send + Sync + 'static>(
        owner: &Arc<T>,
        name: &str,
        tick: Duration,
        worker: fn(&T) -> &Worker,
        mut pass: impl FnMut(&T) -> bool + Send + 'static,
    ) {
        // A worker stopped before (a freeze) may start again.
        worker(owner).stop.store(false, Ordering::Relaxed);
        let weak: Weak<T> = Arc::downgrade(owner);
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut idle = false;
                loop {
                    let Some(owner) = weak.upgrade() else { return };
                    let w = worker(&owner);
                    if w.stopping() {
                        return;
                    }
                    w.wait(tick, idle);
                    if w.stopping() {
                        return;
                    }
                    let ran =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pass(&owner)));
                    idle = match ran {
                        Ok(did) => !did,
                        Err(_) => {
                            w.panicked.fetch_add(1, Ordering::Relaxed);
                            true
                        }
                    };
                }
            })
            .unwrap_or_else(|e| panic!("spawn the {name} thread: {e}"));
        *worker(owner).thread.lock() = Some(h);
    }

    /// Stops the thread (if running) and waits for it, unless called from
    /// it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.kick();
        let h = self.thread.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_job_waits_twice_as_long_each_turn_up_to_the_cap_and_work_resets_it() {
        let t0 = Instant::now();
        let mut b = IdleBackoff::default();
        assert!(b.due(t0, 7));
        b.turn(t0, false, 7);
        assert!(!b.due(t0 + Duration::from_millis(199), 7));
        assert!(b.due(t0 + IdleBackoff::FIRST, 7));
        // A changed state is due at once.
        assert!(b.due(t0, 8));
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            now += Duration::from_secs(10);
            b.turn(now, false, 7);
            waits.push(b.wait);
        }
        assert_eq!(waits[0], Duration::from_millis(400));
        assert_eq!(waits[1], Duration::from_millis(800));
        assert_eq!(*waits.last().unwrap(), IdleBackoff::MAX);
        assert!(!b.due(now + IdleBackoff::MAX - Duration::from_millis(1), 7));
        assert!(b.due(now + IdleBackoff::MAX, 7));
        b.turn(now, true, 7);
        assert!(b.due(now, 7));
        b.turn(now, false, 7);
        assert_eq!(b.wait, IdleBackoff::FIRST);
        b.reset();
        assert!(b.due(now, 7));
    }

    #[test]
    fn a_held_job_waits_out_its_hold_whatever_the_state_and_an_idle_turn_ends_it() {
        let t0 = Instant::now();
        let mut b = IdleBackoff::default();
        b.turn(t0, true, 7);
        b.hold_until(t0 + Duration::from_millis(500));
        // Neither time short of the hold nor a changed state makes it due.
        assert!(!b.due(t0 + Duration::from_millis(499), 7));
        assert!(!b.due(t0 + Duration::from_millis(499), 8));
        assert!(b.due(t0 + Duration::from_millis(500), 8));
        // A hold past an idle turn's wait still holds.
        b.turn(t0, false, 7);
        b.hold_until(t0 + Duration::from_secs(1));
        assert!(!b.due(t0 + IdleBackoff::FIRST, 7));
        assert!(b.due(t0 + Duration::from_secs(1), 7));
        // The next idle turn drops the hold; its own wait applies.
        let t1 = t0 + Duration::from_secs(1);
        b.turn(t1, false, 7);
        assert!(b.due(t1, 8), "a changed state is due at once again");
        b.hold_until(t1 + Duration::from_secs(1));
        b.reset();
        assert!(b.due(t1, 7), "a reset drops the hold");
    }

    #[derive(Default)]
    struct Owner {
        worker: Worker,
        passes: AtomicU64,
    }

    /// Starts `owner`'s worker with `pass` every 5 ms.
    fn start_passes(owner: &Arc<Owner>, pass: fn(&Owner) -> bool) {
        Worker::start(
            owner,
            "terrace-test-worker",
            Duration::from_millis(5),
            |o| &o.worker,
            pass,
        );
    }

    /// Waits (at most 10 s) until `owner`'s worker ran `n` passes.
    fn wait_for_passes(owner: &Owner, n: u64) {
        let start = Instant::now();
        while owner.passes.load(Ordering::Relaxed) < n {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the worker stopped"
            );
            owner.worker.kick();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_pass_that_panics_is_counted_and_the_worker_goes_on() {
        let owner = Arc::new(Owner::default());
        start_passes(&owner, |o| {
            let n = o.passes.fetch_add(1, Ordering::Relaxed);
            assert!(n != 0, "the first pass fails");
            true
        });
        wait_for_passes(&owner, 3);
        owner.worker.stop();
        assert_eq!(owner.worker.panics(), 1);
    }

    #[test]
    fn a_kick_wakes_a_busy_worker_at_once_and_an_idle_one_only_at_its_tick() {
        let w = Worker::default();
        let start = Instant::now();
        w.kick();
        w.wait(Duration::from_secs(10), false);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a kick did not wake it"
        );
        let start = Instant::now();
        w.kick();
        w.wait(Duration::from_millis(200), true);
        assert!(
            start.elapsed() >= Duration::from_millis(190),
            "an idle worker woke on a kick"
        );
        assert!(!*w.woke.lock(), "the kick was not cleared");
    }

    #[test]
    fn stop_ends_an_idle_wait_at_once() {
        let w = Arc::new(Worker::default());
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            let start = Instant::now();
            w2.wait(Duration::from_secs(30), true);
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        w.stop();
        assert!(h.join().unwrap() < Duration::from_secs(10));
        assert!(w.stopping() && !w.running());
    }

    #[test]
    fn a_worker_runs_the_passes_of_any_owner_until_stopped() {
        let owner = Arc::new(Owner::default());
        start_passes(&owner, |o| {
            o.passes.fetch_add(1, Ordering::Relaxed);
            true
        });
        wait_for_passes(&owner, 3);
        assert!(owner.worker.running());
        owner.worker.stop();
        assert!(!owner.worker.running());
    }
}
