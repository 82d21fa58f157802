//! Opening a tier: the index rebuilt from one LIST of its prefix.

use std::collections::BTreeMap;
use std::io;

use super::index::Index;
use super::keys::{self, PartKey};
use super::Bucket;
use crate::block::BLOCK_SIZE;

/// What a LIST of the tier says.
pub(super) struct Rebuilt {
    /// Which part holds which block.
    pub(super) index: Index,
    /// Past every upload number a part name uses (ignored parts included).
    pub(super) listed_next: u64,
    /// Keys left alone, each with the reason.
    pub(super) ignored: Vec<String>,
    /// Upload time of each indexed part (seconds since the epoch, from the
    /// LIST's last-modified).
    pub(super) uploaded: BTreeMap<u64, u64>,
}

/// The index, next upload number, ignored keys and upload times from a LIST
/// of the tier.
pub(super) fn rebuild(bucket: &Bucket, len: u64, segment_blocks: u64) -> io::Result<Rebuilt> {
    let prefix = bucket.prefix().to_string();
    let blocks = len / BLOCK_SIZE;
    let mut ignored = Vec::new();
    let mut parts: Vec<(PartKey, u64)> = Vec::new();
    let mut uploaded = BTreeMap::new();
    // Past every number a part name uses, ignored parts included.
    let mut listed_next = 0u64;
    for (key, size, modified) in bucket.list()? {
        match keys::parse(&prefix, &key) {
            keys::Parsed::Marker => {}
            keys::Parsed::Foreign => ignored.push(format!("{key}: not a Terrace object")),
            keys::Parsed::Malformed(why) => ignored.push(format!("{key}: {why}")),
            keys::Parsed::Part(k) => {
                listed_next = listed_next.max(k.seq.saturating_add(1));
                let first = u64::from(k.first);
                let count = u64::from(k.count);
                let start = k
                    .segment
                    .checked_mul(segment_blocks)
                    .and_then(|s| s.checked_add(first));
                let fits = first + count <= segment_blocks
                    && start.is_some_and(|s| s.checked_add(count).is_some_and(|e| e <= blocks));
                match start {
                    Some(start) if fits && size == count * BLOCK_SIZE => {
                        uploaded.insert(k.seq, modified);
                        parts.push((k, start));
                    }
                    _ if !fits => ignored.push(format!(
                        "{key}: outside the tier ({blocks} blocks, segments of {segment_blocks})"
                    )),
                    _ => ignored.push(format!(
                        "{key}: {size} bytes, its name says {}",
                        count * BLOCK_SIZE
                    )),
                }
            }
        }
    }
    parts.sort_unstable();
    let mut index = Index::new();
    for (k, start) in parts {
        if let Err(why) = index.insert(k, start) {
            ignored.push(format!("{}: {why}", keys::join(&prefix, &k.name())));
        }
    }
    uploaded.retain(|seq, _| index.part(*seq).is_some());
    Ok(Rebuilt {
        index,
        listed_next,
        ignored,
        uploaded,
    })
}
