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
//! Files: [`config`] (URL, credentials, retries and time-outs), [`keys`]
//! (object names), [`marker`] (pool identity), [`index`] (which part holds
//! which block; pure), `rebuild` (the index from a LIST, at open),
//! [`store`] (requests and runtime), `client.rs` (the S3 client and its
//! watched HTTP tries), [`diagnose`] (wrong keys, missing bucket, wrong
//! region, unreachable endpoint: one-line errors), [`fault`] (a
//! fault-injecting store for tests), [`crash`] (an in-memory store with a
//! crash model, for crash-image tests).

mod client;
pub mod config;
pub mod crash;
pub mod credentials;
pub mod diagnose;
pub mod fault;
pub mod index;
pub mod keys;
pub mod marker;
mod rebuild;
pub mod store;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::block::{check_block_range, BlockMedia, BlockStats, BlockStatsCounter, BLOCK_SIZE};

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

/// How many times a read plans again when a part it meant to read was
/// deleted under it (it died: a newer part or a trim took its blocks).
const READ_ATTEMPTS: usize = 3;

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

/// Where a block to read comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Zero,
    Buffered,
    Part { seq: u64, offset: u64 },
}

/// State behind the media's lock.
#[derive(Debug, Default)]
struct State {
    index: Index,
    /// Blocks written since they were last handed to a `sync`.
    pending: BTreeMap<u64, Box<[u8]>>,
    /// Blocks a running `sync` is uploading (still read from here).
    inflight: Option<Arc<BTreeMap<u64, Box<[u8]>>>>,
    /// Trims that arrived while `inflight` was set; applied to its parts
    /// when they become visible.
    trims_in_flight: Vec<(u64, u64)>,
    /// Next upload number.
    next_seq: u64,
    /// Keys of objects to delete that the index does not know (parts of a
    /// failed `sync` whose delete failed too).
    stray: Vec<String>,
    /// Upload time of each indexed part (seconds since the epoch).
    uploaded: BTreeMap<u64, u64>,
}

use index::Index;

/// A block tier in an object store; see the module docs.
pub struct ObjectMedia {
    bucket: Bucket,
    len: u64,
    segment_blocks: u64,
    state: Mutex<State>,
    /// Serialises `sync`, `reclaim` and `retain` (uploads and deletes).
    sync_lock: Mutex<()>,
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
    /// Makes a new tier of `len` bytes for pool `pool_uuid` at the URL of
    /// `cfg`: refuses a prefix that holds a marker or parts already, then
    /// writes the marker.
    pub fn create(
        cfg: &ObjectConfig,
        pool_uuid: [u8; 16],
        len: u64,
        segment_blocks: u64,
    ) -> io::Result<ObjectMedia> {
        ObjectMedia::create_in(Bucket::connect(cfg)?, pool_uuid, len, segment_blocks)
    }

    /// Opens the tier of pool `pool_uuid` at the URL of `cfg`.
    pub fn open(cfg: &ObjectConfig, pool_uuid: [u8; 16]) -> io::Result<ObjectMedia> {
        ObjectMedia::open_in(Bucket::connect(cfg)?, pool_uuid)
    }

    /// [`create`](Self::create) in a given bucket.
    pub fn create_in(
        bucket: Bucket,
        pool_uuid: [u8; 16],
        len: u64,
        segment_blocks: u64,
    ) -> io::Result<ObjectMedia> {
        marker::check_geometry(len, segment_blocks)?;
        let prefix = bucket.prefix().to_string();
        let mut parts = 0u64;
        for (key, _, _) in bucket.list()? {
            match keys::parse(&prefix, &key) {
                keys::Parsed::Marker => return Err(used_prefix(&bucket, "a tier marker")),
                keys::Parsed::Part(_) | keys::Parsed::Malformed(_) => parts += 1,
                keys::Parsed::Foreign => {}
            }
        }
        if parts > 0 {
            return Err(used_prefix(&bucket, &format!("{parts} part objects")));
        }
        let m = Marker::new(pool_uuid, len, segment_blocks);
        let key = keys::join(&prefix, keys::MARKER_NAME);
        match bucket.put_new(&key, Bytes::from(m.to_json())) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(used_prefix(&bucket, "a tier marker"))
            }
            Err(e) => return Err(e),
        }
        let next_seq = first_seq(0);
        Ok(ObjectMedia::new(
            bucket,
            len,
            segment_blocks,
            Index::new(),
            next_seq,
            Vec::new(),
        ))
    }

    /// [`open`](Self::open) in a given bucket: reads the marker, checks the
    /// pool, LISTs the parts and rebuilds the index.
    pub fn open_in(bucket: Bucket, pool_uuid: [u8; 16]) -> io::Result<ObjectMedia> {
        let prefix = bucket.prefix().to_string();
        let url = format!("s3 tier {}", bucket.url());
        let marker_key = keys::join(&prefix, keys::MARKER_NAME);
        let bytes = bucket.get(&marker_key)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{url}: no Terrace tier here (no {}: a wrong prefix, or the tier's objects \
                     were deleted)",
                    keys::MARKER_NAME
                ),
            )
        })?;
        let m = Marker::parse(&bytes, &url)?;
        if m.uuid() != Some(pool_uuid) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{url}: the tier belongs to pool {}, not to pool {} (the prefix holds \
                     another pool's objects; give each pool its own prefix)",
                    m.pool_uuid,
                    marker::uuid_string(&pool_uuid)
                ),
            ));
        }
        let r = rebuild::rebuild(&bucket, m.len, m.segment_blocks)?;
        let next_seq = first_seq(r.listed_next);
        let media = ObjectMedia::new(
            bucket,
            m.len,
            m.segment_blocks,
            r.index,
            next_seq,
            r.ignored,
        );
        media.state.lock().uploaded = r.uploaded;
        Ok(media)
    }

    fn new(
        bucket: Bucket,
        len: u64,
        segment_blocks: u64,
        index: Index,
        next_seq: u64,
        ignored: Vec<String>,
    ) -> ObjectMedia {
        ObjectMedia {
            bucket,
            len,
            segment_blocks,
            state: Mutex::new(State {
                index,
                next_seq,
                ..State::default()
            }),
            sync_lock: Mutex::new(()),
            stats: BlockStatsCounter::new(),
            ignored,
        }
    }

    /// The bucket (its store, URL and request counters).
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Retries and time-outs from the next request on
    /// ([`Bucket::set_network`]).
    pub fn set_network(&self, net: NetworkParams) -> io::Result<()> {
        self.bucket.set_network(net)
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
            pending_bytes: st.pending.len() as u64 * BLOCK_SIZE,
            requests: self.bucket.request_stats(),
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

    /// Deletes every dead part (and stray object); fails if any delete
    /// failed (those stay queued).
    pub fn reclaim(&self) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.delete_dead()
    }

    /// Given every block run `(first block, blocks)` the pool's committed
    /// log references, treats every other block as trimmed and deletes every
    /// part left without a used block — the orphans of uploads whose commit
    /// never happened — together with any other dead part. Call it once
    /// recovery knows the committed runs, before new writes (at mount).
    pub fn retain(&self, used: &[(u64, u64)]) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.state.lock().index.retain(used);
        self.delete_dead()
    }

    /// The parts [`retain`](Self::retain) would delete as orphans, without
    /// deleting anything (for fsck).
    pub fn orphans(&self, used: &[(u64, u64)]) -> Vec<Orphan> {
        let st = self.state.lock();
        st.index
            .orphans(used)
            .into_iter()
            .map(|p| Orphan {
                key: self.key(&p.key),
                block: p.start,
                blocks: p.count(),
            })
            .collect()
    }

    /// Deletes the dead parts and strays; the caller holds `sync_lock`.
    fn delete_dead(&self) -> io::Result<SweepReport> {
        let (dead, stray) = {
            let st = self.state.lock();
            (st.index.dead_parts(), st.stray.clone())
        };
        if dead.is_empty() && stray.is_empty() {
            return Ok(SweepReport::default());
        }
        let mut keys: Vec<String> = dead.iter().map(|p| self.key(&p.key)).collect();
        keys.extend(stray.iter().cloned());
        let total = keys.len();
        let mut failed = self.bucket.delete_all(keys);
        let failed_keys: std::collections::HashSet<String> =
            failed.iter().map(|(k, _)| k.clone()).collect();
        let mut report = SweepReport::default();
        {
            let mut st = self.state.lock();
            for p in &dead {
                if !failed_keys.contains(&self.key(&p.key)) && st.index.forget(p.key.seq) {
                    st.uploaded.remove(&p.key.seq);
                    report.parts += 1;
                    report.bytes += p.count() * BLOCK_SIZE;
                }
            }
            st.stray
                .retain(|k| failed_keys.contains(k) || !stray.contains(k));
        }
        if failed.is_empty() {
            return Ok(report);
        }
        let (_, e) = failed.swap_remove(0);
        Err(io::Error::new(
            e.kind(),
            format!(
                "{} of {total} deletes failed (kept for the next try), first: {e}",
                failed_keys.len()
            ),
        ))
    }

    /// Where each block of `[block, block + n)` comes from; copies buffered
    /// blocks into `buf` and zero-fills holes on the way.
    fn plan_read(&self, st: &State, block: u64, buf: &mut [u8]) -> Vec<Source> {
        let n = (buf.len() / BLOCK) as u64;
        let mut src = vec![Source::Zero; n as usize];
        for piece in st.index.lookup(block, n) {
            for i in 0..piece.blocks {
                let at = (piece.start - block + i) as usize;
                src[at] = match piece.at {
                    Some((seq, off)) => Source::Part {
                        seq,
                        offset: off + i,
                    },
                    None => Source::Zero,
                };
            }
        }
        let end = block + n;
        let buffered = st
            .inflight
            .iter()
            .flat_map(|m| m.range(block..end))
            .chain(st.pending.range(block..end));
        for (&b, data) in buffered {
            let at = (b - block) as usize;
            src[at] = Source::Buffered;
            buf[at * BLOCK..(at + 1) * BLOCK].copy_from_slice(data);
        }
        for (i, s) in src.iter().enumerate() {
            if *s == Source::Zero {
                buf[i * BLOCK..(i + 1) * BLOCK].fill(0);
            }
        }
        src
    }

    /// One try at reading: plan under the lock, fetch without it.
    fn try_read(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        // (buffer offset in blocks, key, object byte range) per GET.
        let mut gets: Vec<(usize, String, std::ops::Range<u64>)> = Vec::new();
        {
            let st = self.state.lock();
            let src = self.plan_read(&st, block, buf);
            let mut i = 0;
            while i < src.len() {
                let Source::Part { seq, offset } = src[i] else {
                    i += 1;
                    continue;
                };
                let mut j = i + 1;
                while j < src.len()
                    && src[j]
                        == (Source::Part {
                            seq,
                            offset: offset + (j - i) as u64,
                        })
                {
                    j += 1;
                }
                let key = match st.index.part(seq) {
                    Some(p) => self.key(&p.key),
                    None => {
                        return Err(io::Error::other(format!(
                            "s3 {}: block {} maps to unknown upload {seq:#x} (bug)",
                            self.bucket.url(),
                            block + i as u64
                        )))
                    }
                };
                let range = offset * BLOCK_SIZE..(offset + (j - i) as u64) * BLOCK_SIZE;
                gets.push((i, key, range));
                i = j;
            }
        }
        if gets.is_empty() {
            return Ok(());
        }
        let gets = split_long_gets(gets, GET_PIECE_BLOCKS);
        let reqs = gets
            .iter()
            .map(|(_, k, r)| (k.clone(), r.clone()))
            .collect();
        let data = self.bucket.get_ranges(reqs)?;
        for ((at, _, _), bytes) in gets.iter().zip(data) {
            buf[at * BLOCK..at * BLOCK + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Uploads `batch`; on success the parts are visible in the index.
    fn upload(&self, batch: &Arc<BTreeMap<u64, Box<[u8]>>>) -> io::Result<()> {
        // Runs of consecutive blocks inside one segment.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &b in batch.keys() {
            match runs.last_mut() {
                Some((s, n)) if *s + *n == b && b % self.segment_blocks != 0 => *n += 1,
                _ => runs.push((b, 1)),
            }
        }
        let parts: Vec<(PartKey, u64)> = {
            let mut st = self.state.lock();
            runs.iter()
                .map(|&(start, n)| {
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    let key = PartKey {
                        seq,
                        segment: start / self.segment_blocks,
                        first: (start % self.segment_blocks) as u32,
                        count: n as u32,
                    };
                    (key, start)
                })
                .collect()
        };
        let objects: Vec<(String, Bytes)> = parts
            .iter()
            .map(|(k, start)| {
                let mut data = Vec::with_capacity(k.count as usize * BLOCK);
                for (_, b) in batch.range(*start..*start + u64::from(k.count)) {
                    data.extend_from_slice(b);
                }
                (self.key(k), Bytes::from(data))
            })
            .collect();
        let keys: Vec<String> = objects.iter().map(|(k, _)| k.clone()).collect();
        let results = self.bucket.put_all(objects);
        let failures = results.iter().filter(|r| r.is_err()).count();
        if let Some(Err(first)) = results.into_iter().find(|r| r.is_err()) {
            // Nothing becomes visible; what landed is deleted (or kept as
            // stray for the next try).
            let failed = self.bucket.delete_all(keys);
            self.state
                .lock()
                .stray
                .extend(failed.into_iter().map(|(k, _)| k));
            return Err(io::Error::new(
                first.kind(),
                format!(
                    "s3 sync of {} blocks in {} parts to {}: {failures} PUTs failed, \
                     nothing made durable; first: {first}",
                    batch.len(),
                    parts.len(),
                    self.bucket.url()
                ),
            ));
        }
        let now = unix_now();
        let mut st = self.state.lock();
        for (k, start) in parts {
            st.uploaded.insert(k.seq, now);
            if let Err(why) = st.index.insert(k, start) {
                // Cannot happen (numbers only grow); keep the object as an
                // orphan rather than panic.
                return Err(io::Error::other(format!(
                    "s3 {}: part {k} not indexed: {why}",
                    self.bucket.url()
                )));
            }
        }
        Ok(())
    }
}

/// The first upload number of a run of the media: past every number listed
/// (`listed_next`), and at least the wall clock in microseconds. Within a run
/// numbers grow by one per part, far slower than the clock, so a new run
/// also starts past every number an earlier run used — even one whose PUT
/// was still on its way when that run stopped and lands only after this
/// run's LIST. Two uploads therefore never share a key.
fn first_seq(listed_next: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    listed_next.max(now)
}

/// Seconds since the epoch (0 before it).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The error for a prefix that holds a tier or parts already.
fn used_prefix(bucket: &Bucket, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "s3 tier {}: the prefix holds {what} already (another pool's tier?); refusing to \
             create a tier over it (use another prefix, or delete the old tier's objects)",
            bucket.url()
        ),
    )
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_read(block, buf) {
                Ok(()) => break,
                // A part deleted under the read: its blocks moved on; plan again.
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < READ_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
        self.stats.record_read(buf.len() as u64);
        Ok(())
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        check_block_range(self.len, block, data.len())?;
        let copies: Vec<Box<[u8]>> = data.chunks_exact(BLOCK).map(Box::from).collect();
        {
            let mut st = self.state.lock();
            for (i, c) in copies.into_iter().enumerate() {
                st.pending.insert(block + i as u64, c);
            }
        }
        self.stats.record_write(data.len() as u64);
        Ok(())
    }

    /// Uploads the pending blocks (see the module docs), then deletes dead
    /// parts (a failed delete does not fail the sync: it is retried later).
    fn sync(&self) -> io::Result<()> {
        let _g = self.sync_lock.lock();
        let batch = {
            let mut st = self.state.lock();
            if st.pending.is_empty() {
                None
            } else {
                let b = Arc::new(std::mem::take(&mut st.pending));
                st.inflight = Some(Arc::clone(&b));
                st.trims_in_flight.clear();
                Some(b)
            }
        };
        if let Some(batch) = batch {
            let result = self.upload(&batch);
            let mut st = self.state.lock();
            st.inflight = None;
            let trims = std::mem::take(&mut st.trims_in_flight);
            match result {
                Ok(()) => {
                    for (b, n) in trims {
                        st.index.trim(b, n);
                    }
                }
                Err(e) => {
                    // Keep the data for the next sync, except blocks written
                    // again or trimmed meanwhile.
                    let batch = Arc::try_unwrap(batch).unwrap_or_else(|a| (*a).clone());
                    for (b, data) in batch {
                        let trimmed = trims.iter().any(|&(s, n)| b >= s && b - s < n);
                        if !trimmed {
                            st.pending.entry(b).or_insert(data);
                        }
                    }
                    return Err(e);
                }
            }
        }
        // Failures stay queued for the next sync or reclaim.
        let _ = self.delete_dead();
        self.stats.record_sync();
        Ok(())
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
        let gone: Vec<u64> = st.pending.range(block..end).map(|(&b, _)| b).collect();
        for b in gone {
            st.pending.remove(&b);
        }
        if st.inflight.is_some() {
            st.trims_in_flight.push((block, blocks));
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

/// Blocks one ranged GET fetches at most: a longer run is fetched as several
/// GETs of this size, in flight together (up to the bucket's concurrency), so
/// a large read of one part is not one stream at a time.
const GET_PIECE_BLOCKS: u64 = 512; // 2 MiB

/// `gets` (buffer offset in blocks, key, byte range) with every range longer
/// than `piece` blocks cut into ranges of at most `piece` blocks.
fn split_long_gets(
    gets: Vec<(usize, String, std::ops::Range<u64>)>,
    piece: u64,
) -> Vec<(usize, String, std::ops::Range<u64>)> {
    let piece_bytes = piece * BLOCK_SIZE;
    let mut out = Vec::with_capacity(gets.len());
    for (at, key, range) in gets {
        let mut start = range.start;
        while start < range.end {
            let end = range.end.min(start + piece_bytes);
            let at_here = at + ((start - range.start) / BLOCK_SIZE) as usize;
            out.push((at_here, key.clone(), start..end));
            start = end;
        }
    }
    out
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn long_gets_are_cut_into_pieces_that_cover_the_range_once_and_land_at_their_offset() {
        let gets = vec![
            (0, "a".to_string(), 0..4096 * 5),
            (5, "b".to_string(), 4096 * 10..4096 * 12),
        ];
        let out = split_long_gets(gets, 2);
        let got: Vec<(usize, &str, std::ops::Range<u64>)> = out
            .iter()
            .map(|(at, k, r)| (*at, k.as_str(), r.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "a", 0..8192),
                (2, "a", 8192..16384),
                (4, "a", 16384..20480),
                (5, "b", 40960..49152),
            ]
        );
    }
}
