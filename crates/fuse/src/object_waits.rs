//! Requests that may wait on an object store, served off the request
//! threads (design.md §5n "Network faults").
//!
//! A read of object-tier data the DRAM cache does not hold is a ranged GET,
//! and while the store does not answer it is retried for up to its retry
//! budget (minutes by default). So is the read of the old block that a
//! write of part of a block, a truncate inside a block, or a
//! `copy_file_range` makes when that block is stored on an object tier —
//! and those wait holding the file's inode lock. Served on a request thread,
//! two such requests would hold both of the mount's request threads, and
//! every request — for data on PM or the SSD too — would wait behind them.
//! An fsync of a file with cached pages uploads them when their write-back
//! goes to an object tier (a file pinned there), holding its request thread
//! for the upload. So the adapter asks the core whether a request may wait
//! on the network (`Fs::read_may_wait_on_network`, `write_…`, `truncate_…`,
//! `copy_…`, `fsync_…`: a
//! range mapped to an object tier, or an inode lock that is busy) and hands
//! such requests, with their replies, to a pool of [`THREADS`] threads; the
//! request thread is free at once.
//!
//! Invariants:
//! - A handed-over request is answered exactly once: by a pool thread, or
//!   on the request thread itself when no pool thread could be started.
//! - Pool threads hold no lock of the adapter; the core's operation takes
//!   its own locks, as on a request thread.
//! - Handing over changes when a request runs, never the order the kernel
//!   relies on: the kernel orders requests that must be ordered by waiting
//!   for the first one's reply (a write and a truncate of one file hold its
//!   i_rwsem until answered; the writeback cache waits for in-flight
//!   write-backs before a truncate), and requests it has in flight at once
//!   already ran in any order on the request threads.
//! - More stuck requests than threads queue behind them, in order; they
//!   never hold up requests that do not need the store.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// Pool threads (started at the first request handed over).
pub(crate) const THREADS: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

/// The pool threads and the way to them.
#[derive(Default)]
pub(crate) struct ObjectWaits {
    /// `None` if no thread could be started.
    jobs: OnceLock<Option<Sender<Job>>>,
}

impl ObjectWaits {
    /// Runs `request` (a request and its reply) on a pool thread.
    pub(crate) fn run(&self, request: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(request);
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
            .name(format!("fuse-s3-{n}"))
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
        let reads = ObjectWaits::default();
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
