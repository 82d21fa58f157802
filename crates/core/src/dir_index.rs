//! A directory's name index: names to children, and the readdir cookies that
//! give each name a stable offset for the life of a mount. Part of a
//! directory inode's DRAM state (`inode.rs`), changed only by replaying
//! committed entries.
//!
//! Each name is stored once, in its entry of the cookie-ordered map; the
//! hash table holds only cookies, found by the hash of their entry's name
//! (so a lookup compares names in the map). Until 2026-11-30 a hash map from
//! names and a map from cookies to names kept two copies of every name,
//! about 100 bytes more per entry (200,000 files: 183 → 163 MB of daemon
//! heap; design.md §8). The price: a lookup finds its entry in the map by
//! cookie, O(log n), after the hash probe.
//!
//! Invariant: `by_name` holds exactly the cookies of `entries`, each under
//! the hash of its entry's name; no two entries have the same name.

use crate::types::Ino;
use hashbrown::HashTable;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};

/// One name of a directory.
#[derive(Debug, Clone)]
struct Named {
    name: Box<[u8]>,
    ino: Ino,
    dt: u8,
}

/// A directory's name index. Cookies give `readdir` stable offsets for the life
/// of a mount: a name keeps its cookie until it is removed.
#[derive(Debug, Clone, Default)]
pub struct DirIndex {
    /// Cookie → entry, in insertion order (readdir's order).
    entries: BTreeMap<u64, Named>,
    /// The cookies of `entries`, by the hash of their names.
    by_name: HashTable<u64>,
    hasher: RandomState,
    next_cookie: u64,
    /// Parent directory (derived from the tree; the root is its own parent).
    pub parent: Ino,
    /// Number of subdirectories.
    pub subdirs: u32,
}

/// First cookie handed to a name ("." is 1, ".." is 2).
pub const FIRST_COOKIE: u64 = 3;

impl DirIndex {
    /// The cookie of `name`, if the directory has it.
    fn find(&self, name: &[u8]) -> Option<u64> {
        let entries = &self.entries;
        self.by_name
            .find(self.hasher.hash_one(name), |c| &*entries[c].name == name)
            .copied()
    }

    /// Adds or replaces `name`.
    pub fn insert(&mut self, name: Vec<u8>, ino: Ino, dt: u8) {
        if self.next_cookie < FIRST_COOKIE {
            self.next_cookie = FIRST_COOKIE;
        }
        if let Some(c) = self.find(&name) {
            let old = self.entries.get_mut(&c).expect("indexed");
            if old.dt == libc::DT_DIR {
                self.subdirs -= 1;
            }
            if dt == libc::DT_DIR {
                self.subdirs += 1;
            }
            old.ino = ino;
            old.dt = dt;
            return;
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        if dt == libc::DT_DIR {
            self.subdirs += 1;
        }
        let hash = self.hasher.hash_one(&name[..]);
        self.entries.insert(
            c,
            Named {
                name: name.into_boxed_slice(),
                ino,
                dt,
            },
        );
        let Self {
            entries,
            by_name,
            hasher,
            ..
        } = self;
        by_name.insert_unique(hash, c, |c| hasher.hash_one(&*entries[c].name));
    }

    /// Removes `name`; returns what it pointed to.
    pub fn remove(&mut self, name: &[u8]) -> Option<(Ino, u8)> {
        let entries = &self.entries;
        let (c, _) = self
            .by_name
            .find_entry(self.hasher.hash_one(name), |c| &*entries[c].name == name)
            .ok()?
            .remove();
        let e = self.entries.remove(&c).expect("indexed");
        if e.dt == libc::DT_DIR {
            self.subdirs -= 1;
        }
        Some((e.ino, e.dt))
    }

    /// The readdir cookie of `name`.
    pub fn cookie_of(&self, name: &[u8]) -> Option<u64> {
        self.find(name)
    }

    /// Gives `name` the cookie `cookie` (free: the name that had it is gone),
    /// so a name renamed within its directory keeps its place in readdir
    /// order — a directory read while its entries are renamed sees each
    /// once, instead of meeting every renamed entry again at the end.
    /// A cookie not handed out yet is refused (a later name would get it).
    pub fn move_to_cookie(&mut self, name: &[u8], cookie: u64) {
        if cookie < FIRST_COOKIE || cookie >= self.next_cookie || self.entries.contains_key(&cookie)
        {
            return;
        }
        let entries = &self.entries;
        let Some(slot) = self
            .by_name
            .find_mut(self.hasher.hash_one(name), |c| &*entries[c].name == name)
        else {
            return;
        };
        let old = std::mem::replace(slot, cookie);
        let e = self.entries.remove(&old).expect("indexed");
        self.entries.insert(cookie, e);
    }

    /// Looks a name up.
    pub fn get(&self, name: &[u8]) -> Option<(Ino, u8)> {
        self.find(name).map(|c| {
            let e = &self.entries[&c];
            (e.ino, e.dt)
        })
    }

    /// The names after cookie `after`, in cookie order: (cookie, name,
    /// child, DT type).
    pub fn after(&self, after: u64) -> impl Iterator<Item = (u64, &[u8], Ino, u8)> {
        self.entries
            .range(after.saturating_add(1)..)
            .map(|(&c, e)| (c, &*e.name, e.ino, e.dt))
    }

    /// Every name, in cookie order: (cookie, name, child, DT type).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8], Ino, u8)> {
        self.after(0)
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the directory has no names.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn dir_cookies_are_stable_and_replace_keeps_cookie() {
        let mut d = DirIndex::default();
        d.insert(b"a".to_vec(), 5, libc::DT_REG);
        d.insert(b"b".to_vec(), 6, libc::DT_DIR);
        let cb = d.cookie_of(b"b").unwrap();
        d.insert(b"b".to_vec(), 7, libc::DT_REG);
        assert_eq!(d.get(b"b"), Some((7, libc::DT_REG)));
        assert_eq!(d.cookie_of(b"b"), Some(cb));
        assert_eq!(d.subdirs, 0);
        assert_eq!(d.remove(b"a"), Some((5, libc::DT_REG)));
        assert_eq!(d.len(), 1);
    }

    /// Random inserts, replaces, removes and cookie moves against two plain
    /// maps (what the index kept before it stored each name once).
    #[test]
    fn the_index_agrees_with_a_map_by_name_and_a_map_by_cookie() {
        use std::collections::HashMap;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xd1e);
        let mut d = DirIndex::default();
        let mut by_name: HashMap<Vec<u8>, (Ino, u8, u64)> = HashMap::new();
        let mut order: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut next = FIRST_COOKIE;
        for step in 0..20_000u64 {
            let name = format!("n{}", rng.gen_range(0..300)).into_bytes();
            match rng.gen_range(0..10) {
                0..=4 => {
                    let dt = if rng.gen_bool(0.2) {
                        libc::DT_DIR
                    } else {
                        libc::DT_REG
                    };
                    d.insert(name.clone(), step, dt);
                    match by_name.get_mut(&name) {
                        Some(v) => (v.0, v.1) = (step, dt),
                        None => {
                            by_name.insert(name.clone(), (step, dt, next));
                            order.insert(next, name.clone());
                            next += 1;
                        }
                    }
                }
                5..=7 => {
                    let want = by_name.remove(&name).map(|(i, t, c)| {
                        order.remove(&c);
                        (i, t)
                    });
                    assert_eq!(d.remove(&name), want, "step {step}");
                }
                _ => {
                    let cookie = rng.gen_range(FIRST_COOKIE..next + 10);
                    d.move_to_cookie(&name, cookie);
                    if cookie < next && !order.contains_key(&cookie) {
                        if let Some(v) = by_name.get_mut(&name) {
                            order.remove(&v.2);
                            v.2 = cookie;
                            order.insert(cookie, name.clone());
                        }
                    }
                }
            }
            assert_eq!(d.get(&name), by_name.get(&name).map(|v| (v.0, v.1)));
            assert_eq!(d.cookie_of(&name), by_name.get(&name).map(|v| v.2));
        }
        let listed: Vec<(u64, Vec<u8>, Ino, u8)> =
            d.iter().map(|(c, n, i, t)| (c, n.to_vec(), i, t)).collect();
        let want: Vec<(u64, Vec<u8>, Ino, u8)> = order
            .iter()
            .map(|(&c, n)| (c, n.clone(), by_name[n].0, by_name[n].1))
            .collect();
        assert_eq!(listed, want);
        let subdirs = by_name.values().filter(|v| v.1 == libc::DT_DIR).count();
        assert_eq!(d.subdirs as usize, subdirs);
        let mid = want[want.len() / 2].0;
        assert!(d
            .after(mid)
            .map(|e| e.0)
            .eq(order.range(mid + 1..).map(|(&c, _)| c)));
    }
}
