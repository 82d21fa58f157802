//! [`Closable`]: block media that can be closed while references to it
//! are still shared.
//!
//! The file system keeps a reference to every tier it mounted for as long
//! as it is mounted (readers take no lock on the tier list, so a tier
//! removed from a mounted pool stays valid memory). Its media, though — an
//! open file and its lock's purpose, or an object store's connections —
//! should go when the tier does: [`Closable::close`] waits for the requests
//! in flight, then drops the wrapped media; every later request fails with
//! an error naming the closed tier, and nothing reaches the old device.
//!
//! Invariants:
//! - A request holds the read side of `inner` for its whole length, so
//!   `close` (the write side) returns only once no request is in flight,
//!   and the wrapped media is dropped after that (outside the lock).
//! - After `close`, `read_blocks`, `write_blocks` and `sync` fail
//!   ([`io::ErrorKind::NotConnected`]); the optional methods do nothing and
//!   report nothing (no trim, no sweep, no object stats); `len` stays what
//!   it was.
//!
//! Lock order: `inner` is taken around every call into the wrapped media
//! and so sits above every lock of that media (docs/design.md §4a, "Locks
//! of the media crate"); the wrapped media never calls back.

use std::io;

use parking_lot::RwLock;

use crate::block::{BlockMedia, BlockStats};
use crate::object::{NetworkParams, ObjectStats, PartInfo, SweepReport};

/// Block media that [`close`](Closable::close) can shut while others still
/// hold references to it; see the module docs.
pub struct Closable<B: BlockMedia> {
    inner: RwLock<Option<B>>,
    len: u64,
    /// What the media was, for [`BlockMedia::describe`] once closed.
    was: String,
}

impl<B: BlockMedia> std::fmt::Debug for Closable<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closable")
            .field("media", &self.was)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl<B: BlockMedia> Closable<B> {
    /// Wraps `inner`, open.
    pub fn new(inner: B) -> Closable<B> {
        Closable {
            len: inner.len(),
            was: inner.describe(),
            inner: RwLock::new(Some(inner)),
        }
    }

    /// Waits for the requests in flight, then drops the wrapped media (its
    /// file is closed, its connections go). Idempotent.
    pub fn close(&self) {
        let taken = self.inner.write().take();
        drop(taken);
    }

    /// Whether [`close`](Closable::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.read().is_none()
    }

    fn closed(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            format!("{}: closed (its tier was removed from the pool)", self.was),
        )
    }
}

impl<B: BlockMedia> BlockMedia for Closable<B> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.read_blocks(block, buf),
            None => Err(self.closed()),
        }
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.write_blocks(block, data),
            None => Err(self.closed()),
        }
    }

    fn sync(&self) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.sync(),
            None => Err(self.closed()),
        }
    }

    fn seal(&self) -> u64 {
        match &*self.inner.read() {
            Some(m) => m.seal(),
            None => 0,
        }
    }

    fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.sync_sealed(ticket),
            None => Err(self.closed()),
        }
    }

    fn delete_dead(&self) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.delete_dead(),
            None => Ok(()),
        }
    }

    fn read_ahead(&self, block: u64, blocks: u64) {
        if let Some(m) = &*self.inner.read() {
            m.read_ahead(block, blocks);
        }
    }

    fn trim(&self, block: u64, blocks: u64) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.trim(block, blocks),
            None => Ok(()),
        }
    }

    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.discard(block, blocks),
            None => Err(self.closed()),
        }
    }

    fn retain_only(&self, used: &[(u64, u64)]) -> io::Result<Option<SweepReport>> {
        match &*self.inner.read() {
            Some(m) => m.retain_only(used),
            None => Ok(None),
        }
    }

    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        self.inner
            .read()
            .as_ref()
            .and_then(|m| m.unreferenced(used))
    }

    fn object_tier_stats(&self) -> Option<ObjectStats> {
        self.inner
            .read()
            .as_ref()
            .and_then(|m| m.object_tier_stats())
    }

    fn object_parts(&self) -> Option<Vec<PartInfo>> {
        self.inner.read().as_ref().and_then(|m| m.object_parts())
    }

    fn set_network(&self, net: &NetworkParams) -> io::Result<()> {
        match &*self.inner.read() {
            Some(m) => m.set_network(net),
            None => Ok(()),
        }
    }

    fn host_free_bytes(&self) -> Option<u64> {
        self.inner.read().as_ref().and_then(|m| m.host_free_bytes())
    }

    fn unbacked_bytes(&self) -> Option<u64> {
        self.inner.read().as_ref().and_then(|m| m.unbacked_bytes())
    }

    fn describe(&self) -> String {
        match &*self.inner.read() {
            Some(m) => m.describe(),
            None => format!("{} (closed)", self.was),
        }
    }

    fn stats(&self) -> BlockStats {
        self.inner
            .read()
            .as_ref()
            .map(|m| m.stats())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemBlock, BLOCK_SIZE};
    use std::sync::Arc;

    #[test]
    fn a_closed_media_fails_every_request_and_drops_what_it_wrapped() {
        let dev = Arc::new(MemBlock::new(16 * BLOCK_SIZE));
        let c = Closable::new(dev.clone());
        c.write_blocks(1, &[7u8; BLOCK_SIZE as usize]).unwrap();
        c.sync().unwrap();
        assert_eq!(Arc::strong_count(&dev), 2);
        c.close();
        assert!(c.is_closed());
        assert_eq!(Arc::strong_count(&dev), 1, "the wrapped media is dropped");
        let mut buf = vec![0u8; BLOCK_SIZE as usize];
        let e = c.read_blocks(1, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        assert!(e.to_string().contains("removed"), "{e}");
        assert!(c.write_blocks(1, &buf).is_err());
        assert!(c.sync().is_err());
        assert!(c.trim(1, 1).is_ok());
        assert_eq!(c.len(), 16 * BLOCK_SIZE);
        assert!(c.describe().contains("closed"));
        c.close();
    }

    #[test]
    fn close_waits_for_the_requests_in_flight() {
        struct Slow {
            inside: std::sync::Barrier,
            done: std::sync::atomic::AtomicBool,
        }
        impl BlockMedia for Slow {
            fn len(&self) -> u64 {
                BLOCK_SIZE
            }
            fn read_blocks(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
                self.inside.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
                self.done.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            fn write_blocks(&self, _: u64, _: &[u8]) -> io::Result<()> {
                Ok(())
            }
            fn sync(&self) -> io::Result<()> {
                Ok(())
            }
            fn describe(&self) -> String {
                "slow".into()
            }
            fn stats(&self) -> BlockStats {
                BlockStats::default()
            }
        }
        let slow = Arc::new(Slow {
            inside: std::sync::Barrier::new(2),
            done: std::sync::atomic::AtomicBool::new(false),
        });
        let c = Arc::new(Closable::new(slow.clone()));
        let reader = {
            let c = c.clone();
            std::thread::spawn(move || c.read_blocks(0, &mut vec![0u8; BLOCK_SIZE as usize]))
        };
        slow.inside.wait();
        c.close();
        assert!(
            slow.done.load(std::sync::atomic::Ordering::SeqCst),
            "close returned while a read was inside the media"
        );
        assert!(reader.join().unwrap().is_ok());
        assert_eq!(Arc::strong_count(&slow), 1);
    }
}
