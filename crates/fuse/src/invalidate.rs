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
//! Invariants:
//! - A handed-over reply is sent exactly once, after its invalidation
//!   returned (or at once when no kernel can be told: before the session
//!   exists, or when the thread could not be started).
//! - The invalidation thread holds no lock of the core or of the adapter
//!   while it waits for the kernel.

use fuser::{INodeNo, Notifier};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, OnceLock};

/// A range of a file's data the kernel may hold stale pages of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale {
    pub(crate) ino: u64,
    pub(crate) offset: u64,
    /// Bytes; 0 means to the end of the file.
    pub(crate) len: u64,
}

struct Job {
    stale: Stale,
    then: Box<dyn FnOnce() + Send>,
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
        let job = Job {
            stale,
            then: Box::new(then),
        };
        match self.jobs.get_or_init(|| self.start()) {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    // The thread is gone (it only ends with the adapter):
                    // invalidate here rather than lose the reply.
                    run(&self.notifier, job);
                }
            }
            None => run(&self.notifier, job),
        }
    }

    fn start(&self) -> Option<Sender<Job>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let notifier = self.notifier.clone();
        std::thread::Builder::new()
            .name("fuse-invalidate".into())
            .spawn(move || {
                for job in rx {
                    run(&notifier, job);
                }
            })
            .ok()
            .map(|_| tx)
    }
}

/// Drops the pages (an error means the kernel forgot the inode or the
/// session ended: nothing is cached then), then replies.
fn run(notifier: &OnceLock<Notifier>, job: Job) {
    if let Some(n) = notifier.get() {
        let off = i64::try_from(job.stale.offset).unwrap_or(i64::MAX);
        let len = i64::try_from(job.stale.len).unwrap_or(0);
        let _ = n.inval_inode(INodeNo(job.stale.ino), off, len);
    }
    (job.then)();
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
