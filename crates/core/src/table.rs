//! The DRAM inode table: locking one inode ([`Fs::lock`]) or a set of them
//! ([`Fs::lock_set`]), and taking and returning slot numbers.
//!
//! # Locking
//! Each inode has its own mutex. An operation on several inodes locks them in
//! ascending inode-number order ([`Fs::lock_set`]), after a first unlocked
//! lookup pass, and re-validates what it looked up once it holds the locks.
//! Renames also hold `rename_lock`, so directory parents (the only thing a
//! loop check reads) change one rename at a time. The order of every lock in
//! the core is written once, in docs/design.md section 4a.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::lock_order::MutexGuard;
use crate::types::{errno, FsResult, Ino};

/// How long an inode allocation waits for deleted inodes the kernel still
/// references before it fails with ENOSPC (see [`Fs::alloc_slot`]).
const ZOMBIE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A locked inode slot of the DRAM table.
pub type Slot<'a> = MutexGuard<'a, Option<Box<Inode>>>;

impl Fs {
    /// Locks one inode; ENOENT when the slot holds no live inode.
    #[track_caller]
    pub(crate) fn lock(&self, ino: Ino) -> FsResult<Slot<'_>> {
        let slot = self
            .table
            .get(ino as usize)
            .ok_or_else(|| errno(libc::ENOENT))?
            .lock();
        match slot.as_ref() {
            Some(i) if !i.zombie || i.open_count > 0 || i.lookups > 0 => Ok(slot),
            _ => Err(errno(libc::ENOENT)),
        }
    }

    /// Locks several inodes in ascending order (duplicates ignored).
    #[track_caller]
    pub(crate) fn lock_set(&self, inos: &[Ino]) -> FsResult<Locked<'_>> {
        let mut v: Vec<Ino> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut guards = Vec::with_capacity(v.len());
        for ino in v {
            guards.push((ino, self.lock(ino)?));
        }
        Ok(Locked { guards })
    }

    /// Puts a new inode into its free slot `ino` (taken with
    /// [`Fs::alloc_slot`]), under its parent's inode lock whatever the two
    /// numbers: the one exception to ascending inode order (design.md §4a).
    /// It cannot deadlock: until this store the slot is empty, and whoever
    /// locks an empty slot (`Fs::lock`, the table scans) finds nothing and
    /// lets go without waiting for any other lock.
    pub(crate) fn install_inode(&self, ino: Ino, inode: Inode) {
        let mut slot = self.table[ino as usize].lock_unchecked();
        debug_assert!(slot.is_none(), "inode {ino} installed into a used slot");
        *slot = Some(Box::new(inode));
    }

    /// Takes a free inode slot number. When none is free but deleted inodes
    /// still wait for the kernel to drop its references (its `forget` comes
    /// asynchronously, possibly on another FUSE thread after the application
    /// already saw the unlink finish), waits up to [`ZOMBIE_WAIT`] for one of
    /// them before failing with ENOSPC.
    pub(crate) fn alloc_slot(&self) -> FsResult<Ino> {
        let deadline = std::time::Instant::now() + ZOMBIE_WAIT;
        loop {
            if let Some(ino) = self.free_slots.lock().pop() {
                return Ok(ino);
            }
            if std::time::Instant::now() >= deadline || !self.has_zombies() {
                return Err(errno(libc::ENOSPC));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Whether some deleted inode still waits for its last kernel reference.
    fn has_zombies(&self) -> bool {
        self.table.iter().any(|slot| {
            slot.try_lock()
                .is_some_and(|g| g.as_ref().is_some_and(|i| i.zombie))
        })
    }

    /// Returns a slot number to the free list (the DRAM slot must be empty).
    pub(crate) fn release_slot(&self, ino: Ino) {
        self.free_slots.lock().push(ino);
    }
}

/// Several locked inodes.
pub(crate) struct Locked<'a> {
    guards: Vec<(Ino, Slot<'a>)>,
}

impl Locked<'_> {
    /// The locked inode `ino` (must be in the set).
    pub(crate) fn get(&mut self, ino: Ino) -> &mut Inode {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        g.1.as_mut().expect("live inode")
    }

    /// The DRAM slot of `ino` (to drop a freed inode).
    pub(crate) fn slot(&mut self, ino: Ino) -> &mut Option<Box<Inode>> {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        &mut g.1
    }
}
