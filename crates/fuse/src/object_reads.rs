//! Reads that may wait on an object store, served off the request threads
//! (design.md §5n "Network faults").
//!
//! A read of object-tier data the DRAM cache does not hold is a ranged GET,
//! and while the store does not answer it is retried for up to its retry
//! budget (minutes by default). Served on a request thread, two such reads
//! would hold both of the mount's request threads, and every request — for
//! data on PM or the SSD too — would wait behind them. So the adapter asks
//! the core whether a read's range maps to an object tier
//! (`Fs::read_may_wait_on_network`) and hands such reads to a pool of
//! [`THREADS`] reader threads; the request thread is free at once.
//!
//! Invariants:
//! - A handed-over read is answered exactly once: by a reader thread, or
//!   on the request thread itself when no reader thread could be started.
//! - Reader threads hold no lock of the adapter; the core's read takes its
//!   own locks, as on a request thread.
//! - More stuck reads than threads queue behind them, in order; they never
//!   hold up requests that do not need the store.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// Reader threads (started at the first read handed over).
pub(crate) const THREADS: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

/// The reader threads and the way to them.
#[derive(Default)]
pub(crate) struct ObjectReads {
    /// `None` if no thread could be started.
    jobs: OnceLock<Option<Sender<Job>>>,
}

impl ObjectReads {
    /// Runs `read` (a read and its reply) on a reader thread.
    pub(crate) fn run(&self, read: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(read);
        let Some(tx) = self.jobs.get_or_init(start) else {
            return job();
        };
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            // Every thread is gone (they only end with the adapter).
            job();
        }
    }
}

fn start() -> Option<Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for n in 0..THREADS {
        let rx = Arc::clone(&rx);
        let ok = std::thread::Builder::new()
            .name(format!("fuse-s3-read-{n}"))
            .spawn(move || serve(&rx))
            .is_ok();
        started += usize::from(ok);
    }
    (started > 0).then_some(tx)
}

/// Takes jobs one at a time (the receiver's lock is held only to take one).
fn serve(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn stuck_reads_do_not_hold_up_later_ones_until_every_thread_is_stuck() {
        let reads = ObjectReads::default();
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (done_tx, done_rx) = channel::<usize>();
        // THREADS - 1 reads stuck on a store that does not answer …
        for k in 0..THREADS - 1 {
            let (r, d) = (Arc::clone(&release_rx), done_tx.clone());
            reads.run(move || {
                let _ = r.lock().unwrap().recv();
                d.send(k).unwrap();
            });
        }
        // … and one more read is still answered at once.
        let d = done_tx.clone();
        reads.run(move || d.send(usize::MAX).unwrap());
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Ok(usize::MAX)
        );
        for _ in 0..THREADS - 1 {
            release_tx.send(()).unwrap();
        }
        let mut answered = 0;
        while done_rx.recv_timeout(Duration::from_secs(10)).is_ok() {
            answered += 1;
            if answered == THREADS - 1 {
                break;
            }
        }
        assert_eq!(answered, THREADS - 1, "every read is answered once");
    }
}
