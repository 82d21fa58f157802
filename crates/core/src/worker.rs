//! One background worker's lifecycle — start, wake, stop, join — shared by
//! the write-back thread and the migration thread (and what comes next).
//!
//! A worker runs `pass` in a loop: after each pass it sleeps until kicked or
//! until its tick elapses. A pass that did nothing makes the worker *idle*:
//! then kicks wait for the next tick too, so a worker whose work cannot
//! progress (a full target tier) never spins on kicks. The thread holds only
//! a weak reference to the file system and ends when it is gone or when
//! [`Worker::stop`] is called; `stop` from the worker's own thread does not
//! wait for itself.
//!
//! Lock order: `woke` is a leaf (nothing is locked under it); `thread` is
//! taken only to store or take the handle.

use crate::fs::Fs;
use crate::lock_order::Mutex;
use parking_lot::Condvar;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A background thread's wake-up and stop state.
#[derive(Default)]
pub(crate) struct Worker {
    wake: Condvar,
    /// A kick not yet seen by the thread.
    woke: Mutex<bool>,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Worker {
    /// Wakes the thread (at once, unless it is idle).
    pub(crate) fn kick(&self) {
        *self.woke.lock() = true;
        self.wake.notify_one();
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

    /// Starts the thread `name`: `pass(fs)` every `tick` or when kicked; a
    /// pass returns whether it did something. `worker` finds this worker in
    /// the file system.
    pub(crate) fn start(
        fs: &Arc<Fs>,
        name: &str,
        tick: Duration,
        worker: fn(&Fs) -> &Worker,
        mut pass: impl FnMut(&Fs) -> bool + Send + 'static,
    ) {
        // A worker stopped before (a freeze) may start again.
        worker(fs).stop.store(false, Ordering::Relaxed);
        let weak: Weak<Fs> = Arc::downgrade(fs);
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut idle = false;
                loop {
                    let Some(fs) = weak.upgrade() else { return };
                    let w = worker(&fs);
                    if w.stopping() {
                        return;
                    }
                    w.wait(tick, idle);
                    if w.stopping() {
                        return;
                    }
                    idle = !pass(&fs);
                }
            })
            .unwrap_or_else(|e| panic!("spawn the {name} thread: {e}"));
        *worker(fs).thread.lock() = Some(h);
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
}
