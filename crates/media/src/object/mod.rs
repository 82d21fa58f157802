//! [`ObjectMedia`]: a [`BlockMedia`] over an S3-compatible object store, the
//! media half of the object tier (docs/design.md §5n).
//!
//! The tier is a virtual block space of `len` bytes cut into segments of
//! `segment_blocks` blocks. Objects are immutable; the block-media contract
//! is kept with three rules:
//!
//! 1. **Writes are DRAM until `sync`.** `write_blocks` copies into a pending
//!    buffer (visible to reads at once). `sync` uploads every contiguous run of
//!    pending blocks inside one segment as ONE new object, a *part*, named by
//!    a fresh upload number ([`keys`]), up to `concurrency` PUTs at once.
//! 2. **Visible only when all landed.** The parts of a `sync` enter the index
//!    only after every PUT was answered with success and an ETag; then `sync`
//!    returns `Ok`. If any PUT fails, none enters the index, the parts that
//!    did land are deleted (best effort; leftovers are orphans for
//!    [`ObjectMedia::retain`]), the data stays pending (a later `sync`
//!    uploads it again under new numbers) and `sync` fails naming the
//!    endpoint, the key and the cause. No object is ever overwritten: every
//!    upload has a number never used before in the tier, continued at open
//!    past the highest one listed and past the wall clock in microseconds
//!    (`first_seq`: covers a PUT of an earlier run that lands late).
//! 3. **Newest wins, dead parts go.** A block reads from the pending buffer,
//!    else from the newest part holding it ([`index`]), else as zeros. A part
//!    all of whose blocks are superseded by newer parts or trimmed
//!    ([`BlockMedia::trim`]) is dead: nothing can read it, and it is deleted
//!    by the next `sync` (after that sync's own parts are visible) or by
//!    [`ObjectMedia::reclaim`]. A failed delete is retried at the next one.
//!
//! So the file system's own order — copy to free blocks, `sync`, then commit
//! the log entry — means a committed entry only ever names blocks whose part
//! is durable and indexed. Deleting is safe under the same assumption every
//! block tier makes: blocks are written only while free, and trimmed only
//! once the commit that freed them is durable.
//!
//! Opening LISTs the prefix and rebuilds the index from the keys alone;
//! malformed or foreign keys are reported ([`ObjectMedia::ignored_keys`]) and
//! left alone. Trims are not stored: after a reopen, trimmed blocks of a part
//! that is still partly live are live again until [`ObjectMedia::retain`]
//! is told which blocks the pool's committed log references.
//!
//! Files: this one (the media's state, counters and `BlockMedia`),
//! `buffer.rs` (the pending and in-flight blocks: runs of shared buffers that
//! upload bodies slice without copying), `open.rs`
//! (create and open, upload numbers), `read.rs` (reads: plan, ranged GETs),
//! `sync.rs` (uploads at `sync`, deletion of dead parts and orphans),
//! [`config`] (the tier URL; its options, certificates, credentials,
//! retries and time-outs in `url_options.rs`, `certificates.rs`,
//! [`credentials`] and `network.rs`), [`keys`]
//! (object names), [`marker`] (pool identity), [`index`] (which part holds
//! which block; pure), `rebuild` (the index from a LIST, at open),
//! [`store`] (requests and runtime), `client.rs` (the S3 client and its
//! watched HTTP tries), [`diagnose`] (wrong keys, missing bucket, wrong
//! region, unreachable endpoint: one-line errors), [`fault`] (a
//! fault-injecting store for tests), [`crash`] (an in-memory store with a
//! crash model, for crash-image tests).

mod ahead;
mod buffer;
mod certificates;
mod client;
pub mod config;
pub mod crash;
pub mod credentials;
pub mod diagnose;
pub mod fault;
pub mod index;
pub mod keys;
pub mod marker;
mod network;
mod open;
mod read;
mod rebuild;
pub mod store;
mod sync;
mod url_options;
mod wrapper;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::io;

use parking_lot::{Condvar, Mutex};

use crate::block::{check_block_range, BlockMedia, BlockStats, BlockStatsCounter, BLOCK_SIZE};

pub use ahead::AheadStats;
pub use config::{Credentials, NetworkParams, ObjectConfig, UrlOptions};
pub use crash::{CrashStore, ObjectEvent, ObjectLoss};
pub use fault::{FaultStore, InjectedObjectFaults, PutFault};
pub use index::Part;
pub use keys::PartKey;
pub use marker::{Marker, MAX_SEGMENT_BLOCKS};
pub use store::{Bucket, RequestStats, StoreFailure};

/// Default segment: 16 MiB (4096 blocks), the largest part; see the
/// measurements in docs/design.md §5n.
pub const DEFAULT_SEGMENT_BLOCKS: u64 = (16 << 20) / BLOCK_SIZE;

const BLOCK: usize = BLOCK_SIZE as usize;

/// Space and request counters of an object tier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Parts in the store (dead ones not yet deleted included).
    pub parts: u64,
    /// Bytes of those parts.
    pub stored_bytes: u64,
    /// Bytes of blocks that read from a part (the rest of `stored_bytes` is
    /// superseded or trimmed: what cleaning would win back).
    pub live_bytes: u64,
    /// Dead parts waiting for deletion, and objects of failed syncs whose
    /// delete failed (not in `parts`).
    pub dead_parts: u64,
    /// Bytes written but not yet synced.
    pub pending_bytes: u64,
    /// Requests so far.
    pub requests: RequestStats,
    /// `Some` while the store fails requests (until one succeeds).
    pub failing: Option<StoreFailure>,
}

/// What a [`ObjectMedia::retain`] or [`ObjectMedia::reclaim`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Parts deleted.
    pub parts: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A part that [`ObjectMedia::orphans`] found: none of its blocks is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// Full object key.
    pub key: String,
    /// First block (tier address).
    pub block: u64,
    /// Blocks in the object.
    pub blocks: u64,
}

/// A part's use, for cleaning ([`ObjectMedia::parts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartInfo {
    /// Its upload number (larger is newer).
    pub seq: u64,
    /// First block (tier address).
    pub block: u64,
    /// Blocks in the object.
    pub blocks: u64,
    /// Blocks that still read from it (0: dead, waiting for its delete).
    pub live: u64,
    /// When it was uploaded (seconds since the epoch; the LIST's
    /// last-modified for parts found at open).
    pub uploaded_unix: u64,
}

/// State behind the media's lock.
#[derive(Debug, Default)]
pub(super) struct State {
    index: Index,
    /// Blocks written since they were last handed to a `sync` or sealed
    /// (and blocks of a failed upload put back, where nothing newer is).
    pending: BlockBuffer,
    /// Blocks set aside by `seal`, one buffer per ticket, oldest first
    /// (older than `pending`, newer than `inflight`).
    sealed: VecDeque<(u64, BlockBuffer)>,
    /// Uploads running, in the order they took their blocks: the order
    /// their parts enter the index (`sync.rs`).
    inflight: VecDeque<sync::Inflight>,
    /// The last ticket `seal` handed out (tickets start at 1).
    last_ticket: u64,
    /// Upload turns: the next to hand out, and the next to finish.
    next_turn: u64,
    finishing_turn: u64,
    /// Tickets an upload took, until their own `sync_sealed` asks: `None`
    /// while it runs, then its outcome.
    outcomes: BTreeMap<u64, Option<sync::Outcome>>,
    /// Per ticket not yet asked for, what became of the uploads that had
    /// taken blocks when it was sealed: blocks written before the seal may
    /// be in those instead of the ticket (a `sync` took them), so
    /// `sync_sealed` answers for them too (`sync.rs`).
    seal_marks: BTreeMap<u64, sync::SealMark>,
    /// Uploads that failed so far (a `sync` fails when one that took
    /// blocks before it did).
    failed_uploads: u64,
    /// Next upload number.
    next_seq: u64,
    /// Keys of objects to delete that the index does not know (parts of a
    /// failed `sync` whose delete failed too).
    stray: Vec<String>,
    /// Upload time of each indexed part (seconds since the epoch).
    uploaded: BTreeMap<u64, u64>,
}

use buffer::BlockBuffer;
use index::Index;

/// A block tier in an object store; see the module docs.
pub struct ObjectMedia {
    bucket: Bucket,
    len: u64,
    segment_blocks: u64,
    state: Mutex<State>,
    /// Signalled when an upload finishes its turn (`sync.rs`).
    turns: Condvar,
    /// Serialises the deletes of dead parts (`reclaim`, `retain`, and
    /// those after a `sync`).
    sync_lock: Mutex<()>,
    /// Read-ahead GETs started for sequential readers (`ahead.rs`).
    ahead: ahead::Ahead,
    stats: BlockStatsCounter,
    /// Keys found at open that are not Terrace's or are malformed, with why.
    ignored: Vec<String>,
}

impl std::fmt::Debug for ObjectMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectMedia")
            .field("url", &self.bucket.url())
            .field("len", &self.len)
            .field("segment_blocks", &self.segment_blocks)
            .finish()
    }
}

impl ObjectMedia {
    /// The bucket (its store, URL and request counters).
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Retries and time-outs from the next request on
    /// ([`Bucket::set_network`]).
    pub fn set_network(&self, net: NetworkParams) -> io::Result<()> {
        self.bucket.set_network(net)
    }

    /// Counters of the read-ahead (`BlockMedia::read_ahead`), and the bytes
    /// it holds now.
    pub fn read_ahead_stats(&self) -> (AheadStats, u64) {
        self.ahead.stats()
    }

    /// Blocks per segment.
    pub fn segment_blocks(&self) -> u64 {
        self.segment_blocks
    }

    /// Keys found at open that were left alone, each with the reason.
    pub fn ignored_keys(&self) -> &[String] {
        &self.ignored
    }

    /// Space and request counters.
    pub fn object_stats(&self) -> ObjectStats {
        let st = self.state.lock();
        let ix = &st.index;
        ObjectStats {
            parts: ix.parts(),
            stored_bytes: ix.stored_blocks() * BLOCK_SIZE,
            live_bytes: ix.live_blocks() * BLOCK_SIZE,
            dead_parts: ix.dead_parts().len() as u64 + st.stray.len() as u64,
            pending_bytes: (st.pending.blocks()
                + st.sealed.iter().map(|(_, b)| b.blocks()).sum::<u64>())
                * BLOCK_SIZE,
            requests: {
                let (ahead, _) = self.ahead.stats();
                RequestStats {
                    read_ahead_gets: ahead.started,
                    read_ahead_bytes: ahead.started_bytes,
                    read_ahead_taken_bytes: ahead.taken_bytes,
                    read_ahead_waited: ahead.waited,
                    ..self.bucket.request_stats()
                }
            },
            failing: self.bucket.failing(),
        }
    }

    /// Every part the index knows (dead ones not yet deleted included),
    /// oldest first: what an object cleaner chooses from.
    pub fn parts(&self) -> Vec<PartInfo> {
        let st = self.state.lock();
        st.index
            .all_parts()
            .map(|p| PartInfo {
                seq: p.key.seq,
                block: p.start,
                blocks: p.count(),
                live: p.live,
                uploaded_unix: st.uploaded.get(&p.key.seq).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Full key of a part.
    fn key(&self, k: &PartKey) -> String {
        keys::join(self.bucket.prefix(), &k.name())
    }
}

impl BlockMedia for ObjectMedia {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        check_block_range(self.len, block, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        self.read_planned(block, buf)?;
        self.stats.record_read(buf.len() as u64);
        Ok(())
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        check_block_range(self.len, block, data.len())?;
        self.state
            .lock()
            .pending
            .write(block, data, self.segment_blocks);
        self.stats.record_write(data.len() as u64);
        Ok(())
    }

    /// Uploads the pending blocks (see the module docs), then deletes dead
    /// parts (a failed delete does not fail the sync: it is retried later).
    fn sync(&self) -> io::Result<()> {
        self.sync_pending()
    }

    fn seal(&self) -> u64 {
        self.seal_pending()
    }

    /// Uploads what was sealed under `ticket` (blocks written after the
    /// seal stay pending); see `sync.rs`.
    fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
        self.sync_ticket(ticket)
    }

    fn read_ahead(&self, block: u64, blocks: u64) {
        self.start_read_ahead(block, blocks);
    }

    fn trim(&self, block: u64, blocks: u64) -> io::Result<()> {
        let end = match block.checked_add(blocks) {
            Some(e) if e <= self.len / BLOCK_SIZE => e,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "trim of blocks [{block}, +{blocks}) outside media of {} blocks",
                        self.len / BLOCK_SIZE
                    ),
                ))
            }
        };
        let mut st = self.state.lock();
        st.index.trim(block, blocks);
        st.pending.remove(block, end - block);
        for (_, b) in st.sealed.iter_mut() {
            b.remove(block, end - block);
        }
        for f in st.inflight.iter_mut() {
            f.trims.push((block, blocks));
        }
        Ok(())
    }

    fn retain_only(&self, used: &[(u64, u64)]) -> io::Result<Option<SweepReport>> {
        self.retain(used).map(Some)
    }

    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        let orphans = self.orphans(used);
        Some(SweepReport {
            parts: orphans.len() as u64,
            bytes: orphans.iter().map(|o| o.blocks * BLOCK_SIZE).sum(),
        })
    }

    fn delete_dead(&self) -> io::Result<()> {
        self.reclaim().map(|_| ())
    }

    fn object_tier_stats(&self) -> Option<ObjectStats> {
        Some(self.object_stats())
    }

    fn object_parts(&self) -> Option<Vec<PartInfo>> {
        Some(self.parts())
    }

    fn set_network(&self, net: &NetworkParams) -> io::Result<()> {
        ObjectMedia::set_network(self, *net)
    }

    fn describe(&self) -> String {
        format!("s3 {}", self.bucket.url())
    }

    fn stats(&self) -> BlockStats {
        self.stats.snapshot()
    }
}
