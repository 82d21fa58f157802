//! Test media over other block media: [`Hooked`] forwards every
//! [`BlockMedia`] call to the wrapped media except those the test's
//! [`Hooks`] change (a sync held or failed, a read damaged on its way, a
//! discard refused, a sweep watched), so each test writes only what differs.

use std::io;
use terrace_media::{BlockMedia, BlockStats, SweepReport};

/// What a test changes of the media it wraps; every method not overridden
/// goes to [`Hooks::inner`].
pub trait Hooks: Send + Sync {
    /// The wrapped media.
    fn inner(&self) -> &dyn BlockMedia;
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner().read_blocks(block, buf)
    }
    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        self.inner().write_blocks(block, data)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner().sync()
    }
    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        self.inner().discard(block, blocks)
    }
    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        self.inner().unreferenced(used)
    }
    fn describe(&self) -> String {
        self.inner().describe()
    }
}

/// Block media made of a test's [`Hooks`] (dereferences to them).
pub struct Hooked<H>(pub H);

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.0
    }
}

impl<H: Hooks> BlockMedia for Hooked<H> {
    fn len(&self) -> u64 {
        self.0.inner().len()
    }
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_blocks(block, buf)
    }
    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_blocks(block, data)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn seal(&self) -> u64 {
        self.0.inner().seal()
    }
    fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
        self.0.inner().sync_sealed(ticket)
    }
    fn read_ahead(&self, block: u64, blocks: u64) {
        self.0.inner().read_ahead(block, blocks)
    }
    fn trim(&self, block: u64, blocks: u64) -> io::Result<()> {
        self.0.inner().trim(block, blocks)
    }
    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        self.0.discard(block, blocks)
    }
    fn retain_only(&self, used: &[(u64, u64)]) -> io::Result<Option<SweepReport>> {
        self.0.inner().retain_only(used)
    }
    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        self.0.unreferenced(used)
    }
    fn delete_dead(&self) -> io::Result<()> {
        self.0.inner().delete_dead()
    }
    fn object_tier_stats(&self) -> Option<terrace_media::ObjectStats> {
        self.0.inner().object_tier_stats()
    }
    fn object_parts(&self) -> Option<Vec<terrace_media::PartInfo>> {
        self.0.inner().object_parts()
    }
    fn set_network(&self, net: &terrace_media::NetworkParams) -> io::Result<()> {
        self.0.inner().set_network(net)
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn stats(&self) -> BlockStats {
        self.0.inner().stats()
    }
}
