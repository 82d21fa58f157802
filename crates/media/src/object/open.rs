//! Creating and opening an object tier: the marker that names the pool and
//! the geometry, the refusal of a prefix in use, the index rebuilt from a
//! LIST at open, and the first upload number of a run of the media.

use std::io;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::index::Index;
use super::marker::{self, Marker};
use super::{keys, rebuild, Bucket, ObjectConfig, ObjectMedia, State};
use crate::block::BlockStatsCounter;

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
            turns: Condvar::new(),
            sync_lock: Mutex::new(()),
            ahead: Default::default(),
            stats: BlockStatsCounter::new(),
            ignored,
        }
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
