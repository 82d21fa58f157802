//! [`PerWriterSync`]: a failed sync reaches every writer it may have hurt.
//!
//! Linux reports a failed write-back of a file to one `fsync` per open file
//! description (errseq) and marks the failed pages clean: reads still see
//! the data, a later `fsync` has nothing to write and succeeds, and the data
//! never reaches the device. A block tier is one open file shared by every
//! thread of the daemon (migration workers, write-back, writes through the
//! cache, log migration), each of which writes blocks, syncs, and only then
//! commits entries that point at them (design.md §5a). If thread B's sync
//! fails while thread A's blocks are written but not yet synced, A's own
//! sync returns success and A would commit blocks that are not on the
//! device — acknowledged data lost at the next crash (found by the fault
//! campaign, `crates/core/tests/fault_campaign.rs`).
//!
//! The wrapper keeps, per thread, the number of failed syncs seen when the
//! thread wrote its first block since its last sync; a sync succeeds for a
//! thread only if no sync of the media failed since then. Threads write and
//! sync their own data (every writer in the core does), so a thread's sync
//! answers for exactly its writes; a thread that wrote before a failure and
//! never synced gets a spurious error at its next sync — only ever after a
//! real device error. The cost is a thread-local map lookup per request.
//!
//! Two more ways a sync could answer for writes a failure lost:
//! - Syncs run alongside each other wait on the same write-back, and Linux
//!   reports its failure to one of them: another could return success and
//!   look at the failure count before the failing one raised it. So a sync
//!   that succeeded waits, before it looks, for every sync that ran beside
//!   it to end (syncs are grouped in generations: one that ends closes the
//!   current generation and waits for the ones at or before it; later ones
//!   never hold it up). Syncs still run together on the device.
//! - A thread whose own sync failed may still hold writes made before it
//!   that a later sync of its own is meant to answer for (a migration
//!   worker's batch, written, then a file's write-back synced and failed,
//!   then the batch synced and committed). The failure lost those too, so
//!   the thread's record is kept: its next sync fails as well.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::{BlockMedia, BlockStats};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Per wrapper (by id): failed syncs seen at this thread's first write
    /// since its last sync.
    static FIRST_WRITE: RefCell<HashMap<u64, u64>> = RefCell::new(HashMap::new());
}

/// Block media whose `sync` fails for every thread whose unsynced writes a
/// failed sync (of any thread) may have lost; see the module docs.
#[derive(Debug)]
pub struct PerWriterSync<B: BlockMedia> {
    inner: B,
    id: u64,
    /// Syncs that failed since the wrapper was made.
    failed: AtomicU64,
    /// The syncs running, by generation (module docs); a leaf lock:
    /// nothing else is locked under it.
    running: parking_lot::Mutex<Running>,
    /// Signalled when a sync ends.
    ended: parking_lot::Condvar,
}

/// The syncs of `inner` under way.
#[derive(Debug, Default)]
struct Running {
    /// The generation a sync starting now joins.
    generation: u64,
    /// Syncs under way per generation (no entry once none is).
    by_generation: std::collections::BTreeMap<u64, u32>,
}

impl<B: BlockMedia> PerWriterSync<B> {
    /// Wraps `inner`.
    pub fn new(inner: B) -> PerWriterSync<B> {
        PerWriterSync {
            inner,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            failed: AtomicU64::new(0),
            running: parking_lot::Mutex::new(Running::default()),
            ended: parking_lot::Condvar::new(),
        }
    }

    /// The wrapped media.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Syncs of the media that failed so far.
    pub fn failed_syncs(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }
}

impl<B: BlockMedia> Drop for PerWriterSync<B> {
    fn drop(&mut self) {
        // Only this thread's entry can be reached; others die with their
        // threads (ids are never reused).
        let _ = FIRST_WRITE.try_with(|m| m.borrow_mut().remove(&self.id));
    }
}

impl<B: BlockMedia> BlockMedia for PerWriterSync<B> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_blocks(block, buf)
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        // Noted before the write: a write that reaches the page cache and
        // then fails is as unsynced as one that succeeds.
        let now = self.failed.load(Ordering::SeqCst);
        FIRST_WRITE.with(|m| {
            m.borrow_mut().entry(self.id).or_insert(now);
        });
        self.inner.write_blocks(block, data)
    }

    fn sync(&self) -> io::Result<()> {
        let first = FIRST_WRITE.with(|m| m.borrow_mut().remove(&self.id));
        let joined = {
            let mut r = self.running.lock();
            let g = r.generation;
            *r.by_generation.entry(g).or_insert(0) += 1;
            g
        };
        let result = self.inner.sync();
        let mut r = self.running.lock();
        if let std::collections::btree_map::Entry::Occupied(mut n) = r.by_generation.entry(joined) {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
        // Counted before the waiters wake, so each sees this failure.
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        self.ended.notify_all();
        if let Err(e) = result {
            drop(r);
            if let Some(seen) = first {
                // Writes this thread made before may still wait for a sync
                // of its own: that one fails too (module docs).
                FIRST_WRITE.with(|m| m.borrow_mut().insert(self.id, seen));
            }
            return Err(e);
        }
        // Every sync that ran beside this one started at or before this
        // generation: wait for them to end (and count their failures).
        let last = r.generation;
        r.generation += 1;
        while r.by_generation.range(..=last).next().is_some() {
            self.ended.wait(&mut r);
        }
        drop(r);
        match first {
            // The device synced, but a failed sync since this thread's first
            // write may have dropped some of it: EIO, as the kernel would
            // have said had it told every writer.
            Some(seen) if seen != self.failed.load(Ordering::SeqCst) => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            _ => Ok(()),
        }
    }

    fn seal(&self) -> u64 {
        self.inner.seal()
    }

    /// The sealed writes' upload runs on a thread that wrote nothing, so
    /// there is no writer of its own to answer for: a failure is counted for
    /// the writers, and the caller (the mover) keeps what it sealed
    /// uncommitted.
    fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
        self.inner.sync_sealed(ticket).inspect_err(|_| {
            self.failed.fetch_add(1, Ordering::SeqCst);
        })
    }

    crate::forward_block_extras!(|self| self.inner);

    fn host_free_bytes(&self) -> Option<u64> {
        self.inner.host_free_bytes()
    }

    fn unbacked_bytes(&self) -> Option<u64> {
        self.inner.unbacked_bytes()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn stats(&self) -> BlockStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockLoss, CrashBlock, FaultBlock, BLOCK_SIZE};
    use std::sync::Arc;

    const B: usize = BLOCK_SIZE as usize;

    /// A device that fails one sync the Linux way: the unsynced writes are
    /// lost for good, and the next sync succeeds.
    struct Errseq {
        dev: Arc<CrashBlock>,
        fail_next: std::sync::atomic::AtomicBool,
        /// Run by the failing sync after it lost the writes, before it
        /// returns the error.
        while_failing: Option<Box<dyn Fn() + Send + Sync>>,
    }

    impl BlockMedia for Errseq {
        fn len(&self) -> u64 {
            self.dev.len()
        }
        fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
            self.dev.read_blocks(block, buf)
        }
        fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
            self.dev.write_blocks(block, data)
        }
        fn sync(&self) -> io::Result<()> {
            if self.fail_next.swap(false, Ordering::SeqCst) {
                self.dev.lose_unsynced();
                if let Some(f) = &self.while_failing {
                    f();
                }
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.dev.sync()
        }
        fn describe(&self) -> String {
            "errseq".into()
        }
        fn stats(&self) -> BlockStats {
            self.dev.stats()
        }
    }

    #[test]
    fn a_sync_after_another_writers_failed_sync_fails_for_writers_it_may_have_hurt() {
        let dev = Arc::new(CrashBlock::new(8 * BLOCK_SIZE));
        let m = Arc::new(PerWriterSync::new(Errseq {
            dev: dev.clone(),
            fail_next: false.into(),
            while_failing: None,
        }));
        // Thread A writes block 1 and waits; this thread writes block 2 and
        // its sync fails, losing both; A's sync must fail too.
        let (wrote, go) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let a = {
            let m = m.clone();
            let (tx, rx) = (wrote.0, go.1);
            std::thread::spawn(move || {
                m.write_blocks(1, &[1; B]).unwrap();
                tx.send(()).unwrap();
                rx.recv().unwrap();
                m.sync()
            })
        };
        wrote.1.recv().unwrap();
        m.write_blocks(2, &[2; B]).unwrap();
        m.inner().fail_next.store(true, Ordering::SeqCst);
        assert!(m.sync().is_err());
        go.0.send(()).unwrap();
        let e = a
            .join()
            .unwrap()
            .expect_err("A's data was lost, its sync must fail");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.crash_image(BlockLoss::AllUnsynced)[B], 0);
        // Writes after the failure are unaffected: A retries and succeeds.
        let m2 = m.clone();
        std::thread::spawn(move || {
            m2.write_blocks(1, &[1; B]).unwrap();
            m2.sync()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(dev.crash_image(BlockLoss::AllUnsynced)[B], 1);
        // This thread's block 2 was lost by its own failed sync: its next
        // sync says so once; then it has nothing unsynced and gets the
        // device's answer.
        assert!(m.sync().is_err());
        m.sync().unwrap();
        assert_eq!(m.failed_syncs(), 1);
    }

    #[test]
    fn a_sync_run_beside_a_failing_one_fails_for_the_writes_that_failure_lost() {
        use std::sync::mpsc::{channel, Receiver, Sender};
        use std::sync::Mutex;
        use std::time::Duration;
        let dev = Arc::new(CrashBlock::new(8 * BLOCK_SIZE));
        // The failing sync lets A start its sync and gives it time to reach
        // the device before returning its error (Linux tells one of the
        // syncs waiting on a failed write-back, and the other succeeds).
        let (go_tx, go_rx): (Sender<()>, Receiver<()>) = channel();
        let (syncing_tx, syncing_rx): (Sender<()>, Receiver<()>) = channel();
        let (go_tx, syncing_rx) = (Mutex::new(go_tx), Mutex::new(syncing_rx));
        let m = Arc::new(PerWriterSync::new(Errseq {
            dev: dev.clone(),
            fail_next: false.into(),
            while_failing: Some(Box::new(move || {
                go_tx.lock().unwrap().send(()).unwrap();
                syncing_rx.lock().unwrap().recv().unwrap();
                std::thread::sleep(Duration::from_millis(100));
            })),
        }));
        let (wrote_tx, wrote_rx) = channel();
        let a = {
            let m = m.clone();
            std::thread::spawn(move || {
                m.write_blocks(1, &[1; B]).unwrap();
                wrote_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                syncing_tx.send(()).unwrap();
                m.sync()
            })
        };
        wrote_rx.recv().unwrap();
        m.write_blocks(2, &[2; B]).unwrap();
        m.inner().fail_next.store(true, Ordering::SeqCst);
        assert!(m.sync().is_err());
        let r = a.join().unwrap();
        assert_eq!(
            dev.crash_image(BlockLoss::AllUnsynced)[B],
            0,
            "A's block was lost"
        );
        assert!(r.is_err(), "A's sync answered success for a lost block");
    }

    #[test]
    fn a_thread_whose_sync_failed_fails_its_next_sync_for_the_writes_before() {
        let dev = Arc::new(CrashBlock::new(8 * BLOCK_SIZE));
        let m = PerWriterSync::new(Errseq {
            dev: dev.clone(),
            fail_next: false.into(),
            while_failing: None,
        });
        // A batch written, then another write synced alone fails (its
        // caller copes), then the batch's own sync: it must not succeed.
        m.write_blocks(1, &[1; B]).unwrap();
        m.write_blocks(2, &[2; B]).unwrap();
        m.inner().fail_next.store(true, Ordering::SeqCst);
        assert!(m.sync().is_err());
        assert!(
            m.sync().is_err(),
            "the batch's sync answered for a lost block"
        );
        assert_eq!(dev.crash_image(BlockLoss::AllUnsynced)[B], 0);
        // Writes after that are unaffected.
        m.write_blocks(1, &[1; B]).unwrap();
        m.sync().unwrap();
        assert_eq!(dev.crash_image(BlockLoss::AllUnsynced)[B], 1);
    }

    #[test]
    fn healthy_media_behaves_as_its_inner_media() {
        let m = PerWriterSync::new(FaultBlock::new(CrashBlock::new(4 * BLOCK_SIZE)));
        m.write_blocks(0, &[7; B]).unwrap();
        m.sync().unwrap();
        let mut b = [0u8; B];
        m.read_blocks(0, &mut b).unwrap();
        assert_eq!(b, [7; B]);
        m.inner().fail_sync_after(0);
        m.write_blocks(1, &[8; B]).unwrap();
        assert!(m.sync().is_err());
        m.inner().heal();
        // The thread's writes before the failure count as lost (on Linux
        // they are): its next sync fails too, and the one after works.
        assert!(m.sync().is_err());
        m.sync().unwrap();
        assert_eq!(m.failed_syncs(), 1);
    }
}
