//! Which files may share blocks: *clone families*, the files joined by
//! `copy_file_range` clones (`ops_clone.rs`), so that a move of shared
//! blocks (`reshare.rs`) looks for their other owners among a few files
//! instead of walking every inode.
//!
//! DRAM only. A clone joins the families of its source and destination;
//! mount rebuilds them from the extent maps (files mapping one shared run
//! are joined), and a freed inode leaves its family.
//!
//! Invariant: two live files that map one block are in one family. A
//! family may hold more than that — files that shared blocks once, or two
//! pairs whose shared runs touch on a tier — which costs a look, never a
//! wrong answer (every owner found is checked under its own lock).
//!
//! Lock order: a leaf.

use crate::lock_order::{Mutex, Rank};
use crate::types::Ino;
use std::collections::HashMap;

/// The families, by member.
pub struct CloneFamilies {
    inner: Mutex<Families>,
}

#[derive(Default)]
struct Families {
    /// Member → its family.
    of: HashMap<Ino, u32>,
    /// Family → its members.
    members: HashMap<u32, Vec<Ino>>,
    next: u32,
}

impl Default for CloneFamilies {
    fn default() -> CloneFamilies {
        CloneFamilies {
            inner: Mutex::new(Rank::leaf("clone families"), Families::default()),
        }
    }
}

impl CloneFamilies {
    /// `a` and `b` may share blocks from now on: one family.
    pub fn join(&self, a: Ino, b: Ino) {
        if a == b {
            return;
        }
        let mut f = self.inner.lock();
        match (f.of.get(&a).copied(), f.of.get(&b).copied()) {
            (None, None) => {
                let id = f.next;
                f.next = f.next.wrapping_add(1);
                f.of.insert(a, id);
                f.of.insert(b, id);
                f.members.insert(id, vec![a, b]);
            }
            (Some(id), None) | (None, Some(id)) => {
                let new = if f.of.contains_key(&a) { b } else { a };
                f.of.insert(new, id);
                f.members.entry(id).or_default().push(new);
            }
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) => {
                // The smaller family moves into the larger.
                let (small, large) = if f.members.get(&x).map_or(0, Vec::len)
                    <= f.members.get(&y).map_or(0, Vec::len)
                {
                    (x, y)
                } else {
                    (y, x)
                };
                let moved = f.members.remove(&small).unwrap_or_default();
                for &m in &moved {
                    f.of.insert(m, large);
                }
                f.members.entry(large).or_default().extend(moved);
            }
        }
    }

    /// The other members of `ino`'s family (empty when it has none).
    pub fn others(&self, ino: Ino) -> Vec<Ino> {
        let f = self.inner.lock();
        f.of.get(&ino)
            .and_then(|id| f.members.get(id))
            .map(|m| m.iter().copied().filter(|&x| x != ino).collect())
            .unwrap_or_default()
    }

    /// `ino` was freed: it leaves its family (a family of one is dropped).
    pub fn forget(&self, ino: Ino) {
        let mut f = self.inner.lock();
        let Some(id) = f.of.remove(&ino) else { return };
        let Some(m) = f.members.get_mut(&id) else {
            return;
        };
        m.retain(|&x| x != ino);
        if m.len() <= 1 {
            let left = std::mem::take(m);
            f.members.remove(&id);
            for x in left {
                f.of.remove(&x);
            }
        }
    }

    /// Members in all families (for status and tests).
    pub fn len(&self) -> usize {
        self.inner.lock().of.len()
    }

    /// Whether no file is in a family.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_of_clones_are_one_family_and_freed_members_leave_it() {
        let f = CloneFamilies::default();
        f.join(2, 3);
        f.join(3, 4);
        f.join(7, 8);
        let mut o = f.others(2);
        o.sort_unstable();
        assert_eq!(o, vec![3, 4]);
        assert_eq!(f.others(7), vec![8]);
        assert!(f.others(9).is_empty());
        // Two families joined by a clone between them.
        f.join(8, 4);
        let mut o = f.others(7);
        o.sort_unstable();
        assert_eq!(o, vec![2, 3, 4, 8]);
        for ino in [2, 3, 4, 8] {
            f.forget(ino);
        }
        assert!(f.others(7).is_empty(), "a family of one is dropped");
        assert!(f.is_empty());
    }
}
