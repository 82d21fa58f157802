//! The migration thread: start, wake, stop; notices for the log.

use super::*;

impl Fs {
    /// Starts the migration thread: a pass every 100 ms (or when kicked),
    /// sleeping when there is nothing to do; stops at [`Fs::unmount`].
    pub fn start_migration(self: &Arc<Self>) {
        let weak: Weak<Fs> = Arc::downgrade(self);
        let h = std::thread::Builder::new()
            .name("terrace-migrate".into())
            .spawn(move || {
                let mut idle = false;
                loop {
                    let Some(fs) = weak.upgrade() else { return };
                    let m = &fs.migrator;
                    if m.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    {
                        let mut woke = m.wake_lock.lock();
                        if !*woke || idle {
                            // After a pass that moved nothing (target full, or
                            // nothing qualifies), kicks wait for the next tick:
                            // the thread never spins on them.
                            let until = Instant::now() + Duration::from_millis(100);
                            loop {
                                let timed_out = m.wake.wait_until(&mut woke, until).timed_out();
                                if timed_out || !idle || m.stop.load(Ordering::Relaxed) {
                                    break;
                                }
                            }
                        }
                        *woke = false;
                    }
                    if m.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    m.passes.fetch_add(1, Ordering::Relaxed);
                    idle = fs.migration_pass() == 0;
                }
            })
            .expect("spawn the migration thread");
        *self.migrator.thread.lock() = Some(h);
    }

    /// Whether the migration thread runs (so waiting for it can help).
    pub(crate) fn migration_thread_running(&self) -> bool {
        self.migrator.thread.lock().is_some() && !self.migrator.stop.load(Ordering::Relaxed)
    }

    /// Wakes the migration thread (PM passed its threshold).
    pub(crate) fn kick_migration(&self) {
        self.migrator.kick();
    }

    /// Stops the migration thread (if running) and waits for it.
    pub(crate) fn stop_migration(&self) {
        self.migrator.stop.store(true, Ordering::Relaxed);
        self.migrator.kick();
        let h = self.migrator.thread.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Queues a message for the daemon's log.
    pub(crate) fn notice(&self, msg: String) {
        self.migrator.notices.lock().push(msg);
    }

    /// Messages for the daemon's log (each returned once).
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.migrator.notices.lock())
    }
}
