//! A directory's name index: names to children, and the readdir cookies that
//! give each name a stable offset for the life of a mount. Part of a
//! directory inode's DRAM state (`inode.rs`), changed only by replaying
//! committed entries.

use crate::types::Ino;
use std::collections::{BTreeMap, HashMap};

/// A directory's name index. Cookies give `readdir` stable offsets for the life
/// of a mount: a name keeps its cookie until it is removed.
#[derive(Debug, Clone, Default)]
pub struct DirIndex {
    /// Name → (child, DT type, cookie).
    pub names: HashMap<Vec<u8>, (Ino, u8, u64)>,
    /// Cookie → name, in insertion order.
    pub order: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
    /// Parent directory (derived from the tree; the root is its own parent).
    pub parent: Ino,
    /// Number of subdirectories.
    pub subdirs: u32,
}

/// First cookie handed to a name ("." is 1, ".." is 2).
pub const FIRST_COOKIE: u64 = 3;

impl DirIndex {
    /// Adds or replaces `name`.
    pub fn insert(&mut self, name: Vec<u8>, ino: Ino, dt: u8) {
        if self.next_cookie < FIRST_COOKIE {
            self.next_cookie = FIRST_COOKIE;
        }
        if let Some(old) = self.names.get_mut(&name) {
            if old.1 == libc::DT_DIR {
                self.subdirs -= 1;
            }
            if dt == libc::DT_DIR {
                self.subdirs += 1;
            }
            old.0 = ino;
            old.1 = dt;
            return;
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        if dt == libc::DT_DIR {
            self.subdirs += 1;
        }
        self.order.insert(c, name.clone());
        self.names.insert(name, (ino, dt, c));
    }

    /// Removes `name`; returns what it pointed to.
    pub fn remove(&mut self, name: &[u8]) -> Option<(Ino, u8)> {
        let (ino, dt, c) = self.names.remove(name)?;
        self.order.remove(&c);
        if dt == libc::DT_DIR {
            self.subdirs -= 1;
        }
        Some((ino, dt))
    }

    /// The readdir cookie of `name`.
    pub fn cookie_of(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|&(_, _, c)| c)
    }

    /// Gives `name` the cookie `cookie` (free: the name that had it is gone),
    /// so a name renamed within its directory keeps its place in readdir
    /// order — a directory read while its entries are renamed sees each
    /// once, instead of meeting every renamed entry again at the end.
    pub fn move_to_cookie(&mut self, name: &[u8], cookie: u64) {
        if self.order.contains_key(&cookie) {
            return;
        }
        if let Some(e) = self.names.get_mut(name) {
            self.order.remove(&e.2);
            e.2 = cookie;
            self.order.insert(cookie, name.to_vec());
        }
    }

    /// Looks a name up.
    pub fn get(&self, name: &[u8]) -> Option<(Ino, u8)> {
        self.names.get(name).map(|&(i, d, _)| (i, d))
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when the directory has no names.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_cookies_are_stable_and_replace_keeps_cookie() {
        let mut d = DirIndex::default();
        d.insert(b"a".to_vec(), 5, libc::DT_REG);
        d.insert(b"b".to_vec(), 6, libc::DT_DIR);
        let cb = d.names[&b"b".to_vec()].2;
        d.insert(b"b".to_vec(), 7, libc::DT_REG);
        assert_eq!(d.names[&b"b".to_vec()], (7, libc::DT_REG, cb));
        assert_eq!(d.subdirs, 0);
        assert_eq!(d.remove(b"a"), Some((5, libc::DT_REG)));
        assert_eq!(d.len(), 1);
    }
}
