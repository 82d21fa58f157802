//! The campaign's media: PM with poisoned loads and the SSD that fails.

use super::*;

pub(crate) type Pm = FaultMedia<CrashMedia>;
/// The campaign's SSD: [`FaultBlock`]'s countdowns (EIO on reads, writes
/// or syncs until healed) over a [`CrashBlock`], plus the way a buffered
/// file's fsync fails on Linux: once, with the unsynced writes lost for
/// good although reads still see them ([`CrashBlock::lose_unsynced`]).
pub(crate) struct Ssd {
    pub(crate) fault: FaultBlock<Arc<CrashBlock>>,
    /// Syncs to let through before the one that fails and loses writes.
    pub(crate) lose_at: parking_lot::Mutex<Option<u64>>,
    pub(crate) lost_syncs: AtomicU64,
    /// Holds the next sync until released (for the regression test of a
    /// sync error seen by another writer): signals arrival, waits for go.
    pub(crate) gate: parking_lot::Mutex<Option<Gate>>,
}

pub(crate) type Gate = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);

impl Ssd {
    pub(crate) fn new(bytes: u64) -> Hooked<Ssd> {
        Hooked(Ssd {
            fault: FaultBlock::new(Arc::new(CrashBlock::new(bytes))),
            lose_at: parking_lot::Mutex::new(None),
            lost_syncs: AtomicU64::new(0),
            gate: parking_lot::Mutex::new(None),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<CrashBlock> {
        self.fault.inner()
    }

    pub(crate) fn heal(&self) {
        self.fault.heal();
        *self.lose_at.lock() = None;
    }

    /// The sync after the next `n` fails once, losing the unsynced writes.
    pub(crate) fn lose_writes_at_sync_after(&self, n: u64) {
        *self.lose_at.lock() = Some(n);
    }
}

impl std::ops::Deref for Ssd {
    type Target = FaultBlock<Arc<CrashBlock>>;
    fn deref(&self) -> &Self::Target {
        &self.fault
    }
}

impl Hooks for Ssd {
    fn inner(&self) -> &dyn BlockMedia {
        &self.fault
    }
    fn sync(&self) -> std::io::Result<()> {
        let gate = self.gate.lock().take();
        if let Some((arrived, go)) = gate {
            let _ = arrived.send(());
            let _ = go.recv_timeout(std::time::Duration::from_secs(10));
        }
        {
            let mut l = self.lose_at.lock();
            match *l {
                Some(0) => {
                    *l = None;
                    self.inner().lose_unsynced();
                    self.lost_syncs.fetch_add(1, Ordering::Relaxed);
                    return Err(std::io::Error::from_raw_os_error(libc::EIO));
                }
                Some(n) => *l = Some(n - 1),
                None => {}
            }
        }
        self.fault.sync()
    }
}
