//! Drops ranges of the kernel's cached pages before a change is
//! acknowledged, off the request threads.
//!
//! The kernel's `notify_inval_inode` for a data range waits for the page
//! locks of that range, and a page being read stays locked until the daemon
//! answers its read request. Sent from a request thread, an invalidation
//! holds that thread while it waits; once every request thread waits so, the
//! reads that would unlock the pages find no thread to serve them and the
//! mount hangs (xfstests generic/095: fio's direct writes beside buffered
//! reads and mappings of the same files). So a request whose change needs
//! an invalidation hands its reply to one invalidation thread, which drops
//! the pages and then replies. The application's call still returns only
//! after the kernel dropped its stale pages (coherence is unchanged), and
//! the request thread is free at once to serve the reads the invalidation
//! waits for.
//!
//! The same thread runs longer work in *steps* that must be ordered with
//! those invalidations: a fill of a file's pages after its writer closed it
//! (`crate::fill`) stores one piece per step, and the reply to an open that
//! waits for the fill is a step that queues itself again until the fill
//! ended. A change made during a fill queues its invalidation behind the
//! fill's step in progress, so no store of older bytes lands after the
//! change is acknowledged.
//!
//! Invariants:
//! - A handed-over reply is sent exactly once, after its invalidation
//!   returned (or at once when no kernel can be told: before the session
//!   exists, or when the thread could not be started).
//! - Jobs run in the order they were queued; a step's next step runs after
//!   every job queued before the step ended.
//! - The invalidation thread holds no lock of the core or of the adapter
//!   while it waits for the kernel, except the fill gate of `crate::fill`
//!   (which only the forget of the file being filled waits for, and whose
//!   store waits on no request: no cached open of that file is live).

use fuser::{INodeNo, Notifier};
use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};

/// A range of a file's data the kernel may hold stale pages of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale {
    pub(crate) ino: u64,
    pub(crate) offset: u64,
    /// Bytes; 0 means to the end of the file.
    pub(crate) len: u64,
}

/// Work for the invalidation thread, run in the order it was queued.
enum Job {
    /// Drop the kernel's pages of `stale`, then run `then` (a reply).
    Invalidate {
        stale: Stale,
        then: Box<dyn FnOnce() + Send>,
    },
    /// A step of longer work (a fill of a file's pages, an open waiting for
    /// it: `crate::fill`).
    Step(Step),
}

/// One step of longer work on the invalidation thread: it returns its next
/// step, which is queued behind everything that arrived meanwhile.
pub(crate) struct Step(Box<dyn FnOnce() -> Option<Step> + Send>);

impl Step {
    pub(crate) fn new(f: impl FnOnce() -> Option<Step> + Send + 'static) -> Step {
        Step(Box::new(f))
    }
}

/// The invalidation thread and the way to it.
pub(crate) struct Invalidator {
    notifier: Arc<OnceLock<Notifier>>,
    /// Started at the first invalidation; `None` if it could not be started.
    jobs: OnceLock<Option<Sender<Job>>>,
}

impl Invalidator {
    /// Invalidations go to the kernel through `notifier` once it is set.
    pub(crate) fn new(notifier: Arc<OnceLock<Notifier>>) -> Invalidator {
        Invalidator {
            notifier,
            jobs: OnceLock::new(),
        }
    }

    /// Runs `then` (a reply) once the kernel dropped its pages of `stale`.
    pub(crate) fn then(&self, stale: Stale, then: impl FnOnce() + Send + 'static) {
        if self.notifier.get().is_none() {
            return then();
        }
        self.queue(Job::Invalidate {
            stale,
            then: Box::new(then),
        });
    }

    /// Runs `step` on the invalidation thread, in order with the
    /// invalidations and steps queued before it (here, to its end, when the
    /// thread could not be started).
    pub(crate) fn step(&self, step: Step) {
        self.queue(Job::Step(step));
    }

    /// The kernel, once the session exists.
    pub(crate) fn kernel(&self) -> Option<&Notifier> {
        self.notifier.get()
    }

    fn queue(&self, job: Job) {
        match self.jobs.get_or_init(|| self.start()) {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    // The thread is gone (it only ends with the adapter):
                    // run the job here rather than lose a reply.
                    run_to_end(&self.notifier, job);
                }
            }
            None => run_to_end(&self.notifier, job),
        }
    }

    fn start(&self) -> Option<Sender<Job>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let notifier = self.notifier.clone();
        std::thread::Builder::new()
            .name("fuse-invalidate".into())
            .spawn(move || serve(&notifier, &rx))
            .ok()
            .map(|_| tx)
    }
}

/// The invalidation thread: jobs in arrival order; a step's next step goes
/// behind every job that arrived before it ended. Ends when the adapter's
/// sender is dropped and nothing is left to run.
fn serve(notifier: &OnceLock<Notifier>, rx: &Receiver<Job>) {
    let mut queue = VecDeque::new();
    loop {
        queue.extend(rx.try_iter());
        let job = match queue.pop_front() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        if let Some(next) = run(notifier, job) {
            queue.extend(rx.try_iter());
            queue.push_back(Job::Step(next));
        }
    }
}

/// Runs `job` and every step after it, here.
fn run_to_end(notifier: &OnceLock<Notifier>, job: Job) {
    let mut next = run(notifier, job);
    while let Some(step) = next {
        next = (step.0)();
    }
}

/// Drops the pages (an error means the kernel forgot the inode or the
/// session ended: nothing is cached then), then replies; or runs a step.
fn run(notifier: &OnceLock<Notifier>, job: Job) -> Option<Step> {
    match job {
        Job::Invalidate { stale, then } => {
            if let Some(n) = notifier.get() {
                let off = i64::try_from(stale.offset).unwrap_or(i64::MAX);
                let len = i64::try_from(stale.len).unwrap_or(0);
                let _ = n.inval_inode(INodeNo(stale.ino), off, len);
            }
            then();
            None
        }
        Job::Step(step) => (step.0)(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn without_a_kernel_a_reply_is_sent_at_once_and_only_once() {
        let inv = Invalidator::new(Arc::default());
        let (tx, rx) = channel();
        let stale = Stale {
            ino: 2,
            offset: 0,
            len: 4096,
        };
        inv.then(stale, move || tx.send(7).unwrap());
        assert_eq!(rx.try_recv(), Ok(7));
        assert!(rx.try_recv().is_err());
        // No thread was started for it.
        assert!(inv.jobs.get().is_none());
    }
}
