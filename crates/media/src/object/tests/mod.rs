//! `ObjectMedia` over object_store's in-memory store and the fault wrapper:
//! durability at `sync` only, nothing half-visible after a failed upload,
//! deletion of dead parts and orphans, pool identity, malformed keys.
//!
//! This file holds the helpers the tests share; the tests are in
//! `durability.rs` (what `sync` makes durable, upload numbers, dead parts),
//! `failures.rs` (failed uploads and requests, orphans, refused prefixes,
//! foreign keys) and `model.rs` (a property test against a per-block model).

mod durability;
mod failures;
mod model;
mod wrappers;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;

use super::sync::unix_now;
use super::*;

const UUID: [u8; 16] = [0x5a; 16];
const OTHER: [u8; 16] = [0xa5; 16];

/// Block `b` filled with `v`, its number in the first 8 bytes (so a block
/// read from the wrong place shows).
fn pattern(b: u64, v: u8) -> Vec<u8> {
    let mut d = vec![v; BLOCK];
    d[..8].copy_from_slice(&b.to_le_bytes());
    d
}

fn blocks(start: u64, n: u64, v: u8) -> Vec<u8> {
    (start..start + n).flat_map(|b| pattern(b, v)).collect()
}

fn bucket(store: &Arc<dyn ObjectStore>) -> Bucket {
    Bucket::with_store(Arc::clone(store), "memory://test", "pool/tier1").unwrap()
}

fn new_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

/// Every key in the store, sorted.
fn keys_in(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    let b = Bucket::with_store(Arc::clone(store), "memory://list", "").unwrap();
    let mut k: Vec<String> = b.list().unwrap().into_iter().map(|(k, _, _)| k).collect();
    k.sort();
    k
}

/// Parts in the store, sorted by upload number.
fn part_keys(store: &Arc<dyn ObjectStore>) -> Vec<PartKey> {
    let mut k: Vec<PartKey> = parts_in(store)
        .iter()
        .filter_map(|k| match keys::parse("pool/tier1", k) {
            keys::Parsed::Part(p) => Some(p),
            _ => None,
        })
        .collect();
    k.sort_by_key(|p| p.seq);
    k
}

/// Keys of parts only.
fn parts_in(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    keys_in(store)
        .into_iter()
        .filter(|k| k.contains("/seg-"))
        .collect()
}

fn read(m: &dyn BlockMedia, start: u64, n: u64) -> Vec<u8> {
    let mut b = vec![0xee; (n * BLOCK_SIZE) as usize];
    m.read_blocks(start, &mut b).unwrap();
    b
}

/// Lets held PUTs go when dropped: a test that fails while the store holds
/// them must not leave a thread waiting forever (a scope joins its threads).
struct ReleasePuts<'a>(&'a FaultStore);

impl Drop for ReleasePuts<'_> {
    fn drop(&mut self) {
        self.0.release_puts();
    }
}
